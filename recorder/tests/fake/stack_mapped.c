/* The program's own stack registered with DEVICEMAP (NPP registers buffers that live on the
 * stack) in client mode (cli/tests/run_remote_managed.rs): the client write-protects the pages to
 * see the host's writes, so the next push onto the stack faults; the fault handler must run
 * (on an alternate stack) and the program go on. A kernel then doubles the registered values
 * (the client carries the host's writes there before the launch). Prints what the host saw. */
#include <string.h>

#include "scale.h"

__attribute__((weak)) CUresult cuMemHostRegister_v2(void *p, size_t bytes, unsigned flags);
__attribute__((weak)) CUresult cuMemHostUnregister(void *p);

#define N 16
/* Deep enough that its frames write into the registered page below the caller's. */
static __attribute__((noinline)) int depth(int n) {
  volatile char pad[512];
  pad[0] = (char)n;
  return n ? depth(n - 1) + pad[0] : 0;
}

/* Touches `n` bytes of stack below the caller's frame (so they are mapped). */
static __attribute__((noinline)) void touch(size_t n) {
  volatile char big[32768];
  for (size_t i = 0; i < n && i < sizeof big; i += 64) big[i] = 1;
}

int main(void) {
  void *ctx, *mod, *fn;
  OPEN_SCALE(ctx, mod, fn);
  float h[N];
  for (int i = 0; i < N; i++) h[i] = (float)i;
  CK(cuMemHostRegister_v2, h, sizeof h, 2 /* CU_MEMHOSTREGISTER_DEVICEMAP */);
  /* The stack below this frame, where the next calls' frames and a signal's frame go, also
   * registered: every push there faults until the fault handler has run for its page. */
  touch(32768);
  char *below = (char *)__builtin_frame_address(0) - 24576;
  below = (char *)((uintptr_t)below & ~(uintptr_t)4095);
  CK(cuMemHostRegister_v2, below, 16384, 2);
  printf("calls after: %d\n", depth(32) >= 0);
  CK(cuMemHostUnregister, below);
  for (int i = 0; i < N; i++) h[i] = (float)(i + 1);
  scale_twice_shared(fn, (CUdeviceptr)(uintptr_t)h, h, N);
  printf("h: %g %g\n", h[0], h[N - 1]);
  CK(cuMemHostUnregister, h);
  printf("done\n");
  return 0;
}
