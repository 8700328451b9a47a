/* A stand-in for a shared libcudart: the registration functions that nvcc-generated
 * constructors call. It keeps what it is told (host stub -> kernel name, host variable -> name
 * and size) so that programs can ask for it back, refuses handles it did not give out (abort),
 * and loads each fat binary through the driver from inside __cudaRegisterFatBinaryEnd, as an
 * eagerly loading cudart does (not with FAKE_CUDART_LAZY set). Built under two sonames by the
 * tests; CUDART_ID tells the copies apart. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

#ifndef CUDART_ID
#define CUDART_ID "A"
#endif
typedef struct { unsigned x, y, z; } uint3;
typedef uint3 dim3;
struct fn { const void *host; const char *name; };
struct var { const void *host; const char *name; size_t size; };
static struct fn fns[64];
static struct var vars[64];
static void *handles[64];
static int nfns, nvars, nhandles, ended;

typedef int (*gpa_t)(const char *, void **, int, uint64_t, int *);
static int (*load)(void **, const void *);
static void driver(void) {
  if (load) return;
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return;
  gpa_t gpa = (gpa_t)dlsym(lib, "cuGetProcAddress_v2");
  int (*init)(unsigned) = 0;
  int st;
  if (!gpa || gpa("cuInit", (void **)&init, 13000, 0, &st) || gpa("cuModuleLoadData", (void **)&load, 13000, 0, &st))
    abort();
  init(0);
}
static void check(void **h) {
  if (h < handles || h >= handles + nhandles) abort();
}

void **__cudaRegisterFatBinary(void *fatCubin) {
  if (nhandles == 64) abort();
  handles[nhandles] = fatCubin;
  return &handles[nhandles++];
}
void __cudaRegisterFatBinaryEnd(void **h) {
  check(h);
  if (!getenv("FAKE_CUDART_LAZY")) {
    void *mod;
    driver();
    if (load(&mod, *h)) abort();
  }
  ended++;
}
void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun, const char *deviceName, int thread_limit,
                            uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize) {
  (void)deviceFun; (void)thread_limit; (void)tid; (void)bid; (void)bDim; (void)gDim; (void)wSize;
  check(h);
  if (nfns == 64) abort();
  fns[nfns++] = (struct fn){hostFun, deviceName};
}
void __cudaRegisterVar(void **h, char *hostVar, char *deviceAddress, const char *deviceName, int ext, size_t size,
                       int constant, int global) {
  (void)deviceAddress; (void)ext; (void)constant; (void)global;
  check(h);
  if (nvars == 64) abort();
  vars[nvars++] = (struct var){hostVar, deviceName, size};
}

/* What a program asks its runtime. */
const char *fakeKernelName(const void *hostFun) {
  for (int i = 0; i < nfns; i++)
    if (fns[i].host == hostFun) return fns[i].name;
  return "unregistered";
}
long fakeVarSize(const void *hostVar) {
  for (int i = 0; i < nvars; i++)
    if (vars[i].host == hostVar) return (long)vars[i].size;
  return -1;
}
const char *fakeCudartId(void) { return CUDART_ID; }
int fakeFatbinsEnded(void) { return ended; }
