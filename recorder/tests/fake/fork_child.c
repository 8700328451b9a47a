/* A child forked without exec after the parent's CUDA work, which calls the driver and exits
 * through exit() (its atexit handlers run). Through the client the child's call must fail
 * without touching the parent's session, and the parent's work must go on: it reads back what
 * it wrote. Prints the child's status and the parent's. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "linked.h"

int main(void) {
  int dev = 0;
  void *ctx = 0;
  CUdeviceptr p = 0;
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
      cuMemAlloc_v2(&p, 256) || cuMemsetD8_v2(p, 7, 256))
    return 2;
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    int r = cuMemsetD8_v2(p, 9, 256);
    printf("child %d\n", r);
    fflush(stdout);
    exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  unsigned char h[256] = {0};
  int r = cuMemcpyDtoH_v2(h, p, sizeof h);
  printf("parent %d %d\n", r, h[0]);
  return 0;
}
