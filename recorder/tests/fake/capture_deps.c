/* A capture the program extends itself (cli/tests/run_remote_graph.rs), as graphConditionalNodes
 * does: `scale` on `a` is captured, cuStreamGetCaptureInfo_v3 gives the capture's graph and its
 * dependency (that launch), the program adds a kernel node on `b` after it into the graph being
 * captured and makes that node the capture's dependency (cuStreamUpdateCaptureDependencies_v2);
 * one more `scale` on `a` is captured after it. The graph is launched once; the data read back.
 * Natively and through the client the output must be the same. Any failing call prints
 * `FAILED <call> <code>` to stderr and exits with 1. */
#include <string.h>

#include "scale.h"

CUresult cuGraphAddKernelNode_v2(void **n, void *g, void *const *deps, size_t nd, const KernelParams *p);

CUresult cuStreamCreate(void **stream, unsigned flags);
CUresult cuStreamBeginCapture_v2(void *stream, int mode);
CUresult cuStreamEndCapture(void *stream, void **graph);
CUresult cuStreamGetCaptureInfo_v3(void *s, int *status, unsigned long long *id, void **graph, void *const **deps,
                                   const void **edges, size_t *n);
__attribute__((weak)) CUresult cuStreamUpdateCaptureDependencies_v2(void *s, void **deps, const void *edges, size_t n,
                                                                    unsigned flags);
CUresult cuGraphGetNodes(void *g, void **nodes, size_t *n);
CUresult cuStreamSynchronize(void *stream);

#define N 8
int main(void) {
  void *ctx, *mod, *fn, *s, *g = 0, *g2 = 0, *k, *exec;
  OPEN_SCALE(ctx, mod, fn);
  CK(cuStreamCreate, &s, 0);
  CUdeviceptr a, b;
  iota_buffer(&a, N);
  iota_buffer(&b, N);
  float two = 2.0f, three = 3.0f;
  int n = N;
  void *pa[] = {&a, &two, &n}, *pb[] = {&b, &three, &n};
  CK(cuStreamBeginCapture_v2, s, 0);
  CK(cuLaunchKernel, fn, 1, 1, 1, N, 1, 1, 0, s, pa, 0);
  int status = -1;
  size_t nd = 99;
  void *const *deps = 0;
  const void *edges = 0;
  CK(cuStreamGetCaptureInfo_v3, s, &status, 0, &g, &deps, &edges, &nd);
  printf("capture info: status %d, graph given %d, dependencies %zu\n", status, g != 0, nd);
  KernelParams kp = scale_node(fn, N, pb);
  CK(cuGraphAddKernelNode_v2, &k, g, deps, nd, &kp);
  CK(cuStreamUpdateCaptureDependencies_v2, s, &k, 0, 1, 1 /* CU_STREAM_SET_CAPTURE_DEPENDENCIES */);
  CK(cuLaunchKernel, fn, 1, 1, 1, N, 1, 1, 0, s, pa, 0);
  CK(cuStreamEndCapture, s, &g2);
  size_t nodes = 0;
  CK(cuGraphGetNodes, g2, 0, &nodes);
  printf("captured graph nodes: %zu\n", nodes);
  CK(cuGraphInstantiateWithFlags, &exec, g2, 0);
  CK(cuGraphLaunch, exec, s);
  CK(cuStreamSynchronize, s);
  float ra[N], rb[N];
  CK(cuMemcpyDtoH_v2, ra, a, sizeof ra);
  CK(cuMemcpyDtoH_v2, rb, b, sizeof rb);
  printf("a: %g %g, b: %g %g\n", ra[1], ra[N - 1], rb[1], rb[N - 1]);
  return 0;
}
