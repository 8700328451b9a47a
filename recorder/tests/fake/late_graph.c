/* A graph whose upload reads what a host function captured before it wrote (cli/tests/
 * record_late_copies.rs): on a captured stream, a host function sets h[1] = 10 * h[0] and an
 * upload from h[1] follows; the graph is launched three times with h[0] = 1, 2, 3, each result
 * downloaded. The recording must hold, per launch, the bytes the upload read (10, 20, 30), so
 * that the replay (where host functions do nothing) verifies the three downloads. Any failing
 * call prints `FAILED <call> <code>` to stderr and exits with 1. */
#include "scale.h"

typedef void (*hostfn)(void *);
CUresult cuStreamCreate(void **stream, unsigned flags);
CUresult cuStreamBeginCapture_v2(void *stream, int mode);
CUresult cuStreamEndCapture(void *stream, void **graph);
CUresult cuLaunchHostFunc(void *stream, hostfn fn, void *ud);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *stream);
CUresult cuStreamSynchronize(void *stream);

static void times10(void *p) {
  int *h = p;
  h[1] = 10 * h[0]; }

int main(void) {
  void *ctx, *mod, *fn, *s, *g, *exec;
  OPEN_SCALE(ctx, mod, fn);
  CK(cuStreamCreate, &s, 0);
  static int h[2];
  CUdeviceptr d;
  CK(cuMemAlloc_v2, &d, sizeof(int));
  CK(cuStreamBeginCapture_v2, s, 0);
  CK(cuLaunchHostFunc, s, times10, h);
  CK(cuMemcpyHtoDAsync_v2, d, &h[1], sizeof(int), s);
  CK(cuStreamEndCapture, s, &g);
  CK(cuGraphInstantiateWithFlags, &exec, g, 0);
  printf("device got:");
  for (int i = 1; i <= 3; i++) {
    h[0] = i;
    CK(cuGraphLaunch, exec, s);
    CK(cuStreamSynchronize, s);
    int out = -1;
    CK(cuMemcpyDtoH_v2, &out, d, sizeof out);
    printf(" %d", out);
  }
  printf("\n");
  return 0;
}
