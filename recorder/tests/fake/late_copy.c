/* A host function writes pinned memory that an upload queued after it on the same stream
 * sends (cli/tests/record_late_copies.rs): on a GPU the upload reads its source when the stream
 * reaches it, after the function ran (the stand-in does so with FAKE_CUDA_DEFER_HOSTFN=1). The
 * device gets what the function wrote; so must the recording. Prints what came back; any failing
 * call prints `FAILED <call> <code>` to stderr and exits with 1. */
#include "scale.h"

CUresult cuMemAllocHost_v2(void **p, size_t n);
CUresult cuMemFreeHost(void *p);
CUresult cuStreamCreate(void **s, unsigned flags);
CUresult cuStreamSynchronize(void *s);
CUresult cuLaunchHostFunc(void *s, void (*fn)(void *), void *ud);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *s);

#define N 8
static void fill(void *p) {
  for (int i = 0; i < N; i++) ((float *)p)[i] = 7.0f + (float)i; }

int main(void) {
  void *ctx, *mod, *fn, *s;
  OPEN_SCALE(ctx, mod, fn);
  CK(cuStreamCreate, &s, 0);
  float *pinned;
  CK(cuMemAllocHost_v2, (void **)&pinned, N * sizeof(float));
  for (int i = 0; i < N; i++) pinned[i] = 1.0f;
  CUdeviceptr d;
  CK(cuMemAlloc_v2, &d, N * sizeof(float));
  CK(cuLaunchHostFunc, s, fill, pinned);
  CK(cuMemcpyHtoDAsync_v2, d, pinned, N * sizeof(float), s);
  CK(cuStreamSynchronize, s);
  float out[N];
  CK(cuMemcpyDtoH_v2, out, d, sizeof out);
  printf("device got: %g %g\n", out[0], out[N - 1]);
  CK(cuMemFreeHost, pinned);
  return 0;
}
