/* The program's own virtual memory (cli/tests/run_remote_vmm.rs): a reservation of two
 * granules, one physical allocation mapped at its start, access granted, data uploaded, the
 * stand-in's `scale` run on it and read back; the driver's errors for maps it refuses; the
 * allocation's properties; then unmap, release and free, after which a copy there is refused;
 * and a copy past the end of a plain allocation, refused as the driver refuses it.
 * Prints what it saw; any failing call that should succeed prints `FAILED <call> <code>` to
 * stderr and exits with 1. */
#include <string.h>

#include "scale.h"

typedef struct {
  int type, handle_types;
  struct { int type, id; } location;
  void *win32;
  unsigned char compression, rdma;
  unsigned short usage;
  unsigned char reserved[4];
} Prop;
typedef struct { struct { int type, id; } location; int flags; } Access;
CUresult cuMemGetAllocationGranularity(size_t *g, const Prop *prop, int option);
CUresult cuMemAddressReserve(CUdeviceptr *p, size_t n, size_t align, CUdeviceptr addr, unsigned long long f);
CUresult cuMemAddressFree(CUdeviceptr p, size_t n);
CUresult cuMemCreate(unsigned long long *h, size_t n, const Prop *prop, unsigned long long f);
CUresult cuMemRelease(unsigned long long h);
CUresult cuMemMap(CUdeviceptr p, size_t n, size_t off, unsigned long long h, unsigned long long f);
CUresult cuMemUnmap(CUdeviceptr p, size_t n);
CUresult cuMemSetAccess(CUdeviceptr p, size_t n, const Access *d, size_t count);
CUresult cuMemGetAllocationPropertiesFromHandle(Prop *prop, unsigned long long h);

#define N 64
int main(void) {
  void *ctx, *mod, *fn;
  OPEN_SCALE(ctx, mod, fn);
  Prop prop;
  memset(&prop, 0, sizeof prop);
  prop.type = 1;          /* CU_MEM_ALLOCATION_TYPE_PINNED */
  prop.location.type = 1; /* CU_MEM_LOCATION_TYPE_DEVICE */
  size_t g = 0;
  CK(cuMemGetAllocationGranularity, &g, &prop, 0);
  printf("granularity: %zu MiB\n", g >> 20);
  CUdeviceptr base = 0;
  CK(cuMemAddressReserve, &base, 2 * g, g, 0, 0);
  printf("reserved: aligned %d\n", base % g == 0);
  unsigned long long h = 0;
  CK(cuMemCreate, &h, g, &prop, 0);
  printf("map outside the reservation: %d\n", cuMemMap(base + 2 * g, g, 0, h, 0));
  printf("map past the allocation: %d\n", cuMemMap(base, 2 * g, 0, h, 0));
  printf("map of no allocation: %d\n", cuMemMap(base, g, 0, h + 0x10000, 0));
  CK(cuMemMap, base, g, 0, h, 0);
  printf("map over a mapping: %d\n", cuMemMap(base, g, 0, h, 0));
  Access acc = {{1, 0}, 3}; /* the device, read-write */
  CK(cuMemSetAccess, base, g, &acc, 1);
  Prop got;
  memset(&got, 0xff, sizeof got);
  CK(cuMemGetAllocationPropertiesFromHandle, &got, h);
  printf("properties: type %d location %d/%d\n", got.type, got.location.type, got.location.id);
  float data[N];
  for (int i = 0; i < N; i++) data[i] = (float)i;
  CUdeviceptr at = base + 4096;
  CK(cuMemcpyHtoD_v2, at, data, sizeof data);
  float k = 3.0f;
  int n = N;
  void *params[] = {&at, &k, &n};
  CK(cuLaunchKernel, fn, 1, 1, 1, N, 1, 1, 0, 0, params, 0);
  CK(cuCtxSynchronize);
  memset(data, 0, sizeof data);
  CK(cuMemcpyDtoH_v2, data, at, sizeof data);
  printf("after kernel: %g %g %g\n", data[0], data[1], data[N - 1]);
  printf("copy into the unmapped half: %d\n", cuMemcpyHtoD_v2(base + g, data, sizeof data));
  CK(cuMemUnmap, base, g);
  CK(cuMemRelease, h);
  printf("release again: %d\n", cuMemRelease(h));
  CK(cuMemAddressFree, base, 2 * g);
  printf("copy after the free: %d\n", cuMemcpyHtoD_v2(at, data, sizeof data));
  /* An allocation's end is checked as the driver checks it (the arena's chunk is larger). */
  CUdeviceptr small;
  CK(cuMemAlloc_v2, &small, 256);
  printf("copy past the end of an allocation: %d\n", cuMemcpyHtoD_v2(small + 200, data, 100));
  printf("done\n");
  return 0;
}
