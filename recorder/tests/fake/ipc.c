/* Memory and events shared between two processes of a program, through the client
 * (cli/tests/run_remote_ipc.rs): the parent exports an allocation (cuIpcGetMemHandle), an
 * interprocess event and a physical allocation as a POSIX descriptor; a child (fork and exec of
 * this program) opens and imports them, uses them and closes them. Prints each status; the
 * bytes are not shared on the stand-in (each executor's heap is its own): the GPU suite's
 * testdata/cuda/suite/ipc.cu proves them. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;
typedef struct { char reserved[64]; } CUipcMemHandle;
typedef struct { char reserved[64]; } CUipcEventHandle;
CUresult cuInit(unsigned);
CUresult cuDeviceGet(int *, int);
CUresult cuDevicePrimaryCtxRetain(void **, int);
CUresult cuCtxSetCurrent(void *);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t);
CUresult cuMemcpyDtoH_v2(void *, CUdeviceptr, size_t);
CUresult cuIpcGetMemHandle(CUipcMemHandle *, CUdeviceptr);
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *, CUipcMemHandle, unsigned);
CUresult cuIpcCloseMemHandle(CUdeviceptr);
CUresult cuIpcGetEventHandle(CUipcEventHandle *, void *);
CUresult cuIpcOpenEventHandle(void **, CUipcEventHandle);
CUresult cuEventCreate(void **, unsigned);
CUresult cuEventRecord(void *, void *);
CUresult cuEventDestroy_v2(void *);
CUresult cuStreamCreate(void **, unsigned);
CUresult cuStreamWaitEvent(void *, void *, unsigned);
CUresult cuStreamSynchronize(void *);
CUresult cuMemCreate(unsigned long long *, size_t, const void *, unsigned long long);
CUresult cuMemRelease(unsigned long long);
CUresult cuMemExportToShareableHandle(void *, unsigned long long, int, unsigned long long);
CUresult cuMemImportFromShareableHandle(unsigned long long *, void *, int);
CUresult cuMemAddressReserve(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
CUresult cuMemMap(CUdeviceptr, size_t, size_t, unsigned long long, unsigned long long);
CUresult cuMemUnmap(CUdeviceptr, size_t);
CUresult cuMemAddressFree(CUdeviceptr, size_t);
typedef struct { char reserved[64]; } CUmemPoolPtrExportData;
CUresult cuMemPoolCreate(void **, const void *);
CUresult cuMemPoolDestroy(void *);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *, size_t, void *, void *);
CUresult cuMemFreeAsync(CUdeviceptr, void *);
CUresult cuMemPoolExportToShareableHandle(void *, void *, int, unsigned long long);
CUresult cuMemPoolImportFromShareableHandle(void **, void *, int, unsigned long long);
CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData *, CUdeviceptr);
CUresult cuMemPoolImportPointer(CUdeviceptr *, void *, CUmemPoolPtrExportData *);
CUresult cuMemPoolGetAccess(int *, void *, const void *);
CUresult cuMemPoolSetAccess(void *, const void *, size_t);

struct handles { CUipcMemHandle small; CUipcEventHandle event; int fd, pool_fd; CUmemPoolPtrExportData data; };

static void setup(void) {
  void *ctx;
  int dev;
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) {
    printf("init failed\n");
    exit(1);
  }
}

static int child(int fd) {
  struct handles h;
  if (read(fd, &h, sizeof h) != (ssize_t)sizeof h) { printf("child no handles\n"); return 1; }
  setup();
  CUdeviceptr small = 0, again = 0;
  int a = cuIpcOpenMemHandle_v2(&small, h.small, 1), b = cuIpcOpenMemHandle_v2(&again, h.small, 1);
  printf("open %d %d same %d arena %d\n", a, b, small == again, (int)(small >> 40) == 0x64);
  char bytes[16] = "fifteen bytes..", back[16] = {0};
  printf("copies %d %d\n", cuMemcpyHtoD_v2(small, bytes, 16), cuMemcpyDtoH_v2(back, small, 16));
  void *ev = 0, *s = 0;
  int e = cuIpcOpenEventHandle(&ev, h.event);
  cuStreamCreate(&s, 1);
  printf("event %d %d %d %d\n", e, cuEventRecord(ev, s), cuStreamWaitEvent(s, ev, 0), cuStreamSynchronize(s));
  CUipcMemHandle zero;
  memset(&zero, 0, sizeof zero);
  CUdeviceptr none = 0;
  printf("bad %d\n", cuIpcOpenMemHandle_v2(&none, zero, 1));
  int c1 = cuIpcCloseMemHandle(small), c2 = cuIpcCloseMemHandle(small), c3 = cuIpcCloseMemHandle(small);
  printf("close %d %d %d\n", c1, c2, c3);
  /* The physical allocation the parent exported as a descriptor. */
  unsigned long long ph = 0;
  CUdeviceptr at = 0;
  int i = cuMemImportFromShareableHandle(&ph, (void *)(intptr_t)h.fd, 1);
  int r = cuMemAddressReserve(&at, 2 << 20, 0, 0, 0);
  int m = cuMemMap(at, 2 << 20, 0, ph, 0);
  printf("import %d %d %d %d\n", i, r, m, cuMemcpyHtoD_v2(at, bytes, 16));
  cuMemUnmap(at, 2 << 20);
  cuMemRelease(ph);
  cuMemAddressFree(at, 2 << 20);
  cuEventDestroy_v2(ev);
  /* The parent's pool and a pointer allocated from it. */
  void *pool = 0, *other = 0;
  CUdeviceptr ip = 0, wrong = 0;
  int props[22] = {1, 1, 1, 0}; /* pinned, POSIX fd, device 0 */
  int pi = cuMemPoolImportFromShareableHandle(&pool, (void *)(intptr_t)h.pool_fd, 1, 0);
  cuMemPoolCreate(&other, props);
  int pw = cuMemPoolImportPointer(&wrong, other, &h.data);
  int pp = cuMemPoolImportPointer(&ip, pool, &h.data);
  int flags = 0, loc[2] = {1, 0};
  int pa = cuMemPoolGetAccess(&flags, pool, loc);
  printf("pool %d %d %d arena %d access %d %d\n", pi, pw, pp, (int)(ip >> 40) == 0x64, pa, flags);
  int rw[3] = {1, 0, 3}, ro[3] = {1, 0, 1}; /* device 0: read-write, read-only */
  printf("pool_access %d %d\n", cuMemPoolSetAccess(pool, rw, 1), cuMemPoolSetAccess(pool, ro, 1));
  printf("pool_free %d %d\n", cuMemFreeAsync(ip, 0), cuMemPoolDestroy(pool));
  printf("child done\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "child")) return child(atoi(argv[2]));
  setvbuf(stdout, NULL, _IOLBF, 0);
  setup();
  CUdeviceptr small = 0;
  cuMemAlloc_v2(&small, 4096);
  struct handles h;
  CUipcMemHandle twice;
  int a = cuIpcGetMemHandle(&h.small, small), c = cuIpcGetMemHandle(&twice, small);
  printf("get %d %d same %d\n", a, c, !memcmp(&twice, &h.small, sizeof twice));
  printf("get_bad %d\n", cuIpcGetMemHandle(&twice, 0x1234));
  void *ev = 0;
  cuEventCreate(&ev, 4 | 2); /* CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING */
  printf("event_handle %d\n", cuIpcGetEventHandle(&h.event, ev));
  /* A physical allocation exported as a descriptor (handle type POSIX_FILE_DESCRIPTOR). */
  int prop[8] = {1, 1, 1, 0, 0, 0, 0, 0}; /* pinned, POSIX fd, device 0 */
  unsigned long long ph = 0;
  int fd = -1;
  int m = cuMemCreate(&ph, 2 << 20, prop, 0);
  printf("export %d %d\n", m, cuMemExportToShareableHandle(&fd, ph, 1, 0));
  h.fd = dup(fd); /* without close-on-exec, for the child */
  /* A pool shared, and a pointer allocated from it. */
  void *pool = 0;
  int props[22] = {1, 1, 1, 0}; /* pinned, POSIX fd, device 0 */
  CUdeviceptr pp = 0;
  int pool_fd = -1;
  int pc = cuMemPoolCreate(&pool, props), pa = cuMemAllocFromPoolAsync(&pp, 4096, pool, 0);
  int pe = cuMemPoolExportToShareableHandle(&pool_fd, pool, 1, 0), px = cuMemPoolExportPointer(&h.data, pp);
  printf("pool_export %d %d %d %d\n", pc, pa, pe, px);
  h.pool_fd = dup(pool_fd);
  int fds[2];
  if (pipe(fds)) return 2;
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[1]);
    char arg[16];
    snprintf(arg, sizeof arg, "%d", fds[0]);
    execl("/proc/self/exe", argv[0], "child", arg, (char *)NULL);
    _exit(127);
  }
  close(fds[0]);
  if (write(fds[1], &h, sizeof h) != (ssize_t)sizeof h) return 2;
  close(fds[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  printf("child_status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128);
  cuMemRelease(ph);
  cuMemFreeAsync(pp, 0);
  cuMemPoolDestroy(pool);
  cuMemFree_v2(small);
  printf("parent done\n");
  return 0;
}
