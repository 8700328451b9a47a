// Stream-ordered allocation (issue 35): cudaMallocAsync/cudaFreeAsync from the device's default
// pool (a kernel writes, a copy reads back, freed in stream order; memory freed on one stream
// reused on another after an event); a pool of its own (cudaMemPoolCreate for device 0) with a
// release threshold (cudaMemPoolSetAttribute, read back), allocations from it with
// cudaMallocFromPoolAsync and, after cudaDeviceSetMemPool, with plain cudaMallocAsync; its used
// and reserved memory (cudaMemPoolGetAttribute) printed only as zero/nonzero while allocations
// live, after they are freed (the threshold keeps the memory reserved) and after
// cudaMemPoolTrimTo(0) (nothing reserved); then the default pool restored and the pool
// destroyed. Results are checked against a CPU model. Shared cudart. Exits 1 if any value
// differs.
#include <cstring>
#include <vector>

#include "check.h"

static int bad = 0;
static void verdict(const char* what, int errors) {
    printf("%s: %s\n", what, errors ? "WRONG" : "ok");
    if (errors) fprintf(stderr, "%s: %d wrong values\n", what, errors);
    bad += errors != 0;
}
static void expect_str(const char* what, const char* got, const char* want) {
    bool ok = strcmp(got, want) == 0;
    printf("%s: %s (expected %s) %s\n", what, got, want, ok ? "ok" : "WRONG");
    bad += !ok;
}
static const char* zero_or_not(cudaMemPool_t pool, cudaMemPoolAttr attr) {
    uint64_t v = 12345;
    CK(cudaMemPoolGetAttribute(pool, attr, &v));
    return v == 0 ? "zero" : "nonzero";
}

__global__ void fill(int* p, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = i * k + 1;
}
__global__ void combine(const int* a, const int* b, int* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] - 2 * b[i];
}

int main() {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    int dev = 0;
    CK(cudaSetDevice(dev));
    int supported = 0;
    CK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, dev));
    printf("memory pools supported: %s\n", supported ? "yes" : "no");
    if (!supported) return 1;
    cudaStream_t s1, s2;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    const int n = 1 << 20;
    const size_t bytes = n * sizeof(int);
    const int grid = (n + 255) / 256;
    std::vector<int> h(n);

    // 1. The default pool.
    cudaMemPool_t def;
    CK(cudaDeviceGetDefaultMemPool(&def, dev));
    cudaMemPool_t cur;
    CK(cudaDeviceGetMemPool(&cur, dev));
    printf("1. current pool is the default pool: %s\n", cur == def ? "yes" : "no");
    bad += cur != def;
    {
        int *a, *b, *c;
        CK(cudaMallocAsync(&a, bytes, s1));
        CK(cudaMallocAsync(&b, bytes, s1));
        CK(cudaMallocAsync(&c, bytes, s1));
        fill<<<grid, 256, 0, s1>>>(a, n, 5);
        fill<<<grid, 256, 0, s1>>>(b, n, 2);
        combine<<<grid, 256, 0, s1>>>(a, b, c, n);
        CK(cudaGetLastError());
        CK(cudaMemcpyAsync(h.data(), c, bytes, cudaMemcpyDeviceToHost, s1));
        CK(cudaStreamSynchronize(s1));
        expect_str("1. default pool used memory while 3 allocations live",
                   zero_or_not(def, cudaMemPoolAttrUsedMemCurrent), "nonzero");
        CK(cudaFreeAsync(a, s1));
        CK(cudaFreeAsync(b, s1));
        CK(cudaFreeAsync(c, s1));
        CK(cudaStreamSynchronize(s1));
        int errors = 0;
        for (int i = 0; i < n; ++i) errors += h[i] != (i * 5 + 1) - 2 * (i * 2 + 1);
        char what[128];
        snprintf(what, sizeof what, "1. cudaMallocAsync x3, kernels, copy, cudaFreeAsync: checksum=0x%016llx",
                 (unsigned long long)fnv1a(h.data(), bytes));
        verdict(what, errors);

        // Freed on s1, then allocated on s2 after s2 waits for s1's event.
        int* d;
        CK(cudaMallocAsync(&d, bytes, s1));
        fill<<<grid, 256, 0, s1>>>(d, n, 9);
        CK(cudaGetLastError());
        CK(cudaFreeAsync(d, s1));
        cudaEvent_t e;
        CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        CK(cudaEventRecord(e, s1));
        CK(cudaStreamWaitEvent(s2, e, 0));
        int* d2;
        CK(cudaMallocAsync(&d2, bytes, s2));
        fill<<<grid, 256, 0, s2>>>(d2, n, -3);
        CK(cudaGetLastError());
        CK(cudaMemcpyAsync(h.data(), d2, bytes, cudaMemcpyDeviceToHost, s2));
        CK(cudaFreeAsync(d2, s2));
        CK(cudaStreamSynchronize(s2));
        errors = 0;
        for (int i = 0; i < n; ++i) errors += h[i] != i * -3 + 1;
        verdict("1. freed on one stream, allocated on another after an event: kernel and copy", errors);
        CK(cudaEventDestroy(e));
    }

    // 2. A pool of its own.
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = dev;
    cudaMemPool_t pool;
    CK(cudaMemPoolCreate(&pool, &props));
    uint64_t threshold = 256ull << 20;
    CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    uint64_t back = 0;
    CK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &back));
    printf("2. release threshold read back: %llu MiB\n", (unsigned long long)(back >> 20));
    bad += back != threshold;
    expect_str("2. new pool reserved memory before any allocation", zero_or_not(pool, cudaMemPoolAttrReservedMemCurrent),
               "zero");
    {
        int *a, *b;
        CK(cudaMallocFromPoolAsync(&a, bytes, pool, s1));
        CK(cudaMallocFromPoolAsync(&b, bytes, pool, s1));
        fill<<<grid, 256, 0, s1>>>(a, n, 7);
        fill<<<grid, 256, 0, s1>>>(b, n, 1);
        combine<<<grid, 256, 0, s1>>>(a, b, a, n);
        CK(cudaGetLastError());
        CK(cudaMemcpyAsync(h.data(), a, bytes, cudaMemcpyDeviceToHost, s1));
        CK(cudaStreamSynchronize(s1));
        int errors = 0;
        for (int i = 0; i < n; ++i) errors += h[i] != (i * 7 + 1) - 2 * (i + 1);
        verdict("2. cudaMallocFromPoolAsync x2, kernels, copy", errors);
        expect_str("2. pool used memory while allocations live", zero_or_not(pool, cudaMemPoolAttrUsedMemCurrent),
                   "nonzero");
        expect_str("2. pool reserved memory while allocations live",
                   zero_or_not(pool, cudaMemPoolAttrReservedMemCurrent), "nonzero");
        cudaPointerAttributes pa = {};
        CK(cudaPointerGetAttributes(&pa, a));
        printf("2. pool allocation's pointer type: %s\n", pa.type == cudaMemoryTypeDevice ? "device" : "other");
        bad += pa.type != cudaMemoryTypeDevice;
        CK(cudaFreeAsync(a, s1));
        CK(cudaFreeAsync(b, s1));
        CK(cudaStreamSynchronize(s1));
        expect_str("2. pool used memory after cudaFreeAsync and a synchronization",
                   zero_or_not(pool, cudaMemPoolAttrUsedMemCurrent), "zero");
        expect_str("2. pool reserved memory then (kept under the release threshold)",
                   zero_or_not(pool, cudaMemPoolAttrReservedMemCurrent), "nonzero");
    }

    // 3. The pool as the device's current pool: plain cudaMallocAsync takes from it.
    CK(cudaDeviceSetMemPool(dev, pool));
    CK(cudaDeviceGetMemPool(&cur, dev));
    printf("3. current pool is the created pool: %s\n", cur == pool ? "yes" : "no");
    bad += cur != pool;
    {
        int* a;
        CK(cudaMallocAsync(&a, bytes, s2));
        fill<<<grid, 256, 0, s2>>>(a, n, 11);
        CK(cudaGetLastError());
        CK(cudaMemcpyAsync(h.data(), a, bytes, cudaMemcpyDeviceToHost, s2));
        CK(cudaStreamSynchronize(s2));
        expect_str("3. pool used memory while the cudaMallocAsync allocation lives",
                   zero_or_not(pool, cudaMemPoolAttrUsedMemCurrent), "nonzero");
        CK(cudaFreeAsync(a, s2));
        CK(cudaStreamSynchronize(s2));
        int errors = 0;
        for (int i = 0; i < n; ++i) errors += h[i] != i * 11 + 1;
        verdict("3. cudaMallocAsync from the current (created) pool, kernel, copy", errors);
    }
    CK(cudaMemPoolTrimTo(pool, 0));
    expect_str("3. pool reserved memory after cudaMemPoolTrimTo(0)", zero_or_not(pool, cudaMemPoolAttrReservedMemCurrent),
               "zero");
    uint64_t zero = 0;
    CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));  // high-water marks reset
    CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero));
    expect_str("3. pool reserved-memory high-water mark after a reset", zero_or_not(pool, cudaMemPoolAttrReservedMemHigh),
               "zero");

    // 4. Back to the default pool; the created pool destroyed; one more allocation.
    CK(cudaDeviceSetMemPool(dev, def));
    CK(cudaMemPoolDestroy(pool));
    {
        int* a;
        CK(cudaMallocAsync(&a, bytes, s1));
        fill<<<grid, 256, 0, s1>>>(a, n, 13);
        CK(cudaGetLastError());
        CK(cudaMemcpyAsync(h.data(), a, bytes, cudaMemcpyDeviceToHost, s1));
        CK(cudaFreeAsync(a, s1));
        CK(cudaStreamSynchronize(s1));
        int errors = 0;
        for (int i = 0; i < n; ++i) errors += h[i] != i * 13 + 1;
        verdict("4. default pool again after the created pool was destroyed", errors);
    }
    CK(cudaMemPoolTrimTo(def, 0));
    CK(cudaStreamDestroy(s1));
    CK(cudaStreamDestroy(s2));
    printf("pools: %s\n", bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}
