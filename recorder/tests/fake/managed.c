/* Managed memory in client mode (cli/tests/run_remote_managed.rs): one address on both sides,
 * coherent at launches and synchronizations. Prints what the host saw.
 *
 * - kernel after host writes: the kernel (scale x2) sees what the host wrote;
 * - host after a synchronization: the host sees what the kernel wrote;
 * - a second round, the host changing one value: the kernel sees it;
 * - a larger allocation (2 MiB) of which the host writes one value: little is sent;
 * - the pointer's attributes: managed; the device: no access to pageable memory;
 * - advice the program gave, in the range's attributes;
 * - a freed allocation's pages are gone (a new one is zeroed).
 * Any failing call prints `FAILED <call> <code>` to stderr and exits with 1. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scale.h"

/* Weak: the stand-in driver lacks it (the server backs it with device memory); the client has it. */
__attribute__((weak)) CUresult cuMemAllocManaged(CUdeviceptr *p, size_t bytes, unsigned flags);
CUresult cuMemFree_v2(CUdeviceptr p);
__attribute__((weak)) CUresult cuMemAdvise(CUdeviceptr p, size_t bytes, int advice, int device);
typedef struct { int type, id; } Location;
__attribute__((weak)) CUresult cuMemAdvise_v2(CUdeviceptr p, size_t bytes, int advice, Location where);
__attribute__((weak)) CUresult cuPointerGetAttributes(unsigned n, int *attrs, void **data, CUdeviceptr p);
__attribute__((weak)) CUresult cuMemRangeGetAttribute(void *data, size_t size, int attr, CUdeviceptr p, size_t bytes);
CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p);
CUresult cuDeviceGetAttribute(int *v, int attr, int dev);

#define N 16
int main(void) {
  void *ctx, *mod, *fn;
  OPEN_SCALE(ctx, mod, fn);
  CUdeviceptr m;
  CK(cuMemAllocManaged, &m, N * sizeof(float), 1);
  float *h = (float *)(uintptr_t)m;
  printf("fresh: %g %g\n", h[0], h[N - 1]);
  for (int i = 0; i < N; i++) h[i] = (float)i;
  if (getenv("MANAGED_FAULT")) { /* a fault of the program's own beside managed memory */
    alarm(20);
    *(volatile int *)(uintptr_t)16 = 1;
  }
  scale_twice_shared(fn, m, h, N);
  float k = 2.0f;

  CUdeviceptr big;
  size_t bytes = 2 << 20; /* the stand-in device has a few MiB */
  CK(cuMemAllocManaged, &big, bytes, 1);
  float *b = (float *)(uintptr_t)big;
  b[(bytes / sizeof(float)) / 2] = 3.0f; /* one page written */
  int half = (int)((bytes / sizeof(float)) / 2) + 1;
  void *bparams[] = {&big, &k, &half};
  CK(cuLaunchKernel, fn, 1, 1, 1, 1, 1, 1, 0, 0, bparams, 0);
  CK(cuCtxSynchronize);
  printf("big: %g %g\n", b[(bytes / sizeof(float)) / 2], b[0]);

  unsigned managed = 0;
  CK(cuPointerGetAttribute, &managed, 8, m + 4); /* CU_POINTER_ATTRIBUTE_IS_MANAGED */
  int pageable = -1;
  CK(cuDeviceGetAttribute, &pageable, 88, 0); /* PAGEABLE_MEMORY_ACCESS */
  printf("attributes: managed %u pageable %d\n", managed, pageable);

  int mostly = -1, preferred = 7;
  CK(cuMemAdvise, m, N * sizeof(float), 1, 0);  /* CU_MEM_ADVISE_SET_READ_MOSTLY */
  CK(cuMemAdvise, m, N * sizeof(float), 3, -1); /* SET_PREFERRED_LOCATION: the CPU */
  CK(cuMemRangeGetAttribute, &mostly, 4, 1, m, N * sizeof(float));
  CK(cuMemRangeGetAttribute, &preferred, 4, 2, m, N * sizeof(float));
  printf("advice: read mostly %d, preferred %d\n", mostly, preferred);
  Location dev0 = {1, 0}; /* CU_MEM_LOCATION_TYPE_DEVICE, device 0 */
  int type = -1, id = -1;
  CK(cuMemAdvise_v2, m, N * sizeof(float), 3, dev0);
  CK(cuMemRangeGetAttribute, &preferred, 4, 2, m, N * sizeof(float));
  CK(cuMemRangeGetAttribute, &type, 4, 5, m, N * sizeof(float));
  CK(cuMemRangeGetAttribute, &id, 4, 6, m, N * sizeof(float));
  printf("advice v2: preferred %d type %d id %d\n", preferred, type, id);

  CK(cuMemFree_v2, m);
  CK(cuMemFree_v2, big);
  CUdeviceptr again;
  CK(cuMemAllocManaged, &again, N * sizeof(float), 1);
  printf("again: %g\n", ((float *)(uintptr_t)again)[1]);
  return 0;
}
