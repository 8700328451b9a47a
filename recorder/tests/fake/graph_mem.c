/* Graph memory nodes in client mode (cli/tests/run_remote_pools.rs): a graph built by hand
 * allocates (cuGraphAddMemAllocNode: the address comes back in the node's parameters), runs the
 * stand-in's `scale` on the allocation in a kernel node after it and frees it
 * (cuGraphAddMemFreeNode); the graph is instantiated and launched twice, the data uploaded
 * before and read back after each launch (the allocation keeps its contents between them
 * here). Prints what it saw; any failing call prints `FAILED <call> <code>` to stderr and exits
 * with 1. */
#include <string.h>

#include "scale.h"

typedef struct {
  unsigned char pool_props[88];
  const void *access;
  size_t access_count;
  size_t bytesize;
  CUdeviceptr dptr;
} AllocParams;
__attribute__((weak)) CUresult cuGraphAddMemAllocNode(void **n, void *g, void *const *deps, size_t nd, AllocParams *p);
__attribute__((weak)) CUresult cuGraphAddMemFreeNode(void **n, void *g, void *const *deps, size_t nd, CUdeviceptr p);
CUresult cuGraphCreate(void **g, unsigned flags);
CUresult cuGraphAddKernelNode_v2(void **n, void *g, void *const *deps, size_t nd, const KernelParams *p);
CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags);
CUresult cuGraphLaunch(void *exec, void *stream);
CUresult cuCtxSynchronize(void);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n);
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n);

#define N 16
int main(void) {
  void *ctx, *mod, *fn, *g, *a, *kn, *fr, *exec;
  OPEN_SCALE(ctx, mod, fn);
  CK(cuGraphCreate, &g, 0);
  AllocParams ap;
  memset(&ap, 0, sizeof ap);
  ap.pool_props[0] = 1; /* pinned, on device 0 */
  ap.pool_props[8] = 1;
  ap.bytesize = N * sizeof(float);
  CK(cuGraphAddMemAllocNode, &a, g, 0, 0, &ap);
  printf("allocation address given: %d\n", ap.dptr != 0);
  CUdeviceptr p = ap.dptr;
  float k = 3.0f;
  int n = N;
  void *params[] = {&p, &k, &n};
  KernelParams kp = scale_node(fn, N, params);
  CK(cuGraphAddKernelNode_v2, &kn, g, &a, 1, &kp);
  CK(cuGraphAddMemFreeNode, &fr, g, &kn, 1, p);
  CK(cuGraphInstantiateWithFlags, &exec, g, 0);
  float data[N];
  for (int l = 0; l < 2; l++) {
    for (int i = 0; i < N; i++) data[i] = (float)i;
    CK(cuMemcpyHtoD_v2, p, data, sizeof data);
    CK(cuGraphLaunch, exec, 0);
    CK(cuCtxSynchronize);
    CK(cuMemcpyDtoH_v2, data, p, sizeof data);
    printf("launch %d: %g %g %g\n", l, data[0], data[1], data[N - 1]);
  }
  CUdeviceptr later;
  CK(cuMemAlloc_v2, &later, N * sizeof(float));
  printf("later allocation elsewhere: %d\n", later != p);
  printf("done\n");
  return 0;
}
