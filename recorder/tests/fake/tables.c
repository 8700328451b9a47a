/* The driver's private export tables as the CUDA runtime uses them, asked of the client library
 * (cli/tests/run_remote_tables.rs runs it with `gpuless run --remote`): every table cudart asks
 * for, the slots it calls, and the inputs of the integrity check, so that the test can recompute
 * the answer. Prints `key value...` lines; any failing call prints `FAILED <what> <code>` to
 * stderr and exits with 1. */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef struct { unsigned char bytes[16]; } CUuuid;
CUresult cuInit(unsigned flags);
CUresult cuDriverGetVersion(int *version);
CUresult cuDeviceGet(CUdevice *dev, int ordinal);
CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev);
CUresult cuDeviceGetAttribute(int *value, int attribute, CUdevice dev);
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuGetExportTable(const void **table, const CUuuid *id);
CUresult cuModuleLoadData(void **module, const void *image);
CUresult cuModuleGetFunction(void **f, void *module, const char *name);
CUresult cuCtxSynchronize(void);

static void check(CUresult r, const char *what) {
  if (r != 0) {
    fprintf(stderr, "FAILED %s %d\n", what, r);
    exit(1);
  }
}

static const void *table(const char *hex) {
  CUuuid u;
  for (int i = 0; i < 16; i++) {
    unsigned v;
    sscanf(hex + 2 * i, "%2x", &v);
    u.bytes[i] = (unsigned char)v;
  }
  const void *t = 0;
  check(cuGetExportTable(&t, &u), hex);
  return t;
}

static void destructor(CUcontext c, void *k, void *v) { (void)c; (void)k; (void)v; }

/* What ToolsModule slot 7 hands its callback (as cuFFT's callback receives it). */
static void *seen_f[8], *seen_user;
static const char *seen_name[8];
static int seen_n;
static void each(void *user, void *f, const char *name) {
  if (seen_n < 8) {
    seen_f[seen_n] = f;
    seen_name[seen_n] = name;
  }
  seen_n++;
  seen_user = user;
}

int main(void) {
  check(cuInit(0), "cuInit");
  int drv = 0;
  check(cuDriverGetVersion(&drv), "cuDriverGetVersion");
  CUdevice dev;
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUuuid uuid;
  check(cuDeviceGetUuid_v2(&uuid, dev), "cuDeviceGetUuid_v2");
  int dom = 0, bus = 0, slot = 0;
  check(cuDeviceGetAttribute(&dom, 50, dev), "cuDeviceGetAttribute(PCI_DOMAIN_ID)");
  check(cuDeviceGetAttribute(&bus, 33, dev), "cuDeviceGetAttribute(PCI_BUS_ID)");
  check(cuDeviceGetAttribute(&slot, 34, dev), "cuDeviceGetAttribute(PCI_DEVICE_ID)");

  const void *cudart = table("6bd5fb6c5bf4e74a8987d93912fd9df9");
  const void *tls = table("42d85a8123f6cb478298f6e78a3aecdc");
  const void *hooks = table("a094798c2e742e7493f20800200c0a66");
  const void *cls = table("c693336e1121df11a8c368f355d89593");
  const void *checks = table("263e88607cd2614392f6bbd5006dfa7e");
  const void *integ = table("d4082055bde6704b8d34ba123c66e1f2");
  printf("sizes %zu %zu %zu %zu %zu\n", *(const size_t *)cudart, *(const size_t *)tls,
         *(const size_t *)hooks, *(const size_t *)checks, *(const size_t *)integ);
  const void *other = 0;
  CUuuid unknown = {{1, 2, 3}};
  printf("unknown_table %d\n", cuGetExportTable(&other, &unknown));

  /* CUDART_INTERFACE slot 2: the primary context, the one cuDevicePrimaryCtxRetain returns. */
  typedef CUresult (*primary_fn)(CUcontext *, CUdevice);
  CUcontext p1 = 0, p2 = 0;
  check(((primary_fn const *)cudart)[2](&p1, 0), "cudart_interface[2]");
  check(cuDevicePrimaryCtxRetain(&p2, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(p2), "cuCtxSetCurrent");
  printf("primary_same %d\n", p1 == p2 && p1 != 0);

  /* Context-local storage: put, get (explicit and current context), delete, get again. */
  typedef CUresult (*put_fn)(CUcontext, void *, void *, void (*)(CUcontext, void *, void *));
  typedef CUresult (*del_fn)(CUcontext, void *);
  typedef CUresult (*get_fn)(void **, CUcontext, void *);
  void *v = 0;
  printf("cls_missing %d\n", ((get_fn const *)cls)[2](&v, p2, (void *)0x5151));
  check(((put_fn const *)cls)[0](p2, (void *)0x5151, (void *)0x7777, destructor), "cls[0]");
  check(((get_fn const *)cls)[2](&v, p2, (void *)0x5151), "cls[2]");
  void *w = 0;
  check(((get_fn const *)cls)[2](&w, 0, (void *)0x5151), "cls[2] current");
  printf("cls_value %d %d\n", v == (void *)0x7777, w == (void *)0x7777);
  check(((del_fn const *)cls)[1](p2, (void *)0x5151), "cls[1]");
  printf("cls_deleted %d\n", ((get_fn const *)cls)[2](&v, p2, (void *)0x5151));

  /* Context checks. */
  typedef CUresult (*check2_fn)(CUcontext, unsigned *, void **);
  typedef unsigned (*check3_fn)(void);
  unsigned r1 = 7;
  void *r2 = (void *)0x1234;
  check(((check2_fn const *)checks)[2](p2, &r1, &r2), "checks[2]");
  printf("checks %u %d %u\n", r1, r2 == (void *)0x1234, ((check3_fn const *)checks)[3]());

  /* Callback hooks' buffers. */
  typedef void (*hook_fn)(void **, size_t *);
  void *b2 = 0, *b6 = 0;
  size_t n2 = 0, n6 = 0;
  ((hook_fn const *)hooks)[2](&b2, &n2);
  ((hook_fn const *)hooks)[6](&b6, &n6);
  memset(b2, 0xab, n2);
  memset(b6, 0xcd, n6);
  printf("hooks %zu %zu\n", n2, n6);

  /* The integrity check, as cudart calls it, and every input of its answer. */
  typedef CUresult (*integ_fn)(unsigned, unsigned long long, unsigned long long *);
  integ_fn f = ((integ_fn const *)integ)[1];
  for (unsigned ver = 13000; ver <= 13002; ver++) {
    unsigned long long out[2] = {0, 0};
    check(f(ver, 1764000000ULL, out), "integrity[1]");
    printf("integrity %u %016llx%016llx\n", ver, out[1], out[0]);
  }
  /* ToolsModule (cuFFT): slot 7 hands each function of a module to a callback, in the image's
   * order, the function cuModuleGetFunction gives for the name; it returns how many. */
  const void *tools = table("6e163fbeb958444d835ce182aff1991e");
  printf("tools_module_size %zu\n", *(const size_t *)tools);
  static const char two[] = ".version 7.0\n.target sm_75\n.address_size 64\n"
                            ".visible .entry wide(.param .u64 p) { ret; }\n"
                            ".visible .entry scale(.param .u64 p) { ret; }\n";
  static const char none[] = ".version 7.0\n.target sm_75\n.address_size 64\n.visible .global .align 4 .u32 g;\n";
  void *m2 = 0, *m0 = 0, *scale = 0;
  check(cuModuleLoadData(&m2, two), "cuModuleLoadData(two kernels)");
  check(cuModuleGetFunction(&scale, m2, "scale"), "cuModuleGetFunction(scale)");
  typedef unsigned long long (*functions_fn)(CUcontext, void *, void (*)(void *, void *, const char *), void *);
  functions_fn functions = ((functions_fn const *)tools)[7];
  int user = 0;
  unsigned long long n = functions(p2, m2, each, &user);
  printf("module_functions %llu", n);
  for (int i = 0; i < seen_n && i < 8; i++) printf(" %s", seen_name[i]);
  printf(" user %d same %d distinct %d\n", seen_user == &user, seen_n == 2 && seen_f[1] == scale,
         seen_n == 2 && seen_f[0] != seen_f[1] && seen_f[0] != 0);
  check(cuModuleLoadData(&m0, none), "cuModuleLoadData(no kernel)");
  seen_n = 0;
  n = functions(0, m0, each, &user);
  printf("module_functions_none %llu %d\n", n, seen_n);
  check(cuCtxSynchronize(), "cuCtxSynchronize after the functions of a module");

  /* cuBLASLt's table 1734dc26 (its fp16 GEMMs' set-up): handed out with the driver's size; its
   * slots answer CUDA_ERROR_NOT_SUPPORTED (cuBLASLt computes the same without them, measured
   * natively), each said once, and write nothing. */
  const void *lt = table("1734dc26800d47458726c0f1e7dd8bca");
  printf("cublaslt_size %zu\n", *(const size_t *)lt);
  /* Slot 4 as cuBLASLt calls it (two out-pointers, 1, a count, a zeroed block). The driver
   * answers 0 and writes two objects: the GPU suite leaves this line out of its comparison. */
  typedef CUresult (*lt4_fn)(void **, void **, int, int, void *, int);
  void *pa = 0, *pb = 0;
  static unsigned long long zeros[16];
  CUresult l1 = ((lt4_fn const *)lt)[4](&pa, &pb, 1, 30, zeros, 0);
  CUresult l2 = l1 == 0 ? 0 : ((lt4_fn const *)lt)[4](&pa, &pb, 1, 64, zeros, 0);
  printf("cublaslt_slots %d %d %d\n", l1, l2, pa == 0 && pb == 0);

  printf("inputs %d %d 0x%lx %p %p %p ", drv, (int)getpid(), (unsigned long)pthread_self(), cudart, integ,
         (void *)f);
  for (int i = 0; i < 16; i++) printf("%02x", uuid.bytes[i]);
  printf(" %d %d %d\n", dom, bus, slot);
  return 0;
}
