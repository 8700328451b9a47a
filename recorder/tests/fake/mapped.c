/* Device-mapped host memory in client mode (cli/tests/run_remote_managed.rs): memory from
 * cuMemHostAlloc with DEVICEMAP is one address on both sides, coherent at launches and
 * synchronizations as managed memory is; so is plain pinned memory from the first launch given
 * a pointer into it (what it held before goes up then). Prints what the host saw; any failing
 * call that should succeed prints `FAILED <call> <code>` to stderr and exits with 1. */
#include <string.h>

#include "scale.h"

/* Weak: the stand-in driver lacks them (the client answers them); linked against the client. */
__attribute__((weak)) CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned flags);
__attribute__((weak)) CUresult cuMemAllocHost_v2(void **p, size_t bytes);
__attribute__((weak)) CUresult cuMemFreeHost(void *p);
__attribute__((weak)) CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned flags);
CUresult cuCtxSynchronize(void);

#define N 16
int main(void) {
  void *ctx, *mod, *fn;
  OPEN_SCALE(ctx, mod, fn);
  float *h;
  CK(cuMemHostAlloc, (void **)&h, N * sizeof(float), 2 /* CU_MEMHOSTALLOC_DEVICEMAP */);
  CUdeviceptr d = 0;
  CK(cuMemHostGetDevicePointer_v2, &d, h, 0);
  printf("device pointer is the host pointer: %d\n", d == (CUdeviceptr)(uintptr_t)h);
  for (int i = 0; i < N; i++) h[i] = (float)i;
  int n = N;
  float k = 2.0f;
  void *params[] = {&d, &k, &n};
  CK(cuLaunchKernel, fn, 1, 1, 1, N, 1, 1, 0, 0, params, 0);
  CK(cuCtxSynchronize);
  printf("after kernel: %g %g %g\n", h[0], h[1], h[N - 1]);
  h[1] = 100.0f;
  CK(cuLaunchKernel, fn, 1, 1, 1, N, 1, 1, 0, 0, params, 0);
  CK(cuCtxSynchronize);
  printf("second round: %g %g %g\n", h[0], h[1], h[N - 1]);
  CK(cuMemFreeHost, h);

  float *plain;
  CK(cuMemAllocHost_v2, (void **)&plain, N * sizeof(float));
  for (int i = 0; i < N; i++) plain[i] = (float)(i + 1);
  CUdeviceptr pd = (CUdeviceptr)(uintptr_t)plain;
  void *pparams[] = {&pd, &k, &n};
  CK(cuLaunchKernel, fn, 1, 1, 1, N, 1, 1, 0, 0, pparams, 0);
  CK(cuCtxSynchronize);
  printf("plain pinned after kernel: %g %g\n", plain[0], plain[N - 1]);
  plain[0] = 50.0f;
  CK(cuLaunchKernel, fn, 1, 1, 1, N, 1, 1, 0, 0, pparams, 0);
  CK(cuCtxSynchronize);
  printf("plain pinned second round: %g %g\n", plain[0], plain[N - 1]);
  CK(cuMemFreeHost, plain);
  printf("done\n");
  return 0;
}
