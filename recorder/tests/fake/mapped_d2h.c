/* Device-to-host copies into device-mapped host memory in client mode (cli/tests/
 * run_remote_managed.rs): a 1 MiB DEVICEMAP buffer is the destination of eight downloads of
 * device memory; the host reads it, then a kernel scales it in place (the device's copy must
 * hold what the downloads brought) and the host reads the result. The downloads' bytes must not
 * go back up: the test checks the session's upload count. Prints what the host saw; any failing
 * call prints `FAILED <call> <code>` to stderr and exits with 1. */
#include "scale.h"

__attribute__((weak)) CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned flags);

#define N (256 * 1024)
int main(void) {
  void *ctx, *mod, *fn;
  OPEN_SCALE(ctx, mod, fn);
  float *h;
  CK(cuMemHostAlloc, (void **)&h, N * sizeof(float), 2 /* CU_MEMHOSTALLOC_DEVICEMAP */);
  static float src[N];
  CUdeviceptr d;
  CK(cuMemAlloc_v2, &d, sizeof src);
  float sum = 0;
  for (int r = 0; r < 8; r++) {
    for (int i = 0; i < N; i += 4096) src[i] = (float)(r + i / 4096);
    CK(cuMemcpyHtoD_v2, d, src, sizeof src);
    CK(cuMemcpyDtoH_v2, h, d, sizeof src);
    sum += h[4096];
  }
  printf("downloads into mapped memory: last %g %g, sum %g\n", h[0], h[4096], sum);
  CUdeviceptr hd = (CUdeviceptr)(uintptr_t)h;
  float k = 3.0f;
  int n = N;
  void *params[] = {&hd, &k, &n};
  CK(cuLaunchKernel, fn, 1, 1, 1, 64, 1, 1, 0, 0, params, 0);
  CK(cuCtxSynchronize);
  printf("kernel on it: %g %g\n", h[0], h[4096]);
  printf("done\n");
  return 0;
}
