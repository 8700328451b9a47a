/* Recorder cost per "inference" on the fake driver: the call mix PyTorch's ResNet-50 makes per
 * inference (measured: ~1,250 repeated queries over a few hundred distinct questions, ~220
 * launches, one synchronization). Prints ns per inference, per launch and per query.
 * With "wide", every launch also passes a 640-byte struct, different at each of the 220 launch
 * sites and the same in every inference (as PyTorch's element-wise kernels do). With "mapped",
 * the program first allocates 4 bytes of device-mapped host memory (as the CUDA runtime does).
 *   bench [INFERENCES] [wide] [mapped]   (LD_LIBRARY_PATH must find the fake libcuda.so.1) */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2000;
  open_driver();
  int (*init)(unsigned) = get("cuInit");
  int (*alloc)(uint64_t *, size_t) = get("cuMemAlloc");
  int (*load)(void **, const void *) = get("cuModuleLoadData");
  int (*getf)(void **, void *, const char *) = get("cuModuleGetFunction");
  int (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                void **, void **) = get("cuLaunchKernel");
  int (*attr)(int *, int, int) = get("cuDeviceGetAttribute");
  int (*cur)(void **) = get("cuCtxGetCurrent");
  int (*sync)(void *) = get("cuStreamSynchronize");
  int (*retain)(void **, int) = get("cuDevicePrimaryCtxRetain");
  int (*set)(void *) = get("cuCtxSetCurrent");
  /* The kernels' entries (a client analyzes the image it is given: scale(float *, float, int)). */
  static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                            ".visible .entry scale(\n\t.param .u64 p0,\n\t.param .f32 p1,\n\t.param .u32 p2\n)\n{\n\tret;\n}\n"
                            ".visible .entry wide(\n\t.param .u64 w0,\n\t.param .f32 w1,\n\t.param .u32 w2,\n"
                            "\t.param .align 8 .b8 w3[640]\n)\n{\n\tret;\n}\n";
  uint64_t d; void *mod, *fn, *c, *ctx;
  /* The stand-in has no host allocation of its own: natively, "mapped" allocates nothing. */
  int (*host_alloc)(void **, size_t, unsigned) = 0;
  int st = 0;
  gpa("cuMemHostAlloc", (void **)&host_alloc, 13000, 0, &st);
  int wide = 0, mapped = 0;
  for (int a = 2; a < argc; a++) {
    wide |= !strcmp(argv[a], "wide");
    mapped |= !strcmp(argv[a], "mapped");
  }
  void *flag = 0;
  if (init(0) || retain(&ctx, 0) || set(ctx) || alloc(&d, 256) || load(&mod, ptx) || getf(&fn, mod, wide ? "wide" : "scale"))
    return 4;
  if (mapped && host_alloc && host_alloc(&flag, 4, 2 /* CU_MEMHOSTALLOC_DEVICEMAP */)) return 5;
  static struct { char b[640]; } meta[220];
  for (int l = 0; l < 220; l++) memset(meta[l].b, l, sizeof meta[l].b);
  float k = 2.5f; int cnt = 64; void *params[] = {&d, &k, &cnt, &meta[0]};
  double t0 = now();
  for (int it = 0; it < n; it++) {
    for (int l = 0; l < 220; l++) {
      for (int q = 0; q < 5; q++) { int v; attr(&v, (l * 5 + q) % 300, 0); }
      cur(&c);
      params[3] = &meta[l];
      launch(fn, 1, 1, 1, 64, 1, 1, 0, 0, params, 0);
    }
    sync(0);
  }
  double t = (now() - t0) / n;
  printf("ns_per_inference=%.0f (220 launches%s, 1320 queries, 1 sync%s)\n", t, wide ? " of 656 parameter bytes" : "",
         mapped ? ", 4 mapped bytes" : "");
  return 0;
}
