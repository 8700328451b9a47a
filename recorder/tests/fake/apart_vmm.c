/* The program's own virtual memory on a device of the second server of a session across two
 * (cli/tests/run_remote_devices.rs: two stand-in servers of two "GPUs" each, `--remote A,B
 * --gpus 2`): device 2 is the second server's device 0, so the device ordinals the program's
 * records carry — cuMemCreate's location, cuMemSetAccess's descriptors, a device argument — must
 * reach that server as its own (the stand-in refuses an ordinal past its devices). Prints
 * `ok NAME` or `FAIL NAME got X`, `apart_vmm: done` at the end; exits 1 when a check failed. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

static void *lib;
static int failed;

static void *sym(const char *name) {
  void *p = dlsym(lib, name);
  if (!p) {
    fprintf(stderr, "FAILED dlsym %s\n", name);
    exit(2);
  }
  return p;
}

static void check(const char *name, int good, long long got) {
  if (good) printf("ok %s\n", name);
  else {
    printf("FAIL %s got %lld\n", name, got);
    failed = 1;
  }
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) return 2;
  CUresult (*init)(unsigned) = sym("cuInit");
  CUresult (*get_count)(int *) = sym("cuDeviceGetCount");
  CUresult (*retain)(CUcontext *, int) = sym("cuDevicePrimaryCtxRetain");
  CUresult (*set_current)(CUcontext) = sym("cuCtxSetCurrent");
  CUresult (*create)(unsigned long long *, size_t, const void *, unsigned long long) = sym("cuMemCreate");
  CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long) = sym("cuMemAddressReserve");
  CUresult (*map)(CUdeviceptr, size_t, size_t, unsigned long long, unsigned long long) = sym("cuMemMap");
  CUresult (*set_access)(CUdeviceptr, size_t, const void *, size_t) = sym("cuMemSetAccess");
  CUresult (*htod)(CUdeviceptr, const void *, size_t) = sym("cuMemcpyHtoD_v2");
  CUresult (*dtoh)(void *, CUdeviceptr, size_t) = sym("cuMemcpyDtoH_v2");
  CUresult (*unmap)(CUdeviceptr, size_t) = sym("cuMemUnmap");
  CUresult (*release)(unsigned long long) = sym("cuMemRelease");
  CUresult (*reset)(int) = sym("cuDevicePrimaryCtxReset_v2");
  if (init(0)) return 2;
  int n = 0;
  CUresult r = get_count(&n);
  check("count_4", r == 0 && n == 4, r ? r : n);
  CUcontext ctx = NULL;
  r = retain(&ctx, 2);
  if (!r) r = set_current(ctx);
  check("device_2_current", r == 0, r);
  enum { SIZE = 2 << 20 };
  /* CUmemAllocationProp: pinned (1), no handle types, location { device (1), 2 }. */
  int prop[8] = {1, 0, 1, 2, 0, 0, 0, 0};
  unsigned long long h = 0;
  r = create(&h, SIZE, prop, 0);
  check("vmm_create_on_2", r == 0, r);
  CUdeviceptr p = 0;
  r = reserve(&p, SIZE, 0, 0, 0);
  if (!r) r = map(p, SIZE, 0, h, 0);
  check("vmm_map", r == 0, r);
  /* CUmemAccessDesc: location { device (1), 2 }, read-write (3). */
  int desc[3] = {1, 2, 3};
  r = set_access(p, SIZE, desc, 1);
  check("vmm_set_access_2", r == 0, r);
  static unsigned char in[4096], out[4096];
  for (int i = 0; i < 4096; i++) in[i] = (unsigned char)(i * 31 + 7);
  r = htod(p, in, sizeof in);
  if (!r) r = dtoh(out, p, sizeof out);
  check("vmm_round_trip", r == 0 && !memcmp(in, out, sizeof in), r);
  r = unmap(p, SIZE);
  if (!r) r = release(h);
  check("vmm_release", r == 0, r);
  /* A device argument: device 2's primary context reset, on its server as its device 0. */
  r = reset(2);
  check("reset_2", r == 0, r);
  printf("apart_vmm: done\n");
  return failed;
}
