/* Issue 34: the JIT's list options, on the driver and through the client.
 *
 * A PTX module declares `.extern .global` variables and a kernel that adds to them; the
 * symbols are to be resolved from CU_JIT_GLOBAL_SYMBOL_NAMES / _ADDRESSES / _COUNT (options
 * 17, 18, 19): once to device memory (cuMemAlloc), once to pinned host memory mapped for the
 * device (cuMemHostAlloc DEVICEMAP, its unified address). Each route the driver offers is
 * tried and its answers printed: the JIT linker (cuLinkCreate with the lists), the module
 * loader (cuModuleLoadDataEx), the library loader (cuLibraryLoadData); then without the
 * lists, with one of two names, and with the referenced-names options (25..28) beside them. A
 * control module defines the variables itself. Every answer and the error logs' first lines
 * are printed, so that the client's output can be compared with the driver's line by line.
 *
 * Measured on driver 580 (H200): no route resolves them as given here — the linker reports
 * the undefined references, cuModuleLoadDataEx answers CUDA_ERROR_INVALID_VALUE, and
 * cuLibraryLoadData loads but the kernel's launch answers it — so the program is a check of
 * the answers, not of a working use. Exit status 0 when the control module runs, no module with
 * an unresolved symbol runs, and the memory holds what the routes that ran added.
 */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define HEAD ".version 8.0\n.target sm_90\n.address_size 64\n"
#define BODY                                  \
  ".visible .entry bump(.param .u32 bump_v)\n" \
  "{\n"                                       \
  "  .reg .b32 %r<6>;\n"                      \
  "  .reg .b64 %rd<3>;\n"                     \
  "  ld.param.u32 %r1, [bump_v];\n"           \
  "  mov.u64 %rd1, gl_dev;\n"                 \
  "  ld.global.u32 %r2, [%rd1];\n"            \
  "  add.s32 %r3, %r2, %r1;\n"                \
  "  st.global.u32 [%rd1], %r3;\n"            \
  "  mov.u64 %rd2, gl_host;\n"                \
  "  ld.global.u32 %r4, [%rd2+4];\n"          \
  "  add.s32 %r5, %r4, %r1;\n"                \
  "  st.global.u32 [%rd2+4], %r5;\n"          \
  "  ret;\n"                                  \
  "}\n"

/* The variables declared only: resolved by the lists. */
static const char *ptx_extern = HEAD
    ".extern .global .align 4 .u32 gl_dev[4];\n"
    ".extern .global .align 4 .u32 gl_host[4];\n" BODY;
/* The control: the module defines them. */
static const char *ptx_defined = HEAD
    ".visible .global .align 4 .u32 gl_dev[4];\n"
    ".visible .global .align 4 .u32 gl_host[4];\n" BODY;

static void say(const char *label, const char *what, CUresult r) {
  const char *name = NULL;
  if (cuGetErrorName(r, &name) != CUDA_SUCCESS) name = "?";
  printf("%s: %s: %d %s\n", label, what, (int)r, name);
}

#define MUST(call)                   \
  do {                               \
    CUresult r_ = (call);            \
    if (r_ != CUDA_SUCCESS) {        \
      say("main", #call, r_);        \
      return 1;                      \
    }                                \
  } while (0)

enum route { LINKER, MODULE, LIBRARY };
static const char *route_name[] = {"linker", "module", "library"};

/* The error log's first line (the JIT's own text). */
static void log_line(const char *label, const char *log) {
  const char *nl = strchr(log, '\n');
  int n = nl ? (int)(nl - log) : (int)strlen(log);
  printf("%s: log: %.*s\n", label, n > 160 ? 160 : n, log[0] ? log : "(empty)");
}

/* Loads `ptx` by `how` with the NOPTS options, runs bump(V) once; 0 when it ran. */
static CUresult load_and_run(enum route how, const char *ptx, unsigned nopts, CUjit_option *opts, void **vals,
                             unsigned v, const char *what) {
  char label[96];
  snprintf(label, sizeof label, "%s (%s)", what, route_name[how]);
  char err[4096] = {0};
  CUjit_option all[16];
  void *allv[16];
  unsigned n = 0;
  for (unsigned i = 0; i < nopts; i++) { all[n] = opts[i]; allv[n] = vals[i]; n++; }
  all[n] = CU_JIT_ERROR_LOG_BUFFER; allv[n] = err; n++;
  all[n] = CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES; allv[n] = (void *)(uintptr_t)sizeof err; n++;
  CUmodule mod = NULL;
  CUlibrary lib = NULL;
  CUlinkState ls = NULL;
  CUresult r;
  if (how == LINKER) {
    r = cuLinkCreate(n, all, allv, &ls);
    say(label, "cuLinkCreate", r);
    if (r) return r;
    r = cuLinkAddData(ls, CU_JIT_INPUT_PTX, (void *)ptx, strlen(ptx) + 1, "lists.ptx", 0, NULL, NULL);
    say(label, "cuLinkAddData", r);
    void *cubin = NULL;
    size_t size = 0;
    if (!r) {
      r = cuLinkComplete(ls, &cubin, &size);
      say(label, "cuLinkComplete", r);
    }
    log_line(label, err);
    if (!r) {
      r = cuModuleLoadData(&mod, cubin);
      say(label, "cuModuleLoadData", r);
    }
    cuLinkDestroy(ls);
  } else if (how == MODULE) {
    r = cuModuleLoadDataEx(&mod, ptx, n, all, allv);
    say(label, "cuModuleLoadDataEx", r);
    log_line(label, err);
  } else {
    r = cuLibraryLoadData(&lib, ptx, all, allv, n, NULL, NULL, 0);
    say(label, "cuLibraryLoadData", r);
    log_line(label, err);
  }
  if (r) return r;
  CUfunction f = NULL;
  if (how == LIBRARY) {
    CUkernel k;
    r = cuLibraryGetKernel(&k, lib, "bump");
    if (!r) r = cuKernelGetFunction(&f, k);
  } else {
    r = cuModuleGetFunction(&f, mod, "bump");
  }
  if (!r) {
    void *args[] = {&v};
    r = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL);
  }
  if (!r) r = cuCtxSynchronize();
  say(label, "launch", r);
  if (mod) cuModuleUnload(mod);
  if (lib) cuLibraryUnload(lib);
  return r;
}

int main(void) {
  MUST(cuInit(0));
  CUdevice dev;
  MUST(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  MUST(cuDevicePrimaryCtxRetain(&ctx, dev));
  MUST(cuCtxSetCurrent(ctx));

  CUdeviceptr dbuf;
  MUST(cuMemAlloc(&dbuf, 4 * sizeof(uint32_t)));
  uint32_t init[4] = {5, 50, 500, 5000};
  MUST(cuMemcpyHtoD(dbuf, init, sizeof init));
  uint32_t *hbuf = NULL;
  MUST(cuMemHostAlloc((void **)&hbuf, 4 * sizeof(uint32_t), CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  memcpy(hbuf, init, sizeof init);
  CUdeviceptr hdev;
  MUST(cuMemHostGetDevicePointer(&hdev, hbuf, 0));
  printf("mapped host memory at its own address: %s\n", (uintptr_t)hdev == (uintptr_t)hbuf ? "yes" : "no");

  int failures = 0;
  /* The control: no lists needed. */
  if (load_and_run(LINKER, ptx_defined, 0, NULL, NULL, 1, "control") != CUDA_SUCCESS) {
    printf("FAIL: the control module\n");
    failures++;
  }

  const char *names[] = {"gl_dev", "gl_host"};
  void *addrs[] = {(void *)(uintptr_t)dbuf, (void *)(uintptr_t)hdev};
  CUjit_option o[] = {CU_JIT_GLOBAL_SYMBOL_NAMES, CU_JIT_GLOBAL_SYMBOL_ADDRESSES, CU_JIT_GLOBAL_SYMBOL_COUNT};
  void *v2[] = {(void *)names, (void *)addrs, (void *)(uintptr_t)2};
  void *v1[] = {(void *)names, (void *)addrs, (void *)(uintptr_t)1};
  unsigned add = 7, expect_dev = 5, expect_host = 50;
  int resolved = 0;
  for (int how = LINKER; how <= LIBRARY; how++) {
    if (load_and_run((enum route)how, ptx_extern, 3, o, v2, add, "resolved") == CUDA_SUCCESS) {
      resolved++;
      expect_dev += add;
      expect_host += add;
    }
    add += 4;
    load_and_run((enum route)how, ptx_extern, 0, NULL, NULL, 1, "unresolved");
    if (load_and_run((enum route)how, ptx_extern, 3, o, v1, 1000, "one of two") == CUDA_SUCCESS) {
      printf("FAIL: a module with an unresolved symbol ran\n");
      failures++;
    }
  }
  /* The referenced-names options (meant for LTO inputs) beside the resolving lists. */
  const char *kernels[] = {"bump"};
  const char *vars[] = {"gl_dev"};
  CUjit_option o4[] = {CU_JIT_GLOBAL_SYMBOL_NAMES, CU_JIT_GLOBAL_SYMBOL_ADDRESSES, CU_JIT_GLOBAL_SYMBOL_COUNT,
                       CU_JIT_REFERENCED_KERNEL_NAMES, CU_JIT_REFERENCED_KERNEL_COUNT,
                       CU_JIT_REFERENCED_VARIABLE_NAMES, CU_JIT_REFERENCED_VARIABLE_COUNT};
  void *v4[] = {(void *)names, (void *)addrs, (void *)(uintptr_t)2, (void *)kernels, (void *)(uintptr_t)1,
                (void *)vars, (void *)(uintptr_t)1};
  if (load_and_run(MODULE, ptx_extern, 7, o4, v4, 100, "referenced names") == CUDA_SUCCESS) {
    expect_dev += 100;
    expect_host += 100;
  }

  uint32_t back[4];
  MUST(cuMemcpyDtoH(back, dbuf, sizeof back));
  printf("device memory: %u %u %u %u\n", back[0], back[1], back[2], back[3]);
  printf("host memory: %u %u %u %u\n", hbuf[0], hbuf[1], hbuf[2], hbuf[3]);
  printf("routes that resolved the lists: %d\n", resolved);
  if (back[0] != expect_dev || back[1] != 50) { printf("FAIL: device memory (expected %u)\n", expect_dev); failures++; }
  if (hbuf[1] != expect_host || hbuf[0] != 5) { printf("FAIL: mapped host memory (expected %u)\n", expect_host); failures++; }

  cuMemFreeHost(hbuf);
  cuMemFree(dbuf);
  cuDevicePrimaryCtxRelease(dev);
  printf("%s\n", failures ? "FAILED" : "done");
  return failures ? 1 : 0;
}
