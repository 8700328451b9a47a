/* Device-mapped host memory in client mode (cli/tests/run_remote_managed.rs): memory from
 * cuMemHostAlloc with DEVICEMAP is one address on both sides, coherent at launches and
 * synchronizations as managed memory is; so is plain pinned memory from the first launch given
 * a pointer into it (what it held before goes up then) or from the request for its device
 * pointer, and the program's own memory registered with DEVICEMAP from the registration (its
 * pages the program's again after cuMemHostUnregister). Prints what the host saw; any failing
 * call that should succeed prints `FAILED <call> <code>` to stderr and exits with 1. */
#include <string.h>

#include "scale.h"

/* Weak: the stand-in driver lacks them (the client answers them); linked against the client. */
__attribute__((weak)) CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned flags);
__attribute__((weak)) CUresult cuMemAllocHost_v2(void **p, size_t bytes);
__attribute__((weak)) CUresult cuMemFreeHost(void *p);
__attribute__((weak)) CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned flags);
__attribute__((weak)) CUresult cuMemHostRegister_v2(void *p, size_t bytes, unsigned flags);
__attribute__((weak)) CUresult cuMemHostUnregister(void *p);

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
  scale_twice_shared(fn, d, h, N);
  int n = N;
  float k = 2.0f;
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

  /* The program's own memory registered for the device: shared from the registration. */
  float *own = aligned_alloc(4096, 4096);
  for (int i = 0; i < N; i++) own[i] = (float)(10 * i);
  CK(cuMemHostRegister_v2, own, 4096, 2 /* CU_MEMHOSTREGISTER_DEVICEMAP */);
  CUdeviceptr od = (CUdeviceptr)(uintptr_t)own;
  void *oparams[] = {&od, &k, &n};
  CK(cuLaunchKernel, fn, 1, 1, 1, N, 1, 1, 0, 0, oparams, 0);
  CK(cuCtxSynchronize);
  printf("registered after kernel: %g %g\n", own[1], own[N - 1]);
  CK(cuMemHostUnregister, own);
  own[0] = 7.0f; /* writable again, the program's as before */
  printf("registered after unregister: %g\n", own[0]);
  free(own);

  /* Plain pinned memory whose device pointer the program asks for: shared from then on. */
  float *asked;
  CK(cuMemAllocHost_v2, (void **)&asked, N * sizeof(float));
  for (int i = 0; i < N; i++) asked[i] = 1.0f;
  CUdeviceptr ad = 0;
  CK(cuMemHostGetDevicePointer_v2, &ad, asked, 0);
  void *aparams[] = {&ad, &k, &n};
  CK(cuLaunchKernel, fn, 1, 1, 1, N, 1, 1, 0, 0, aparams, 0);
  CK(cuCtxSynchronize);
  printf("asked pointer after kernel: %g %g\n", asked[0], asked[N - 1]);
  CK(cuMemFreeHost, asked);
  printf("done\n");
  return 0;
}
