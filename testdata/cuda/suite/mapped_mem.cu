// Host memory the device reads and writes in place (issue 35): (a) cudaHostAlloc with
// cudaHostAllocMapped, used by kernels through cudaHostGetDevicePointer, the host writing
// between two launches (cudaStreamSynchronize between them) and the second launch seeing those
// writes; (b) the same with cudaHostRegister(cudaHostRegisterMapped) of a page-aligned buffer
// (posix_memalign) and of one that starts 80 bytes into a page; (c) a kernel taking a struct by
// value that holds two pointers to mapped memory and a count, reading through one and writing
// through the other; (d) cudaMallocHost memory used by a kernel through its host pointer
// (unified addressing, no cudaHostGetDevicePointer); (e) 5 rounds of: the host writes inputs
// into mapped memory, a kernel writes results and then a flag (the round's number) there, the
// host reads flag and results after cudaDeviceSynchronize. A client must carry the host's
// writes to the device before each launch and the device's writes back at each
// synchronization. Values are checked against a CPU model; no pointer is printed. Shared
// cudart. Exits 1 if any value differs.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.h"

static int bad = 0;
static void verdict(const char* what, int errors) {
    printf("%s: %s\n", what, errors ? "WRONG" : "ok");
    if (errors) fprintf(stderr, "%s: %d wrong values\n", what, errors);
    bad += errors != 0;
}

__global__ void affine(int* p, int n, int k, int a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = p[i] * k + a;
}

struct Pair {
    const int* in;
    int* out;
    int n;
};
__global__ void through_pair(Pair pr, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < pr.n) pr.out[i] = pr.in[pr.n - 1 - i] * k + i;
}

struct Results {
    int flag;          // the round, written last
    int pad[3];
    long long sum;     // sum of the inputs
    int mx;            // their maximum
    int out[256];      // in[i] * round
};
__global__ void round_kernel(const int* in, int n, Results* r, int round) {
    __shared__ long long s_sum;
    __shared__ int s_max;
    if (threadIdx.x == 0) {
        s_sum = 0;
        s_max = -2147483647 - 1;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        atomicAdd((unsigned long long*)&s_sum, (unsigned long long)(long long)in[i]);
        atomicMax(&s_max, in[i]);
        r->out[i] = in[i] * round;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        r->sum = s_sum;
        r->mx = s_max;
        __threadfence_system();
        *(volatile int*)&r->flag = round;
    }
}

// Two launches on `s` with host writes between them, through device pointer `d` of host `h`.
static void two_launches(const char* label, int* h, int* d, int n, cudaStream_t s) {
    for (int i = 0; i < n; ++i) h[i] = 3 * i - 1000;
    affine<<<(n + 255) / 256, 256, 0, s>>>(d, n, 2, 1);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(s));
    int errors = 0;
    for (int i = 0; i < n; ++i) errors += h[i] != (3 * i - 1000) * 2 + 1;
    char what[160];
    snprintf(what, sizeof what, "%s: first launch's writes seen by the host", label);
    verdict(what, errors);
    for (int i = 0; i < n; i += 5) h[i] = 77 * i;  // the host writes between the launches
    affine<<<(n + 255) / 256, 256, 0, s>>>(d, n, -1, 4);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(s));
    errors = 0;
    for (int i = 0; i < n; ++i) errors += h[i] != -(i % 5 == 0 ? 77 * i : (3 * i - 1000) * 2 + 1) + 4;
    snprintf(what, sizeof what, "%s: second launch saw the host's writes; result checksum=0x%016llx", label,
             (unsigned long long)fnv1a(h, n * sizeof(int)));
    verdict(what, errors);
}

int main() {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    int dev = 0;
    CK(cudaSetDevice(dev));
    int can_map = 0, uva = 0;
    CK(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, dev));
    CK(cudaDeviceGetAttribute(&uva, cudaDevAttrUnifiedAddressing, dev));
    printf("can map host memory: %s, unified addressing: %s\n", can_map ? "yes" : "no", uva ? "yes" : "no");
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const int n = 100000;
    const size_t bytes = n * sizeof(int);

    // (a) cudaHostAlloc, mapped.
    int *ha, *da;
    CK(cudaHostAlloc((void**)&ha, bytes, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer((void**)&da, ha, 0));
    two_launches("(a) cudaHostAlloc(Mapped)", ha, da, n, s);
    unsigned flags = 0;
    CK(cudaHostGetFlags(&flags, ha));
    printf("(a) cudaHostGetFlags: mapped %s\n", (flags & cudaHostAllocMapped) ? "yes" : "no");
    bad += !(flags & cudaHostAllocMapped);

    // (b) cudaHostRegister, mapped: page-aligned, then 80 bytes into a page.
    const size_t padded = (bytes + 4096 + 4095) / 4096 * 4096;
    void* raw1 = nullptr;
    void* raw2 = nullptr;
    if (posix_memalign(&raw1, 4096, padded) || posix_memalign(&raw2, 4096, padded)) {
        fprintf(stderr, "posix_memalign failed\n");
        return 1;
    }
    int* hb = (int*)raw1;
    CK(cudaHostRegister(hb, bytes, cudaHostRegisterMapped));
    int* db;
    CK(cudaHostGetDevicePointer((void**)&db, hb, 0));
    two_launches("(b) cudaHostRegister(Mapped), page-aligned", hb, db, n, s);
    int* hu = (int*)((char*)raw2 + 80);
    printf("(b) unaligned buffer: %d bytes into its page\n", (int)((uintptr_t)hu % 4096));
    CK(cudaHostRegister(hu, bytes, cudaHostRegisterMapped));
    int* du;
    CK(cudaHostGetDevicePointer((void**)&du, hu, 0));
    two_launches("(b) cudaHostRegister(Mapped), 80 bytes into a page", hu, du, n, s);
    // The bytes around the unaligned registration (same pages, not registered) keep what the
    // host last wrote there across a launch and a synchronization.
    {
        unsigned char* before = (unsigned char*)raw2;          // 80 bytes before hu
        unsigned char* after = (unsigned char*)(hu + n);       // up to the end of the last page
        size_t after_len = (size_t)(((uintptr_t)after + 4095) / 4096 * 4096 - (uintptr_t)after);
        memset(before, 0xab, 80);
        memset(after, 0xcd, after_len);
        affine<<<(n + 255) / 256, 256, 0, s>>>(du, n, 1, 1);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(s));
        memset(before, 0x5c, 80);  // written by the host after the launch
        affine<<<(n + 255) / 256, 256, 0, s>>>(du, n, 1, 1);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(s));
        int errors = 0;
        for (int i = 0; i < 80; ++i) errors += before[i] != 0x5c;
        for (size_t i = 0; i < after_len; ++i) errors += after[i] != 0xcd;
        for (int i = 0; i < n; ++i) errors += hu[i] != -(i % 5 == 0 ? 77 * i : (3 * i - 1000) * 2 + 1) + 4 + 2;
        verdict("(b) bytes beside the unaligned registration kept the host's values; kernel +2 seen", errors);
    }

    // (c) A struct by value with two mapped pointers and a count: reads (a)'s memory, writes (b)'s.
    {
        for (int i = 0; i < n; ++i) ha[i] = i * 11 + 3;
        memset(hb, 0, bytes);
        Pair pr{da, db, n};
        through_pair<<<(n + 255) / 256, 256, 0, s>>>(pr, 3);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(s));
        int errors = 0;
        for (int i = 0; i < n; ++i) errors += hb[i] != ((n - 1 - i) * 11 + 3) * 3 + i;
        for (int i = 0; i < n; ++i) errors += ha[i] != i * 11 + 3;  // the input is unchanged
        char what[128];
        snprintf(what, sizeof what, "(c) struct {in, out, n} by value: checksum=0x%016llx",
                 (unsigned long long)fnv1a(hb, bytes));
        verdict(what, errors);
        // Again with the roles swapped and the unaligned buffer as output.
        for (int i = 0; i < n; ++i) hb[i] = -i;
        Pair pr2{db, du, n};
        through_pair<<<(n + 255) / 256, 256, 0, s>>>(pr2, -2);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(s));
        errors = 0;
        for (int i = 0; i < n; ++i) errors += hu[i] != (-(n - 1 - i)) * -2 + i;
        verdict("(c) struct by value, registered input, unaligned registered output", errors);
    }
    CK(cudaHostUnregister(hu));
    CK(cudaHostUnregister(hb));
    free(raw2);
    free(raw1);

    // (d) cudaMallocHost memory through its host pointer.
    {
        int* hp;
        CK(cudaMallocHost((void**)&hp, bytes));
        for (int i = 0; i < n; ++i) hp[i] = n - i;
        affine<<<(n + 255) / 256, 256, 0, s>>>(hp, n, 5, -7);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(s));
        int errors = 0;
        for (int i = 0; i < n; ++i) errors += hp[i] != (n - i) * 5 - 7;
        for (int i = 1; i < n; i += 2) hp[i] = 0;
        affine<<<(n + 255) / 256, 256, 0, s>>>(hp, n, 1, 1);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(s));
        for (int i = 0; i < n; ++i) errors += hp[i] != (i % 2 ? 0 : (n - i) * 5 - 7) + 1;
        cudaPointerAttributes a;
        memset(&a, 0, sizeof a);
        CK(cudaPointerGetAttributes(&a, hp));
        printf("(d) cudaMallocHost pointer: type %s, devicePointer %s\n",
               a.type == cudaMemoryTypeHost ? "host" : "NOT host",
               a.devicePointer == (void*)hp ? "== the host pointer" : "!= the host pointer");
        bad += a.type != cudaMemoryTypeHost || a.devicePointer != (void*)hp;
        verdict("(d) cudaMallocHost memory used by two kernels through its host pointer", errors);
        CK(cudaFreeHost(hp));
    }

    // (e) Five rounds of inputs and results in mapped memory, a flag written last.
    {
        const int m = 256;
        int *hin, *din;
        Results *hr, *dr;
        CK(cudaHostAlloc((void**)&hin, m * sizeof(int), cudaHostAllocMapped));
        CK(cudaHostAlloc((void**)&hr, sizeof(Results), cudaHostAllocMapped));
        CK(cudaHostGetDevicePointer((void**)&din, hin, 0));
        CK(cudaHostGetDevicePointer((void**)&dr, hr, 0));
        memset(hr, 0, sizeof(Results));
        for (int round = 1; round <= 5; ++round) {
            long long want_sum = 0;
            int want_max = -2147483647 - 1;
            for (int i = 0; i < m; ++i) {
                hin[i] = (i * 37 + round * 101) % 1009 - 500;
                want_sum += hin[i];
                want_max = hin[i] > want_max ? hin[i] : want_max;
            }
            round_kernel<<<1, 128>>>(din, m, dr, round);
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            int flag = *(volatile int*)&hr->flag;
            int errors = flag != round || hr->sum != want_sum || hr->mx != want_max;
            for (int i = 0; i < m; ++i) errors += hr->out[i] != hin[i] * round;
            printf("(e) round %d: flag %d, sum %lld, max %d: %s\n", round, flag, hr->sum, hr->mx,
                   errors ? "WRONG" : "ok");
            bad += errors != 0;
        }
        CK(cudaFreeHost(hr));
        CK(cudaFreeHost(hin));
    }

    CK(cudaFreeHost(ha));
    CK(cudaStreamDestroy(s));
    printf("mapped_mem: %s\n", bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}
