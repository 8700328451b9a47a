// The program's own virtual memory, through the driver's VMM calls (issue 35): it reserves an
// address range of 4 granules (cuMemAddressReserve), creates 2 physical allocations of one
// granule each (cuMemCreate), maps them at slots 0 and 1 (cuMemMap), grants read/write access
// (cuMemSetAccess), has a kernel write through the range and copies it back. Then it unmaps
// slot 1 and maps the FIRST allocation there too: the same physical memory at two addresses, so
// a kernel's write (and an upload) at one address must be read at the other, in both
// directions; the second allocation, mapped again at slot 2, must still hold what was uploaded
// into it at slot 1, and a kernel copies from slot 2 into slot 1, read back at slot 0.
// Finally cuMemUnmap, cuMemRelease and cuMemAddressFree. A client must know that two device
// addresses can be one memory (a copy of one is a copy of the other). Kernels through cudart,
// the VMM calls through the driver API (shared cudart and -lcuda). Prints the minimum
// granularity (a property of the device, 2 MiB on an H100) and checked values only, never an
// address. Exits 1 if any value differs.
#include <cuda.h>
#include <vector>

#include "check.h"

#include "cu_check.h"

static int bad = 0;
static void verdict(const char* what, int errors) {
    printf("%s: %s\n", what, errors ? "WRONG" : "ok");
    if (errors) fprintf(stderr, "%s: %d wrong values\n", what, errors);
    bad += errors != 0;
}

__global__ void fill(unsigned* p, size_t n, unsigned base) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = base + (unsigned)i * 7u;
}
// dst[i] = src[i] + 1: reads at one address, writes at another.
__global__ void copy_plus(const unsigned* src, unsigned* dst, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i] + 1u;
}

static int check_fill(const std::vector<unsigned>& h, size_t from, size_t count, unsigned base) {
    int errors = 0;
    for (size_t i = 0; i < count; ++i) errors += h[from + i] != base + (unsigned)i * 7u;
    return errors;
}

int main() {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    int dev = 0;
    CK(cudaSetDevice(dev));
    CK(cudaFree(0));  // the primary context, current for the driver calls below
    int vmm = 0;
    CU(cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
    printf("virtual memory management supported: %s\n", vmm ? "yes" : "no");
    if (!vmm) return 1;

    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t g = 0;
    CU(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    printf("minimum granularity: %zu KiB\n", g / 1024);
    size_t rec = 0;
    CU(cuMemGetAllocationGranularity(&rec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    printf("recommended granularity is a multiple of the minimum: %s\n", rec >= g && rec % g == 0 ? "yes" : "no");
    bad += !(rec >= g && rec % g == 0);

    CUdeviceptr base = 0;
    CU(cuMemAddressReserve(&base, 4 * g, g, 0, 0));
    printf("reserved 4 granules, aligned to the granularity: %s\n", base % g == 0 ? "yes" : "no");
    bad += base % g != 0;
    CUmemGenericAllocationHandle h1, h2;
    CU(cuMemCreate(&h1, g, &prop, 0));
    CU(cuMemCreate(&h2, g, &prop, 0));
    CU(cuMemMap(base, g, 0, h1, 0));
    CU(cuMemMap(base + g, g, 0, h2, 0));
    CUmemAccessDesc acc = {};
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = dev;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU(cuMemSetAccess(base, 2 * g, &acc, 1));
    unsigned long long flags = 0;
    CUmemLocation loc = acc.location;
    CU(cuMemGetAccess(&flags, &loc, base + g));
    printf("access of slot 1: %s\n", flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? "read/write" : "other");
    bad += flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE;

    // A kernel writes both slots at once (one range, two physical allocations).
    const size_t per = g / sizeof(unsigned);  // ints a granule
    unsigned* p0 = (unsigned*)base;
    unsigned* p1 = (unsigned*)(base + g);
    unsigned* p2 = (unsigned*)(base + 2 * g);
    fill<<<256, 256>>>(p0, 2 * per, 100);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<unsigned> h(2 * per);
    CK(cudaMemcpy(h.data(), p0, 2 * g, cudaMemcpyDeviceToHost));
    int errors = check_fill(h, 0, 2 * per, 100);
    char what[160];
    snprintf(what, sizeof what, "kernel wrote 2 granules through the range, copied back: checksum=0x%016llx",
             (unsigned long long)fnv1a(h.data(), 2 * g));
    verdict(what, errors);
    // A host-to-device copy into slot 1 and a device-to-device copy back out.
    std::vector<unsigned> up(per);
    for (size_t i = 0; i < per; ++i) up[i] = (unsigned)(per - i);
    CK(cudaMemcpy(p1, up.data(), g, cudaMemcpyHostToDevice));
    unsigned* scratch;
    CK(cudaMalloc(&scratch, g));
    CK(cudaMemcpy(scratch, p1, g, cudaMemcpyDeviceToDevice));
    std::vector<unsigned> down(per);
    CK(cudaMemcpy(down.data(), scratch, g, cudaMemcpyDeviceToHost));
    errors = 0;
    for (size_t i = 0; i < per; ++i) errors += down[i] != (unsigned)(per - i);
    verdict("upload into slot 1, device-to-device copy out of it", errors);

    // Alias: slot 1 unmapped, the first allocation mapped there as well.
    CU(cuMemUnmap(base + g, g));
    CU(cuMemMap(base + g, g, 0, h1, 0));
    CU(cuMemSetAccess(base + g, g, &acc, 1));
    fill<<<256, 256>>>(p1, per, 5000);  // written at slot 1 ...
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<unsigned> at0(per);
    CK(cudaMemcpy(at0.data(), p0, g, cudaMemcpyDeviceToHost));  // ... read at slot 0
    verdict("aliased: a kernel's write at slot 1 read at slot 0", check_fill(at0, 0, per, 5000));
    copy_plus<<<256, 256>>>(p0, p0, per);  // slot 0 in place: +1 ...
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<unsigned> at1(per);
    CK(cudaMemcpy(at1.data(), p1, g, cudaMemcpyDeviceToHost));  // ... read at slot 1
    verdict("aliased: a kernel's write at slot 0 read at slot 1", check_fill(at1, 0, per, 5001));
    CK(cudaMemcpy(p0, up.data(), g, cudaMemcpyHostToDevice));  // an upload at slot 0 ...
    CK(cudaMemcpy(down.data(), p1, g, cudaMemcpyDeviceToHost));  // ... read at slot 1
    errors = 0;
    for (size_t i = 0; i < per; ++i) errors += down[i] != (unsigned)(per - i);
    verdict("aliased: an upload at slot 0 read at slot 1", errors);

    // The second allocation, mapped again at slot 2, still holds the first kernel's values.
    CU(cuMemMap(base + 2 * g, g, 0, h2, 0));
    CU(cuMemSetAccess(base + 2 * g, g, &acc, 1));
    std::vector<unsigned> at2(per);
    CK(cudaMemcpy(at2.data(), p2, g, cudaMemcpyDeviceToHost));
    errors = 0;
    for (size_t i = 0; i < per; ++i) errors += at2[i] != (unsigned)(per - i);
    verdict("second allocation remapped at slot 2 kept the upload it had at slot 1", errors);
    copy_plus<<<256, 256>>>(p2, p1, per);  // slot 2 -> slot 1 (= the first allocation)
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(at0.data(), p0, g, cudaMemcpyDeviceToHost));
    errors = 0;
    for (size_t i = 0; i < per; ++i) errors += at0[i] != (unsigned)(per - i) + 1u;
    verdict("kernel from slot 2 into slot 1, read at slot 0", errors);

    for (int slot = 0; slot < 3; ++slot) CU(cuMemUnmap(base + slot * g, g));
    CU(cuMemRelease(h1));
    CU(cuMemRelease(h2));
    CU(cuMemAddressFree(base, 4 * g));
    CK(cudaFree(scratch));
    printf("vmm: %s\n", bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}
