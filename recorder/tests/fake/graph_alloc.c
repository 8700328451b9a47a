/* Stream-ordered allocation captured into a graph, in client mode (cli/tests/run_remote_pools.rs):
 * a capture allocates (cuMemAllocAsync), uploads, runs the stand-in's `scale` twice, downloads
 * and frees (cuMemFreeAsync) on its stream; the graph is launched twice, each launch giving the
 * same result; the captured graph has an allocation and a free node, as the driver's capture
 * makes; an allocation made afterwards never takes the graph's address. Prints what it
 * saw; any failing call prints `FAILED <call> <code>` to stderr and exits with 1. */
#include "scale.h"

__attribute__((weak)) CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, void *stream);
__attribute__((weak)) CUresult cuMemFreeAsync(CUdeviceptr p, void *stream);
CUresult cuStreamCreate(void **stream, unsigned flags);
CUresult cuStreamBeginCapture_v2(void *stream, int mode);
CUresult cuStreamEndCapture(void *stream, void **graph);
CUresult cuStreamSynchronize(void *stream);
CUresult cuGraphGetNodes(void *g, void **nodes, size_t *n);
__attribute__((weak)) CUresult cuGraphNodeGetType(void *node, int *type);
__attribute__((weak)) CUresult cuGraphMemAllocNodeGetParams(void *node, AllocParams *p);
__attribute__((weak)) CUresult cuGraphMemFreeNodeGetParams(void *node, CUdeviceptr *p);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *stream);
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *stream);

#define N 16
int main(void) {
  void *ctx, *mod, *fn, *s, *g, *exec;
  OPEN_SCALE(ctx, mod, fn);
  CK(cuStreamCreate, &s, 0);
  static float in[N], out[N];
  for (int i = 0; i < N; i++) in[i] = (float)i;
  CUdeviceptr p = 0;
  float k = 2.0f;
  int n = N;
  void *params[] = {&p, &k, &n};
  CK(cuStreamBeginCapture_v2, s, 0);
  CK(cuMemAllocAsync, &p, N * sizeof(float), s);
  CK(cuMemcpyHtoDAsync_v2, p, in, sizeof in, s);
  CK(cuLaunchKernel, fn, 1, 1, 1, N, 1, 1, 0, s, params, 0);
  CK(cuLaunchKernel, fn, 1, 1, 1, N, 1, 1, 0, s, params, 0);
  CK(cuMemcpyDtoHAsync_v2, out, p, sizeof out, s);
  CK(cuMemFreeAsync, p, s);
  CK(cuStreamEndCapture, s, &g);
  void *nodes[8];
  size_t nn = 8;
  CK(cuGraphGetNodes, g, nodes, &nn);
  int allocs = 0, frees = 0;
  for (size_t i = 0; i < nn && i < 8; i++) {
    int t = -1;
    CK(cuGraphNodeGetType, nodes[i], &t);
    allocs += t == 10; /* CU_GRAPH_NODE_TYPE_MEM_ALLOC */
    frees += t == 11;  /* CU_GRAPH_NODE_TYPE_MEM_FREE */
    if (t == 10) {
      AllocParams ap;
      CK(cuGraphMemAllocNodeGetParams, nodes[i], &ap);
      printf("allocation node: %zu bytes at the allocation's address %d\n", ap.bytesize, ap.dptr == p);
    }
    if (t == 11) {
      CUdeviceptr f = 0;
      CK(cuGraphMemFreeNodeGetParams, nodes[i], &f);
      printf("free node frees it: %d\n", f == p);
    }
  }
  printf("captured nodes: %zu, allocation %d, free %d\n", nn, allocs, frees);
  CK(cuGraphInstantiateWithFlags, &exec, g, 0);
  for (int l = 0; l < 2; l++) {
    for (int i = 0; i < N; i++) out[i] = -1.0f;
    CK(cuGraphLaunch, exec, s);
    CK(cuStreamSynchronize, s);
    printf("launch %d: %g %g %g\n", l, out[0], out[1], out[N - 1]);
  }
  CUdeviceptr later;
  CK(cuMemAlloc_v2, &later, N * sizeof(float));
  printf("later allocation elsewhere: %d\n", later != p);
  printf("done\n");
  return 0;
}
