/* Work sent ahead of a synchronization (cli/tests/run_remote_ahead.rs): a first synchronization,
 * then three launches, then 60 ms of the program's own work, then a second synchronization.
 * Through `gpuless run --remote`, the launches must reach the server while the program works,
 * not with the second synchronization. Calls only what the stand-in driver implements. */
#include <stdint.h>
#include <time.h>

#include "scale.h"

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes);

int main(void) {
  void *ctx, *mod, *fn;
  CUdeviceptr d;
  float host[64] = {1.0f};
  OPEN_SCALE(ctx, mod, fn);
  CK(cuMemAlloc_v2, &d, sizeof host);
  CK(cuMemcpyHtoD_v2, d, host, sizeof host);
  CK(cuCtxSynchronize);
  float k = 2.0f;
  int n = 64;
  void *args[] = {&d, &k, &n};
  for (int i = 0; i < 3; i++) CK(cuLaunchKernel, fn, 1, 1, 1, 64, 1, 1, 0, 0, args, 0);
  struct timespec work = {0, 60 * 1000 * 1000};
  nanosleep(&work, 0);
  CK(cuCtxSynchronize);
  printf("done\n");
  return 0;
}
