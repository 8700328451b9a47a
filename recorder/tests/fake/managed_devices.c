/* Managed memory in a session of two devices (cli/tests/run_remote_devices.rs): an allocation
 * made on each device, written by the host, scaled by a kernel on its device after the other
 * device was current, and read back; then the host writes device 0's memory while device 1 is
 * current and a kernel on device 0 sees it. Through the client each allocation's copies and
 * comparisons run in its own device's context on the executor. Prints what the host saw; a
 * failing call prints `FAILED <call> <code>` to stderr and exits with 1. */
#include "scale.h"

/* Weak: the stand-in driver lacks it (the client answers it); linked against the client. */
__attribute__((weak)) CUresult cuMemAllocManaged(CUdeviceptr *p, size_t bytes, unsigned flags);

#define N 16
int main(void) {
  void *ctx[2], *mod[2], *fn[2];
  int dev[2];
  CK(cuInit, 0);
  float *m[2];
  CUdeviceptr p[2];
  float k = 2.0f;
  int n = N;
  for (int d = 0; d < 2; d++) {
    CK(cuDeviceGet, &dev[d], d);
    CK(cuDevicePrimaryCtxRetain, &ctx[d], dev[d]);
  }
  for (int d = 0; d < 2; d++) {
    CK(cuCtxSetCurrent, ctx[d]);
    CK(cuModuleLoadData, &mod[d], ptx);
    CK(cuModuleGetFunction, &fn[d], mod[d], "scale");
    CK(cuMemAllocManaged, &p[d], N * sizeof(float), 1);
    m[d] = (float *)(uintptr_t)p[d];
    for (int i = 0; i < N; i++) m[d][i] = (float)(i + 10 * d);
    CK(cuCtxSetCurrent, ctx[1 - d]);
    CK(cuCtxSynchronize);
    CK(cuCtxSetCurrent, ctx[d]);
    void *params[] = {&p[d], &k, &n};
    CK(cuLaunchKernel, fn[d], 1, 1, 1, N, 1, 1, 0, 0, params, 0);
    CK(cuCtxSynchronize);
    printf("managed on device %d: %g %g\n", d, m[d][1], m[d][N - 1]);
  }
  CK(cuCtxSetCurrent, ctx[1]);
  m[0][1] = 100.0f;
  CK(cuCtxSetCurrent, ctx[0]);
  void *params[] = {&p[0], &k, &n};
  CK(cuLaunchKernel, fn[0], 1, 1, 1, N, 1, 1, 0, 0, params, 0);
  CK(cuCtxSynchronize);
  printf("device 0's memory written while device 1 was current: %g %g\n", m[0][1], m[1][1]);
  printf("done\n");
  return 0;
}
