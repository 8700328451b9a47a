/* Memory pools in client mode (cli/tests/run_remote_pools.rs): stream-ordered allocations from
 * the default pool and from a pool of the program's, a kernel on one, and what the pools report
 * about their memory (used, reserved, the release threshold, trims, high-water resets) as the
 * driver would; the created pool made current and destroyed. Prints what it saw; any failing
 * call that should succeed prints `FAILED <call> <code>` to stderr and exits with 1. */
#include <string.h>

#include "scale.h"

/* Weak: the stand-in driver lacks the allocations (the client serves them from its arena). */
__attribute__((weak)) CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, void *stream);
__attribute__((weak)) CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, void *pool, void *stream);
__attribute__((weak)) CUresult cuMemFreeAsync(CUdeviceptr p, void *stream);
__attribute__((weak)) CUresult cuMemPoolGetAttribute(void *pool, int attr, void *value);
CUresult cuMemPoolSetAttribute(void *pool, int attr, void *value);
CUresult cuMemPoolCreate(void **pool, const void *props);
CUresult cuMemPoolDestroy(void *pool);
CUresult cuMemPoolTrimTo(void *pool, size_t keep);
CUresult cuDeviceGetDefaultMemPool(void **pool, int dev);
CUresult cuDeviceGetMemPool(void **pool, int dev);
CUresult cuDeviceSetMemPool(int dev, void *pool);

static unsigned long long attr(void *pool, int a) {
  unsigned long long v = 12345;
  CK(cuMemPoolGetAttribute, pool, a, &v);
  return v; }
/* CU_MEMPOOL_ATTR_RELEASE_THRESHOLD .. USED_MEM_HIGH */
enum { THRESHOLD = 4, RESERVED = 5, RESERVED_HIGH = 6, USED = 7, USED_HIGH = 8 };

#define N 64
int main(void) {
  void *ctx, *mod, *fn;
  OPEN_SCALE(ctx, mod, fn);
  void *def = 0, *cur = 0;
  CK(cuDeviceGetDefaultMemPool, &def, 0);
  CUdeviceptr a, b;
  CK(cuMemAllocAsync, &a, 4096, 0);
  CK(cuMemAllocAsync, &b, 4096, 0);
  printf("default pool used: %llu\n", attr(def, USED));
  CK(cuMemFreeAsync, a, 0);
  CK(cuMemFreeAsync, b, 0);
  CK(cuCtxSynchronize);
  printf("default pool after frees: used %llu reserved %llu high %llu\n", attr(def, USED), attr(def, RESERVED),
         attr(def, USED_HIGH));

  unsigned char props[88];
  memset(props, 0, sizeof props);
  props[0] = 1; /* CU_MEM_ALLOCATION_TYPE_PINNED; location: device 0 */
  props[8] = 1;
  void *pool = 0;
  CK(cuMemPoolCreate, &pool, props);
  unsigned long long threshold = 1 << 20;
  CK(cuMemPoolSetAttribute, pool, THRESHOLD, &threshold);
  printf("threshold: %llu\n", attr(pool, THRESHOLD));
  CUdeviceptr p;
  CK(cuMemAllocFromPoolAsync, &p, N * sizeof(float), pool, 0);
  float data[N];
  for (int i = 0; i < N; i++) data[i] = (float)i;
  CK(cuMemcpyHtoD_v2, p, data, sizeof data);
  float k = 4.0f;
  int n = N;
  void *params[] = {&p, &k, &n};
  CK(cuLaunchKernel, fn, 1, 1, 1, N, 1, 1, 0, 0, params, 0);
  CK(cuMemcpyDtoH_v2, data, p, sizeof data);
  printf("kernel on pool memory: %g %g\n", data[1], data[N - 1]);
  printf("pool used: %llu\n", attr(pool, USED));
  CK(cuMemFreeAsync, p, 0);
  CK(cuCtxSynchronize);
  printf("pool after free: used %llu reserved %llu\n", attr(pool, USED), attr(pool, RESERVED));
  CK(cuMemPoolTrimTo, pool, 0);
  printf("pool after trim: reserved %llu\n", attr(pool, RESERVED));
  unsigned long long zero = 0, one = 1;
  CK(cuMemPoolSetAttribute, pool, USED_HIGH, &zero);
  printf("used high after reset: %llu; reset to 1: %d\n", attr(pool, USED_HIGH),
         cuMemPoolSetAttribute(pool, USED_HIGH, &one));
  CK(cuDeviceSetMemPool, 0, pool);
  CK(cuDeviceGetMemPool, &cur, 0);
  printf("current is the created pool: %d\n", cur == pool);
  CK(cuMemAllocAsync, &a, 4096, 0);
  printf("current pool used: %llu\n", attr(pool, USED));
  CK(cuMemFreeAsync, a, 0);
  CK(cuCtxSynchronize);
  CK(cuDeviceSetMemPool, 0, def);
  CK(cuMemPoolDestroy, pool);
  printf("done\n");
  return 0;
}
