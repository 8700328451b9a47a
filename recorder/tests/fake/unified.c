/* Copies between unified addresses (cuMemcpy, cuMemcpyAsync: what cudaMemcpyDefault reaches),
 * every direction, through the stand-in libcuda (cli/tests/unified_copies.rs records, replays
 * and runs it through the client). Prints the sums of what came back to the host. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

/* CUDA_MEMCPY2D as cuda.h lays it out. */
typedef struct {
  size_t srcXInBytes, srcY;
  int srcMemoryType;
  const void *srcHost;
  uint64_t srcDevice;
  void *srcArray;
  size_t srcPitch;
  size_t dstXInBytes, dstY;
  int dstMemoryType;
  void *dstHost;
  uint64_t dstDevice;
  void *dstArray;
  size_t dstPitch;
  size_t WidthInBytes, Height;
} copy2d;

static double sum(const float *v, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += v[i] * (i + 1);
  return s;
}

int main(void) {
  open_driver();
  int (*init)(unsigned) = get("cuInit");
  int (*retain)(void **, int) = get("cuDevicePrimaryCtxRetain");
  int (*set_current)(void *) = get("cuCtxSetCurrent");
  int (*alloc)(uint64_t *, size_t) = get("cuMemAlloc");
  int (*load)(void **, const void *) = get("cuModuleLoadData");
  int (*getf)(void **, void *, const char *) = get("cuModuleGetFunction");
  int (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                void **, void **) = get("cuLaunchKernel");
  int (*copy)(uint64_t, uint64_t, size_t) = get("cuMemcpy");
  int (*copy_async)(uint64_t, uint64_t, size_t, void *) = get("cuMemcpyAsync");
  int (*sync)(void *) = get("cuStreamSynchronize");
  int (*copy2d_async)(const copy2d *, void *) = get("cuMemcpy2DAsync");
  /* The kernel's parameters in the image: a client answers cuModuleGetFunction from them. */
  static const char ptx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry scale(\n\t.param .u64 scale_param_0,\n\t.param .f32 scale_param_1,\n"
    "\t.param .u32 scale_param_2\n)\n{\n\tret;\n}\n";
  enum { N = 64, B = N * sizeof(float) };
  float *in = malloc(B), *out = malloc(B), *later = malloc(B), *twice = malloc(B), *plain = malloc(B);
  for (int i = 0; i < N; i++) in[i] = (float)(i % 7) + 0.5f;
  uint64_t d; void *ctx, *mod, *fn;
  int r;
  if ((r = init(0)) || (r = retain(&ctx, 0)) || (r = set_current(ctx)) || (r = alloc(&d, 4 * B)) || (r = load(&mod, ptx)) || (r = getf(&fn, mod, "scale"))) {
    fprintf(stderr, "FAILED set-up %d\n", r);
    return 4;
  }
  /* Host to device, then the kernel scales the device copy. */
  if (copy(d, (uint64_t)(uintptr_t)in, B)) return 5;
  float k = 3.0f; int n = N; void *params[] = {&d, &k, &n};
  if (launch(fn, 1, 1, 1, N, 1, 1, 0, 0, params, 0)) return 6;
  /* Device to host (synchronous), device to device, then device to host asynchronously. */
  if (copy((uint64_t)(uintptr_t)out, d, B)) return 7;
  if (copy(d + B, d, B)) return 8;
  if (copy_async((uint64_t)(uintptr_t)later, d + B, B, 0) || sync(0)) return 9;
  /* Host to device asynchronously, scaled again, back synchronously. */
  if (copy_async(d + 2 * B, (uint64_t)(uintptr_t)out, B, 0)) return 10;
  uint64_t d2 = d + 2 * B; void *params2[] = {&d2, &k, &n};
  if (launch(fn, 1, 1, 1, N, 1, 1, 0, 0, params2, 0)) return 11;
  if (copy((uint64_t)(uintptr_t)twice, d2, B)) return 12;
  /* 2D, asynchronously: the scaled rows into host rows of a wider pitch whose padding stays,
   * the destination a unified address. */
  unsigned char rows[4 * 80];
  memset(rows, 0x55, sizeof rows);
  copy2d c = {0};
  c.srcMemoryType = 2; c.srcDevice = d2; c.srcPitch = 64;
  c.dstMemoryType = 4; c.dstDevice = (uint64_t)(uintptr_t)rows; c.dstPitch = 80;
  c.WidthInBytes = 64; c.Height = 4;
  if (copy2d_async(&c, 0) || sync(0)) return 14;
  double rsum = 0;
  for (int i = 0; i < (int)sizeof rows; i++) rsum += rows[i] * (i % 13 + 1);
  /* Host to host. */
  if (copy((uint64_t)(uintptr_t)plain, (uint64_t)(uintptr_t)in, B)) return 13;
  printf("out %.1f\nlater %.1f\ntwice %.1f\nplain %.1f\nrows %.1f\n", sum(out, N), sum(later, N), sum(twice, N),
         sum(plain, N), rsum);
  return 0;
}
