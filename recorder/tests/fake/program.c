/* A driver-API program that reaches libcuda the way cudart does: dlopen, dlsym of
 * cuGetProcAddress_v2, then every entry point through it. Prints its results. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "driver.h"
#include <dirent.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>

static void exit_from_handler(int sig) { (void)sig; _exit(6); }

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 0;
  open_driver();
  int (*init)(unsigned) = get("cuInit");
  int (*alloc)(uint64_t *, size_t) = get("cuMemAlloc");
  int (*htod)(uint64_t, const void *, size_t) = get("cuMemcpyHtoD");
  int (*dtoh)(void *, uint64_t, size_t) = get("cuMemcpyDtoH");
  int (*load)(void **, const void *) = get("cuModuleLoadData");
  int (*getf)(void **, void *, const char *) = get("cuModuleGetFunction");
  int (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                void **, void **) = get("cuLaunchKernel");
  int (*cur)(void **) = get("cuCtxGetCurrent");
  int (*unmodeled)(int) = get("cuFakeUnmodeled");
  int (*dtoh_async)(void *, uint64_t, size_t, void *) = get("cuMemcpyDtoHAsync");
  int (*sync)(void *) = get("cuStreamSynchronize");
  int (*range)(uint64_t *, size_t *, uint64_t) = get("cuMemGetAddressRange");
  int (*release)(uint64_t) = get("cuMemFree");
  int (*fake_mapped)(int *) = get("cuFakeMapped");
  static const char ptx[] = ".version 9.0\n.target sm_90\n.address_size 64\n";
  float h[64]; for (int i = 0; i < 64; i++) h[i] = (float)i;
  uint64_t d; void *mod, *fn;
  if (init(0) || alloc(&d, sizeof h) || htod(d, h, sizeof h) || load(&mod, ptx) || getf(&fn, mod, "scale")) return 4;
  float k = 2.5f; int n = 64; void *params[] = {&d, &k, &n};
  if (launch(fn, 1, 1, 1, 64, 1, 1, 0, 0, params, 0)) return 5;
  { /* cuLaunchKernelEx with one attribute (cluster dimension 2x1x1): no effect on the data */
    typedef struct { unsigned id; char pad[4]; unsigned value[16]; } lattr;
    typedef struct { unsigned gx, gy, gz, bx, by, bz, smem; void *stream; lattr *attrs; unsigned n; } lcfg;
    int (*launch_ex)(const lcfg *, void *, void **, void **) = get("cuLaunchKernelEx");
    lattr a = {4, {0}, {2, 1, 1}};
    lcfg cfg = {2, 1, 1, 64, 1, 1, 16, 0, &a, 1};
    if (launch_ex(&cfg, fn, params, 0)) return 12;
  }
  if (dtoh(h, d, sizeof h)) return 6;
  unmodeled(0); unmodeled(0);
  float again[64];
  if (dtoh_async(again, d, sizeof again, 0) || sync(0)) return 7;
  for (int i = 0; i < 64; i++) if (again[i] != h[i]) return 8;
  if (iters == -3) { /* an async copy on a stream, completed by an event recorded with flags */
    int (*ecreate)(void **, unsigned) = get("cuEventCreate");
    int (*erecord)(void *, void *, unsigned) = get("cuEventRecordWithFlags");
    int (*esync)(void *) = get("cuEventSynchronize");
    void *ev, *stream = (void *)0x10; float third[64];
    if (ecreate(&ev, 0) || dtoh_async(third, d, sizeof third, stream) || erecord(ev, stream, 0) || esync(ev)) return 13;
    return 0;
  }
  if (iters == -4) { /* a stable query asked 1000 times in each of three states of the context */
    int (*retain)(void **, int) = get("cuDevicePrimaryCtxRetain");
    int (*prelease)(int) = get("cuDevicePrimaryCtxRelease");
    int (*state)(int, unsigned *, int *) = get("cuDevicePrimaryCtxGetState");
    int (*set_active)(int) = get("cuFakeSetActive");
    int (*asked)(int *) = get("cuFakeStateQueries");
    void *pc; unsigned fl = 0; int act = -1, n = 0;
    if (retain(&pc, 0)) return 14;
    for (int i = 0; i < 1000; i++) if (state(0, &fl, &act) || act != 1 || fl != 4) return 15;
    if (prelease(0)) return 16;
    for (int i = 0; i < 1000; i++) if (state(0, &fl, &act) || act != 0) return 17;
    set_active(1);
    for (int i = 0; i < 1000; i++) if (state(0, &fl, &act) || act != 1) return 18;
    if (state(1, &fl, &act) != 101 || state(0, &fl, 0) != 1) return 19;
    asked(&n);
    printf("driver_answered=%d\n", n);
    return 0;
  }
  if (iters == -6) { /* versions of old names: 1000 cuCtxGetDevice (given as its _v2) between
                        stable queries, and 5 calls of a version the table does not know */
    int (*dev)(int *, void *) = get("cuCtxGetDevice");
    int (*flags)(unsigned *) = get("cuCtxGetFlags");
    int (*state)(int, unsigned *, int *) = get("cuDevicePrimaryCtxGetState");
    int (*asked)(int *) = get("cuFakeStateQueries");
    int dv = -1, act = -1, n = 0; unsigned fl = 9;
    for (int i = 0; i < 1000; i++) if (dev(&dv, 0) || dv != 0 || state(0, &fl, &act) || fl != 4) return 21;
    for (int i = 0; i < 5; i++) if (flags(&fl) || fl != 0) return 22;
    asked(&n);
    printf("driver_answered=%d\n", n);
    return 0;
  }
  if (iters == -22) { /* two downloads into one pinned buffer on a stream, one synchronization */
    int (*screate)(void **, unsigned) = get("cuStreamCreate");
    int (*halloc)(void **, size_t) = get("cuMemAllocHost");
    void *st; float *p;
    if (screate(&st, 1) || halloc((void **)&p, sizeof h)) return 56;
    if (dtoh_async(p, d, sizeof h, st) || launch(fn, 1, 1, 1, 64, 1, 1, 0, st, params, 0)) return 57;
    if (dtoh_async(p, d, sizeof h, st) || sync(st)) return 58;
    printf("pinned: %g\n", p[1]);
    return 0;
  }
  if (iters == -21) { /* downloads into host memory registered for the device (simpleStreams) */
    int (*reg)(void *, size_t, unsigned) = get("cuMemHostRegister");
    int (*unreg)(void *) = get("cuMemHostUnregister");
    float *r = aligned_alloc(4096, 4096);
    for (int i = 0; i < 1024; i++) r[i] = -1.0f;
    if (reg(r, 4096, 2 /* CU_MEMHOSTREGISTER_DEVICEMAP */)) return 52;
    if (dtoh(r, d, sizeof h) || dtoh_async(r + 64, d, sizeof h, 0) || sync(0)) return 53;
    if (launch(fn, 1, 1, 1, 64, 1, 1, 0, 0, params, 0) || dtoh(h, d, sizeof h)) return 54;
    printf("registered: %g %g\n", r[1], r[65]);
    if (unreg(r)) return 55;
    free(r);
    return 0;
  }
  if (iters == -20) { /* an upload, then a launch on a stream of its own that reads it */
    int (*screate)(void **, unsigned) = get("cuStreamCreate");
    void *st; float up[64], out[64];
    for (int i = 0; i < 64; i++) up[i] = (float)(100 + i);
    if (screate(&st, 1) || htod(d, up, sizeof up) || launch(fn, 1, 1, 1, 64, 1, 1, 0, st, params, 0) || sync(st)) return 50;
    if (dtoh(out, d, sizeof out)) return 51;
    printf("out[1]=%g\n", out[1]);
    return 0;
  }
  if (iters == -11) { /* state queries: an event timing, event and stream status, free memory */
    int (*ecreate)(void **, unsigned) = get("cuEventCreate");
    int (*erecord)(void *, void *) = get("cuEventRecord");
    int (*esync)(void *) = get("cuEventSynchronize");
    int (*elapsed)(float *, void *, void *) = get("cuEventElapsedTime");
    int (*equery)(void *) = get("cuEventQuery");
    int (*squery)(void *) = get("cuStreamQuery");
    int (*meminfo)(size_t *, size_t *) = get("cuMemGetInfo");
    int (*screate)(void **, unsigned) = get("cuStreamCreate");
    void *e0, *e1, *st; float ms = 0; size_t fr = 0, tot = 0;
    if (screate(&st, 0) || squery(st)) return 27;
    if (ecreate(&e0, 0) || ecreate(&e1, 0) || erecord(e0, 0)) return 24;
    if (launch(fn, 1, 1, 1, 64, 1, 1, 0, 0, params, 0) || erecord(e1, 0) || esync(e1)) return 25;
    if (elapsed(&ms, e0, e1) || equery(e1) || squery(0) || meminfo(&fr, &tot)) return 26;
    printf("elapsed_ms=%.2f free=%zu total=%zu\n", ms, fr, tot);
    return 0;
  }
  if (iters == -14) { /* a launch of a function taken from a private table, not cuModuleGetFunction */
    int (*table)(const void **, const void *) = get("cuGetExportTable");
    static const unsigned char uuid[16] = {0x6e, 0x16, 0x3f, 0xbe};
    const void *t;
    void *g;
    if (table(&t, uuid)) return 43;
    if (((int (*)(void **, void *))((void *const *)t)[4])(&g, mod)) return 44;
    float k2 = 3.0f; static char meta[640]; void *p2[] = {&d, &k2, &n, meta};
    if (launch(g, 1, 1, 1, 64, 1, 1, 0, 0, p2, 0)) return 45;
    float third[64];
    if (dtoh(third, d, sizeof third)) return 46;
    printf("third[1]=%g\n", third[1]);
    return 0;
  }
  if (iters == -13) { /* calls through a private export table: slot 1 twice, slot 3 once */
    int (*table)(const void **, const void *) = get("cuGetExportTable");
    static const unsigned char uuid[16] = {0x6b, 0xd5, 0xfb, 0x6c, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    const void *t;
    if (table(&t, uuid)) return 40;
    void *const *slots = t;
    if (((int (*)(int))slots[1])(2) || ((int (*)(int))slots[1])(3)) return 41;
    int n = 0;
    if (((int (*)(int *))slots[3])(&n)) return 42;
    printf("slot_calls=%d\n", n);
    return 0;
  }
  if (iters == -12) { /* 4-byte answers with other bytes after them, and a 4-byte argument in a
                         register whose upper half is not zero: each is the value, at its width */
    int (*loading)(int *) = get("cuModuleGetLoadingMode");
    int (*capturing)(void *, int *) = get("cuStreamIsCapturing");
    int (*exchange)(int *) = get("cuThreadExchangeStreamCaptureMode");
    int (*prange)(int *, int *) = get("cuCtxGetStreamPriorityRange");
    /* cuDeviceGetAttribute(int *, CUdevice_attribute, CUdevice) called with a 64-bit attribute:
       the callee reads the register's low half (the x86-64 ABI leaves the rest undefined) */
    int (*attr_wide)(int *, unsigned long long, int) =
      (int (*)(int *, unsigned long long, int))get("cuDeviceGetAttribute");
    enum { CANARY = 0x7f7f7f7f };
    struct { int v; int canary; } mode = {-1, CANARY}, cap = {-1, CANARY}, xm = {2, CANARY},
      least = {-1, CANARY}, greatest = {-1, CANARY}, a[2] = {{-1, CANARY}, {-1, CANARY}};
    if (loading(&mode.v) || capturing((void *)0x5, &cap.v) || exchange(&xm.v) || prange(&least.v, &greatest.v))
      return 28;
    /* stable: the second answer comes from the recorder's memory */
    for (int i = 0; i < 2; i++) if (attr_wide(&a[i].v, 0x7f7f7f7f00000000ull | 75, 0)) return 29;
    if (mode.canary != CANARY || cap.canary != CANARY || xm.canary != CANARY || least.canary != CANARY ||
        greatest.canary != CANARY || a[0].canary != CANARY || a[1].canary != CANARY) return 30;
    printf("mode=%d capturing=%d previous_mode=%d priorities=%d,%d attribute=%d,%d\n", mode.v, cap.v, xm.v,
           least.v, greatest.v, a[0].v, a[1].v);
    return 0;
  }
  if (iters == -10) { /* a 1.5 MiB upload and its download: a blob large enough for bulk paths */
    size_t big = 3u << 19; unsigned char *src = malloc(big), *back = malloc(big); uint64_t db;
    if (!src || !back) return 21;
    for (size_t i = 0; i < big; i++) src[i] = (unsigned char)(i * 7 + (i >> 12));
    if (alloc(&db, big) || htod(db, src, big) || dtoh(back, db, big)) return 22;
    return memcmp(src, back, big) ? 23 : 0;
  }
  if (iters == -9) { /* this process's peak resident memory, once the trace is open */
    char line[256]; long hwm = -1; FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f)) if (!strncmp(line, "VmHWM:", 6)) hwm = atol(line + 6);
    if (f) fclose(f);
    printf("peak_kib=%ld\n", hwm);
    return 0;
  }
  if (iters == -8) { /* how many trace compression threads run beside this program (they
                        name themselves as they start: counted until the count holds 100 ms) */
    int n = -1, last = -2;
    for (int round = 0; round < 50 && n != last; round++) {
      last = n; n = 0;
      DIR *d = opendir("/proc/self/task"); struct dirent *e;
      while (d && (e = readdir(d))) {
        char path[300], name[32] = {0};
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (fgets(name, sizeof name, f) && !strncmp(name, "gpuless-trace-z", 15)) n++;
        fclose(f);
      }
      if (d) closedir(d);
      usleep(100000);
    }
    printf("compression_threads=%d\n", n);
    return 0;
  }
  if (iters == -7) { /* the legacy bare cuMemAlloc, asked for by name: a 32-bit address is
                        written, the word after it stays as it was */
    unsigned int (*legacy)(unsigned int *, unsigned int) =
      (unsigned int (*)(unsigned int *, unsigned int))dlsym(dlopen("libcuda.so.1", RTLD_NOW), "cuMemAlloc");
    unsigned int out[2] = {0, 0xdeadbeefu};
    if (!legacy || legacy(out, 256)) return 23;
    /* ... and through cuGetProcAddress with a pre-3.2 version: the same legacy function */
    unsigned int (*legacy_gpa)(unsigned int *, unsigned int) = 0; int st = 0;
    if (gpa("cuMemAlloc", (void **)&legacy_gpa, 3000, 0, &st) || !legacy_gpa) return 25;
    unsigned int again[2] = {0, 0xdeadbeefu};
    if (legacy_gpa(again, 256) || again[0] != out[0] || again[1] != 0xdeadbeefu) return 26;
    int (*capture10)(void *) = (int (*)(void *))dlsym(dlopen("libcuda.so.1", RTLD_NOW), "cuStreamBeginCapture");
    if (!capture10 || capture10((void *)0x5)) return 24;
    printf("legacy=%#x canary=%#x\n", out[0], out[1]);
    return 0;
  }
  double sum = 0; for (int i = 0; i < 64; i++) sum += h[i];
  printf("sum=%.1f\n", sum);
  uint64_t base = 0; size_t size = 0; int chunks = -1;
  if (range(&base, &size, d + 100) || base != d || size != 256) return 9;
  fake_mapped(&chunks);
  fprintf(stderr, "mapped_chunks=%d\n", chunks);
  if (release(d)) return 10;
  if (iters == -5) { /* 10 launches, 10 with recording paused (GPULESS_DIAG=pause), 10 more */
    void (*pause_rec)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "gpuless_diag_pause");
    for (int phase = 0; phase < 3; phase++) {
      if (pause_rec) pause_rec(phase == 1);
      for (int i = 0; i < 10; i++) if (launch(fn, 1, 1, 1, 64, 1, 1, 0, 0, params, 0)) return 20;
    }
    return 0;
  }
  if (iters == -2) { /* a child forked without exec calls the driver: not recorded, said once */
    pid_t pid = fork();
    if (pid == 0) { void *c; cur(&c); cur(&c); exit(0); } /* exit: atexit handlers run in the child */
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 11;
  }
  if (iters == -17) { /* 7 launches, nothing synchronized, then _exit (atexit handlers skipped) */
    for (int i = 0; i < 7; i++) if (launch(fn, 1, 1, 1, 64, 1, 1, 0, 0, params, 0)) return 21;
    _exit(5);
  }
  if (iters == -19) { /* 7 launches, then _exit(6) from the program's own signal handler */
    signal(SIGUSR1, exit_from_handler);
    for (int i = 0; i < 7; i++) if (launch(fn, 1, 1, 1, 64, 1, 1, 0, 0, params, 0)) return 21;
    raise(SIGUSR1);
    return 24;
  }
  if (iters == -18) { /* a vfork child whose exec fails calls _exit (it shares our memory), then
                       * 7 launches here */
    pid_t pid = vfork();
    if (pid == 0) { execl("/nonexistent/gpuless-test", "x", (char *)0); _exit(127); }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 127) return 23;
    for (int i = 0; i < 7; i++) if (launch(fn, 1, 1, 1, 64, 1, 1, 0, 0, params, 0)) return 21;
    return 0;
  }
  if (iters == -15 || iters == -16) { /* 7 launches, nothing synchronized, then a crash: a fault
                                        * (-15, SIGSEGV) or abort() (-16, SIGABRT) */
    for (int i = 0; i < 7; i++) if (launch(fn, 1, 1, 1, 64, 1, 1, 0, 0, params, 0)) return 21;
    if (iters == -16) abort();
    *(volatile int *)(uintptr_t)8 = 1;
    return 22;
  }
  if (iters < 0) { /* wait for a signal: the recorder must finish the trace on SIGTERM */
    printf("ready\n"); fflush(stdout);
    for (;;) pause();
  }
  if (iters > 0) { /* per-call cost of a cheap query and of a launch */
    struct timespec a, b; void *c;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < iters; i++) cur(&c);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double q = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / iters;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < iters; i++) launch(fn, 1, 1, 1, 64, 1, 1, 0, 0, params, 0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double l = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / iters;
    printf("ns_per_query=%.1f ns_per_launch=%.1f\n", q, l);
  }
  return 0;
}
