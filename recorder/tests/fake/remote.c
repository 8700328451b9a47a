/* A driver-API program as `gpuless run --remote` runs it (cli/tests/run_remote_fake.rs): linked
 * against libcuda.so.1 (-lcuda) and calling the driver directly, as programs built with the CUDA
 * toolkit do, plus one entry point reached the way cudart reaches all of them (dlopen of
 * libcuda.so.1, dlsym of cuGetProcAddress_v2). It only calls what the stand-in driver
 * (libcuda.c) implements, and prints nothing that differs between the stand-in driver here and
 * a remote session: no addresses, no handles, no memory sizes.
 *
 * Usage: remote [ITERS]   (ITERS iterations of launch + async download + stream sync; default 3)
 * Any failing call prints `FAILED <call> <code>` to stderr and exits with 1. */
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The prototypes of cuda.h, by the symbols it maps them to (cuMemAlloc is cuMemAlloc_v2, ...). */
typedef int CUresult;
typedef int CUdevice;
typedef uint64_t CUdeviceptr;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream, *CUevent;
CUresult cuInit(unsigned flags);
CUresult cuDriverGetVersion(int *version);
CUresult cuDeviceGet(CUdevice *dev, int ordinal);
CUresult cuDeviceGetName(char *name, int len, CUdevice dev);
CUresult cuDeviceGetAttribute(int *value, int attribute, CUdevice dev);
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleGetFunction(CUfunction *fn, CUmodule module, const char *name);
CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t bytes);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes);
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes);
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, CUstream stream);
CUresult cuLaunchKernel(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned smem, CUstream stream, void **params, void **extra);
CUresult cuStreamCreate(CUstream *stream, unsigned flags);
CUresult cuStreamSynchronize(CUstream stream);
CUresult cuEventCreate(CUevent *event, unsigned flags);
CUresult cuEventRecord(CUevent event, CUstream stream);
CUresult cuEventSynchronize(CUevent event);
CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end);
CUresult cuMemFree_v2(CUdeviceptr ptr);

#include "scale.h"

enum { N = 256 };

static double sum(const float *v) {
  double s = 0;
  for (int i = 0; i < N; i++) s += v[i];
  return s; }

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 3;
  int version = 0, count = 0, major = 0, minor = 0;
  char name[256] = {0};
  CUdevice dev;
  CK(cuInit, 0);
  CK(cuDriverGetVersion, &version);
  printf("driver version %d\n", version);

  /* The cudart way: the library the program is already linked against, by name. */
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) { fprintf(stderr, "FAILED dlopen %s\n", dlerror()); return 1; }
  typedef CUresult (*gpa_t)(const char *, void **, int, uint64_t, int *);
  gpa_t gpa = (gpa_t)dlsym(lib, "cuGetProcAddress_v2");
  if (!gpa) { fprintf(stderr, "FAILED dlsym cuGetProcAddress_v2\n"); return 1; }
  void *p = 0; int status = 0;
  check(gpa("cuDeviceGetCount", &p, 13000, 0, &status), "cuGetProcAddress_v2");
  if (!p) { fprintf(stderr, "FAILED cuGetProcAddress_v2 %d\n", status); return 1; }
  CUresult (*get_count)(int *) = (CUresult(*)(int *))p;
  check(get_count(&count), "cuDeviceGetCount");
  printf("devices %d\n", count);

  CK(cuDeviceGet, &dev, 0);
  CK(cuDeviceGetName, name, (int)sizeof name - 1, dev);
  CK(cuDeviceGetAttribute, &major, 75, dev); /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
  CK(cuDeviceGetAttribute, &minor, 76, dev); /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR */
  printf("device %s, compute capability %d.%d\n", name, major, minor);

  CUcontext ctx;
  CUmodule mod;
  CUfunction fn;
  CK(cuDevicePrimaryCtxRetain, &ctx, dev);
  CK(cuCtxSetCurrent, ctx);
  CK(cuModuleLoadData, &mod, ptx);
  CK(cuModuleGetFunction, &fn, mod, "scale");

  static float h[N], back[N];
  for (int i = 0; i < N; i++) h[i] = (float)(i + 1);
  CUdeviceptr d;
  CK(cuMemAlloc_v2, &d, sizeof h);
  CK(cuMemcpyHtoD_v2, d, h, sizeof h);
  float factor = 2.0f; int n = N;
  void *params[] = {&d, &factor, &n};
  CK(cuLaunchKernel, fn, 1, 1, 1, N, 1, 1, 0, 0, params, 0);
  CK(cuMemcpyDtoH_v2, back, d, sizeof back); /* synchronous: waits for the launch */
  printf("sum %.1f\n", sum(back));

  CUstream stream;
  CK(cuStreamCreate, &stream, 0);
  factor = 0.5f;
  for (int i = 0; i < iters; i++) {
    CK(cuLaunchKernel, fn, 1, 1, 1, N, 1, 1, 0, stream, params, 0);
    CK(cuMemcpyDtoHAsync_v2, back, d, sizeof back, stream);
    CK(cuStreamSynchronize, stream);
    printf("iteration %d sum %.1f\n", i, sum(back));
  }

  CUevent start, end;
  float ms = -1;
  CK(cuEventCreate, &start, 0);
  CK(cuEventCreate, &end, 0);
  CK(cuEventRecord, start, stream);
  CK(cuEventRecord, end, stream);
  CK(cuEventSynchronize, end);
  CK(cuEventElapsedTime_v2, &ms, start, end);
  printf("elapsed %.2f ms\n", ms);
  CK(cuCtxSynchronize);
  CK(cuMemFree_v2, d);
  printf("done\n");
  return 0;
}
