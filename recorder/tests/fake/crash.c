/* A driver-API program that crashes after its work: an allocation, five memsets (sent ahead,
 * never synchronized), then a fault (no argument) or abort() (any argument). Through the
 * client, the session must still end as at exit: the work sent, the counts written. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "linked.h"

int main(int argc, char **argv) {
  int dev = 0;
  void *ctx = 0;
  CUdeviceptr p = 0;
  (void)argv;
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
      cuMemAlloc_v2(&p, 256))
    return 2;
  for (int i = 0; i < 5; i++)
    if (cuMemsetD8_v2(p, (unsigned char)i, 256)) return 3;
  printf("crashing\n");
  fflush(stdout);
  if (argc > 1) abort();
  *(volatile int *)(uintptr_t)8 = 1;
  return 4;
}
