/* Cached-trace execution through the client (cli/tests/run_remote_pieces.rs): 24 inferences of
 * an upload, four launches and a download on the default stream, then a synchronization. The
 * uploaded bytes differ at every inference; the factor changes every 6 inferences (other kernel
 * parameters) and the buffer every 4 (other addresses, as a caching allocator hands out): the
 * same shape of work, which one graph runs once its nodes are given the inference's values.
 * When a result exceeds a threshold, a data-dependent branch runs five more launches and a
 * download before its own synchronization (another shape). Prints every result: through a server that runs
 * repeated pieces as graphs, the lines must be the native ones. Calls only what the stand-in
 * driver implements. */
#include <stdint.h>

#include "scale.h"

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes, void *stream);
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, void *stream);
CUresult cuStreamSynchronize(void *stream);

#define N 16

int main(void) {
  void *ctx, *mod, *fn;
  CUdeviceptr bufs[2];
  OPEN_SCALE(ctx, mod, fn);
  CK(cuMemAlloc_v2, &bufs[0], N * sizeof(float));
  CK(cuMemAlloc_v2, &bufs[1], N * sizeof(float));
  int n = N, branches = 0;
  for (int i = 0; i < 24; i++) {
    CUdeviceptr d = bufs[(i / 4) % 2];
    float in[N], out[N], k = (i / 6) % 2 ? 1.5f : 0.75f;
    for (int j = 0; j < N; j++) in[j] = (float)(i * 7 % 5) + 0.25f * (float)j;
    void *args[] = {&d, &k, &n};
    CK(cuMemcpyHtoDAsync_v2, d, in, sizeof in, 0);
    for (int l = 0; l < 4; l++) CK(cuLaunchKernel, fn, 1, 1, 1, N, 1, 1, 0, 0, args, 0);
    CK(cuMemcpyDtoHAsync_v2, out, d, sizeof out, 0);
    CK(cuStreamSynchronize, 0);
    float sum = 0;
    for (int j = 0; j < N; j++) sum += out[j];
    printf("inference %d buffer %d factor %.2f sum %.4f", i, (i / 4) % 2, k, sum);
    if (sum > 300.0f) { /* the branch: five more launches, another download */
      float half = 0.5f;
      void *more[] = {&d, &half, &n};
      for (int l = 0; l < 5; l++) CK(cuLaunchKernel, fn, 1, 1, 1, N, 1, 1, 0, 0, more, 0);
      CK(cuMemcpyDtoHAsync_v2, out, d, sizeof out, 0);
      CK(cuStreamSynchronize, 0);
      sum = 0;
      for (int j = 0; j < N; j++) sum += out[j];
      printf(" branch %.4f", sum);
      branches++;
    }
    printf("\n");
  }
  printf("branches %d\n", branches);
  return 0;
}
