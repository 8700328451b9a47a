/* What nvcc generates for one .cu file, by hand: a fat binary wrapper, host stubs for two
 * kernels, the host shadow of a __device__ variable, and a constructor that registers them with
 * the runtime. TAG (an identifier) names this copy; TAG_report() prints what the runtime that
 * got the registrations answers for them. */
#include <stdio.h>
#include <stddef.h>

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define STR2(a) #a
#define STR(a) STR2(a)
typedef struct { unsigned x, y, z; } uint3;
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **h);
void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun, const char *deviceName, int thread_limit,
                            uint3 *tid, uint3 *bid, uint3 *bDim, uint3 *gDim, int *wSize);
void __cudaRegisterVar(void **h, char *hostVar, char *deviceAddress, const char *deviceName, int ext, size_t size,
                       int constant, int global);
const char *fakeKernelName(const void *hostFun);
long fakeVarSize(const void *hostVar);
const char *fakeCudartId(void);

static const char ptx[] = ".version 9.0\n.target sm_90\n.address_size 64\n";
static const struct { int magic, version; const void *data; void *filename; } wrapper = {0x466243B1, 1, ptx, 0};
static void **handle;
void CAT(TAG, _scale)(void) { puts("stub"); }
void CAT(TAG, _other)(void) { puts("stub"); }
double CAT(TAG, _counter)[3];

__attribute__((constructor)) static void reg(void) {
  handle = __cudaRegisterFatBinary((void *)&wrapper);
  __cudaRegisterFunction(handle, (const char *)CAT(TAG, _scale), (char *)"scale", "scale", -1, 0, 0, 0, 0, 0);
  __cudaRegisterFunction(handle, (const char *)CAT(TAG, _other), (char *)"other_" STR(TAG), "other_" STR(TAG), -1, 0, 0,
                         0, 0, 0);
  __cudaRegisterVar(handle, (char *)CAT(TAG, _counter), (char *)"counter_" STR(TAG), "counter_" STR(TAG), 0,
                    sizeof CAT(TAG, _counter), 0, 0);
  __cudaRegisterFatBinaryEnd(handle);
}

void CAT(TAG, _report)(void) {
  printf("%s: %s %s %ld (cudart %s)\n", STR(TAG), fakeKernelName((const void *)CAT(TAG, _scale)),
         fakeKernelName((const void *)CAT(TAG, _other)), fakeVarSize(CAT(TAG, _counter)), fakeCudartId());
}
