/* A stand-in libcuda.so.1 with 100 kernels of 3-42 parameters, for the cold-cache recorder
 * bench (run.sh). It only checks and reads what it is given: never a stand-in for a GPU. */
#include <stdint.h>
#include <string.h>
#include <stddef.h>
typedef int CUresult;
static int kernels[128], ctx_token, module_token;
static unsigned char heap[1 << 20];
CUresult cuInit(unsigned f) { (void)f; return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuDeviceGet(int *d, int o) { *d = o; return 0; }
CUresult cuDeviceGetName(char *n, int l, int d) { (void)d; strncpy(n, "Fake GPU", l); return 0; }
CUresult cuDeviceGetAttribute(int *v, int a, int d) { (void)d; *v = a == 75 ? 9 : a == 76 ? 0 : 1; return 0; }
CUresult cuDeviceGetUuid_v2(unsigned char *u, int d) { (void)d; memset(u, 0xab, 16); return 0; }
CUresult cuCtxGetCurrent(void **c) { *c = &ctx_token; return 0; }
CUresult cuCtxGetDevice_v2(int *d, void *c) { (void)c; *d = 0; return 0; }
CUresult cuDevicePrimaryCtxGetState(int d, unsigned *f, int *a) { (void)d; *f = 0; *a = 1; return 0; }
CUresult cuKernelGetAttribute(int *v, int a, void *k, int d) { (void)k; (void)d; *v = a * 3; return 0; }
CUresult cuMemAlloc_v2(uint64_t *p, size_t n) { static size_t top = 256; *p = 0x7e0000000000ull + top; top += (n + 255) & ~255ul; return 0; }
CUresult cuStreamSynchronize(void *s) { (void)s; return 0; }
CUresult cuModuleLoadData(void **m, const void *i) { (void)i; *m = &module_token; return 0; }
CUresult cuModuleGetFunction(void **f, void *m, const char *name) { (void)m; *f = &kernels[(unsigned char)name[0] % 128]; return 0; }
static int nparams(void *f) { return (int)(((int *)f - kernels) % 40) + 3; }
CUresult cuFuncGetParamInfo(void *f, size_t i, size_t *off, size_t *size) {
  if ((int)i >= nparams(f)) return 1;
  *off = i * 8; *size = i % 3 == 2 ? 4 : 8; return 0; }
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned smem, void *stream, void **params, void **extra) {
  (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)smem; (void)stream; (void)extra;
  unsigned s = 0; int n = nparams(f);
  for (int i = 0; i < n; i++) s += *(unsigned *)params[i];
  heap[s & 0xfffff]++; return 0; }
struct entry { const char *name; void *fn; };
static const struct entry table[] = {
  {"cuInit", cuInit}, {"cuDriverGetVersion", cuDriverGetVersion}, {"cuDeviceGet", cuDeviceGet},
  {"cuDeviceGetName", cuDeviceGetName}, {"cuDeviceGetAttribute", cuDeviceGetAttribute},
  {"cuDeviceGetUuid", cuDeviceGetUuid_v2}, {"cuCtxGetCurrent", cuCtxGetCurrent}, {"cuCtxGetDevice", cuCtxGetDevice_v2},
  {"cuDevicePrimaryCtxGetState", cuDevicePrimaryCtxGetState}, {"cuKernelGetAttribute", cuKernelGetAttribute},
  {"cuMemAlloc", cuMemAlloc_v2}, {"cuModuleLoadData", cuModuleLoadData}, {"cuModuleGetFunction", cuModuleGetFunction},
  {"cuFuncGetParamInfo", cuFuncGetParamInfo}, {"cuLaunchKernel", cuLaunchKernel}, {"cuStreamSynchronize", cuStreamSynchronize},
};
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, uint64_t flags, int *status) {
  (void)ver; (void)flags;
  for (size_t i = 0; i < sizeof table / sizeof *table; i++)
    if (!strcmp(sym, table[i].name)) { *pfn = table[i].fn; if (status) *status = 1; return 0; }
  *pfn = 0; if (status) *status = 2; return 500; }
