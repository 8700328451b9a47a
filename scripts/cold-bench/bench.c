/* Recorder cost with cold caches: between calls the "framework" runs ~70 KB of code and walks
 * 1 MB of data, like PyTorch's dispatcher between two launches. bench [INFERENCES] [POLLUTE] */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
uint32_t pollute_code(uint32_t);
typedef int (*gpa_t)(const char *, void **, int, uint64_t, int *);
static gpa_t gpa;
static void *get(const char *name) { void *p = 0; int st = 0;
  if (gpa(name, &p, 13000, 0, &st) || !p) { fprintf(stderr, "no %s\n", name); exit(3); } return p; }
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static unsigned char data[1 << 20];
static uint32_t pollute(uint32_t a) { a = pollute_code(a); for (size_t i = 0; i < sizeof data; i += 64) a += data[i]++; return a; }
int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 200, pol = argc > 2 ? atoi(argv[2]) : 1;
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 2; }
  gpa = (gpa_t)dlsym(lib, "cuGetProcAddress_v2");
  int (*init)(unsigned) = get("cuInit");
  int (*alloc)(uint64_t *, size_t) = get("cuMemAlloc");
  int (*load)(void **, const void *) = get("cuModuleLoadData");
  int (*getf)(void **, void *, const char *) = get("cuModuleGetFunction");
  int (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **) = get("cuLaunchKernel");
  int (*state)(int, unsigned *, int *) = get("cuDevicePrimaryCtxGetState");
  int (*kattr)(int *, int, void *, int) = get("cuKernelGetAttribute");
  int (*sync)(void *) = get("cuStreamSynchronize");
  static const char ptx[] = ".version 9.0\n";
  uint64_t d; void *mod, *fn[100];
  if (init(0) || alloc(&d, 256) || load(&mod, ptx)) return 4;
  for (int i = 0; i < 100; i++) { char name[2] = {(char)i, 0}; if (getf(&fn[i], mod, name)) return 4; }
  uint64_t pv[48]; void *params[48]; for (int i = 0; i < 48; i++) { pv[i] = d + i * 64; params[i] = &pv[i]; }
  uint32_t a = 1; double t0 = now(), tp = 0;
  for (int it = 0; it < n; it++) {
    for (int l = 0; l < 220; l++) {
      if (pol) { double p0 = now(); a = pollute(a); tp += now() - p0; }
      for (int q = 0; q < 3; q++) { unsigned f; int act; state(0, &f, &act); }
      for (int q = 0; q < 2; q++) { int v; kattr(&v, q, fn[l % 100], 0); }
      launch(fn[(l * 7) % 100], 1, 1, 1, 64, 1, 1, 0, 0, params, 0);
    }
    sync(0);
  }
  double t = (now() - t0) / n, p = tp / n;
  printf("ns_per_inference=%.0f excluding_pollution=%.0f (220 launches, 1100 queries, 1 sync) %u\n", t, t - p, a & 1);
  return 0; }
