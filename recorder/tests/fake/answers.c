/* What client mode answers where the driver checks a call (cli/tests/run_remote_answers.rs):
 * every function the API table refuses, asked for by name and called, then the driver's answers
 * to bad arguments — a device that does not exist, nowhere to write an answer, an unknown
 * kernel handle, a launch configuration or a copy the driver refuses, error names and strings,
 * cuGetProcAddress by version — each printed as `WHAT: STATUS`. The stand-in driver answers
 * none of these as the real one does: the test compares with the real driver's answers
 * (measured on driver 580, testdata/cuda/suite/driver_answers.c), not with a native run.
 *
 * Usage: answers REFUSED_SYMBOL...   (each refused symbol is looked up with dlsym and called
 * with every argument zero; `REFUSED name status` is printed for each) */
#include <dlfcn.h>
#include <string.h>

#include "scale.h"

/* Weak: the stand-in driver this links against lacks some; the client library has them all. */
#define WEAK __attribute__((weak))
WEAK CUresult cuDeviceGetCount(int *count);
WEAK CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev);
WEAK CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes);
WEAK CUresult cuGetErrorName(CUresult error, const char **name);
WEAK CUresult cuGetErrorString(CUresult error, const char **str);
WEAK CUresult cuCtxSynchronize(void);
typedef CUresult (*GetProcAddress)(const char *, void **, int, uint64_t, int *);
typedef CUresult (*Zeros)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);

int main(int argc, char **argv) {
  void *ctx, *mod, *fn;
  OPEN_SCALE(ctx, mod, fn);
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  for (int i = 1; i < argc; i++) {
    Zeros f = lib ? (Zeros)dlsym(lib, argv[i]) : 0;
    if (!f) { printf("REFUSED %s absent\n", argv[i]); continue; }
    printf("REFUSED %s %d\n", argv[i], f(0, 0, 0, 0, 0, 0));
  }
  int dev, count;
  size_t bytes;
  printf("cuDeviceGet(1): %d\n", cuDeviceGet(&dev, 1));
  printf("cuDeviceTotalMem(dev 3): %d\n", cuDeviceTotalMem_v2(&bytes, 3));
  printf("cuDeviceGetCount(NULL): %d\n", cuDeviceGetCount(0));
  int r = cuDeviceGetCount(&count);
  printf("cuDeviceGetCount: %d %d\n", r, count);
  const char *s = "untouched";
  r = cuGetErrorString(1, &s);
  printf("cuGetErrorString(1): %d %s\n", r, s);
  r = cuGetErrorName(700, &s);
  printf("cuGetErrorName(700): %d %s\n", r, s);
  r = cuGetErrorName(123456, &s);
  printf("cuGetErrorName(123456): %d %s\n", r, s ? s : "NULL");
  GetProcAddress gpa = lib ? (GetProcAddress)dlsym(lib, "cuGetProcAddress_v2") : 0;
  void *p = 0;
  int status = -1;
  if (gpa) {
    const char *asked[][2] = {{"cuLaunchKernelEx", "11000"}, {"cuLaunchKernelEx", "11080"}, {"cuNoSuchFunction", "13000"}};
    for (int i = 0; i < 3; i++) {
      r = gpa(asked[i][0], &p, atoi(asked[i][1]), 0, &status);
      printf("cuGetProcAddress(%s, %s): %d status %d %s\n", asked[i][0], asked[i][1], r, status, p ? "found" : "null");
    }
    void *v1 = 0, *v2 = 0;
    gpa("cuMemAlloc", &v1, 3000, 0, &status);
    gpa("cuMemAlloc", &v2, 13000, 0, &status);
    printf("cuMemAlloc at 3000 is the one at 13000: %s\n", v1 == v2 ? "yes" : "no");
  }
  CUdeviceptr d;
  float h[4] = {1, 2, 3, 4};
  CK(cuMemAlloc_v2, &d, sizeof h);
  float factor = 2.0f;
  int n = 4;
  void *params[] = {&d, &factor, &n};
  printf("launch of a bogus handle: %d\n", cuLaunchKernel((void *)0x1234, 1, 1, 1, 4, 1, 1, 0, 0, params, 0));
  printf("launch with 2048 threads: %d\n", cuLaunchKernel(fn, 1, 1, 1, 2048, 1, 1, 0, 0, params, 0));
  printf("launch with a grid of 0: %d\n", cuLaunchKernel(fn, 0, 1, 1, 4, 1, 1, 0, 0, params, 0));
  printf("launch: %d\n", cuLaunchKernel(fn, 1, 1, 1, 4, 1, 1, 0, 0, params, 0));
  printf("cuMemcpyDtoH from a host address: %d\n", cuMemcpyDtoH_v2(h, (CUdeviceptr)(uintptr_t)h, sizeof h));
  printf("cuMemcpyDtoH past the end: %d\n", cuMemcpyDtoH_v2(h, d, 4096));
  printf("cuMemcpyDtoH: %d\n", cuMemcpyDtoH_v2(h, d, sizeof h));
  printf("cuMemAlloc(0 bytes): %d\n", cuMemAlloc_v2(&d, 0));
  printf("cuCtxSynchronize: %d\n", cuCtxSynchronize());
  return 0;
}
