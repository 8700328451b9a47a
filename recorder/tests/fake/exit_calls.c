/* Driver calls made while the process exits, after the main thread's thread-local variables
 * were destroyed (glibc runs their destructors before the atexit handlers): C++ static
 * destructors do this (PyTorch's cuFFT plan cache calls cufftDestroy, which calls
 * cuCtxGetCurrent and frees). Prints what the calls answered, in main and at exit. */
#include <stdio.h>
#include <stdlib.h>

#include "linked.h"

static void *ctx, *module;
static CUdeviceptr mem;

static void at_exit(void) {
  void *c = 0, *f = 0;
  int r1 = cuCtxGetCurrent(&c);
  int r2 = cuModuleGetFunction(&f, module, "scale");
  int r3 = cuModuleUnload(module);
  int r4 = cuMemFree_v2(mem);
  int r5 = cuCtxSynchronize();
  printf("at_exit %d %d %d %d %d %d\n", r1, c == ctx, r2, r3, r4, r5);
  fflush(stdout);
}

int main(void) {
  static const char ptx[] = ".version 7.0\n.target sm_75\n.address_size 64\n"
                            ".visible .entry scale(.param .u64 d, .param .f32 k, .param .u32 n) { ret; }\n";
  int dev = 0;
  void *c = 0;
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
      cuModuleLoadData(&module, ptx) || cuMemAlloc_v2(&mem, 256) || cuCtxGetCurrent(&c)) {
    fprintf(stderr, "FAILED set-up\n");
    return 1;
  }
  atexit(at_exit);
  printf("main %d\n", c == ctx);
  return 0;
}
