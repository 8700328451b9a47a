// Pointer attributes of device memory (issue 21): every attribute the driver answers about memory
// from cuMemAlloc, cuMemAllocPitch and cuMemAllocAsync, one at a time and all at once, then
// cuPointerSetAttribute(SYNC_MEMOPS) and cuMemGetAddressRange. Values that are addresses or
// handles are printed relative to what the program knows (the allocation, the current context,
// the device's memory pools), so that a recorded run must print exactly what the native run
// prints: one line per (allocation, attribute). Two kinds of answer go to stderr instead, where
// arena memory differs from the driver's on purpose (docs/ARCHITECTURE.md, "The arena"): legacy
// IPC capability (VMM memory has none) and the exact physical mapping (printed to stdout as
// whether it covers the allocation). A kernel and a device-to-host copy at the end give the
// replay a result to verify.
#include <cstring>
#include <cuda.h>
#include "check.h"

#define CU(call)                                                                          \
    do {                                                                                  \
        CUresult r_ = (call);                                                             \
        if (r_ != CUDA_SUCCESS) {                                                         \
            const char* s_ = nullptr;                                                     \
            cuGetErrorName(r_, &s_);                                                      \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, s_);     \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

__global__ void touch(unsigned* p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = p[i] * 3u + (unsigned)i;
}

static const char* names[] = {"", "CONTEXT", "MEMORY_TYPE", "DEVICE_POINTER", "HOST_POINTER", "P2P_TOKENS",
                              "SYNC_MEMOPS", "BUFFER_ID", "IS_MANAGED", "DEVICE_ORDINAL",
                              "IS_LEGACY_CUDA_IPC_CAPABLE", "RANGE_START_ADDR", "RANGE_SIZE", "MAPPED",
                              "ALLOWED_HANDLE_TYPES", "IS_GPU_DIRECT_RDMA_CAPABLE", "ACCESS_FLAGS",
                              "MEMPOOL_HANDLE", "MAPPING_SIZE", "MAPPING_BASE_ADDR", "MEMORY_BLOCK_ID",
                              "IS_HW_DECOMPRESS_CAPABLE"};
static const int kAttrs = 21;

struct Known {
    CUcontext ctx;
    CUmemoryPool default_pool, current_pool;
    unsigned long long ids[64];
    int nids;
};

// An identifier as the n-th distinct one seen (ids differ between processes).
static int id_index(Known& k, unsigned long long v) {
    for (int i = 0; i < k.nids; ++i)
        if (k.ids[i] == v) return i;
    if (k.nids < 64) k.ids[k.nids++] = v;
    return k.nids - 1;
}

// One attribute's value, printed relative to `alloc` (the allocation's address) and `ptr`.
static void show(Known& k, int a, const unsigned char* v, CUdeviceptr alloc, CUdeviceptr ptr, char* out, size_t n) {
    unsigned long long u = 0;
    memcpy(&u, v, sizeof u);
    unsigned w = 0;
    memcpy(&w, v, sizeof w);
    switch (a) {
    case 1: snprintf(out, n, "%s", (CUcontext)u == k.ctx ? "current" : u ? "other" : "null"); break;
    case 3: case 11: case 19: snprintf(out, n, "ptr%+lld", (long long)(u - ptr)); break;
    case 4: snprintf(out, n, "%s", u ? "set" : "null"); break;
    case 5: snprintf(out, n, "tokens"); break;
    case 7: case 20: snprintf(out, n, "%s#%d", u ? "id" : "zero", u ? id_index(k, u) : 0); break;
    case 12: case 18: snprintf(out, n, "%llu", u); break;
    case 17:
        snprintf(out, n, "%s", !u ? "null" : (CUmemoryPool)u == k.default_pool ? "default-pool"
                           : (CUmemoryPool)u == k.current_pool ? "current-pool" : "other-pool");
        break;
    default: snprintf(out, n, "%u", w);
    }
    (void)alloc;
}

// Attributes whose exact answers differ by design (stderr only).
static bool by_design(int a) { return a == 10 || a == 18 || a == 19; }

static void query_all(Known& k, const char* label, CUdeviceptr alloc, size_t len, CUdeviceptr ptr) {
    unsigned long long map_size = 0, map_base = 0;
    for (int a = 1; a <= kAttrs; ++a) {
        unsigned char v[64];
        memset(v, 0, sizeof v);
        CUresult r = cuPointerGetAttribute(v, (CUpointer_attribute)a, ptr);
        char shown[64] = "-";
        if (r == CUDA_SUCCESS) show(k, a, v, alloc, ptr, shown, sizeof shown);
        if (a == 18) memcpy(&map_size, v, 8);
        if (a == 19) memcpy(&map_base, v, 8);
        fprintf(by_design(a) ? stderr : stdout, "%s %s status=%d value=%s\n", label, names[a], (int)r, shown);
    }
    printf("%s mapping covers the allocation: %s\n", label,
           map_base <= alloc && map_base + map_size >= alloc + len ? "yes" : "no");
    // All at once: the same answers (the call fails as a whole if one attribute fails).
    CUpointer_attribute attrs[kAttrs];
    unsigned long long vals[kAttrs][8];
    void* slots[kAttrs];
    int m = 0;
    for (int a = 1; a <= kAttrs; ++a) {
        if (a == 4 || a == 5) continue;  // host pointer (fails on device memory), p2p tokens
        attrs[m] = (CUpointer_attribute)a;
        memset(vals[m], 0, sizeof vals[m]);
        slots[m] = vals[m];
        ++m;
    }
    CUresult r = cuPointerGetAttributes(m, attrs, slots, ptr);
    printf("%s cuPointerGetAttributes status=%d", label, (int)r);
    if (r == CUDA_SUCCESS) {
        for (int i = 0; i < m; ++i) {
            char shown[64];
            show(k, attrs[i], (const unsigned char*)vals[i], alloc, ptr, shown, sizeof shown);
            if (!by_design(attrs[i])) printf(" %s=%s", names[attrs[i]], shown);
        }
    }
    printf("\n");
}

int main() {
    CK(cudaFree(0));
    Known k{};
    CU(cuCtxGetCurrent(&k.ctx));
    CUdevice dev;
    CU(cuCtxGetDevice(&dev));
    CU(cuDeviceGetDefaultMemPool(&k.default_pool, dev));
    CU(cuDeviceGetMemPool(&k.current_pool, dev));
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

    CUdeviceptr a, b, c, p;
    size_t pitch = 0;
    CU(cuMemAlloc(&a, 1 << 20));
    CU(cuMemAlloc(&b, 3000));
    CU(cuMemAllocPitch(&p, &pitch, 1000, 10, 4));
    CU(cuMemAllocAsync(&c, 1 << 20, s));
    CU(cuStreamSynchronize(s));
    printf("pitch %zu\n", pitch);
    query_all(k, "alloc_1MiB", a, 1 << 20, a);
    query_all(k, "alloc_1MiB+4096", a, 1 << 20, a + 4096);
    query_all(k, "alloc_3000", b, 3000, b);
    query_all(k, "alloc_3000+2999", b, 3000, b + 2999);
    query_all(k, "pitch", p, pitch * 10, p);
    query_all(k, "async_1MiB", c, 1 << 20, c);

    // Setting SYNC_MEMOPS: succeeds on cuMemAlloc memory and reads back.
    unsigned one = 1;
    printf("set SYNC_MEMOPS alloc_1MiB status=%d\n", (int)cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, a));
    printf("set SYNC_MEMOPS alloc_3000+100 status=%d\n",
           (int)cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, b + 100));
    printf("set SYNC_MEMOPS async_1MiB status=%d\n", (int)cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, c));
    unsigned zero_v = 0;
    printf("set SYNC_MEMOPS=0 pitch status=%d\n", (int)cuPointerSetAttribute(&zero_v, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p));
    // (The call first, then the print: argument evaluation order is unspecified.)
    const struct { const char* label; CUdeviceptr ptr; } reads[] = {{"alloc_1MiB", a}, {"alloc_3000", b}, {"pitch", p}};
    for (const auto& rd : reads) {
        unsigned got = 7;
        CUresult r = cuPointerGetAttribute(&got, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, rd.ptr);
        printf("get SYNC_MEMOPS %s status=%d value=%u\n", rd.label, (int)r, got);
    }
    // Other settable attributes are refused on device memory (status printed as it is).
    unsigned zero = 0;
    printf("set ACCESS_FLAGS alloc_1MiB status=%d\n", (int)cuPointerSetAttribute(&zero, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, a));

    // Address ranges from inside an allocation.
    CUdeviceptr base = 0;
    size_t size = 0;
    CUresult r = cuMemGetAddressRange(&base, &size, a + 12345);
    printf("range alloc_1MiB+12345 status=%d base=ptr%+lld size=%zu\n", (int)r, (long long)(base - a), size);
    r = cuMemGetAddressRange(&base, &size, b + 2999);
    printf("range alloc_3000+2999 status=%d base=ptr%+lld size=%zu\n", (int)r, (long long)(base - b), size);

    // A freed allocation: no longer known.
    CUdeviceptr f;
    CU(cuMemAlloc(&f, 4096));
    CU(cuMemFree(f));
    unsigned mt = 0;
    printf("freed MEMORY_TYPE status=%d\n", (int)cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, f));

    // With SYNC_MEMOPS set, a synchronous memset and copy on the memory, then a kernel and a
    // device-to-host copy: the result the replay verifies.
    const int n = (1 << 20) / 4;
    CU(cuMemsetD32(a, 5u, n));
    CU(cuMemcpyDtoD(b, a, 3000));
    touch<<<(n + 255) / 256, 256>>>((unsigned*)a, n);
    CK(cudaGetLastError());
    static unsigned host[(1 << 20) / 4];
    CU(cuMemcpyDtoH(host, a, 1 << 20));
    unsigned char hb[3000];
    CU(cuMemcpyDtoH(hb, b, 3000));
    int errors = 0;
    for (int i = 0; i < n; ++i) errors += host[i] != 15u + (unsigned)i;
    for (int i = 0; i < 3000; ++i) errors += hb[i] != 5 * ((i % 4) == 0);
    uint64_t sum = fnv1a(host, sizeof host, fnv1a(hb, sizeof hb));
    CU(cuMemFreeAsync(c, s));
    CU(cuStreamSynchronize(s));
    return report("ptr_attrs", "21 attributes x 6 pointers", sum, errors);
}
