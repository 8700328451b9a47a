/* A kernel that polls a flag in pinned memory until the host sets it (cli/tests/
 * run_remote_managed.rs, the server's stand-in driver with FAKE_CUDA_POLL=1), as
 * UnifiedMemoryPerf's latch: the kernel is launched on a stream of the program's, the program
 * synchronizes another (idle) stream, sets the flag and only then synchronizes the kernel's
 * stream. Natively both synchronizations return: the idle stream has nothing to wait for, and
 * the host's write reaches the running kernel. Through the client, neither the executor's copy
 * of the host's write nor its read of shared memory after the first synchronization may wait
 * for the polling kernel. Two rounds, plain pinned memory then memory from cuMemHostAlloc with
 * DEVICEMAP. Any failing call prints `FAILED <call> <code>` to stderr and exits with 1. */
#include "scale.h"

/* Weak: the stand-in driver lacks them (the client answers them); linked against the client. */
__attribute__((weak)) CUresult cuMemAllocHost_v2(void **p, size_t bytes);
__attribute__((weak)) CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned flags);
__attribute__((weak)) CUresult cuMemFreeHost(void *p);
__attribute__((weak)) CUresult cuMemAllocManaged(CUdeviceptr *p, size_t bytes, unsigned flags);
__attribute__((weak)) CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t bytes, int device, void *stream);
CUresult cuStreamCreate(void **s, unsigned flags);
CUresult cuStreamSynchronize(void *s);

/* Managed memory a kernel queued behind the poller works on (0: none). */
static CUdeviceptr queued;

/* One round: the polling launch (`scale` with factor 0 under FAKE_CUDA_POLL) on stream a; with
 * `queued` set, a kernel on managed memory behind it and a prefetch of that memory to the host
 * on the legacy stream (UnifiedMemoryPerf's asynchronous round). */
static void round_with(void *fn, unsigned *flag, void *a, void *b, const char *what) {
  *flag = 0;
  CUdeviceptr d = (CUdeviceptr)(uintptr_t)flag;
  float k = 0.0f;
  int n = 1;
  void *params[] = {&d, &k, &n};
  CK(cuLaunchKernel, fn, 1, 1, 1, 1, 1, 1, 0, a, params, 0);
  if (queued) {
    float two = 2.0f;
    int eight = 8;
    void *qparams[] = {&queued, &two, &eight};
    CK(cuLaunchKernel, fn, 1, 1, 1, 8, 1, 1, 0, a, qparams, 0);
    CK(cuMemPrefetchAsync, queued, 8 * sizeof(float), -1 /* CU_DEVICE_CPU */, 0);
  }
  CK(cuStreamSynchronize, b);
  *flag = 1;
  CK(cuStreamSynchronize, a);
  printf("%s: poller released, flag %u\n", what, *flag);
}

int main(void) {
  void *ctx, *mod, *fn;
  OPEN_SCALE(ctx, mod, fn);
  void *a, *b;
  CK(cuStreamCreate, &a, 0);
  CK(cuStreamCreate, &b, 0);
  unsigned *plain, *mapped;
  CK(cuMemAllocHost_v2, (void **)&plain, 4096);
  CK(cuMemHostAlloc, (void **)&mapped, 4096, 2 /* CU_MEMHOSTALLOC_DEVICEMAP */);
  round_with(fn, plain, a, b, "plain pinned");
  round_with(fn, plain, a, b, "plain pinned again");
  round_with(fn, mapped, a, b, "mapped");
  CK(cuMemAllocManaged, &queued, 8 * sizeof(float), 1);
  float *m = (float *)(uintptr_t)queued;
  for (int i = 0; i < 8; i++) m[i] = (float)i;
  round_with(fn, plain, a, b, "work queued behind");
  printf("managed after the queued kernel: %g %g\n", m[1], m[7]);
  CK(cuMemFreeHost, plain);
  CK(cuMemFreeHost, mapped);
  printf("done\n");
  return 0;
}
