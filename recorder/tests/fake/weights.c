/* Warm constants through the client (cli/tests/run_remote_warm.rs): uploads 256 KiB of
 * "weights" (the same bytes at every run) into one allocation, then three inferences: an input
 * uploaded into another allocation, scale launched over it with a factor taken from the
 * weights, and the result downloaded. Prints a checksum of each result and of the weights read
 * back at the end. With WEIGHTS_WRITE_FIRST=1 (the same program to a server: its command line
 * does not change), it first launches scale over the weights' allocation and only then uploads
 * them: a server that skipped that upload because the last run left the same bytes there would
 * hand back scaled weights, and the checksum would differ. WEIGHTS_FLOATS=N uploads N floats
 * instead of 65,536 (more than 262,144: an allocation with its own backing, where a run of the
 * default size had a shared chunk). Calls only what the stand-in driver implements. */
#include <stdint.h>

#include "scale.h"

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes);
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes);

#define N 16

static double sum(const float *v, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += v[i] * (double)((i % 7) + 1);
  return s;
}

int main(void) {
  void *ctx, *mod, *fn;
  const char *count = getenv("WEIGHTS_FLOATS");
  int weights = count && atoi(count) > 0 ? atoi(count) : 64 * 1024;
  size_t bytes = (size_t)weights * sizeof(float);
  float *w = malloc(bytes), *back = malloc(bytes);
  if (!w || !back) return 1;
  CUdeviceptr dw, dx;
  OPEN_SCALE(ctx, mod, fn);
  for (int i = 0; i < weights; i++) w[i] = (float)(i % 251) * 0.125f;
  CK(cuMemAlloc_v2, &dw, bytes);
  CK(cuMemAlloc_v2, &dx, N * sizeof(float));
  const char *first = getenv("WEIGHTS_WRITE_FIRST");
  if (first && *first == '1') { /* a write into the allocation before the upload */
    float two = 2.0f;
    int n = weights;
    void *args[] = {&dw, &two, &n};
    CK(cuLaunchKernel, fn, 1, 1, 1, 1, 1, 1, 0, 0, args, 0);
  }
  CK(cuMemcpyHtoD_v2, dw, w, bytes);
  for (int i = 0; i < 3; i++) {
    float in[N], out[N], k = w[100 + i];
    int n = N;
    for (int j = 0; j < N; j++) in[j] = (float)(i + j);
    void *args[] = {&dx, &k, &n};
    CK(cuMemcpyHtoD_v2, dx, in, sizeof in);
    CK(cuLaunchKernel, fn, 1, 1, 1, N, 1, 1, 0, 0, args, 0);
    CK(cuMemcpyDtoH_v2, out, dx, sizeof out);
    printf("inference %d sum %.4f\n", i, sum(out, N));
  }
  CK(cuMemcpyDtoH_v2, back, dw, bytes);
  CK(cuCtxSynchronize);
  printf("weights %.4f (uploaded %.4f)\n", sum(back, weights), sum(w, weights));
  return 0;
}
