/* What the test programs that call the stand-in driver directly share (remote.c,
 * graph_params.c, ahead.c, pieces.c): the kernel the stand-in knows, how a failing call ends the
 * program, and the driver calls every one of them makes (an including file declares the others;
 * its own typedefs of handles as `void *` and devices as `int` redeclare these compatibly). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;
CUresult cuInit(unsigned flags);
CUresult cuDeviceGet(int *dev, int ordinal);
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev);
CUresult cuCtxSetCurrent(void *ctx);
CUresult cuModuleLoadData(void **module, const void *image);
CUresult cuModuleGetFunction(void **fn, void *module, const char *name);
CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t bytes);
CUresult cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned smem, void *stream, void **params, void **extra);

/* The kernel the stand-in driver knows, as PTX text: scale(float *data, float factor, int n),
 * parameters at offsets 0, 8, 12 with sizes 8, 4, 4 (the stand-in's cuFuncGetParamInfo). */
static const char ptx[] =
  ".version 8.0\n"
  ".target sm_90\n"
  ".address_size 64\n"
  ".visible .entry scale(\n"
  "\t.param .u64 scale_param_0,\n"
  "\t.param .f32 scale_param_1,\n"
  "\t.param .u32 scale_param_2\n"
  ")\n"
  "{\n"
  "\tret;\n"
  "}\n";

/* Prints `FAILED <call> <code>` to stderr and exits with 1 when r is not CUDA_SUCCESS. */
static void check(int r, const char *call) {
  if (r) { fprintf(stderr, "FAILED %s %d\n", call, r); exit(1); } }
/* A kernel node's parameters (CUDA_KERNEL_NODE_PARAMS_v2), and one of `scale` over one block
 * of n threads with these arguments. */
typedef struct { void *func; unsigned grid[3], block[3], smem; void **params, **extra; void *kern, *ctx; } KernelParams;
static inline KernelParams scale_node(void *fn, unsigned n, void **params) {
  KernelParams kp = {0};
  kp.func = fn;
  kp.grid[0] = kp.grid[1] = kp.grid[2] = 1;
  kp.block[0] = n;
  kp.block[1] = kp.block[2] = 1;
  kp.params = params;
  return kp; }
/* A graph allocation node's parameters (CUDA_MEM_ALLOC_NODE_PARAMS): the pool's properties, the
 * access descriptors, the size and the address the driver writes. */
typedef struct {
  unsigned char pool_props[88];
  const void *access;
  size_t access_count;
  size_t bytesize;
  CUdeviceptr dptr;
} AllocParams;
/* Graphs of kernel nodes, launched; synchronous copies. */
CUresult cuGraphCreate(void **g, unsigned flags);
CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags);
CUresult cuGraphLaunch(void *exec, void *stream);
CUresult cuCtxSynchronize(void);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n);
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n);
/* CK(cuInit, 0) calls cuInit(0) and checks its result under the name cuInit. */
#define CK(fn, ...) check(fn(__VA_ARGS__), #fn)

/* Device memory of n floats 0, 1, ..., n - 1 (n at most 64), at *d. */
static inline void iota_buffer(CUdeviceptr *d, int n) {
  float data[64];
  for (int i = 0; i < n && i < 64; i++) data[i] = (float)i;
  CK(cuMemAlloc_v2, d, (size_t)n * sizeof(float));
  CK(cuMemcpyHtoD_v2, *d, data, (size_t)n * sizeof(float)); }

/* Memory the host and the device share, in two rounds: `scale` by 2 of the n floats at d (the
 * host's h, the same memory), the host reads them, writes h[1] = 100, and again. Prints
 * `after kernel: ...` and `second round: ...` (h[0], h[1], h[n - 1] each time). */
static inline void scale_twice_shared(void *fn, CUdeviceptr d, float *h, int n) {
  float k = 2.0f;
  void *params[] = {&d, &k, &n};
  CK(cuLaunchKernel, fn, 1, 1, 1, (unsigned)n, 1, 1, 0, 0, params, 0);
  CK(cuCtxSynchronize);
  printf("after kernel: %g %g %g\n", h[0], h[1], h[n - 1]);
  h[1] = 100.0f;
  CK(cuLaunchKernel, fn, 1, 1, 1, (unsigned)n, 1, 1, 0, 0, params, 0);
  CK(cuCtxSynchronize);
  printf("second round: %g %g %g\n", h[0], h[1], h[n - 1]); }

/* What every program here starts with: cuInit, device 0's primary context made current, and
 * the stand-in's `scale` from a module loaded from `ptx` (into `ctx`, `mod`, `fn`). */
#define OPEN_SCALE(ctx, mod, fn)                      \
  do {                                                \
    int dev_;                                         \
    CK(cuInit, 0);                                    \
    CK(cuDeviceGet, &dev_, 0);                        \
    CK(cuDevicePrimaryCtxRetain, &(ctx), dev_);       \
    CK(cuCtxSetCurrent, (ctx));                       \
    CK(cuModuleLoadData, &(mod), ptx);                \
    CK(cuModuleGetFunction, &(fn), (mod), "scale");   \
  } while (0)
