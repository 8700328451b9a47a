/* One driver call at a time with the first-level caches evicted before it (96 KiB of data and
 * the generated pollution code): cuCtxGetDevice (PyTorch's most frequent call, answered from the
 * recorder's memo), cuDevicePrimaryCtxGetState (the same, with an input) and a 48-parameter
 * cuLaunchKernel. calls N [MASK]: N rounds; MASK picks the calls (1, 2, 4; default 7). Prints each
 * call's median cycles per 1000 cycles of a fixed stretch of code timed in the same process (the
 * machine's speed changes between processes). misses.sh runs it under callgrind instead. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <x86intrin.h>

#include "driver.h" /* recorder/tests/fake: get() and open_driver(), the way cudart reaches libcuda */
static unsigned char data[96 << 10];
uint32_t pollute_code(uint32_t);
static int cmp(const void *a, const void *b) { uint64_t x = *(uint64_t *)a, y = *(uint64_t *)b; return x < y ? -1 : x > y; }
int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 20000, mask = argc > 2 ? atoi(argv[2]) : 7;
  open_driver();
  int (*init)(unsigned) = get("cuInit");
  int (*getdev)(int *, void *) = get("cuCtxGetDevice");
  int (*state)(int, unsigned *, int *) = get("cuDevicePrimaryCtxGetState");
  int (*alloc)(uint64_t *, size_t) = get("cuMemAlloc");
  int (*load)(void **, const void *) = get("cuModuleLoadData");
  int (*getf)(void **, void *, const char *) = get("cuModuleGetFunction");
  int (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **) =
      get("cuLaunchKernel");
  int (*sync)(void *) = get("cuStreamSynchronize");
  uint64_t d; void *mod, *fn;
  if (init(0) || alloc(&d, 256) || load(&mod, "x") || getf(&fn, mod, "\x05")) return 4;
  uint64_t pv[48]; void *params[48]; for (int i = 0; i < 48; i++) { pv[i] = d; params[i] = &pv[i]; }
  uint64_t *t[4]; for (int k = 0; k < 4; k++) if (!(t[k] = calloc(n, sizeof(uint64_t)))) return 5;
  uint32_t a = 1;
  for (int i = 0; i < n; i++) {
    for (int k = 0; k < 3; k++) {
      if (!(mask & (1 << k))) continue;
      a = pollute_code(a); for (size_t j = 0; j < sizeof data; j += 64) a += data[j]++;
      uint64_t t0 = __rdtsc();
      if (k == 0) { int dv; getdev(&dv, 0); }
      else if (k == 1) { unsigned f; int act; state(0, &f, &act); }
      else launch(fn, 1, 1, 1, 64, 1, 1, 0, 0, params, 0);
      t[k][i] = __rdtsc() - t0;
    }
    { uint64_t t0 = __rdtsc(); a = pollute_code(a); t[3][i] = __rdtsc() - t0; }
    if (i % 200 == 199) sync(0);
  }
  for (int k = 0; k < 4; k++) qsort(t[k], n, sizeof(uint64_t), cmp);
  double c = t[3][n / 2] / 1000.0;
  printf("per 1000 cycles of fixed code: getdev %.1f state %.1f launch %.1f  (fixed code %lu cycles) %u\n",
         t[0][n / 2] / c, t[1][n / 2] / c, t[2][n / 2] / c, (unsigned long)t[3][n / 2], a & 1);
  return 0; }
