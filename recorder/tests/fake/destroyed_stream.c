/* A captured download whose stream is destroyed before the synchronization that completes it
 * (cli/tests/record_late_copies.rs), as conjugateGradientCudaGraphs does: on stream s1 a capture
 * downloads a result into host memory; the graph is launched on s2; both streams are destroyed;
 * then the context is synchronized and the host reads the result. A replay must wait for that
 * download through the context (the stream is gone) and verify it. Any failing call prints
 * `FAILED <call> <code>` to stderr and exits with 1. */
#include "scale.h"

CUresult cuStreamCreate(void **stream, unsigned flags);
CUresult cuStreamDestroy_v2(void *stream);
CUresult cuStreamBeginCapture_v2(void *stream, int mode);
CUresult cuStreamEndCapture(void *stream, void **graph);
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *stream);
CUresult cuStreamSynchronize(void *stream);

int main(void) {
  void *ctx, *mod, *fn, *s0, *s1, *s2, *g, *exec;
  OPEN_SCALE(ctx, mod, fn);
  CK(cuStreamCreate, &s0, 0); /* the stand-in's first stream is never destroyed */
  CK(cuStreamCreate, &s1, 0);
  CK(cuStreamCreate, &s2, 0);
  CUdeviceptr d;
  CK(cuMemAlloc_v2, &d, sizeof(int));
  int v = 42, out = 0;
  CK(cuMemcpyHtoD_v2, d, &v, sizeof v);
  CK(cuStreamBeginCapture_v2, s1, 0);
  CK(cuMemcpyDtoHAsync_v2, &out, d, sizeof out, s1);
  CK(cuStreamEndCapture, s1, &g);
  CK(cuGraphInstantiateWithFlags, &exec, g, 0);
  CK(cuGraphLaunch, exec, s2);
  CK(cuStreamSynchronize, s2);
  CK(cuStreamDestroy_v2, s2);
  CK(cuStreamDestroy_v2, s1);
  CK(cuCtxSynchronize);
  printf("downloaded: %d\n", out);
  return 0;
}
