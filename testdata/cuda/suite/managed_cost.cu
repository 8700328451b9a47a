// What managed memory costs a client (issue 35's cost probe, run on its own, not in the
// compatibility list): `managed_cost [MiB] [STEPS]` (default 1024 MiB, 5 steps). A
// cudaMallocManaged array of MiB mebibytes is initialized by a kernel (never touched by the host
// first) to i-dependent values; then each step a kernel adds step+1 to a contiguous 1% slice at
// a step-dependent offset, cudaDeviceSynchronize, and the host reads and checks 16 values inside
// that slice and writes one value in it (which later kernels and checks must see). At the end
// the host reads every 4096th value, checks each against the CPU model and prints their
// checksum. A client that moves the whole array at every synchronization pays for MiB each
// step; one that moves only what is touched pays for the slice. Output is deterministic (no
// timings); the last line is "managed_cost: ok". Shared cudart. Exits 1 if any value differs.
#include <cstdlib>
#include <vector>

#include "check.h"

static __host__ __device__ unsigned init_value(size_t i) { return (unsigned)(i * 2654435761ull) ^ 0x9e3779b9u; }

__global__ void init(unsigned* a, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        a[i] = init_value(i);
}
__global__ void add_slice(unsigned* a, size_t off, size_t len, unsigned v) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < len; i += (size_t)gridDim.x * blockDim.x)
        a[off + i] += v;
}

struct Step {
    size_t off, len, written;
    unsigned add, value;
};

// The value at i after `done` steps, from the CPU model.
static unsigned model(size_t i, const std::vector<Step>& steps, size_t done) {
    unsigned v = init_value(i);
    for (size_t s = 0; s < done; ++s) {
        const Step& st = steps[s];
        if (i >= st.off && i < st.off + st.len) v += st.add;
        if (i == st.written) v = st.value;
    }
    return v;
}

int main(int argc, char** argv) {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    long mib = argc > 1 ? atol(argv[1]) : 1024;
    long nsteps = argc > 2 ? atol(argv[2]) : 5;
    if (mib < 1 || nsteps < 0 || nsteps > 10000) {
        fprintf(stderr, "usage: managed_cost [MiB >= 1] [STEPS 0..10000]\n");
        return 2;
    }
    const size_t n = (size_t)mib * 1024 * 1024 / sizeof(unsigned);
    const size_t len = n / 100 > 16 ? n / 100 : 16;
    printf("managed_cost: %ld MiB (%zu ints), %ld steps, slice %zu ints (1%%)\n", mib, n, nsteps, len);
    int bad = 0;

    unsigned* a;
    CK(cudaMallocManaged(&a, n * sizeof(unsigned)));
    init<<<1024, 256>>>(a, n);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());

    std::vector<Step> steps;
    for (long s = 0; s < nsteps; ++s) {
        Step st;
        st.len = len;
        st.off = (size_t)((s * 37) % 99) * (n / 100);  // distinct slices for 99 steps, then again
        if (st.off + st.len > n) st.off = n - st.len;
        st.add = (unsigned)s + 1;
        st.written = st.off + st.len / 2 + 1;
        st.value = 1000000u + (unsigned)s;
        add_slice<<<1024, 256>>>(a, st.off, st.len, st.add);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        steps.push_back(st);
        // 16 values inside the slice, read after this step's kernel (before the host's write).
        int errors = 0;
        uint64_t sum = 1469598103934665603ull;
        std::vector<Step> before_write(steps);
        before_write.back().written = (size_t)-1;  // this step's host write is not done yet
        for (int k = 0; k < 16; ++k) {
            size_t i = st.off + (size_t)k * (st.len / 16) + (size_t)k;
            if (i >= st.off + st.len) i = st.off + st.len - 1;
            unsigned got = a[i];
            errors += got != model(i, before_write, before_write.size());
            sum = fnv1a(&got, sizeof got, sum);
        }
        a[st.written] = st.value;
        printf("step %ld: slice [%zu, %zu) +%u, 16 values checksum=0x%016llx %s, host wrote index %zu\n", s,
               st.off, st.off + st.len, st.add, (unsigned long long)sum, errors ? "WRONG" : "ok", st.written);
        bad += errors != 0;
    }

    // A sparse sample of the whole array, read by the host.
    int errors = 0;
    uint64_t sum = 1469598103934665603ull;
    size_t samples = 0;
    for (size_t i = 0; i < n; i += 4096, ++samples) {
        unsigned got = a[i];
        errors += got != model(i, steps, steps.size());
        sum = fnv1a(&got, sizeof got, sum);
    }
    // The host's writes, which no sample may have hit, read back too.
    for (const Step& st : steps) errors += a[st.written] != model(st.written, steps, steps.size());
    printf("sample of %zu values (every 4096th) checksum=0x%016llx %s\n", samples, (unsigned long long)sum,
           errors ? "WRONG" : "ok");
    bad += errors != 0;
    CK(cudaFree(a));
    printf("managed_cost: %s\n", bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}
