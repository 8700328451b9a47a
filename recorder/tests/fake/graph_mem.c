/* Graph memory nodes in client mode (cli/tests/run_remote_pools.rs): a graph built by hand
 * allocates (cuGraphAddMemAllocNode: the address comes back in the node's parameters), runs the
 * stand-in's `scale` on the allocation in a kernel node after it and frees it
 * (cuGraphAddMemFreeNode); the graph is instantiated and launched twice, the data uploaded
 * before and read back after each launch (the allocation keeps its contents between them
 * here). Then: an allocation node after the free node gets the freed address again; a second
 * graph's allocation (no free node in it) is freed outside the graph with cuMemFree, the graph
 * launched again and the memory freed with cuMemFreeAsync; the graph allocator's attributes
 * before, after the launches and after the graphs are destroyed and memory trimmed.
 * Prints what it saw; any failing call prints `FAILED <call> <code>` to stderr and exits
 * with 1. */
#include <string.h>

#include "scale.h"

CUresult cuGraphAddKernelNode_v2(void **n, void *g, void *const *deps, size_t nd, const KernelParams *p);

__attribute__((weak)) CUresult cuGraphAddMemAllocNode(void **n, void *g, void *const *deps, size_t nd, AllocParams *p);
__attribute__((weak)) CUresult cuGraphAddMemFreeNode(void **n, void *g, void *const *deps, size_t nd, CUdeviceptr p);
__attribute__((weak)) CUresult cuMemFree_v2(CUdeviceptr p);
__attribute__((weak)) CUresult cuMemFreeAsync(CUdeviceptr p, void *stream);
CUresult cuGraphExecDestroy(void *exec);
CUresult cuGraphDestroy(void *g);
__attribute__((weak)) CUresult cuDeviceGetGraphMemAttribute(int dev, int attr, void *value);
__attribute__((weak)) CUresult cuDeviceGraphMemTrim(int dev);
__attribute__((weak)) CUresult cuGraphMemAllocNodeGetParams(void *node, AllocParams *p);
__attribute__((weak)) CUresult cuGraphMemFreeNodeGetParams(void *node, CUdeviceptr *p);

static unsigned long long used(void) {
  unsigned long long v = 0;
  CK(cuDeviceGetGraphMemAttribute, 0, 0 /* USED_MEM_CURRENT */, &v);
  return v; }
static unsigned long long reserved(void) {
  unsigned long long v = 0;
  CK(cuDeviceGetGraphMemAttribute, 0, 2 /* RESERVED_MEM_CURRENT */, &v);
  return v; }

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
  AllocParams got;
  CUdeviceptr freed = 0;
  CK(cuGraphMemAllocNodeGetParams, a, &got);
  CK(cuGraphMemFreeNodeGetParams, fr, &freed);
  printf("node parameters: allocation %d, free %d\n", got.dptr == p && got.bytesize == ap.bytesize, freed == p);
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
  printf("used after the launches: %s\n", used() ? "nonzero" : "zero");
  /* An allocation after the free node: the same address again. */
  void *a2;
  CK(cuGraphAddMemAllocNode, &a2, g, &fr, 1, &ap);
  printf("allocation after the free reuses the address: %d\n", ap.dptr == p);
  /* A graph without a free node: its memory outlives the launch until freed outside. */
  void *g2, *b, *kb, *exec2;
  CK(cuGraphCreate, &g2, 0);
  ap.dptr = 0;
  CK(cuGraphAddMemAllocNode, &b, g2, 0, 0, &ap);
  CUdeviceptr q = ap.dptr;
  printf("second graph's address differs: %d\n", q != p && q != 0);
  params[0] = &q;
  kp = scale_node(fn, N, params);
  CK(cuGraphAddKernelNode_v2, &kb, g2, &b, 1, &kp);
  CK(cuGraphInstantiateWithFlags, &exec2, g2, 0);
  for (int l = 0; l < 2; l++) {
    CK(cuGraphLaunch, exec2, 0);
    CK(cuCtxSynchronize);
    CK(cuMemcpyDtoH_v2, data, q, sizeof data);
    if (l == 0) CK(cuMemFree_v2, q);
    else CK(cuMemFreeAsync, q, 0);
  }
  CK(cuCtxSynchronize);
  printf("freed outside the graph, launched again, freed async: ok\n");
  CK(cuGraphExecDestroy, exec);
  CK(cuGraphExecDestroy, exec2);
  CK(cuGraphDestroy, g);
  CK(cuGraphDestroy, g2);
  CK(cuDeviceGraphMemTrim, 0);
  printf("after destroy and trim: used %llu reserved %llu\n", used(), reserved());
  printf("done\n");
  return 0;
}
