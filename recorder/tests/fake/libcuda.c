/* A stand-in for libcuda.so.1 used to test the recorder's plumbing on machines without a GPU:
 * cuGetProcAddress_v2 resolves names to the functions below, which behave like a tiny device
 * (one allocation arena in host memory, one module with one kernel of known parameters), or
 * several (one per entry of CUDA_VISIBLE_DEVICES, each with memory of its own: see below).
 * It is never a stand-in for real GPU behaviour: that is proven by scripts/gpu-suite.sh. */
#define _GNU_SOURCE
#include <stdint.h>
#include <time.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/mman.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;
static unsigned char heap[4 << 20]; /* device memory: the driver's at 0x7e0000000000, the arena's at 0x640000000000 */
static size_t heap_top = 256;
static int kernel_token, wide_token, module_token, ctx_token, stamp_token;
/* A library holding scale too (cuLibraryLoadData): its CUkernel, and the function the driver
 * makes of it in the context (cuKernelGetFunction; a captured launch of the kernel names it). */
static int library_token, lib_kernel_token, lib_function_token;
static int is_scale(const void *f) { return f == &kernel_token || f == &lib_kernel_token || f == &lib_function_token; }

/* Several devices: a server's executor for a session of several GPUs is started with
 * CUDA_VISIBLE_DEVICES listing them (comma-separated); each entry is a device (one when it is
 * unset), whose name and UUID say its entry. Any two distinct devices reach each other. Device k
 * has its own primary context and its own memory: the arena [ARENA, ARENA + 1 TiB) is cut into
 * one slice per device (1 TiB / n rounded down to 2 MiB, as gpuless_traces::devices cuts it),
 * and the first 4 MiB of slice k are device k's heap (devices 0..MEMDEV-1 have memory). */
enum { MAXDEV = 16, MEMDEV = 4 };
#define ARENA 0x640000000000ull
static int ndev = 1;
static unsigned long long slice = 1ull << 40;
static unsigned char more_heap[MEMDEV - 1][4 << 20]; /* devices 1..'s memory (device 0's: heap) */
static int more_ctx[MAXDEV];                         /* devices 1..'s primary contexts (0's: ctx_token) */
static __thread int current_dev;                     /* the device of the thread's current context */
__attribute__((constructor)) static void read_devices(void) {
  const char *v = getenv("CUDA_VISIBLE_DEVICES");
  for (ndev = 1; v && *v; v++) ndev += *v == ',' && ndev < MAXDEV;
  slice = ((1ull << 40) / (unsigned)ndev) & ~((2ull << 20) - 1); }
/* With one device every ordinal is it, as before devices were several (the stand-in's callers
 * rely on it); with several, an ordinal past them is CUDA_ERROR_INVALID_DEVICE. */
static int bad_dev(int d) { return ndev > 1 && (d < 0 || d >= ndev); }
static int dev_of(int d) { return ndev > 1 ? d : 0; }
/* Device d's entry of CUDA_VISIBLE_DEVICES and its length (null when it is unset or empty). */
static const char *dev_entry(int d, int *len) {
  const char *v = getenv("CUDA_VISIBLE_DEVICES");
  if (!v || !*v) return 0;
  for (int k = 0; k < d && v; k++) if ((v = strchr(v, ','))) v++;
  if (v) *len = (int)strcspn(v, ",");
  return v; }
static void *primary(int d) { return d <= 0 ? (void *)&ctx_token : (void *)&more_ctx[d]; }
/* The device of context c: -1 for none of the primary contexts. */
static int ctx_dev(const void *c) {
  for (int k = 0; k < ndev; k++) if (c == primary(k)) return k;
  return -1; }
/* A server of a session across several servers holds a part of the client's arena (a quarter
 * of it at most, in CI): each part's memory starts at the start of a heap. */
#define PART (1ull << 38)
/* Whether [p, p + n) lies in one device's heap in the arena. */
static int in_arena_heap(CUdeviceptr p, size_t n) {
  if (p < ARENA) return 0;
  unsigned long long off = p - ARENA, k = off / slice;
  return k < (unsigned)ndev && k < MEMDEV && off % slice % PART + n <= sizeof heap; }

CUresult cuInit(unsigned flags) { (void)flags; return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuDeviceGet(int *d, int ordinal) { if (bad_dev(ordinal)) return 101; *d = ordinal; return 0; }
CUresult cuDeviceGetCount(int *n) { *n = ndev; return 0; }
/* A server's executor for one of several GPUs sees it through CUDA_VISIBLE_DEVICES: the
   stand-in's name and UUID say which. */
CUresult cuDeviceGetName(char *name, int len, int dev) {
  int n = 0;
  const char *v = dev_entry(dev_of(dev), &n);
  if (bad_dev(dev)) return 101;
  if (v) snprintf(name, (size_t)len, "Fake GPU %.*s", n, v); else strncpy(name, "Fake GPU", len);
  return 0; }
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
  /* A real GPU's launch limits (threads per block, block and grid dimensions), sm_90, 1 else;
   * the PCI bus (33) tells devices apart. */
  static const int limits[] = {0, 1024, 1024, 1024, 64, 2147483647, 65535, 65535};
  int n = 0;
  const char *gpu = dev_entry(dev_of(dev), &n);
  if (bad_dev(dev)) return 101;
  /* The bus of the GPU CUDA_VISIBLE_DEVICES names: executors of two servers differ. */
  int bus = 1 + (gpu ? atoi(gpu) : dev_of(dev));
  /* MPS (133): off, unless FAKE_CUDA_MPS is set (an operator's MPS daemon). */
  if (attr == 133) { *v = getenv("FAKE_CUDA_MPS") ? 1 : 0; return 0; }
  *v = attr >= 1 && attr <= 7 ? limits[attr] : attr == 75 ? 9 : attr == 76 ? 0 : attr == 33 ? bus : 1;
  return 0; }
CUresult cuDeviceGetUuid_v2(unsigned char *u, int dev) {
  int n = 0;
  const char *v = dev_entry(dev_of(dev), &n);
  if (bad_dev(dev)) return 101;
  memset(u, 0xab, 16);
  if (v) u[15] = (unsigned char)atoi(v);
  return 0; }
CUresult cuDeviceCanAccessPeer(int *can, int dev, int peer) {
  if (dev < 0 || dev >= ndev || peer < 0 || peer >= ndev) return 101;
  *can = dev != peer; return 0; }
/* Distinct devices: performance rank 0 (attribute 1), every capability 1; a device and itself:
 * CUDA_ERROR_INVALID_DEVICE, as the driver answers. */
CUresult cuDeviceGetP2PAttribute(int *v, int attr, int src, int dst) {
  if (src < 0 || src >= ndev || dst < 0 || dst >= ndev || src == dst) return 101;
  *v = attr == 1 ? 0 : 1; return 0; }
CUresult cuCtxGetCurrent(void **c) { *c = primary(current_dev); return 0; }
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
  if (heap_top + n > sizeof heap) return 2;
  *p = 0x7e0000000000ull + heap_top; heap_top += (n + 255) & ~(size_t)255; return 0; }
/* Device memory: the driver's (cuMemAlloc, device 0's) or the arena's, in its device's heap. */
static unsigned char *host(CUdeviceptr p) {
  if (p >= 0x7e0000000000ull) return heap + (p - 0x7e0000000000ull);
  unsigned long long off = p - ARENA, k = off / slice;
  return k >= 1 && k < (unsigned)ndev && k < MEMDEV ? more_heap[k - 1] + off % slice % PART : heap + off % slice % PART; }
/* The legacy 32-bit ABI (before CUDA 3.2): a 32-bit device address and size. Only a program
 * that asks for the bare symbol by name gets it (cuGetProcAddress gives cuMemAlloc_v2). */
CUresult cuMemAlloc(unsigned int *p, unsigned int n) { (void)n; *p = 0x1000u; return 0; }
/* The CUDA 10.0 form, without a capture mode. */
CUresult cuStreamBeginCapture(void *stream) { return stream == (void *)0x5 ? 0 : 1; }
/* FAKE_CUDA_STAGED_HTOD=1: a synchronous upload returns once its bytes are staged, as the
 * driver's from pageable memory does; they land when the legacy stream next runs or is waited
 * for (a synchronization of it or of the context, a later legacy copy or launch), not before a
 * launch on another stream. */
static struct { CUdeviceptr dst; unsigned char *bytes; size_t n; } staged[16];
static int nstaged;
static void land(void) {
  for (int i = 0; i < nstaged; i++) { memcpy(host(staged[i].dst), staged[i].bytes, staged[i].n); free(staged[i].bytes); }
  nstaged = 0; }
static int legacy(const void *s) { return s == 0 || s == (void *)1; }
/* FAKE_CUDA_POLL=1: a `scale` launch with factor 0 on a stream other than the legacy one stands
 * for a kernel that polls the word at `data` until the host makes it nonzero (a latch in pinned
 * memory, as UnifiedMemoryPerf's): it keeps running until then. What waits for it (its stream's
 * or the context's synchronization, or any work of the legacy stream, which waits for the
 * blocking streams') would wait forever on a GPU while the flag is 0: the stand-in says so on
 * stderr and answers CUDA_ERROR_UNKNOWN. `any`: the waiter is the legacy stream or the context. */
static struct { const void *stream; CUdeviceptr flag; int on; } poller;
static CUresult wait_poller(const void *stream, int any) {
  if (!poller.on || (!any && stream != poller.stream)) return 0;
  if (*(volatile unsigned *)host(poller.flag)) { poller.on = 0; return 0; }
  fprintf(stderr, "fake libcuda: deadlock: waiting for a kernel that polls memory nobody writes\n");
  return 999; }
#define WAIT_LEGACY() do { CUresult w_ = wait_poller(0, 1); if (w_) return w_; } while (0)
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
  WAIT_LEGACY();
  land();
  if (getenv("FAKE_CUDA_STAGED_HTOD") && nstaged < 16 && (staged[nstaged].bytes = malloc(n))) {
    memcpy(staged[nstaged].bytes, src, n); staged[nstaged].dst = dst; staged[nstaged++].n = n; return 0; }
  memcpy(host(dst), src, n); return 0; }
/* FAKE_CUDA_PRINTF=1: every launch "prints" a line, which reaches stdout when a synchronization
 * (context, stream, event, blocking copy) flushes the device's printf buffer, as the driver's. */
static char printed[1 << 16];
static size_t printed_len;
static unsigned launches_printed;
static void device_printf(void) {
  if (!getenv("FAKE_CUDA_PRINTF") || printed_len > sizeof printed - 64) return;
  printed_len += (size_t)snprintf(printed + printed_len, sizeof printed - printed_len, "device printf: launch %u\n",
                                  ++launches_printed); }
static void flush_printf(void) {
  if (!printed_len) return;
  fwrite(printed, 1, printed_len, stdout); fflush(stdout); printed_len = 0; }
/* FAKE_CUDA_DEFER_HOSTFN=1: host functions and the async uploads queued after them run when
 * the program synchronizes, in order, as a GPU's stream runs them (an upload from pinned memory
 * reads its source then); pinned memory answers CU_MEMORYTYPE_HOST. Otherwise both run at once. */
typedef void (*hostfn)(void *);
static struct { hostfn fn; void *ud; CUdeviceptr dst; const void *src; size_t n; } queue[64];
static int queued;
static int deferring(void) { static int d = -1; if (d < 0) d = getenv("FAKE_CUDA_DEFER_HOSTFN") != 0; return d; }
static void drain(void) {
  for (int i = 0; i < queued; i++) {
    if (queue[i].fn) queue[i].fn(queue[i].ud);
    else memcpy(host(queue[i].dst), queue[i].src, queue[i].n); }
  queued = 0; }
static struct { void *p; size_t n; } pinned[64];
static int npinned;
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { WAIT_LEGACY(); land(); drain(); memcpy(dst, host(src), n); flush_printf(); return 0; }
static CUresult capture_copy(int type, void *dst, const void *src, CUdeviceptr dev, size_t n);
static void *capturing; /* the stream being captured (all streams are one here) */
/* Async copies on a capturing stream become copy nodes (cuGraphLaunch runs them in order). */
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *stream) {
  if (capturing && stream == capturing) return capture_copy(2, dst, 0, src, n);
  memcpy(dst, host(src), n); return 0; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *stream) {
  if (capturing && stream == capturing) return capture_copy(1, 0, src, dst, n);
  if (queued && queued < 64) { queue[queued].fn = 0; queue[queued].dst = dst; queue[queued].src = src; queue[queued++].n = n; return 0; }
  memcpy(host(dst), src, n); return 0; }
/* Unified addresses: the heaps' ranges are device memory, anything else host memory. */
static int is_device(CUdeviceptr p) {
  return (p >= 0x7e0000000000ull && p < 0x7e0000000000ull + sizeof heap) || in_arena_heap(p, 1); }
static unsigned char *unified(CUdeviceptr p) { return is_device(p) ? host(p) : (unsigned char *)(uintptr_t)p; }
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { memmove(unified(dst), unified(src), n); return 0; }
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, void *stream) {
  (void)stream; memmove(unified(dst), unified(src), n); return 0; }
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { memmove(host(dst), host(src), n); return 0; }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *stream) {
  (void)stream; memmove(host(dst), host(src), n); return 0; }
/* CU_POINTER_ATTRIBUTE_MEMORY_TYPE (2) only: device memory for the heap; anything else is
 * pageable memory the driver does not know (CUDA_ERROR_INVALID_VALUE). */
CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p) {
  if (attr == 2 && deferring())
    for (int i = 0; i < npinned; i++)
      if (p >= (CUdeviceptr)(uintptr_t)pinned[i].p && p < (CUdeviceptr)(uintptr_t)pinned[i].p + pinned[i].n) {
        *(unsigned *)data = 1; return 0; }
  if (attr != 2 || !is_device(p)) return 1;
  *(unsigned *)data = 2; return 0; }
/* Pinned host memory: plain memory here. */
CUresult cuMemAllocHost_v2(void **p, size_t n) {
  *p = malloc(n);
  if (*p && npinned < 64) { pinned[npinned].p = *p; pinned[npinned++].n = n; }
  return *p ? 0 : 2; }
CUresult cuMemFreeHost(void *p) { free(p); return 0; }
/* Mapped pinned memory: its device address is its host address (unified addressing). */
CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags) { (void)flags; return cuMemAllocHost_v2(p, n); }
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned flags) {
  (void)flags; *d = (CUdeviceptr)(uintptr_t)p; return 0; }
CUresult cuEventDestroy_v2(void *e) { (void)e; return 0; }
/* Streams the program destroyed (handles 0x10, 0x20, ...: see create_stream); synchronizing
 * one is an invalid handle, as the driver's freed stream is. */
static unsigned char stream_destroyed[256];
static int stream_gone(const void *s) {
  uintptr_t k = (uintptr_t)s / 0x10;
  return (uintptr_t)s % 0x10 == 0 && k >= 1 && k < 256 && stream_destroyed[k]; }
CUresult cuStreamDestroy_v2(void *s) {
  uintptr_t k = (uintptr_t)s / 0x10;
  if ((uintptr_t)s % 0x10 == 0 && k >= 2 && k < 256) stream_destroyed[k] = 1;
  return 0; }
CUresult cuStreamSynchronize(void *stream) {
  if (stream_gone(stream)) return 400;
  CUresult w = wait_poller(stream, legacy(stream));
  if (w) return w;
  if (legacy(stream)) land();
  drain(); flush_printf(); return 0; }
CUresult cuModuleLoadData(void **m, const void *image) { (void)image; *m = &module_token; return 0; }
CUresult cuModuleUnload(void *m) { (void)m; return 0; }
CUresult cuLibraryUnload(void *l) { (void)l; return 0; }
CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) { WAIT_LEGACY(); memset(host(dst), v, n); return 0; }
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, void *s) { (void)s; memset(host(dst), v, n); return 0; }
CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
  (void)m;
  if (!strcmp(name, "wide")) { *f = &wide_token; return 0; }
  if (!strcmp(name, "gpuless_stamp")) { *f = &stamp_token; return 0; }
  if (strcmp(name, "scale")) return 500; *f = &kernel_token; return 0; }
/* scale(float* data, float factor, int n): offsets 0, 8, 12; sizes 8, 4, 4 */
CUresult cuFuncGetParamInfo(void *f, size_t i, size_t *off, size_t *size) {
  /* wide(float* data, float factor, int n, struct { char meta[640]; }): like PyTorch's
   * element-wise kernels, a few scalars and a large struct (the median launch passes ~650 bytes). */
  static const size_t o[] = {0, 8, 12, 16}, s[] = {8, 4, 4, 640};
  if (!((is_scale(f) && i <= 2) || (f == &wide_token && i <= 3))) return 1;
  *off = o[i]; *size = s[i]; return 0; }
/* FAKE_CUDA_SCALE_BIAS=x makes the kernels compute data * factor + x instead of data * factor
 * (read once at load: a device whose results differ from the recording's, for replay tests). */
static float scale_bias;
__attribute__((constructor)) static void read_scale_bias(void) {
  const char *b = getenv("FAKE_CUDA_SCALE_BIAS");
  if (b) scale_bias = strtof(b, 0); }
static void run_scale(void **params) {
  float *d = (float *)host(*(CUdeviceptr *)params[0]);
  float k = *(float *)params[1]; int n = *(int *)params[2];
  for (int i = 0; i < n; i++) d[i] = d[i] * k + scale_bias; }
/* The executor's preemption stamp (gpuless_stamp(unsigned long long *slot)): the "GPU timer" is
 * CLOCK_REALTIME plus 7 s here (a GPU's is its own clock), written when the launch is made. */
static CUresult run_stamp(void **params) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  unsigned long long *slot = (unsigned long long *)(uintptr_t)*(CUdeviceptr *)params[0];
  *slot = (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec + 7000000000ull;
  return 0; }
static CUresult capture_launch(void *f, const unsigned *grid, const unsigned *block, unsigned smem, void **params);
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned smem, void *stream, void **params, void **extra) {
  (void)extra;
  if (f == &stamp_token) return run_stamp(params);
  if (!is_scale(f) && f != &wide_token) return 400;
  /* FAKE_CUDA_LAUNCH_US=n: every launch takes n microseconds (a kernel that runs a while). */
  static long launch_us = -1;
  if (launch_us < 0) { const char *e = getenv("FAKE_CUDA_LAUNCH_US"); launch_us = e ? atol(e) : 0; }
  if (launch_us) usleep((useconds_t)launch_us);
  if (capturing && stream == capturing) {
    unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    return capture_launch(f, grid, block, smem, params); }
  if (getenv("FAKE_CUDA_POLL") && is_scale(f) && !legacy(stream) && *(float *)params[1] == 0.0f) {
    poller.stream = stream; poller.flag = *(CUdeviceptr *)params[0]; poller.on = 1; return 0; }
  if (legacy(stream)) { WAIT_LEGACY(); land(); }
  run_scale(params);
  device_printf();
  return 0; }
/* FAKE_CUDA_SYNC_FAULT=1 makes every context synchronization report an illegal address, as a
 * kernel's fault surfaces at the next synchronization (for replay error reports). */
CUresult cuCtxSynchronize(void) { WAIT_LEGACY(); land(); drain(); flush_printf(); return getenv("FAKE_CUDA_SYNC_FAULT") ? 700 : 0; }
CUresult cuCtxGetDevice(int *d) { *d = current_dev; return 0; }
/* CUDA 13 hands out versions with new signatures for old names: cuGetProcAddress("cuCtxGetDevice")
 * gives cuCtxGetDevice_v2. cuCtxGetFlags_v2 stands for a version newer than the recorder's table. */
CUresult cuCtxGetDevice_v2(int *d, void *ctx) { int k = ctx ? ctx_dev(ctx) : -1; *d = k < 0 ? current_dev : k; return 0; }
CUresult cuCtxGetFlags_v2(unsigned *f) { *f = 0; return 0; }
CUresult cuMemFree_v2(CUdeviceptr p) { (void)p; return 0; }
/* Native answer for the one 256-byte allocation the program makes. */
CUresult cuMemGetAddressRange_v2(CUdeviceptr *b, size_t *s, CUdeviceptr p) { *b = p & ~255ull; *s = 256; return 0; }
/* VMM: the reservation is granted only at the arena's default base, and mappings only inside
 * the heap, so the recorder's arena path runs end to end. */
static int reserved, mapped;
CUresult cuMemAddressReserve(CUdeviceptr *p, size_t n, size_t align, CUdeviceptr addr, unsigned long long f) {
  (void)n; (void)align; (void)f;
  /* Like the real driver, take the range with mmap: it fails when something holds it. */
  void *m = mmap((void *)addr, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (m == MAP_FAILED || (CUdeviceptr)m != addr) { if (m != MAP_FAILED) munmap(m, n); *p = 0x100000000000ull; return 0; }
  *p = (addr == 0x640000000000ull && !reserved) ? addr : 0x100000000000ull; reserved = 1; return 0; }
CUresult cuMemAddressFree(CUdeviceptr p, size_t n) { (void)p; (void)n; return 0; }
/* Physical allocations: handle k + 1 has size sizes[k] (0 once released), on device
 * handle_dev[k] (CUmemAllocationProp's location id, its fourth int). */
static size_t sizes[256];
static int handle_dev[256], nsizes;
CUresult cuMemCreate(unsigned long long *h, size_t n, const void *prop, unsigned long long f) {
  (void)f;
  if (nsizes == (int)(sizeof sizes / sizeof sizes[0])) return 2;
  int dev = prop ? dev_of(((const int *)prop)[3]) : 0;
  if (bad_dev(dev)) return 101;
  handle_dev[nsizes] = dev; sizes[nsizes++] = n; *h = (unsigned long long)nsizes; return 0; }
static size_t handle_size(unsigned long long h) { return h >= 1 && h <= (unsigned long long)nsizes ? sizes[h - 1] : 0; }
CUresult cuMemRelease(unsigned long long h) { if (!handle_size(h)) return 400; sizes[h - 1] = 0; return 0; }
/* 2 MiB granules; a handle's properties: pinned device memory on its device. */
CUresult cuMemGetAllocationGranularity(size_t *g, const void *prop, int option) { (void)prop; (void)option; *g = 2 << 20; return 0; }
CUresult cuMemGetAllocationPropertiesFromHandle(int *prop, unsigned long long h) {
  memset(prop, 0, 32); prop[0] = 1; prop[2] = 1; prop[3] = handle_size(h) ? handle_dev[h - 1] : 0; return 0; }
static int pool_token;
CUresult cuDeviceGetMemPool(void **pool, int dev) { (void)dev; *pool = &pool_token; return 0; }
CUresult cuDeviceGetDefaultMemPool(void **pool, int dev) { (void)dev; *pool = &pool_token; return 0; }
/* Pools the program creates: handles only (the arena serves stream-ordered allocations). */
static int pools_made[16], npools;
CUresult cuMemPoolCreate(void **pool, const void *props) {
  (void)props; if (npools == 16) return 2; *pool = &pools_made[npools++]; return 0; }
CUresult cuMemPoolDestroy(void *pool) { return pool == &pool_token ? 1 : 0; }
CUresult cuDeviceSetMemPool(int dev, void *pool) { (void)dev; (void)pool; return 0; }
CUresult cuMemPoolSetAttribute(void *pool, int attr, void *v) { (void)pool; (void)attr; (void)v; return 0; }
CUresult cuMemPoolTrimTo(void *pool, size_t keep) { (void)pool; (void)keep; return 0; }
/* Like the real driver, a range mapped already cannot be mapped again until it is unmapped. */
static struct { CUdeviceptr p; size_t n; } maps[256];
static int nmaps;
CUresult cuMemMap(CUdeviceptr p, size_t n, size_t off, unsigned long long h, unsigned long long f) {
  (void)f;
  if (off + n > handle_size(h)) return 1;
  if (!in_arena_heap(p, n)) return 2;
  for (int i = 0; i < nmaps; i++)
    if (p < maps[i].p + maps[i].n && maps[i].p < p + n) return 1;
  if (nmaps == (int)(sizeof maps / sizeof maps[0])) return 2;
  maps[nmaps].p = p; maps[nmaps].n = n; nmaps++;
  mapped++; return 0; }
CUresult cuMemUnmap(CUdeviceptr p, size_t n) {
  for (int i = 0; i < nmaps; i++)
    if (maps[i].p >= p && maps[i].p + maps[i].n <= p + n) { maps[i--] = maps[--nmaps]; mapped--; }
  return 0; }
/* Access descriptors (CUmemAccessDesc: location type, id, flags), any number; with several
 * devices each must name one. */
CUresult cuMemSetAccess(CUdeviceptr p, size_t n, const void *d, size_t c) {
  (void)p; (void)n;
  for (size_t i = 0; d && i < c; i++) if (bad_dev(((const int *)d)[3 * i + 1])) return 1;
  return 0; }
/* Sharing between processes (the executor's side of client mode's cuIpc*, replay/share.rs): a
 * mapping's handle retained, exported as a memfd whose first 8 bytes are its size, imported from
 * any such descriptor. Memory is not shared between processes here (the heap is the process's
 * own): the GPU suite proves the bytes. */
CUresult cuMemRetainAllocationHandle(unsigned long long *h, void *p) {
  if (!in_arena_heap((CUdeviceptr)p, 1)) return 1;
  if (nsizes == (int)(sizeof sizes / sizeof sizes[0])) return 2;
  handle_dev[nsizes] = 0; sizes[nsizes++] = 2 << 20; *h = (unsigned long long)nsizes; return 0; }
CUresult cuMemExportToShareableHandle(void *out, unsigned long long h, int type, unsigned long long f) {
  (void)f;
  size_t n = handle_size(h);
  if (!n) return 400;
  if (type != 1) return 1;
  int fd = memfd_create("fake-export", MFD_CLOEXEC);
  if (fd < 0 || write(fd, &n, sizeof n) != (ssize_t)sizeof n) return 2;
  *(int *)out = fd; return 0; }
CUresult cuMemImportFromShareableHandle(unsigned long long *h, void *os, int type) {
  size_t n = 0;
  if (type != 1 || pread((int)(intptr_t)os, &n, sizeof n, 0) != (ssize_t)sizeof n || !n) return 1;
  if (nsizes == (int)(sizeof sizes / sizeof sizes[0])) return 2;
  handle_dev[nsizes] = 0; sizes[nsizes++] = n; *h = (unsigned long long)nsizes; return 0; }
/* IPC event handles: 64 bytes of 0x5a name the one event. */
typedef struct { char reserved[64]; } CUipcEventHandle;
CUresult cuIpcGetEventHandle(CUipcEventHandle *h, void *e) { (void)e; memset(h, 0x5a, sizeof *h); return 0; }
CUresult cuIpcOpenEventHandle(void **e, CUipcEventHandle h) {
  for (size_t i = 0; i < sizeof h.reserved; i++) if (h.reserved[i] != 0x5a) return 400;
  *e = &ctx_token; return 0; }
/* Shared events on the executor's side (replay/ipc_events.rs): host memory registered, its
 * device address its host address; stream memory operations done at once. */
CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned f) { (void)p; (void)n; (void)f; return 0; }
CUresult cuMemHostUnregister(void *p) { (void)p; return 0; }
CUresult cuStreamWriteValue64_v2(void *s, CUdeviceptr a, uint64_t v, unsigned f) { (void)s; (void)f; *(volatile uint64_t *)(uintptr_t)a = v; return 0; }
CUresult cuStreamWaitValue64_v2(void *s, CUdeviceptr a, uint64_t v, unsigned f) {
  (void)s; (void)f; return *(volatile uint64_t *)(uintptr_t)a >= v ? 0 : 1; }
/* What the stand-in's own processes would call (programs link against it; client mode
 * answers them): not shared here. */
typedef struct { char reserved[64]; } CUipcMemHandle;
CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p) { (void)h; (void)p; return 801; }
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned f) { (void)p; (void)h; (void)f; return 801; }
CUresult cuIpcCloseMemHandle(CUdeviceptr p) { (void)p; return 801; }
CUresult cuStreamWaitEvent(void *s, void *e, unsigned f) { (void)s; (void)e; (void)f; return 0; }
typedef struct { char reserved[64]; } CUmemPoolPtrExportData;
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, void *pool, void *s) { (void)p; (void)n; (void)pool; (void)s; return 801; }
CUresult cuMemFreeAsync(CUdeviceptr p, void *s) { (void)p; (void)s; return 0; }
/* Pools exported as a memfd, imported from any descriptor as a new pool. */
CUresult cuMemPoolExportToShareableHandle(void *h, void *pool, int t, unsigned long long f) {
  (void)pool; (void)f;
  if (t != 1) return 1;
  int fd = memfd_create("fake-pool", MFD_CLOEXEC);
  if (fd < 0) return 2;
  *(int *)h = fd; return 0; }
CUresult cuMemPoolImportFromShareableHandle(void **pool, void *h, int t, unsigned long long f) {
  (void)h; (void)f;
  if (t != 1) return 1;
  return cuMemPoolCreate(pool, 0); }
CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData *d, CUdeviceptr p) { (void)d; (void)p; return 801; }
CUresult cuMemPoolImportPointer(CUdeviceptr *p, void *pool, CUmemPoolPtrExportData *d) { (void)p; (void)pool; (void)d; return 801; }
CUresult cuMemPoolGetAccess(int *f, void *pool, const void *l) { (void)f; (void)pool; (void)l; return 801; }
CUresult cuMemPoolSetAccess(void *pool, const void *d, size_t n) { (void)pool; (void)d; (void)n; return 801; }
CUresult cuEventCreate(void **e, unsigned f) { (void)f; *e = &ctx_token; return 0; }
CUresult cuEventRecord(void *e, void *s) { (void)e; (void)s; return 0; }
/* FAKE_CUDA_EVENT_US=n: waiting for an event takes n microseconds (the work before it still
 * running on a GPU). */
CUresult cuEventSynchronize(void *e) {
  (void)e;
  static long event_us = -1;
  if (event_us < 0) { const char *v = getenv("FAKE_CUDA_EVENT_US"); event_us = v ? atol(v) : 0; }
  if (event_us > 0) usleep((useconds_t)event_us);
  flush_printf();
  return 0; }
CUresult cuEventRecordWithFlags(void *e, void *s, unsigned f) { (void)e; (void)s; (void)f; return 0; }
/* Enum answers (CUstreamCaptureStatus, CUmoduleLoadingMode, CUstreamCaptureMode) are 4 bytes,
 * written as such: the bytes after them are the caller's. Stream 0x5 is capturing. */
CUresult cuStreamIsCapturing(void *s, int *st) { *st = s == (void *)0x5 || (capturing && s == capturing) ? 1 : 0; return 0; }
CUresult cuModuleGetLoadingMode(int *mode) { *mode = 2; return 0; } /* CU_MODULE_LOADING_MODE_LAZY_LOADING */
static int capture_mode; /* CU_STREAM_CAPTURE_MODE_GLOBAL */
CUresult cuThreadExchangeStreamCaptureMode(int *mode) { int old = capture_mode; capture_mode = *mode; *mode = old; return 0; }
/* State queries: a fixed event timing, done streams and events, the heap as free memory. */
CUresult cuEventElapsedTime_v2(float *ms, void *a, void *b) { (void)a; (void)b; *ms = 1.25f; return 0; }
CUresult cuEventQuery(void *e) { (void)e; return 0; }
/* Done, or with FAKE_CUDA_STREAM_BUSY set, still busy (CUDA_ERROR_NOT_READY): the work a stream
 * had is never seen to finish, as on a GPU behind the program. */
CUresult cuStreamQuery(void *s) { (void)s; return getenv("FAKE_CUDA_STREAM_BUSY") ? 600 : 0; }
CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest) { *least = 0; *greatest = -5; return 0; }
/* Streams: the first is 0x10 (never destroyed: programs may use it without creating it), then
 * 0x20, 0x30, ... up to 0xff0; with FAKE_CUDA_LOG set, each creation's priority is appended to
 * that file. */
static CUresult create_stream(void **s, int prio) { /* static: a recorder cannot see it */
  static uintptr_t next = 1;
  *s = (void *)(0x10 * next);
  stream_destroyed[next] = 0;
  if (next < 255) next++;
  const char *log = getenv("FAKE_CUDA_LOG");
  FILE *o = log ? fopen(log, "a") : 0;
  if (o) { fprintf(o, "stream priority %d\n", prio); fclose(o); }
  return 0; }
CUresult cuStreamCreateWithPriority(void **s, unsigned f, int prio) { (void)f; return create_stream(s, prio); }
CUresult cuStreamCreate(void **s, unsigned f) { (void)f; return create_stream(s, 0); }
CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) { *free_ = sizeof heap - (current_dev ? 0 : heap_top); *total = sizeof heap; return 0; }
/* Exported only (the server's device description looks it up by name). */
CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) { (void)dev; *bytes = sizeof heap; return 0; }
/* 2D/3D copies between host memory and the heap, in the x86-64 layout of CUDA_MEMCPY2D_v2 and
 * CUDA_MEMCPY3D_v2 (memory type 1 host, 2 device; arrays are not modelled). */
typedef struct { size_t x, y; int type; const void *host; CUdeviceptr dev; void *array; size_t pitch; } side2d;
typedef struct { side2d src, dst; size_t width, height; } copy2d;
typedef struct { size_t x, y, z, lod; int type; const void *host; CUdeviceptr dev; void *array, *reserved;
                 size_t pitch, height; } side3d;
typedef struct { side3d src, dst; size_t width, height, depth; } copy3d;
/* Memory type 1 host, 2 device, 4 unified (the address says which). */
static unsigned char *at(int type, const void *h, CUdeviceptr d) {
  return type == 1 ? (unsigned char *)h : type == 4 ? unified(d) : host(d); }
/* Static, so that the async forms do not call an exported symbol another library may hold. */
static CUresult copy_2d(const copy2d *c) {
  for (size_t r = 0; r < c->height; r++)
    memcpy(at(c->dst.type, c->dst.host, c->dst.dev) + (c->dst.y + r) * c->dst.pitch + c->dst.x,
           at(c->src.type, c->src.host, c->src.dev) + (c->src.y + r) * c->src.pitch + c->src.x, c->width);
  return 0; }
CUresult cuMemcpy2D_v2(const copy2d *c) { return copy_2d(c); }
CUresult cuMemcpy2DAsync_v2(const copy2d *c, void *stream) { (void)stream; return copy_2d(c); }
static CUresult copy_3d(const copy3d *c) {
  for (size_t z = 0; z < c->depth; z++)
    for (size_t r = 0; r < c->height; r++)
      memcpy(at(c->dst.type, c->dst.host, c->dst.dev) + ((c->dst.z + z) * c->dst.height + c->dst.y + r) * c->dst.pitch + c->dst.x,
             at(c->src.type, c->src.host, c->src.dev) + ((c->src.z + z) * c->src.height + c->src.y + r) * c->src.pitch + c->src.x,
             c->width);
  return 0; }
CUresult cuMemcpy3D_v2(const copy3d *c) { return copy_3d(c); }
CUresult cuMemcpy3DAsync_v2(const copy3d *c, void *stream) { (void)stream; return copy_3d(c); }
/* Graphs of kernel nodes of scale, each depending on the one before (8 graphs of 8 nodes at
 * most, in a pool). A node keeps its own copy of the arguments, as the driver does; a captured
 * launch of a CUkernel names the kernel's function and the kernel; cuGraphLaunch runs the
 * nodes of an instantiated copy in order. */
typedef struct { void *func; unsigned grid[3], block[3], smem; void **params, **extra; void *kern, *ctx; } knode;
typedef struct { void *func; unsigned grid[3], block[3], smem; void **params, **extra; } knode_v1;
/* type 0: a kernel node; 1: a host-to-device copy (host → dev); 2: device-to-host (dev → dst);
 * 3: a host function (hfn(hud)). */
struct graph;
struct gnode { void *func, *kern; unsigned grid[3], block[3], smem; unsigned char args[16]; void *ptrs[3];
               int type; void *dst; const void *src; CUdeviceptr dev; size_t n; hostfn hfn; void *hud;
               struct graph *body; void *bodies[1]; unsigned long long cond; };
struct graph { int used, n; struct gnode nodes[8]; };
static struct graph graphs[8], execs[8], *captured;
static const size_t arg_off[] = {0, 8, 12}, arg_size[] = {8, 4, 4}; /* scale's layout */
static struct graph *new_graph(struct graph *pool) {
  for (int i = 0; i < 8; i++) {
    if (pool[i].used) continue;
    memset(&pool[i], 0, sizeof pool[i]);
    pool[i].used = 1;
    return &pool[i];
  }
  return 0; }
/* The graph holding node n (null: not a node). */
static struct graph *graph_of(const void *n) {
  for (int i = 0; i < 8; i++) {
    const struct gnode *first = graphs[i].nodes;
    if (graphs[i].used && (const struct gnode *)n >= first && (const struct gnode *)n < first + graphs[i].n)
      return &graphs[i];
  }
  return 0; }
static void point_args(struct gnode *n) { for (int i = 0; i < 3; i++) n->ptrs[i] = n->args + arg_off[i]; }
static void copy_graph(struct graph *to, const struct graph *from) {
  to->n = from->n;
  for (int i = 0; i < from->n; i++) { to->nodes[i] = from->nodes[i]; point_args(&to->nodes[i]); } }
static CUresult set_node(struct gnode *n, const knode *p, int v2) {
  void *f = p->func ? p->func : v2 ? p->kern : 0;
  if (!is_scale(f) || !p->params) return 400;
  n->func = f == &lib_kernel_token ? &lib_function_token : f;
  n->kern = f == &kernel_token ? 0 : &lib_kernel_token;
  memcpy(n->grid, p->grid, sizeof n->grid);
  memcpy(n->block, p->block, sizeof n->block);
  n->smem = p->smem;
  for (int i = 0; i < 3; i++) memcpy(n->args + arg_off[i], p->params[i], arg_size[i]);
  point_args(n);
  return 0; }
static CUresult add_node(void **out, struct graph *g, const knode *p) {
  if (!g || g->n == 8) return 1;
  CUresult r = set_node(&g->nodes[g->n], p, 1);
  if (r) return r;
  *out = &g->nodes[g->n++];
  return 0; }
static CUresult capture_launch(void *f, const unsigned *grid, const unsigned *block, unsigned smem, void **params) {
  knode p = {f, {grid[0], grid[1], grid[2]}, {block[0], block[1], block[2]}, smem, params, 0, 0, 0};
  void *n;
  return add_node(&n, captured, &p); }
static CUresult capture_copy(int type, void *dst, const void *src, CUdeviceptr dev, size_t n) {
  if (!captured || captured->n == 8) return 1;
  struct gnode *g = &captured->nodes[captured->n++];
  memset(g, 0, sizeof *g);
  g->type = type; g->dst = dst; g->src = src; g->dev = dev; g->n = n;
  return 0; }
/* Host functions run when reached: at once on a stream (all work before them is done here), at
 * their place in a graph (a captured one, or a host node). */
CUresult cuLaunchHostFunc(void *stream, hostfn fn, void *ud) {
  if (!fn) return 1;
  if (capturing && stream == capturing) {
    if (!captured || captured->n == 8) return 1;
    struct gnode *g = &captured->nodes[captured->n++];
    memset(g, 0, sizeof *g);
    g->type = 3; g->hfn = fn; g->hud = ud;
    return 0;
  }
  if (deferring() && queued < 64) { queue[queued].fn = fn; queue[queued++].ud = ud; return 0; }
  fn(ud);
  return 0; }
typedef struct { hostfn fn; void *ud; } hnode;
CUresult cuGraphAddHostNode(void **n, void *g, void *const *deps, size_t nd, const hnode *p) {
  (void)deps; (void)nd;
  struct graph *gr = g;
  if (!gr || gr->n == 8 || !p || !p->fn) return 1;
  struct gnode *x = &gr->nodes[gr->n];
  memset(x, 0, sizeof *x);
  x->type = 3; x->hfn = p->fn; x->hud = p->ud;
  *n = &gr->nodes[gr->n++];
  return 0; }
CUresult cuGraphAddEmptyNode(void **n, void *g, void *const *deps, size_t nd) {
  (void)deps; (void)nd;
  struct graph *gr = g;
  if (!gr || gr->n == 8) return 1;
  memset(&gr->nodes[gr->n], 0, sizeof gr->nodes[gr->n]);
  gr->nodes[gr->n].type = 5;
  *n = &gr->nodes[gr->n++];
  return 0; }
CUresult cuGraphCreate(void **g, unsigned f) { (void)f; *g = new_graph(graphs); return *g ? 0 : 2; }
CUresult cuGraphAddKernelNode_v2(void **n, void *g, void *const *deps, size_t nd, const knode *p) {
  (void)deps; (void)nd;
  return add_node(n, g, p); }
CUresult cuStreamBeginCapture_v2(void *s, int mode) {
  (void)mode;
  if (capturing) return 900; /* CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED */
  capturing = s;
  captured = new_graph(graphs);
  return captured ? 0 : 2; }
CUresult cuStreamEndCapture(void *s, void **g) {
  if (s != capturing) return 901;
  capturing = 0;
  *g = captured;
  return 0; }
CUresult cuGraphGetNodes(void *g, void **nodes, size_t *n) {
  struct graph *gr = g;
  if (!gr) return 400;
  for (size_t i = 0; nodes && i < *n && i < (size_t)gr->n; i++) nodes[i] = &gr->nodes[i];
  *n = gr->n;
  return 0; }
/* v1 writes the fields the two versions share (the first 56 bytes). */
static CUresult get_params(const struct gnode *n, knode *p, int v2) {
  if (!graph_of(n)) return 400;
  if (!p) return 1;
  p->func = n->func;
  memcpy(p->grid, n->grid, sizeof p->grid);
  memcpy(p->block, n->block, sizeof p->block);
  p->smem = n->smem;
  p->params = (void **)n->ptrs;
  p->extra = 0;
  if (v2) { p->kern = n->kern; p->ctx = &ctx_token; }
  return 0; }
CUresult cuGraphKernelNodeGetParams_v2(void *n, knode *p) { return get_params(n, p, 1); }
CUresult cuGraphKernelNodeGetParams(void *n, knode_v1 *p) { return get_params(n, (knode *)p, 0); }
CUresult cuGraphKernelNodeSetParams_v2(void *n, const knode *p) { return graph_of(n) ? set_node(n, p, 1) : 400; }
/* The node the capture added last (the capture's one dependency). */
CUresult cuStreamGetCaptureInfo_v3(void *s, int *status, unsigned long long *id, void **graph, void *const **deps,
                                   const void **edges, size_t *n) {
  static void *last;
  int on = capturing && s == capturing && captured;
  if (status) *status = on;
  if (id) *id = on;
  if (graph) *graph = on ? captured : 0;
  if (edges) *edges = 0;
  last = on && captured->n ? &captured->nodes[captured->n - 1] : 0;
  if (deps) *deps = &last;
  if (n) *n = last ? 1 : 0;
  return 0; }
/* A node's CUgraphNodeType (the stand-in's node kinds: copies are MEMCPY). */
CUresult cuGraphNodeGetType(void *n, int *t) {
  const struct gnode *x = n;
  if (!graph_of(n) || !t) return 400;
  *t = x->type == 1 || x->type == 2 ? 1 : x->type;
  return 0; }
/* The capture's dependencies replaced (the stand-in's captures are one chain: accepted). */
CUresult cuStreamUpdateCaptureDependencies_v2(void *s, void **deps, const void *edges, size_t n, unsigned flags) {
  (void)edges; (void)flags;
  return capturing && s == capturing && (n == 0 || deps) ? 0 : 1; }
/* The node of executable graph e that node n of its graph became. */
static struct gnode *exec_node(void *e, void *n) {
  struct graph *g = graph_of(n);
  return g && e ? &((struct graph *)e)->nodes[(struct gnode *)n - g->nodes] : 0; }
CUresult cuGraphExecKernelNodeSetParams_v2(void *e, void *n, const knode *p) {
  struct gnode *x = exec_node(e, n);
  return x && x->type == 0 ? set_node(x, p, 1) : 400; }
CUresult cuGraphMemcpyNodeGetParams(void *n, copy3d *p) {
  const struct gnode *g = n;
  if (!graph_of(n) || g->type == 0) return 1;
  memset(p, 0, sizeof *p);
  if (g->type == 1) { p->src.type = 1; p->src.host = g->src; p->dst.type = 2; p->dst.dev = g->dev; }
  else { p->src.type = 2; p->src.dev = g->dev; p->dst.type = 1; p->dst.host = g->dst; }
  p->width = g->n; p->height = 1; p->depth = 1;
  return 0; }
CUresult cuGraphExecMemcpyNodeSetParams(void *e, void *n, const copy3d *p, void *ctx) {
  (void)ctx;
  struct gnode *x = exec_node(e, n);
  if (!x || x->type == 0 || p->width != x->n) return 1;
  x->dev = x->type == 1 ? p->dst.dev : p->src.dev;
  return 0; }
CUresult cuGraphClone(void **c, void *g) {
  struct graph *to = new_graph(graphs);
  if (!to || !g) return 2;
  copy_graph(to, g);
  *c = to;
  return 0; }
CUresult cuGraphNodeFindInClone(void **n, void *orig, void *clone) {
  struct graph *g = graph_of(orig), *c = clone;
  if (!g || !c) return 400;
  *n = &c->nodes[(struct gnode *)orig - g->nodes];
  return 0; }
CUresult cuGraphInstantiateWithFlags(void **e, void *g, unsigned long long f) {
  (void)f;
  struct graph *x = new_graph(execs);
  if (!x || !g) return 2;
  copy_graph(x, g);
  *e = x;
  return 0; }
/* Conditional handles: their values (the default launch value; no kernel here sets one). */
static unsigned cond_values[16];
static int nconds;
CUresult cuGraphConditionalHandleCreate(unsigned long long *h, void *g, void *ctx, unsigned def, unsigned flags) {
  (void)g; (void)ctx; (void)flags;
  if (nconds == 16) return 2;
  cond_values[nconds] = def; *h = 0xc0de0000ull + (unsigned long long)nconds++; return 0; }
static void run_graph(struct graph *x) {
  for (int i = 0; i < x->n; i++) {
    struct gnode *n = &x->nodes[i];
    if (n->type == 1) memcpy(host(n->dev), n->src, n->n);
    else if (n->type == 2) memcpy(n->dst, host(n->dev), n->n);
    else if (n->type == 3) n->hfn(n->hud);
    else if (n->type == 5) {} /* empty */
    else if (n->type == 13) { if (cond_values[n->cond - 0xc0de0000ull]) run_graph(n->body); } /* IF */
    else run_scale(n->ptrs); } }
/* cuGraphAddNode: conditional IF nodes of one body graph only (what the stand-in models). As
 * the driver does, it points phGraph_out (`bodies`, an output) at an array of its own. */
typedef struct { int type, reserved[3]; unsigned long long handle; int ctype; unsigned size; void **bodies; void *ctx; } cnode;
CUresult cuGraphAddNode_v2(void **n, void *g, void *const *deps, const void *edges, size_t nd, cnode *p) {
  (void)deps; (void)edges; (void)nd;
  struct graph *gr = g;
  if (!gr || gr->n == 8 || !p || p->type != 13 || p->ctype != 0 || p->size != 1) return 801;
  if (p->handle < 0xc0de0000ull || p->handle >= 0xc0de0000ull + (unsigned long long)nconds) return 400;
  struct graph *body = new_graph(graphs);
  if (!body) return 2;
  struct gnode *x = &gr->nodes[gr->n];
  memset(x, 0, sizeof *x);
  x->type = 13; x->body = body; x->cond = p->handle;
  x->bodies[0] = body;
  p->bodies = x->bodies;
  *n = &gr->nodes[gr->n++];
  return 0; }
CUresult cuGraphAddNode(void **n, void *g, void *const *deps, size_t nd, cnode *p) {
  return cuGraphAddNode_v2(n, g, deps, 0, nd, p); }
CUresult cuGraphLaunch(void *e, void *s) {
  (void)s;
  run_graph(e);
  return 0; }
CUresult cuGraphExecDestroy(void *e) { ((struct graph *)e)->used = 0; return 0; }
CUresult cuGraphDestroy(void *g) { ((struct graph *)g)->used = 0; return 0; }
CUresult cuLibraryLoadData(void **lib, const void *code, void *jo, void *jv, unsigned nj, void *lo, void *lv, unsigned nl) {
  (void)code; (void)jo; (void)jv; (void)nj; (void)lo; (void)lv; (void)nl;
  *lib = &library_token;
  return 0; }
CUresult cuLibraryGetKernel(void **k, void *lib, const char *name) {
  if (lib != &library_token || strcmp(name, "scale")) return 500;
  *k = &lib_kernel_token;
  return 0; }
CUresult cuKernelGetFunction(void **f, void *k) {
  if (k != &lib_kernel_token) return 400;
  *f = &lib_function_token;
  return 0; }
/* The JIT linker: inputs are "linked" by concatenating them into PTX text (the stand-in's
 * cuModuleLoadData takes any image). PTX without a .version directive is refused when it is
 * added, as the driver refuses broken PTX (CUDA_ERROR_INVALID_PTX, with an error log in the
 * link's error log buffer), and the link goes on without it. As the driver, it writes its
 * logs into the buffers the link's options name, the bytes it filled into the size options'
 * slots, and the wall time through its option's pointer. */
enum { JIT_WALL_TIME = 2, JIT_INFO_LOG = 3, JIT_INFO_SIZE = 4, JIT_ERROR_LOG = 5, JIT_ERROR_SIZE = 6 };
typedef struct { unsigned n; int *ids; void **vals; unsigned caps[16]; char *image; size_t len; int inputs; } linkstate;
/* Links not destroyed: any other state is an invalid handle, as the driver's. */
static linkstate *live_links[16];
static linkstate *live_link(void *state) {
  for (int i = 0; state && i < 16; i++) if (live_links[i] == state) return state;
  return 0; }
static void link_log(linkstate *l, int buf_id, int size_id, const char *msg) {
  char *buf = 0; int at = -1;
  for (unsigned i = 0; i < l->n; i++) {
    if (l->ids[i] == buf_id) buf = l->vals[i];
    if (l->ids[i] == size_id) at = (int)i; }
  if (!buf || at < 0 || !l->caps[at]) return;
  size_t n = strlen(msg);
  if (n >= l->caps[at]) n = l->caps[at] - 1;
  memcpy(buf, msg, n); buf[n] = 0;
  l->vals[at] = (void *)(uintptr_t)n; }
CUresult cuLinkCreate_v2(unsigned n, int *ids, void **vals, void **out) {
  if (!out || n > 16 || (n && (!ids || !vals))) return 1;
  int slot = 0;
  while (slot < 16 && live_links[slot]) slot++;
  linkstate *l = slot < 16 ? calloc(1, sizeof *l) : 0;
  if (!l) return 2;
  live_links[slot] = l;
  l->n = n; l->ids = ids; l->vals = vals;
  for (unsigned i = 0; i < n; i++)
    if (ids[i] == JIT_INFO_SIZE || ids[i] == JIT_ERROR_SIZE) l->caps[i] = (unsigned)(uintptr_t)vals[i];
  *out = l;
  return 0; }
static int has_version(const char *t, size_t n) {
  for (size_t i = 0; i + 8 <= n; i++) if (!memcmp(t + i, ".version", 8)) return 1;
  return 0; }
CUresult cuLinkAddData_v2(void *state, int type, void *data, size_t size, const char *name, unsigned n, int *ids, void **vals) {
  (void)n; (void)ids; (void)vals;
  linkstate *l = live_link(state);
  if (!l) return 400;
  if (!data || !size) return 1;
  const char *text = data;
  size_t len = strnlen(text, size);
  if (type == 1 && !has_version(text, len)) {
    char msg[256];
    snprintf(msg, sizeof msg, "ptxas fatal   : %s: not PTX (no .version directive)", name && *name ? name : "<input>");
    link_log(l, JIT_ERROR_LOG, JIT_ERROR_SIZE, msg);
    return 218; } /* CUDA_ERROR_INVALID_PTX */
  char *grown = realloc(l->image, l->len + len + 2);
  if (!grown) return 2;
  l->image = grown;
  memcpy(l->image + l->len, text, len);
  l->len += len;
  l->image[l->len++] = '\n';
  l->inputs++;
  return 0; }
CUresult cuLinkAddFile_v2(void *state, int type, const char *path, unsigned n, int *ids, void **vals) {
  FILE *f = path ? fopen(path, "rb") : 0;
  if (!f) return 301; /* CUDA_ERROR_FILE_NOT_FOUND */
  static char buf[1 << 16];
  size_t got = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[got] = 0;
  return cuLinkAddData_v2(state, type, buf, got + 1, path, n, ids, vals); }
CUresult cuLinkComplete(void *state, void **cubin, size_t *size) {
  linkstate *l = live_link(state);
  if (!l) return 400;
  if (!cubin || !size) return 1;
  if (!l->inputs) { link_log(l, JIT_ERROR_LOG, JIT_ERROR_SIZE, "nvlink error   : no input to link"); return 1; }
  /* CU_JIT_GLOBAL_SYMBOL_NAMES (17), _ADDRESSES (18), _COUNT (19): each symbol "relocated" is
   * written into the image as a comment line, from the arrays the options point to. */
  int names = -1, addrs = -1, count = -1;
  for (unsigned i = 0; i < l->n; i++) {
    if (l->ids[i] == 17) names = (int)i;
    if (l->ids[i] == 18) addrs = (int)i;
    if (l->ids[i] == 19) count = (int)i; }
  if (names >= 0 && addrs >= 0 && count >= 0) {
    unsigned k = (unsigned)(uintptr_t)l->vals[count];
    const char **nm = l->vals[names];
    const unsigned long long *ad = l->vals[addrs];
    for (unsigned j = 0; j < k; j++) {
      char line[160];
      int w = snprintf(line, sizeof line, "// symbol %s=%#llx\n", nm[j], ad[j]);
      char *grown = w > 0 ? realloc(l->image, l->len + (size_t)w + 2) : 0;
      if (!grown) return 2;
      l->image = grown;
      memcpy(l->image + l->len, line, (size_t)w);
      l->len += (size_t)w; } }
  l->image[l->len] = 0;
  char msg[128];
  snprintf(msg, sizeof msg, "stand-in linker: %d inputs, %zu bytes", l->inputs, l->len);
  link_log(l, JIT_INFO_LOG, JIT_INFO_SIZE, msg);
  for (unsigned i = 0; i < l->n; i++)
    if (l->ids[i] == JIT_WALL_TIME && l->vals[i]) *(float *)l->vals[i] = 0.25f;
  *cubin = l->image; *size = l->len + 1;
  return 0; }
CUresult cuLinkDestroy(void *state) {
  linkstate *l = live_link(state);
  if (!l) return 400;
  for (int i = 0; i < 16; i++) if (live_links[i] == l) live_links[i] = 0;
  free(l->image); free(l);
  return 0; }
/* How many chunks are mapped: the program prints it, so a test sees the arena at work. */
CUresult cuFakeMapped(int *n) { *n = mapped; return 0; }
/* With several devices an ordinal past them is refused (a record of another server's numbering). */
CUresult cuDevicePrimaryCtxReset_v2(int dev) { return bad_dev(dev) ? 101 : 0; }
CUresult cuFakeUnmodeled(int x) { return x; }
/* cuLaunchKernelEx: checks the function and reads the config; changes no memory. */
typedef struct { unsigned gx, gy, gz, bx, by, bz, smem; void *stream; void *attrs; unsigned n; } lcfg;
CUresult cuLaunchKernelEx(const lcfg *c, void *f, void **params, void **extra) {
  (void)params; (void)extra;
  return f == &kernel_token && c && c->gx > 0 ? 0 : 400; }

/* The primary context's state, and how often the driver was asked for it. cuFakeSetActive is
 * unmodeled: it changes the state behind the recorder's back. */
static int primary_active[MAXDEV], state_queries;
CUresult cuDevicePrimaryCtxRetain(void **c, int dev) {
  if (bad_dev(dev)) return 101;
  *c = primary(dev_of(dev)); primary_active[dev_of(dev)] = 1; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { if (bad_dev(dev)) return 101; primary_active[dev_of(dev)] = 0; return 0; }
CUresult cuDevicePrimaryCtxGetState(int dev, unsigned *flags, int *active) {
  if (dev < 0 || dev >= ndev) return 101;
  if (!flags || !active) return 1;
  state_queries++; *flags = 4; *active = primary_active[dev]; return 0; }
CUresult cuFakeSetActive(int a) { primary_active[0] = a; return 0; }
CUresult cuFakeStateQueries(int *n) { *n = state_queries; return 0; }

/* What the replayer (gpuless replay, through cudarc: dlsym by name) calls beyond the above, so
 * CI can execute traces of program.c on this stand-in (cli/tests/replay_fake.rs). */
/* FAKE_CUDA_SET_CURRENT_FAILS makes making a context current fail (a session that cannot start). */
CUresult cuCtxSetCurrent(void *c) {
  if (getenv("FAKE_CUDA_SET_CURRENT_FAILS")) return 201;
  int k = c ? ctx_dev(c) : 0;
  if (k < 0) return 201;
  current_dev = k; return 0; }

/* A private export table as the driver hands them out (cuGetExportTable): its size in bytes,
 * then function slots; read-only after relocation, as the driver's are. */
static int slot_calls;
static CUresult export_add(int x) { slot_calls += x; return 0; }
static CUresult export_nothing(void) { return 0; }
static CUresult export_count(int *n) { *n = slot_calls; return 0; }
/* A module's function handed out without cuModuleGetFunction (as cuFFT takes its kernels). */
static CUresult export_function(void **f, void *m) { if (m != &module_token) return 400; *f = &wide_token; return 0; }
static void *const export_table[] = {(void *)(5 * sizeof(void *)), (void *)export_add, (void *)export_nothing,
                                     (void *)export_count, (void *)export_function};
CUresult cuFuncGetModule(void **m, void *f) { if (f != &kernel_token && f != &wide_token) return 400; *m = &module_token; return 0; }
CUresult cuFuncGetName(const char **name, void *f) {
  if (f == &kernel_token) { *name = "scale"; return 0; }
  if (f == &wide_token) { *name = "wide"; return 0; }
  return 400; }
CUresult cuGetExportTable(const void **t, const void *id) { (void)id; *t = export_table; return 0; }

struct entry { const char *name; void *fn; };
static const struct entry table[] = {
  {"cuInit", cuInit}, {"cuDriverGetVersion", cuDriverGetVersion}, {"cuDeviceGet", cuDeviceGet},
  {"cuDeviceGetCount", cuDeviceGetCount},
  {"cuDeviceGetName", cuDeviceGetName}, {"cuDeviceGetAttribute", cuDeviceGetAttribute},
  {"cuDeviceGetUuid", cuDeviceGetUuid_v2}, {"cuCtxGetCurrent", cuCtxGetCurrent},
  {"cuMemAlloc", cuMemAlloc_v2}, {"cuMemcpyHtoD", cuMemcpyHtoD_v2}, {"cuMemcpyDtoH", cuMemcpyDtoH_v2},
  {"cuModuleLoadData", cuModuleLoadData}, {"cuModuleGetFunction", cuModuleGetFunction},
  {"cuModuleUnload", cuModuleUnload}, {"cuLibraryUnload", cuLibraryUnload}, {"cuMemsetD8", cuMemsetD8_v2}, {"cuMemsetD8Async", cuMemsetD8Async}, {"cuMemHostRegister", cuMemHostRegister_v2}, {"cuMemHostUnregister", cuMemHostUnregister},
  {"cuFuncGetParamInfo", cuFuncGetParamInfo}, {"cuLaunchKernel", cuLaunchKernel},
  {"cuCtxSynchronize", cuCtxSynchronize}, {"cuMemcpyDtoHAsync", cuMemcpyDtoHAsync_v2}, {"cuMemAllocHost", cuMemAllocHost_v2},
  {"cuStreamSynchronize", cuStreamSynchronize}, {"cuFakeUnmodeled", cuFakeUnmodeled},
  {"cuMemFree", cuMemFree_v2}, {"cuMemGetAddressRange", cuMemGetAddressRange_v2}, {"cuFakeMapped", cuFakeMapped},
  {"cuMemcpy2D", cuMemcpy2D_v2}, {"cuMemcpy3D", cuMemcpy3D_v2}, {"cuGraphCreate", cuGraphCreate},
  {"cuGraphAddKernelNode", cuGraphAddKernelNode_v2}, {"cuLaunchKernelEx", cuLaunchKernelEx},
  {"cuEventCreate", cuEventCreate}, {"cuEventRecord", cuEventRecord},
  {"cuEventRecordWithFlags", cuEventRecordWithFlags}, {"cuEventSynchronize", cuEventSynchronize},
  {"cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain}, {"cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease_v2},
  {"cuDevicePrimaryCtxGetState", cuDevicePrimaryCtxGetState}, {"cuFakeSetActive", cuFakeSetActive},
  {"cuFakeStateQueries", cuFakeStateQueries}, {"cuCtxGetDevice", cuCtxGetDevice_v2},
  {"cuCtxGetFlags", cuCtxGetFlags_v2}, {"cuEventElapsedTime", cuEventElapsedTime_v2},
  {"cuEventQuery", cuEventQuery}, {"cuStreamQuery", cuStreamQuery},
  {"cuCtxGetStreamPriorityRange", cuCtxGetStreamPriorityRange}, {"cuMemGetInfo", cuMemGetInfo_v2},
  {"cuStreamCreate", cuStreamCreate}, {"cuStreamCreateWithPriority", cuStreamCreateWithPriority},
  {"cuStreamIsCapturing", cuStreamIsCapturing}, {"cuModuleGetLoadingMode", cuModuleGetLoadingMode},
  {"cuThreadExchangeStreamCaptureMode", cuThreadExchangeStreamCaptureMode},
  {"cuGetExportTable", cuGetExportTable}, {"cuMemcpyHtoDAsync", cuMemcpyHtoDAsync_v2},
  {"cuMemcpy", cuMemcpy}, {"cuMemcpyAsync", cuMemcpyAsync}, {"cuPointerGetAttribute", cuPointerGetAttribute},
  {"cuLaunchHostFunc", cuLaunchHostFunc}, {"cuGraphAddHostNode", cuGraphAddHostNode},
  {"cuCtxSetCurrent", cuCtxSetCurrent}, {"cuMemcpy2DAsync", cuMemcpy2DAsync_v2}, {"cuMemcpy3DAsync", cuMemcpy3DAsync_v2}, {"cuFuncGetModule", cuFuncGetModule}, {"cuFuncGetName", cuFuncGetName},
  {"cuLinkCreate", cuLinkCreate_v2}, {"cuLinkAddData", cuLinkAddData_v2}, {"cuLinkAddFile", cuLinkAddFile_v2},
  {"cuLinkComplete", cuLinkComplete}, {"cuLinkDestroy", cuLinkDestroy},
};
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, uint64_t flags, int *status) {
  (void)flags;
  /* Like the real driver, a version before CUDA 3.2 gets the legacy 32-bit cuMemAlloc. */
  if (ver < 3020 && !strcmp(sym, "cuMemAlloc")) { *pfn = (void *)cuMemAlloc; if (status) *status = 1; return 0; }
  for (size_t i = 0; i < sizeof table / sizeof *table; i++)
    if (!strcmp(sym, table[i].name)) { *pfn = table[i].fn; if (status) *status = 1; return 0; }
  *pfn = 0; if (status) *status = 2; return 500; }
