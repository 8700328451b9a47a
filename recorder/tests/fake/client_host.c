/* What client mode answers on its own about host memory, pointers and streams
 * (cli/tests/run_remote_host.rs runs it with `gpuless run --remote` against a server on the
 * stand-in driver): every driver function is found through cuGetProcAddress_v2, as cudart finds
 * them. Prints `key value...` lines; a failing call prints `FAILED <what> <code>` and exits 1. */
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef CUresult (*gpa_t)(const char *, void **, int, unsigned long long, int *);
static gpa_t gpa;

static void *fn(const char *name) {
  void *p = 0;
  int status = 0;
  if (gpa(name, &p, 13000, 0, &status) != 0 || !p) {
    fprintf(stderr, "FAILED cuGetProcAddress_v2(%s) %d\n", name, status);
    exit(1);
  }
  return p;
}

static void check(CUresult r, const char *what) {
  if (r != 0) {
    fprintf(stderr, "FAILED %s %d\n", what, r);
    exit(1);
  }
}

/* CUDA_MEMCPY2D as cuda.h lays it out. */
typedef struct {
  size_t srcXInBytes, srcY;
  int srcMemoryType;
  const void *srcHost;
  unsigned long long srcDevice;
  void *srcArray;
  size_t srcPitch;
  size_t dstXInBytes, dstY;
  int dstMemoryType;
  void *dstHost;
  unsigned long long dstDevice;
  void *dstArray;
  size_t dstPitch;
  size_t WidthInBytes, Height;
} copy2d;

static const char ptx[] =
  ".version 8.0\n.target sm_90\n.address_size 64\n"
  ".visible .entry scale(\n\t.param .u64 scale_param_0,\n\t.param .f32 scale_param_1,\n"
  "\t.param .u32 scale_param_2\n)\n{\n\tret;\n}\n";

int main(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) { fprintf(stderr, "FAILED dlopen %s\n", dlerror()); return 1; }
  gpa = (gpa_t)dlsym(lib, "cuGetProcAddress_v2");
  if (!gpa) { fprintf(stderr, "FAILED dlsym\n"); return 1; }
  CUresult (*init)(unsigned) = fn("cuInit");
  CUresult (*dev_get)(int *, int) = fn("cuDeviceGet");
  CUresult (*retain)(void **, int) = fn("cuDevicePrimaryCtxRetain");
  CUresult (*set_current)(void *) = fn("cuCtxSetCurrent");
  CUresult (*host_alloc)(void **, size_t, unsigned) = fn("cuMemHostAlloc");
  CUresult (*alloc_host)(void **, size_t) = fn("cuMemAllocHost");
  CUresult (*free_host)(void *) = fn("cuMemFreeHost");
  CUresult (*host_flags)(unsigned *, void *) = fn("cuMemHostGetFlags");
  CUresult (*host_devptr)(unsigned long long *, void *, unsigned) = fn("cuMemHostGetDevicePointer");
  CUresult (*ptr_attr)(void *, int, unsigned long long) = fn("cuPointerGetAttribute");
  CUresult (*ptr_attrs)(unsigned, int *, void **, unsigned long long) = fn("cuPointerGetAttributes");
  CUresult (*stream_create)(void **, unsigned) = fn("cuStreamCreate");
  CUresult (*capture_info)(void *, int *, unsigned long long *) = fn("cuStreamGetCaptureInfo");
  CUresult (*load)(void **, const void *) = fn("cuModuleLoadData");
  CUresult (*get_fn)(void **, void *, const char *) = fn("cuModuleGetFunction");
  CUresult (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                     void **, void **) = fn("cuLaunchKernel");
  CUresult (*mem_alloc)(unsigned long long *, size_t) = fn("cuMemAlloc");
  CUresult (*priorities)(int *, int *) = fn("cuCtxGetStreamPriorityRange");
  CUresult (*loading)(int *) = fn("cuModuleGetLoadingMode");

  int dev;
  void *ctx;
  check(init(0), "cuInit");
  check(dev_get(&dev, 0), "cuDeviceGet");
  check(retain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(set_current(ctx), "cuCtxSetCurrent");

  /* What only the server's driver knows, asked twice: the second answer comes from memory. */
  int least = 9, greatest = 9, mode = 9;
  for (int i = 0; i < 2; i++) {
    check(priorities(&least, &greatest), "cuCtxGetStreamPriorityRange");
    check(loading(&mode), "cuModuleGetLoadingMode");
  }
  printf("priorities %d %d loading_mode %d\n", least, greatest, mode);

  /* Pinned memory, plain and mapped for the device. */
  void *pinned = 0, *mapped = 0;
  check(alloc_host(&pinned, 8192), "cuMemAllocHost");
  check(host_alloc(&mapped, 4096, 0x2 /* DEVICEMAP */), "cuMemHostAlloc");
  unsigned flags = 99;
  check(host_flags(&flags, mapped), "cuMemHostGetFlags");
  printf("mapped_flags %u\n", flags);
  unsigned long long dptr = 0;
  check(host_devptr(&dptr, (char *)mapped + 16, 0), "cuMemHostGetDevicePointer");
  printf("mapped_devptr_is_host %d\n", dptr == (unsigned long long)(uintptr_t)mapped + 16);

  /* Pointer queries: pinned, pageable, device. */
  int type = 0;
  check(ptr_attr(&type, 2 /* MEMORY_TYPE */, (uintptr_t)pinned + 100), "cuPointerGetAttribute(pinned)");
  unsigned long long start = 0, size = 0;
  check(ptr_attr(&start, 11 /* RANGE_START_ADDR */, (uintptr_t)pinned + 100), "RANGE_START_ADDR");
  check(ptr_attr(&size, 12 /* RANGE_SIZE */, (uintptr_t)pinned + 100), "RANGE_SIZE");
  printf("pinned type %d start_is_base %d size %llu\n", type, start == (uintptr_t)pinned, size);
  static char pageable[64];
  printf("pageable_single %d\n", ptr_attr(&type, 2, (uintptr_t)pageable));
  int attrs[2] = {2 /* MEMORY_TYPE */, 9 /* DEVICE_ORDINAL */};
  int v0 = 7, v1 = 7;
  void *outs[2] = {&v0, &v1};
  CUresult many = ptr_attrs(2, attrs, outs, (uintptr_t)pageable);
  printf("pageable_many %d %d %d\n", many, v0, v1);
  unsigned long long d = 0;
  check(mem_alloc(&d, 1 << 20), "cuMemAlloc");
  check(ptr_attr(&type, 2, d + 4096), "cuPointerGetAttribute(device)");
  printf("device type %d\n", type);

  /* A stream that is not capturing. */
  void *s = 0;
  check(stream_create(&s, 0), "cuStreamCreate");
  int status = 7;
  check(capture_info(s, &status, 0), "cuStreamGetCaptureInfo");
  printf("capture_status %d\n", status);

  /* Launches whose argument points into host memory mapped for the device, or into plain
   * pinned memory, run: the one is mirrored on the server from its allocation, the other from
   * this launch on (with unified addressing the device reads pinned memory directly). */
  void *mod, *f;
  check(load(&mod, ptx), "cuModuleLoadData");
  check(get_fn(&f, mod, "scale"), "cuModuleGetFunction");
  float k = 2.0f;
  int n = 4;
  unsigned long long arg = (uintptr_t)mapped + 64;
  void *args[] = {&arg, &k, &n};
  printf("launch_mapped %d\n", launch(f, 1, 1, 1, 32, 1, 1, 0, 0, args, 0));
  arg = (uintptr_t)pinned + 64;
  printf("launch_pinned %d\n", launch(f, 1, 1, 1, 32, 1, 1, 0, 0, args, 0));
  arg = d;
  printf("launch_device %d\n", launch(f, 1, 1, 1, 32, 1, 1, 0, 0, args, 0));
  /* 2D copies with host sides given as unified addresses: 4 rows of 48 bytes from a host
   * buffer of pitch 100 to device memory of pitch 64, and back into a host buffer of pitch
   * 80 whose gaps must stay as they were. */
  CUresult (*copy)(const copy2d *) = fn("cuMemcpy2D");
  unsigned char src[400], back[320];
  for (int i = 0; i < 400; i++) src[i] = (unsigned char)(i * 7 + 1);
  memset(back, 0xee, sizeof back);
  copy2d up = {0};
  up.srcMemoryType = 4; /* UNIFIED: host memory */
  up.srcDevice = (uintptr_t)src;
  up.srcPitch = 100;
  up.dstMemoryType = 4; /* UNIFIED: device memory */
  up.dstDevice = d;
  up.dstPitch = 64;
  up.WidthInBytes = 48;
  up.Height = 4;
  check(copy(&up), "cuMemcpy2D up");
  copy2d down = {0};
  down.srcMemoryType = 2; /* DEVICE */
  down.srcDevice = d;
  down.srcPitch = 64;
  down.dstMemoryType = 4; /* UNIFIED: host memory */
  down.dstDevice = (uintptr_t)back;
  down.dstPitch = 80;
  down.WidthInBytes = 48;
  down.Height = 4;
  check(copy(&down), "cuMemcpy2D down");
  int rows_ok = 1, gaps_ok = 1;
  for (int r = 0; r < 4; r++)
    for (int x = 0; x < 80; x++) {
      if (x < 48) rows_ok &= back[r * 80 + x] == src[r * 100 + x];
      else gaps_ok &= back[r * 80 + x] == 0xee;
    }
  printf("copy2d rows %d gaps %d\n", rows_ok, gaps_ok);

  check(free_host(mapped), "cuMemFreeHost");
  check(free_host(pinned), "cuMemFreeHost(pinned)");
  printf("freed_again %d\n", free_host(pinned));
  return 0;
}
