/* The driver functions the test programs linked against libcuda (-lcuda) call directly:
 * crash.c, exit_calls.c, fork_child.c (the stand-in in CI, the real driver in the GPU suite). */
#pragma once
#include <stddef.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
CUresult cuInit(unsigned flags);
CUresult cuDeviceGet(int *dev, int ordinal);
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev);
CUresult cuCtxSetCurrent(void *ctx);
CUresult cuCtxGetCurrent(void **ctx);
CUresult cuCtxSynchronize(void);
CUresult cuModuleLoadData(void **module, const void *image);
CUresult cuModuleGetFunction(void **f, void *module, const char *name);
CUresult cuModuleUnload(void *module);
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n);
CUresult cuMemFree_v2(CUdeviceptr p);
CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n);
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n);
