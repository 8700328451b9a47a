/* The driver's answers to bad and unusual calls (issue 34), for the GPU suite's compatibility
 * section (scripts/gpu-suite-compat.sh): run natively and through `gpuless run --remote`, the
 * two outputs must be identical line by line. Driver API only, plain C (build.sh: `-x c
 * -cudart none -lcuda`); its kernels are PTX embedded here, loaded with cuModuleLoadData.
 *
 * One line per check, `NAME: RESULT [values]`, RESULT being the CUresult's name from
 * cuGetErrorName; never an address or a time. `err CODE NAME "STRING"` lines list every code
 * 0..1000 that cuGetErrorName or cuGetErrorString knows (the suite keeps them as reference data).
 * Every driver function but cuInit is referenced weakly: one a client library does not export
 * prints NOT_EXPORTED and the program goes on (cuInit's strong reference keeps libcuda.so.1
 * among the program's needed libraries under --as-needed). Checks that could leave the context
 * unusable come last; calls that crash driver 580 natively are left out, said where.
 * Always exits 0 when it gets to the end: the output is the result. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define CUDA_ENABLE_DEPRECATED 1 /* cuDeviceComputeCapability, cuDeviceGetProperties: still exported */
#include <cuda.h>
#if defined(__has_include)
#if __has_include(<cudaProfiler.h>)
#include <cudaProfiler.h>
#define HAVE_PROFILER_H 1
#endif
#endif
#ifndef HAVE_PROFILER_H
CUresult CUDAAPI cuProfilerStart(void);
CUresult CUDAAPI cuProfilerStop(void);
#endif

#pragma weak cuCtxCreate_v4
#pragma weak cuCtxDestroy_v2
#pragma weak cuCtxGetApiVersion
#pragma weak cuCtxGetCurrent
#pragma weak cuCtxGetDevice
#pragma weak cuCtxGetFlags
#pragma weak cuCtxGetId
#pragma weak cuCtxGetLimit
#pragma weak cuCtxPopCurrent_v2
#pragma weak cuCtxPushCurrent_v2
#pragma weak cuCtxSetCurrent
#pragma weak cuCtxSetLimit
#pragma weak cuCtxSynchronize
#pragma weak cuDeviceCanAccessPeer
#pragma weak cuDeviceComputeCapability
#pragma weak cuDeviceGet
#pragma weak cuDeviceGetAttribute
#pragma weak cuDeviceGetByPCIBusId
#pragma weak cuDeviceGetCount
#pragma weak cuDeviceGetDefaultMemPool
#pragma weak cuDeviceGetExecAffinitySupport
#pragma weak cuDeviceGetGraphMemAttribute
#pragma weak cuDeviceGetLuid
#pragma weak cuDeviceGetMemPool
#pragma weak cuDeviceGetName
#pragma weak cuDeviceGetP2PAttribute
#pragma weak cuDeviceGetPCIBusId
#pragma weak cuDeviceGetProperties
#pragma weak cuDeviceGetTexture1DLinearMaxWidth
#pragma weak cuDeviceGetUuid_v2
#pragma weak cuDeviceGraphMemTrim
#pragma weak cuDevicePrimaryCtxGetState
#pragma weak cuDevicePrimaryCtxRelease_v2
#pragma weak cuDevicePrimaryCtxReset_v2
#pragma weak cuDevicePrimaryCtxRetain
#pragma weak cuDevicePrimaryCtxSetFlags_v2
#pragma weak cuDeviceTotalMem_v2
#pragma weak cuDriverGetVersion
#pragma weak cuEventCreate
#pragma weak cuEventDestroy_v2
#pragma weak cuEventQuery
#pragma weak cuEventRecord
#pragma weak cuEventSynchronize
#pragma weak cuFuncGetAttribute
#pragma weak cuGetErrorName
#pragma weak cuGetErrorString
#pragma weak cuGetProcAddress_v2
#pragma weak cuLaunchKernel
#pragma weak cuLaunchKernelEx
#pragma weak cuLinkAddData_v2
#pragma weak cuLinkComplete
#pragma weak cuLinkCreate_v2
#pragma weak cuLinkDestroy
#pragma weak cuMemAlloc_v2
#pragma weak cuMemFree_v2
#pragma weak cuMemGetInfo_v2
#pragma weak cuMemPoolGetAttribute
#pragma weak cuMemcpyDtoH_v2
#pragma weak cuMemcpyHtoD_v2
#pragma weak cuMemsetD32_v2
#pragma weak cuModuleGetFunction
#pragma weak cuModuleGetGlobal_v2
#pragma weak cuModuleLoadData
#pragma weak cuModuleUnload
#pragma weak cuOccupancyMaxActiveClusters
#pragma weak cuPointerGetAttribute
#pragma weak cuProfilerStart
#pragma weak cuProfilerStop
#pragma weak cuStreamCreate
#pragma weak cuStreamDestroy_v2
#pragma weak cuStreamQuery
#pragma weak cuStreamSynchronize

/* A function the loaded libcuda.so.1 does not define. */
#define NOT_EXPORTED ((CUresult)-1)
#define CALL(fn, ...) ((fn) ? fn(__VA_ARGS__) : NOT_EXPORTED)

/* The CUresult's name (cuGetErrorName), or CUresult(N) where the driver has none. */
static const char *rname(CUresult r) {
  static char bufs[4][32];
  static int next;
  const char *n = NULL;
  if (r == NOT_EXPORTED) return "NOT_EXPORTED";
  if (cuGetErrorName && cuGetErrorName(r, &n) == CUDA_SUCCESS && n) return n;
  char *b = bufs[next++ % 4];
  snprintf(b, sizeof bufs[0], "CUresult(%d)", (int)r);
  return b;
}

/* Prints `name: RESULT[ values]`; values (printf-style) only where fmt is not NULL. */
static void out(const char *name, CUresult r, const char *fmt, ...) {
  printf("%s: %s", name, rname(r));
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    putchar(' ');
    vprintf(fmt, ap);
    va_end(ap);
  }
  putchar('\n');
}
static const char *yesno(int b) { return b ? "yes" : "no"; }

/* fill(int* out, int n, int base): out[i] = base + i * g_val; g_val is a __device__ int (42).
 * cluster_ids(int* out): out[block] = clusterid.x * 10000 + cluster_ctarank * 100 + nctarank. */
static const char *ptx_good =
    ".version 8.0\n"
    ".target sm_90\n"
    ".address_size 64\n"
    ".global .align 4 .u32 g_val = 42;\n"
    ".visible .entry fill(.param .u64 p0, .param .u32 p1, .param .u32 p2)\n"
    "{\n"
    "  .reg .pred %p<2>; .reg .b32 %r<9>; .reg .b64 %rd<5>;\n"
    "  ld.param.u64 %rd1, [p0]; ld.param.u32 %r3, [p1]; ld.param.u32 %r2, [p2];\n"
    "  mov.u32 %r4, %ctaid.x; mov.u32 %r5, %ntid.x; mov.u32 %r6, %tid.x;\n"
    "  mad.lo.s32 %r1, %r4, %r5, %r6;\n"
    "  setp.ge.s32 %p1, %r1, %r3;\n"
    "  @%p1 bra DONE;\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n"
    "  ld.global.u32 %r7, [g_val];\n"
    "  mad.lo.s32 %r8, %r7, %r1, %r2;\n"
    "  mul.wide.s32 %rd3, %r1, 4; add.s64 %rd4, %rd2, %rd3;\n"
    "  st.global.u32 [%rd4], %r8;\n"
    "DONE:\n"
    "  ret;\n"
    "}\n"
    ".visible .entry cluster_ids(.param .u64 q0)\n"
    "{\n"
    "  .reg .pred %p<2>; .reg .b32 %r<12>; .reg .b64 %rd<5>;\n"
    "  ld.param.u64 %rd1, [q0];\n"
    "  mov.u32 %r4, %clusterid.x; mov.u32 %r5, %cluster_ctarank; mov.u32 %r6, %cluster_nctarank;\n"
    "  mov.u32 %r7, %tid.x;\n"
    "  setp.ne.s32 %p1, %r7, 0;\n"
    "  @%p1 bra CDONE;\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n"
    "  mul.lo.s32 %r8, %r4, 10000; mad.lo.s32 %r9, %r5, 100, %r8; add.s32 %r10, %r9, %r6;\n"
    "  mov.u32 %r11, %ctaid.x; mul.wide.u32 %rd3, %r11, 4; add.s64 %rd4, %rd2, %rd3;\n"
    "  st.global.u32 [%rd4], %r10;\n"
    "CDONE:\n"
    "  ret;\n"
    "}\n";

/* The same kernel with a syntax error in its body. */
static const char *ptx_broken =
    ".version 8.0\n"
    ".target sm_90\n"
    ".address_size 64\n"
    ".visible .entry broken(.param .u64 p0)\n"
    "{\n"
    "  .reg .b32 %r<2>;\n"
    "  mov.u32 %r1, %tid.x\n"
    "  this is not an instruction;\n"
    "  ret;\n"
    "}\n";

/* A kernel for a target newer than sm_90 (valid PTX, wrong GPU). */
static const char *ptx_sm100 =
    ".version 8.7\n"
    ".target sm_100\n"
    ".address_size 64\n"
    ".visible .entry newer()\n"
    "{\n"
    "  ret;\n"
    "}\n";

static CUdevice dev;
static CUmodule mod;          /* ptx_good, loaded in the primary context */
static CUfunction f_fill, f_cluster;
static CUdeviceptr buf;       /* 1024 ints */
static int g_expect = 42;     /* g_val's value */

/* Launches fill(buf, 256, base) and checks every value: `LABEL: RESULT ok|N wrong`. */
static void kernel_ok(const char *label, CUfunction f, int base) {
  int n = 256, host[256];
  void *args[] = {&buf, &n, &base};
  CUresult r = CALL(cuLaunchKernel, f, 2, 1, 1, 128, 1, 1, 0, NULL, args, NULL);
  if (r == CUDA_SUCCESS) r = CALL(cuCtxSynchronize);
  if (r == CUDA_SUCCESS) r = CALL(cuMemcpyDtoH_v2, host, buf, sizeof host);
  if (r != CUDA_SUCCESS) { out(label, r, NULL); return; }
  int wrong = 0;
  for (int i = 0; i < n; i++) wrong += host[i] != base + i * g_expect;
  if (wrong) out(label, r, "%d wrong", wrong); else out(label, r, "ok");
}

/* Device-taking functions with an ordinal that is no device. */
static void bad_ordinals(int count) {
  int bads[] = {count, 7, 99, -1};
  for (size_t k = 0; k < sizeof bads / sizeof *bads; k++) {
    int b = bads[k];
    if (b >= 0 && b < count) continue;
    char tag[32], name[160];
    if (k == 0) snprintf(tag, sizeof tag, "count"); else snprintf(tag, sizeof tag, "%d", b);
#define LINE(fmt) snprintf(name, sizeof name, fmt, tag)
    CUdevice d = -5; int v = -5; size_t sz = 0; char str[128] = ""; unsigned u = 0;
    CUuuid uuid; CUcontext c = NULL; CUmemoryPool pool = NULL;
    LINE("cuDeviceGet(ordinal=%s)"); out(name, CALL(cuDeviceGet, &d, b), NULL);
    LINE("cuDeviceGetAttribute(MULTIPROCESSOR_COUNT, dev=%s)");
    out(name, CALL(cuDeviceGetAttribute, &v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, b), NULL);
    LINE("cuDeviceGetName(dev=%s)"); out(name, CALL(cuDeviceGetName, str, sizeof str, b), NULL);
    LINE("cuDeviceTotalMem(dev=%s)"); out(name, CALL(cuDeviceTotalMem_v2, &sz, b), NULL);
    LINE("cuDeviceGetUuid(dev=%s)"); out(name, CALL(cuDeviceGetUuid_v2, &uuid, b), NULL);
    LINE("cuDeviceGetPCIBusId(dev=%s)"); out(name, CALL(cuDeviceGetPCIBusId, str, sizeof str, b), NULL);
    LINE("cuDeviceGetLuid(dev=%s)"); out(name, CALL(cuDeviceGetLuid, str, &u, b), NULL);
    int major = 0, minor = 0;
    LINE("cuDeviceComputeCapability(dev=%s)"); out(name, CALL(cuDeviceComputeCapability, &major, &minor, b), NULL);
    CUdevprop prop;
    LINE("cuDeviceGetProperties(dev=%s)"); out(name, CALL(cuDeviceGetProperties, &prop, b), NULL);
    LINE("cuDevicePrimaryCtxRetain(dev=%s)"); out(name, CALL(cuDevicePrimaryCtxRetain, &c, b), NULL);
    LINE("cuDevicePrimaryCtxRelease(dev=%s)"); out(name, CALL(cuDevicePrimaryCtxRelease_v2, b), NULL);
    int active = -1;
    LINE("cuDevicePrimaryCtxGetState(dev=%s)"); out(name, CALL(cuDevicePrimaryCtxGetState, b, &u, &active), NULL);
    LINE("cuDevicePrimaryCtxSetFlags(dev=%s)"); out(name, CALL(cuDevicePrimaryCtxSetFlags_v2, b, 0), NULL);
    LINE("cuDevicePrimaryCtxReset(dev=%s)"); out(name, CALL(cuDevicePrimaryCtxReset_v2, b), NULL);
    LINE("cuDeviceGetDefaultMemPool(dev=%s)"); out(name, CALL(cuDeviceGetDefaultMemPool, &pool, b), NULL);
    LINE("cuDeviceGetMemPool(dev=%s)"); out(name, CALL(cuDeviceGetMemPool, &pool, b), NULL);
    LINE("cuDeviceGetTexture1DLinearMaxWidth(dev=%s)");
    out(name, CALL(cuDeviceGetTexture1DLinearMaxWidth, &sz, CU_AD_FORMAT_FLOAT, 1, b), NULL);
    LINE("cuDeviceGetExecAffinitySupport(dev=%s)");
    out(name, CALL(cuDeviceGetExecAffinitySupport, &v, CU_EXEC_AFFINITY_TYPE_SM_COUNT, b), NULL);
    cuuint64_t g = 0;
    LINE("cuDeviceGetGraphMemAttribute(dev=%s)");
    out(name, CALL(cuDeviceGetGraphMemAttribute, b, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &g), NULL);
    LINE("cuDeviceGraphMemTrim(dev=%s)"); out(name, CALL(cuDeviceGraphMemTrim, b), NULL);
    LINE("cuDeviceCanAccessPeer(dev, peer=%s)"); out(name, CALL(cuDeviceCanAccessPeer, &v, dev, b), NULL);
    LINE("cuDeviceCanAccessPeer(dev=%s, peer=0)"); out(name, CALL(cuDeviceCanAccessPeer, &v, b, dev), NULL);
    LINE("cuDeviceGetP2PAttribute(ACCESS_SUPPORTED, dev, %s)");
    out(name, CALL(cuDeviceGetP2PAttribute, &v, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, dev, b), NULL);
    LINE("cuCtxCreate(dev=%s)"); out(name, CALL(cuCtxCreate_v4, &c, NULL, 0, b), NULL);
#undef LINE
  }
  CUdevice d = -5;
  out("cuDeviceGetByPCIBusId(\"not a bus id\")", CALL(cuDeviceGetByPCIBusId, &d, "not a bus id"), NULL);
  out("cuDeviceGetByPCIBusId(\"0000:ff:1f.7\")", CALL(cuDeviceGetByPCIBusId, &d, "0000:ff:1f.7"), NULL);
}

/* Bad attribute and limit ids, and the good ones beside them. */
static void bad_attributes(void) {
  int v = -5;
  CUresult r = CALL(cuDeviceGetAttribute, &v, (CUdevice_attribute)9999, dev);
  out("cuDeviceGetAttribute(9999)", r, NULL);
  out("cuDeviceGetAttribute(-1)", CALL(cuDeviceGetAttribute, &v, (CUdevice_attribute)-1, dev), NULL);
  out("cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_MAX)", CALL(cuDeviceGetAttribute, &v, CU_DEVICE_ATTRIBUTE_MAX, dev), NULL);
  r = CALL(cuDeviceGetAttribute, &v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  out("cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)", r, r ? NULL : "%d", v);
  r = CALL(cuDeviceGetAttribute, &v, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, dev);
  out("cuDeviceGetAttribute(CLUSTER_LAUNCH)", r, r ? NULL : "%d", v);

  out("cuFuncGetAttribute(9999)", CALL(cuFuncGetAttribute, &v, (CUfunction_attribute)9999, f_fill), NULL);
  r = CALL(cuFuncGetAttribute, &v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f_fill);
  out("cuFuncGetAttribute(MAX_THREADS_PER_BLOCK)", r, r ? NULL : "%d", v);
  r = CALL(cuFuncGetAttribute, &v, CU_FUNC_ATTRIBUTE_NUM_REGS, f_fill);
  out("cuFuncGetAttribute(NUM_REGS)", r, r ? NULL : "%d", v);
  r = CALL(cuFuncGetAttribute, &v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f_fill);
  out("cuFuncGetAttribute(SHARED_SIZE_BYTES)", r, r ? NULL : "%d", v);

  CUmemoryPool pool = NULL;
  r = CALL(cuDeviceGetDefaultMemPool, &pool, dev);
  out("cuDeviceGetDefaultMemPool", r, NULL);
  if (r == CUDA_SUCCESS) {
    cuuint64_t x = 77;
    out("cuMemPoolGetAttribute(default pool, 9999)", CALL(cuMemPoolGetAttribute, pool, (CUmemPool_attribute)9999, &x), NULL);
    r = CALL(cuMemPoolGetAttribute, pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &x);
    out("cuMemPoolGetAttribute(default pool, RELEASE_THRESHOLD)", r, r ? NULL : "%llu", (unsigned long long)x);
    out("cuMemPoolGetAttribute(default pool, RELEASE_THRESHOLD, NULL)",
        CALL(cuMemPoolGetAttribute, pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, NULL), NULL);
  }

  unsigned long long word = 0;
  out("cuPointerGetAttribute(9999)", CALL(cuPointerGetAttribute, &word, (CUpointer_attribute)9999, buf), NULL);
  unsigned type = 0;
  r = CALL(cuPointerGetAttribute, &type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, buf);
  out("cuPointerGetAttribute(MEMORY_TYPE, device memory)", r, r ? NULL : "%u", type);
  int host_var = 0;
  r = CALL(cuPointerGetAttribute, &type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)&host_var);
  out("cuPointerGetAttribute(MEMORY_TYPE, pageable host memory)", r, NULL);

  size_t lim = 0;
  out("cuCtxGetLimit(0x99)", CALL(cuCtxGetLimit, &lim, (CUlimit)0x99), NULL);
  out("cuCtxSetLimit(0x99)", CALL(cuCtxSetLimit, (CUlimit)0x99, 1), NULL);
  r = CALL(cuCtxGetLimit, &lim, CU_LIMIT_PRINTF_FIFO_SIZE);
  out("cuCtxGetLimit(PRINTF_FIFO_SIZE)", r, r ? NULL : "%zu", lim);
  r = CALL(cuCtxGetLimit, &lim, CU_LIMIT_MALLOC_HEAP_SIZE);
  out("cuCtxGetLimit(MALLOC_HEAP_SIZE)", r, r ? NULL : "%zu", lim);

  v = -5;
  r = CALL(cuDeviceGetP2PAttribute, &v, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, dev, dev);
  out("cuDeviceGetP2PAttribute(ACCESS_SUPPORTED, same device)", r, r ? NULL : "%d", v);
  v = -5;
  r = CALL(cuDeviceGetP2PAttribute, &v, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, dev, dev);
  out("cuDeviceGetP2PAttribute(PERFORMANCE_RANK, same device)", r, r ? NULL : "%d", v);
  v = -5;
  r = CALL(cuDeviceCanAccessPeer, &v, dev, dev);
  out("cuDeviceCanAccessPeer(same device)", r, r ? NULL : "%d", v);
}

/* Common queries with a null out-pointer. */
static void null_outputs(void) {
  out("cuDeviceGetCount(NULL)", CALL(cuDeviceGetCount, NULL), NULL);
  out("cuDeviceGet(NULL, 0)", CALL(cuDeviceGet, NULL, 0), NULL);
  out("cuDriverGetVersion(NULL)", CALL(cuDriverGetVersion, NULL), NULL);
  out("cuDeviceGetAttribute(NULL, MULTIPROCESSOR_COUNT)",
      CALL(cuDeviceGetAttribute, NULL, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), NULL);
  out("cuDeviceGetName(NULL)", CALL(cuDeviceGetName, NULL, 64, dev), NULL);
  out("cuDeviceTotalMem(NULL)", CALL(cuDeviceTotalMem_v2, NULL, dev), NULL);
  out("cuDeviceGetUuid(NULL)", CALL(cuDeviceGetUuid_v2, NULL, dev), NULL);
  out("cuDeviceGetPCIBusId(NULL)", CALL(cuDeviceGetPCIBusId, NULL, 64, dev), NULL);
  out("cuDevicePrimaryCtxRetain(NULL)", CALL(cuDevicePrimaryCtxRetain, NULL, dev), NULL);
  out("cuDevicePrimaryCtxGetState(NULL, NULL)", CALL(cuDevicePrimaryCtxGetState, dev, NULL, NULL), NULL);
  out("cuCtxGetCurrent(NULL)", CALL(cuCtxGetCurrent, NULL), NULL);
  out("cuCtxGetDevice(NULL)", CALL(cuCtxGetDevice, NULL), NULL);
  out("cuCtxGetLimit(NULL, STACK_SIZE)", CALL(cuCtxGetLimit, NULL, CU_LIMIT_STACK_SIZE), NULL);
  out("cuMemAlloc(NULL, 16)", CALL(cuMemAlloc_v2, NULL, 16), NULL);
  out("cuMemGetInfo(NULL, NULL)", CALL(cuMemGetInfo_v2, NULL, NULL), NULL);
  out("cuStreamCreate(NULL)", CALL(cuStreamCreate, NULL, 0), NULL);
  out("cuEventCreate(NULL)", CALL(cuEventCreate, NULL, 0), NULL);
  out("cuModuleGetFunction(NULL, fill)", CALL(cuModuleGetFunction, NULL, mod, "fill"), NULL);
  out("cuFuncGetAttribute(NULL, NUM_REGS)", CALL(cuFuncGetAttribute, NULL, CU_FUNC_ATTRIBUTE_NUM_REGS, f_fill), NULL);
  out("cuPointerGetAttribute(NULL, MEMORY_TYPE)", CALL(cuPointerGetAttribute, NULL, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, buf), NULL);
  CUdeviceptr p = 0;
  out("cuMemAlloc(0 bytes)", CALL(cuMemAlloc_v2, &p, 0), NULL);
}

/* cuModuleGetGlobal: size only, address only, both, a missing name; cuModuleGetFunction too. */
static void globals(void) {
  CUdeviceptr p = 0, q = 0;
  size_t sz = 0;
  CUresult r = CALL(cuModuleGetGlobal_v2, NULL, &sz, mod, "g_val");
  out("cuModuleGetGlobal(size only)", r, r ? NULL : "%zu", sz);
  r = CALL(cuModuleGetGlobal_v2, &p, NULL, mod, "g_val");
  out("cuModuleGetGlobal(address only)", r, r ? NULL : "non-null %s", yesno(p != 0));
  sz = 0;
  r = CALL(cuModuleGetGlobal_v2, &q, &sz, mod, "g_val");
  out("cuModuleGetGlobal(both)", r, r ? NULL : "%zu, same address %s", sz, yesno(p == q));
  out("cuModuleGetGlobal(neither)", CALL(cuModuleGetGlobal_v2, NULL, NULL, mod, "g_val"), NULL);
  out("cuModuleGetGlobal(no_such_global)", CALL(cuModuleGetGlobal_v2, &q, &sz, mod, "no_such_global"), NULL);
  out("cuModuleGetGlobal(fill, a kernel's name)", CALL(cuModuleGetGlobal_v2, &q, &sz, mod, "fill"), NULL);
  if (p) {  /* the address is usable: g_val = 3, read back, and the kernel sees it */
    int three = 3, back = 0;
    r = CALL(cuMemcpyHtoD_v2, p, &three, sizeof three);
    if (r == CUDA_SUCCESS) r = CALL(cuMemcpyDtoH_v2, &back, p, sizeof back);
    out("g_val written and read back through its address", r, r ? NULL : "%d", back);
    if (r == CUDA_SUCCESS) g_expect = back;
    kernel_ok("launch with g_val = 3", f_fill, 1000);
  }
  CUfunction f = NULL;
  out("cuModuleGetFunction(no_such_kernel)", CALL(cuModuleGetFunction, &f, mod, "no_such_kernel"), NULL);
  out("cuModuleGetFunction(g_val, a global's name)", CALL(cuModuleGetFunction, &f, mod, "g_val"), NULL);
}

/* JIT linking: PTX in, a cubin out, loaded and launched. Returns a copy of the cubin (or NULL)
 * for the damaged-image checks. */
static unsigned char *link_ptx(size_t *size_out) {
  CUlinkState ls = NULL;
  unsigned char *copy = NULL;
  *size_out = 0;
  CUresult r = CALL(cuLinkCreate_v2, 0, NULL, NULL, &ls);
  out("cuLinkCreate", r, NULL);
  if (r != CUDA_SUCCESS) return NULL;
  r = CALL(cuLinkAddData_v2, ls, CU_JIT_INPUT_PTX, (void *)ptx_good, strlen(ptx_good) + 1, "good.ptx", 0, NULL, NULL);
  out("cuLinkAddData(PTX)", r, NULL);
  void *cubin = NULL;
  size_t size = 0;
  r = CALL(cuLinkComplete, ls, &cubin, &size);
  int elf = cubin && size >= 4 && !memcmp(cubin, "\x7f" "ELF", 4);
  out("cuLinkComplete", r, r ? NULL : "size > 0: %s, an ELF image: %s", yesno(size > 0), yesno(elf));
  if (r == CUDA_SUCCESS && elf) {
    copy = malloc(size);
    memcpy(copy, cubin, size);
    *size_out = size;
  }
  out("cuLinkDestroy", CALL(cuLinkDestroy, ls), NULL);
  if (copy) {
    CUmodule m = NULL;
    CUfunction f = NULL;
    r = CALL(cuModuleLoadData, &m, copy);
    out("cuModuleLoadData(linked cubin)", r, NULL);
    if (r == CUDA_SUCCESS) {
      r = CALL(cuModuleGetFunction, &f, m, "fill");
      out("cuModuleGetFunction(linked cubin, fill)", r, NULL);
      /* This module's g_val is its own (42), not the first module's. */
      int saved = g_expect;
      g_expect = 42;
      if (r == CUDA_SUCCESS) kernel_ok("launch from the linked cubin", f, 7);
      g_expect = saved;
      out("cuModuleUnload(linked cubin)", CALL(cuModuleUnload, m), NULL);
    }
  }
  /* A link that fails: broken PTX, then completing a link with nothing in it. */
  ls = NULL;
  r = CALL(cuLinkCreate_v2, 0, NULL, NULL, &ls);
  if (r == CUDA_SUCCESS) {
    out("cuLinkAddData(broken PTX)",
        CALL(cuLinkAddData_v2, ls, CU_JIT_INPUT_PTX, (void *)ptx_broken, strlen(ptx_broken) + 1, "broken.ptx", 0, NULL, NULL), NULL);
    CALL(cuLinkDestroy, ls);
  }
  ls = NULL;
  r = CALL(cuLinkCreate_v2, 0, NULL, NULL, &ls);
  if (r == CUDA_SUCCESS) {
    out("cuLinkComplete(nothing added)", CALL(cuLinkComplete, ls, &cubin, &size), NULL);
    CALL(cuLinkDestroy, ls);
  }
  return copy;
}

/* Damaged images: each load must fail with the driver's error and the next launch still work. */
static void damaged_images(const unsigned char *cubin, size_t size) {
  CUmodule m = NULL;
  /* Random bytes (a fixed seed), NUL-terminated, in a buffer larger than anyone reads. */
  size_t n = 1 << 16;
  unsigned char *junk = calloc(n, 1);
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < 4096; i++) {
    s ^= s << 13; s ^= s >> 7; s ^= s << 17;
    junk[i] = (unsigned char)(s >> 24);
  }
  out("cuModuleLoadData(4096 random bytes)", CALL(cuModuleLoadData, &m, junk), NULL);
  kernel_ok("launch after the random image", f_fill, 2000);
  free(junk);
  if (cubin) {
    /* The first half of a real cubin, the rest zeros: the ELF headers promise what is not there. */
    unsigned char *half = calloc(size + 4096, 1);
    memcpy(half, cubin, size / 2);
    out("cuModuleLoadData(truncated cubin)", CALL(cuModuleLoadData, &m, half), NULL);
    kernel_ok("launch after the truncated cubin", f_fill, 3000);
    /* Only the ELF header: every section lies past the end. */
    memset(half, 0, size + 4096);
    memcpy(half, cubin, 64);
    out("cuModuleLoadData(cubin ELF header only)", CALL(cuModuleLoadData, &m, half), NULL);
    kernel_ok("launch after the header-only cubin", f_fill, 3500);
    free(half);
  } else {
    out("cuModuleLoadData(truncated cubin)", CUDA_ERROR_NOT_SUPPORTED, "skipped: no linked cubin");
  }
  out("cuModuleLoadData(PTX with a syntax error)", CALL(cuModuleLoadData, &m, ptx_broken), NULL);
  kernel_ok("launch after the broken PTX", f_fill, 4000);
  out("cuModuleLoadData(PTX for sm_100)", CALL(cuModuleLoadData, &m, ptx_sm100), NULL);
  kernel_ok("launch after the sm_100 PTX", f_fill, 5000);
  out("cuModuleLoadData(empty string)", CALL(cuModuleLoadData, &m, ""), NULL);
  kernel_ok("launch after the empty image", f_fill, 6000);
}

/* cuLaunchKernelEx with a cluster-dimension attribute: clusters of 2 over a grid of 4. */
static void cluster_launch(void) {
  CUlaunchAttribute attr;
  memset(&attr, 0, sizeof attr);
  attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr.value.clusterDim.x = 2; attr.value.clusterDim.y = 1; attr.value.clusterDim.z = 1;
  CUlaunchConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.gridDimX = 4; cfg.gridDimY = 1; cfg.gridDimZ = 1;
  cfg.blockDimX = 32; cfg.blockDimY = 1; cfg.blockDimZ = 1;
  cfg.attrs = &attr; cfg.numAttrs = 1;
  int init[4] = {-1, -1, -1, -1}, got[4] = {0, 0, 0, 0};
  CALL(cuMemcpyHtoD_v2, buf, init, sizeof init);
  void *args[] = {&buf};
  CUresult r = CALL(cuLaunchKernelEx, &cfg, f_cluster, args, NULL);
  out("cuLaunchKernelEx(cluster 2x1x1, grid 4)", r, NULL);
  if (r == CUDA_SUCCESS) r = CALL(cuCtxSynchronize);
  if (r == CUDA_SUCCESS) r = CALL(cuMemcpyDtoH_v2, got, buf, sizeof got);
  const int want[4] = {2, 102, 10002, 10102};
  out("cluster ids (clusterid*10000 + rank*100 + size)", r, r ? NULL : "%d %d %d %d, as expected: %s",
      got[0], got[1], got[2], got[3], yesno(!memcmp(got, want, sizeof want)));
  int clusters = -1;
  r = CALL(cuOccupancyMaxActiveClusters, &clusters, f_cluster, &cfg);
  out("cuOccupancyMaxActiveClusters(cluster 2)", r, r ? NULL : "%d", clusters);
  /* A grid that clusters of 3 do not divide. */
  attr.value.clusterDim.x = 3;
  out("cuLaunchKernelEx(cluster 3x1x1, grid 4)", CALL(cuLaunchKernelEx, &cfg, f_cluster, args, NULL), NULL);
  /* More blocks in a cluster than a portable cluster may hold, without the opt-in. */
  attr.value.clusterDim.x = 16;
  cfg.gridDimX = 16;
  out("cuLaunchKernelEx(cluster 16x1x1, grid 16, not opted in)", CALL(cuLaunchKernelEx, &cfg, f_cluster, args, NULL), NULL);
  out("cuCtxSynchronize after the cluster launches", CALL(cuCtxSynchronize), NULL);
}

/* Every code 0..1000 that has a name or a string, then one that has neither. */
static void error_names(void) {
  for (int c = 0; c <= 1000; c++) {
    const char *n = NULL, *s = NULL;
    CUresult rn = CALL(cuGetErrorName, (CUresult)c, &n);
    CUresult rs = CALL(cuGetErrorString, (CUresult)c, &s);
    if (rn == CUDA_SUCCESS || rs == CUDA_SUCCESS)
      printf("err %d %s \"%s\"\n", c, rn == CUDA_SUCCESS && n ? n : "-", rs == CUDA_SUCCESS && s ? s : "-");
  }
  const char *n = "unchanged", *s = "unchanged";
  CUresult r = CALL(cuGetErrorName, (CUresult)123456, &n);
  out("cuGetErrorName(123456)", r, "name %s", n ? (strcmp(n, "unchanged") ? "set" : "unchanged") : "NULL");
  r = CALL(cuGetErrorString, (CUresult)123456, &s);
  out("cuGetErrorString(123456)", r, "string %s", s ? (strcmp(s, "unchanged") ? "set" : "unchanged") : "NULL");
  /* Not asked: cuGetErrorName with a null out-pointer (driver 580 dereferences it). */
}

static const char *status_name(CUdriverProcAddressQueryResult s) {
  switch (s) {
    case CU_GET_PROC_ADDRESS_SUCCESS: return "SUCCESS";
    case CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND: return "SYMBOL_NOT_FOUND";
    case CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT: return "VERSION_NOT_SUFFICIENT";
    default: return "other";
  }
}

/* cuGetProcAddress_v2 of SYM at VERSION with FLAGS: the result, symbolStatus, and whether a
 * pointer came back. Returns the pointer (never printed). */
static void *proc(const char *sym, int version, cuuint64_t flags) {
  void *p = NULL;
  CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)77;
  CUresult r = CALL(cuGetProcAddress_v2, sym, &p, version, flags, &st);
  char name[128];
  snprintf(name, sizeof name, "cuGetProcAddress(%s, %d, flags %llu)", sym, version, (unsigned long long)flags);
  out(name, r, "status %s, pointer %s", status_name(st), p ? "non-null" : "null");
  return p;
}

static void proc_addresses(void) {
  void *a3000 = proc("cuMemAlloc", 3000, 0), *a3020 = proc("cuMemAlloc", 3020, 0);
  void *a13000 = proc("cuMemAlloc", 13000, 0);
  printf("cuMemAlloc at 3000 is the one at 3020: %s\n", yesno(a3000 == a3020));
  printf("cuMemAlloc at 3020 is the one at 13000: %s\n", yesno(a3020 == a13000));
  if (a13000) {  /* the CUDA 13 entry point allocates */
    CUdeviceptr p = 0;
    CUresult r = ((CUresult (*)(CUdeviceptr *, size_t))a13000)(&p, 64);
    out("calling cuMemAlloc found at 13000", r, r ? NULL : "non-null %s", yesno(p != 0));
    if (r == CUDA_SUCCESS) CALL(cuMemFree_v2, p);
  }
  void *c11 = proc("cuCtxCreate", 11000, 0), *c12 = proc("cuCtxCreate", 12050, 0);
  void *c13 = proc("cuCtxCreate", 13000, 0);
  printf("cuCtxCreate at 11000 is the one at 12050: %s\n", yesno(c11 == c12));
  printf("cuCtxCreate at 12050 is the one at 13000: %s\n", yesno(c12 == c13));
  void *g10 = proc("cuStreamGetCaptureInfo", 10010, 0), *g11 = proc("cuStreamGetCaptureInfo", 11030, 0);
  void *g12 = proc("cuStreamGetCaptureInfo", 12030, 0);
  printf("cuStreamGetCaptureInfo at 10010 is the one at 11030: %s\n", yesno(g10 == g11));
  printf("cuStreamGetCaptureInfo at 11030 is the one at 12030: %s\n", yesno(g11 == g12));
  proc("cuLaunchKernelEx", 11000, 0);
  proc("cuLaunchKernelEx", 11080, 0);
  proc("cuNoSuchFunction", 13000, 0);
  proc("cuGetProcAddress", 13000, 0);
  proc("cuProfilerStart", 13000, 0);
  void *m0 = proc("cuMemcpyAsync", 13000, CU_GET_PROC_ADDRESS_DEFAULT);
  void *m2 = proc("cuMemcpyAsync", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  void *m1 = proc("cuMemcpyAsync", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
  printf("cuMemcpyAsync per-thread is the default one: %s\n", yesno(m0 == m2));
  printf("cuMemcpyAsync legacy is the default one: %s\n", yesno(m0 == m1));
  void *p = NULL;
  out("cuGetProcAddress(cuInit, status NULL)", CALL(cuGetProcAddress_v2, "cuInit", &p, 13000, 0, NULL), NULL);
  /* Not asked: a null pfn or symbol (driver 580 dereferences them). */
}

/* Created contexts, the stack, identity as booleans; `primary` is current afterwards. */
static void contexts(CUcontext primary) {
  CUcontext c1 = NULL, c2 = NULL, cur = NULL, popped = NULL;
  CUresult r = CALL(cuCtxCreate_v4, &c1, NULL, 0, dev);
  out("cuCtxCreate(c1)", r, NULL);
  if (r != CUDA_SUCCESS) { CALL(cuCtxSetCurrent, primary); return; }
  CALL(cuCtxGetCurrent, &cur);
  printf("current == c1: %s\n", yesno(cur == c1));
  printf("c1 == primary: %s\n", yesno(c1 == primary));
  r = CALL(cuCtxCreate_v4, &c2, NULL, 0, dev);
  out("cuCtxCreate(c2)", r, NULL);
  CALL(cuCtxGetCurrent, &cur);
  printf("current == c2: %s\n", yesno(cur == c2));
  r = CALL(cuCtxPopCurrent_v2, &popped);
  out("cuCtxPopCurrent", r, "popped == c2: %s", yesno(popped == c2));
  CALL(cuCtxGetCurrent, &cur);
  printf("current == c1 after the pop: %s\n", yesno(cur == c1));
  out("cuCtxPushCurrent(c2)", CALL(cuCtxPushCurrent_v2, c2), NULL);
  CALL(cuCtxGetCurrent, &cur);
  printf("current == c2 after the push: %s\n", yesno(cur == c2));
  /* Memory made in c2 belongs to c2. */
  CUdeviceptr p = 0;
  if (CALL(cuMemAlloc_v2, &p, 256) == CUDA_SUCCESS) {
    CUcontext owner = NULL;
    r = CALL(cuPointerGetAttribute, &owner, CU_POINTER_ATTRIBUTE_CONTEXT, p);
    out("cuPointerGetAttribute(CONTEXT) of memory made in c2", r, r ? NULL : "== c2: %s", yesno(owner == c2));
    CALL(cuMemFree_v2, p);
  }
  popped = NULL;
  r = CALL(cuCtxPopCurrent_v2, &popped);
  out("cuCtxPopCurrent again", r, "popped == c2: %s", yesno(popped == c2));
  unsigned long long id1 = 0, id2 = 0;
  CUresult r1 = CALL(cuCtxGetId, c1, &id1), r2 = CALL(cuCtxGetId, c2, &id2);
  out("cuCtxGetId(c1), cuCtxGetId(c2)", r1 ? r1 : r2, "ids differ: %s", yesno(id1 != id2));
  CUdevice d = -5;
  r = CALL(cuCtxGetDevice, &d);
  out("cuCtxGetDevice in c1", r, r ? NULL : "== device: %s", yesno(d == dev));
  unsigned v = 0;
  r = CALL(cuCtxGetApiVersion, c1, &v);
  out("cuCtxGetApiVersion(c1)", r, r ? NULL : "%u", v);
  r = CALL(cuCtxGetFlags, &v);
  out("cuCtxGetFlags in c1", r, r ? NULL : "0x%x", v);
  /* The stack is primary, c1: setting NULL pops c1; popping again leaves it empty. */
  out("cuCtxSetCurrent(NULL)", CALL(cuCtxSetCurrent, NULL), NULL);
  cur = NULL;
  r = CALL(cuCtxGetCurrent, &cur);
  out("cuCtxGetCurrent after setting NULL", r, "== primary: %s, NULL: %s", yesno(cur == primary), yesno(cur == NULL));
  popped = NULL;
  r = CALL(cuCtxPopCurrent_v2, &popped);
  out("cuCtxPopCurrent", r, "popped == primary: %s", yesno(popped == primary));
  cur = c1;
  r = CALL(cuCtxGetCurrent, &cur);
  out("cuCtxGetCurrent with an empty stack", r, "NULL: %s", yesno(cur == NULL));
  popped = c1;
  r = CALL(cuCtxPopCurrent_v2, &popped);
  out("cuCtxPopCurrent with an empty stack", r, NULL);
  out("cuCtxSynchronize with none current", CALL(cuCtxSynchronize), NULL);
  CUdeviceptr q = 0;
  out("cuMemAlloc with none current", CALL(cuMemAlloc_v2, &q, 64), NULL);
  CUcontext pc = NULL;
  r = CALL(cuDevicePrimaryCtxRetain, &pc, dev);
  out("cuDevicePrimaryCtxRetain again", r, "== primary: %s, == c1: %s, == c2: %s", yesno(pc == primary), yesno(pc == c1), yesno(pc == c2));
  if (r == CUDA_SUCCESS) CALL(cuDevicePrimaryCtxRelease_v2, dev);
  out("cuCtxDestroy(c2)", CALL(cuCtxDestroy_v2, c2), NULL);
  r = CALL(cuCtxGetApiVersion, c2, &v);
  out("cuCtxGetApiVersion(destroyed c2)", r, NULL);
  /* Not asked: pushing a destroyed context (driver 580 says success, and the next pop or set
   * of the current context crashes in the driver). */
  out("cuCtxDestroy(c1, not current)", CALL(cuCtxDestroy_v2, c1), NULL);
  out("cuCtxSetCurrent(primary)", CALL(cuCtxSetCurrent, primary), NULL);
  CALL(cuCtxGetCurrent, &cur);
  printf("current == primary: %s\n", yesno(cur == primary));
  unsigned flags = 0;
  int active = -1;
  r = CALL(cuDevicePrimaryCtxGetState, dev, &flags, &active);
  out("cuDevicePrimaryCtxGetState", r, r ? NULL : "active %d", active);
}

static void memory_info(void) {
  size_t fr = 0, total = 0, dtotal = 0;
  CUresult r = CALL(cuMemGetInfo_v2, &fr, &total);
  CUresult r2 = CALL(cuDeviceTotalMem_v2, &dtotal, dev);
  out("cuMemGetInfo", r, "free > 0: %s, free <= total: %s", yesno(fr > 0), yesno(fr <= total));
  out("cuDeviceTotalMem", r2, "== cuMemGetInfo's total: %s", yesno(dtotal == total));
  /* 64 MiB allocated shows in the free memory (within 2 MiB of rounding). */
  CUdeviceptr p = 0;
  size_t fr2 = 0;
  if (CALL(cuMemAlloc_v2, &p, 64 << 20) == CUDA_SUCCESS) {
    r = CALL(cuMemGetInfo_v2, &fr2, &total);
    long long drop = (long long)fr - (long long)fr2;
    out("cuMemGetInfo after allocating 64 MiB", r, "free dropped by 64 MiB or more: %s", yesno(drop >= (64 << 20)));
    CALL(cuMemFree_v2, p);
  }
  out("cuProfilerStart", CALL(cuProfilerStart), NULL);
  out("cuProfilerStop", CALL(cuProfilerStop), NULL);
  out("cuProfilerStop again", CALL(cuProfilerStop), NULL);
}

/* Handles and addresses that are not (or no longer) the driver's; last, since a driver may
 * take them badly (what driver 580 crashes on is left out, said where). */
static void stale_handles(void) {
  CUdeviceptr p = 0;
  CUresult r = CALL(cuMemAlloc_v2, &p, 4096);
  out("cuMemAlloc(4096)", r, NULL);
  out("cuMemFree(allocation)", CALL(cuMemFree_v2, p), NULL);
  out("cuMemFree(same allocation again)", CALL(cuMemFree_v2, p), NULL);
  out("cuMemFree(0x1000)", CALL(cuMemFree_v2, (CUdeviceptr)0x1000), NULL);
  out("cuMemFree(buffer + 4, inside an allocation)", CALL(cuMemFree_v2, buf + 4), NULL);
  out("cuMemFree(0)", CALL(cuMemFree_v2, (CUdeviceptr)0), NULL);
  int x[4] = {1, 2, 3, 4};
  out("cuMemcpyHtoD(to 0x1000, never allocated)", CALL(cuMemcpyHtoD_v2, (CUdeviceptr)0x1000, x, sizeof x), NULL);
  out("cuMemcpyDtoH(from 0x1000, never allocated)", CALL(cuMemcpyDtoH_v2, x, (CUdeviceptr)0x1000, sizeof x), NULL);
  out("cuMemcpyHtoD(past the end of an allocation)", CALL(cuMemcpyHtoD_v2, buf + 4096 - 8, x, sizeof x), NULL);
  kernel_ok("launch after the bad frees and copies", f_fill, 7000);

  CUstream s = NULL;
  r = CALL(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING);
  out("cuStreamCreate", r, NULL);
  if (r == CUDA_SUCCESS) {
    out("cuStreamQuery(new stream)", CALL(cuStreamQuery, s), NULL);
    out("cuStreamDestroy", CALL(cuStreamDestroy_v2, s), NULL);
    /* Not asked: cuStreamSynchronize or cuStreamQuery of the destroyed stream, or of a handle
     * never created (driver 580 crashes on the destroyed one). */
  }
  CUevent e = NULL;
  r = CALL(cuEventCreate, &e, CU_EVENT_DEFAULT);
  out("cuEventCreate", r, NULL);
  if (r == CUDA_SUCCESS) {
    out("cuEventQuery(never recorded)", CALL(cuEventQuery, e), NULL);
    out("cuEventSynchronize(never recorded)", CALL(cuEventSynchronize, e), NULL);
    out("cuEventDestroy", CALL(cuEventDestroy_v2, e), NULL);
    out("cuEventQuery(destroyed event)", CALL(cuEventQuery, e), NULL);
  }
  kernel_ok("launch after the stale handles", f_fill, 8000);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);  /* every line out before anything can stop the program */
  CUresult r = cuInit(0);
  out("cuInit", r, NULL);
  if (r != CUDA_SUCCESS) return 1;
  int version = 0, count = 0;
  r = CALL(cuDriverGetVersion, &version);
  out("cuDriverGetVersion", r, r ? NULL : "%d", version);
  r = CALL(cuDeviceGetCount, &count);
  out("cuDeviceGetCount", r, r ? NULL : "at least 1: %s", yesno(count >= 1));
  r = CALL(cuDeviceGet, &dev, 0);
  out("cuDeviceGet(0)", r, NULL);
  if (r != CUDA_SUCCESS) return 1;
  bad_ordinals(count);

  CUcontext primary = NULL;
  r = CALL(cuDevicePrimaryCtxRetain, &primary, dev);
  out("cuDevicePrimaryCtxRetain(0)", r, NULL);
  r = CALL(cuCtxSetCurrent, primary);
  out("cuCtxSetCurrent(primary)", r, NULL);
  r = CALL(cuMemAlloc_v2, &buf, 4096);
  out("cuMemAlloc(4096)", r, NULL);
  if (r != CUDA_SUCCESS) return 1;
  r = CALL(cuModuleLoadData, &mod, ptx_good);
  out("cuModuleLoadData(good PTX)", r, NULL);
  if (r == CUDA_SUCCESS) {
    out("cuModuleGetFunction(fill)", CALL(cuModuleGetFunction, &f_fill, mod, "fill"), NULL);
    out("cuModuleGetFunction(cluster_ids)", CALL(cuModuleGetFunction, &f_cluster, mod, "cluster_ids"), NULL);
  }
  kernel_ok("first launch", f_fill, 0);

  bad_attributes();
  globals();
  size_t cubin_size = 0;
  unsigned char *cubin = link_ptx(&cubin_size);
  damaged_images(cubin, cubin_size);
  free(cubin);
  cluster_launch();
  kernel_ok("launch after the cluster launches", f_fill, 9000);
  error_names();
  proc_addresses();
  contexts(primary);
  kernel_ok("launch in the primary context after the created ones", f_fill, 9500);
  memory_info();
  null_outputs();
  kernel_ok("launch after the null outputs", f_fill, 100);
  stale_handles();
  out("cuModuleUnload", CALL(cuModuleUnload, mod), NULL);
  out("cuMemFree(buffer)", CALL(cuMemFree_v2, buf), NULL);
  out("cuDevicePrimaryCtxRelease(0)", CALL(cuDevicePrimaryCtxRelease_v2, dev), NULL);
  printf("driver_answers: done\n");
  return 0;
}
