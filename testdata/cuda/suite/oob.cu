// Reads outside allocations (issue 21), as some benchmarks do by mistake: a kernel reads 64
// bytes before the start of an allocation and 64 bytes past the end of another, and an
// allocation made after a free reuses memory whose old contents the kernel reads. The in-bounds
// results go to stdout (a recorded run must print what the native run prints); the bytes read
// outside go to a device-to-host copy that a replay must reproduce (never fault) and to stderr
// (they may differ from the native run's: what lies outside an allocation is the allocator's).
#include <string>
#include <vector>
#include "check.h"

__global__ void reach(const int* before, const int* after, int n_after, int* in_bounds, int* outside, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) in_bounds[i] = before[i] + after[i % n_after];
    if (i < 16) {
        outside[i] = before[i - 16];          // 64 bytes before `before`
        outside[16 + i] = after[n_after + i];  // 64 bytes past the end of `after`
    }
}

__global__ void stale(const int* p, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = p[i];
}

int main(int argc, char** argv) {
    // `oob kept`: also read the 64 bytes before a 3 MiB allocation that follow two freed 1 MiB
    // ones. The driver's allocator faults on that read (nothing is mapped there natively);
    // gpuless's arena keeps the freed chunk mapped, so the recorded run reads it, and a replay
    // must map what the recording had mapped. Without the argument the program is valid natively.
    const bool kept = argc > 1 && std::string(argv[1]) == "kept";
    const int n = 4096, n_after = 1000;
    int errors = 0;
    // A freed 1 MiB allocation, then smaller ones: allocators place them in what the first held.
    int* big;
    CK(cudaMalloc(&big, 1 << 20));
    CK(cudaMemset(big, 0x11, 1 << 20));
    CK(cudaDeviceSynchronize());
    CK(cudaFree(big));
    int *before, *after, *in_bounds, *outside, *fresh, *copy;
    CK(cudaMalloc(&after, n_after * sizeof(int)));
    CK(cudaMalloc(&before, n * sizeof(int)));
    CK(cudaMalloc(&in_bounds, n * sizeof(int)));
    CK(cudaMalloc(&outside, 32 * sizeof(int)));
    CK(cudaMalloc(&fresh, n * sizeof(int)));
    CK(cudaMalloc(&copy, n * sizeof(int)));
    // Two 1 MiB allocations and a 3 MiB one after them; both 1 MiB ones are freed and a kernel
    // then reads the 64 bytes before the 3 MiB one (`kept` only).
    int *k1, *k2, *own, *edge;
    CK(cudaMalloc(&k1, 1 << 20));
    CK(cudaMalloc(&k2, 1 << 20));
    CK(cudaMalloc(&own, 3 << 20));
    CK(cudaMalloc(&edge, 16 * sizeof(int)));
    CK(cudaMemset(k2, 0x22, 1 << 20));
    CK(cudaMemset(own, 0, 3 << 20));
    CK(cudaMemset(edge, 0, 16 * sizeof(int)));
    CK(cudaDeviceSynchronize());
    CK(cudaFree(k1));
    CK(cudaFree(k2));
    if (kept) stale<<<1, 16>>>(own - 16, edge, 16);
    CK(cudaGetLastError());
    std::vector<int> h(n);
    for (int i = 0; i < n; ++i) h[i] = i * 7 - 3;
    CK(cudaMemcpy(before, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(after, h.data(), n_after * sizeof(int), cudaMemcpyHostToDevice));
    reach<<<(n + 255) / 256, 256>>>(before, after, n_after, in_bounds, outside, n);
    CK(cudaGetLastError());
    // `fresh` was never written: the kernel reads what the allocator left there.
    stale<<<(n + 255) / 256, 256>>>(fresh, copy, n);
    CK(cudaGetLastError());
    std::vector<int> got(n), out(32), old(n), before_own(16);
    CK(cudaMemcpy(before_own.data(), edge, 16 * sizeof(int), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(got.data(), in_bounds, n * sizeof(int), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(out.data(), outside, 32 * sizeof(int), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(old.data(), copy, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) errors += got[i] != h[i] + h[i % n_after];
    fprintf(stderr, "oob: outside %s, stale %s, before the 3 MiB allocation %s\n",
            std::to_string(fnv1a(out.data(), 128)).c_str(), std::to_string(fnv1a(old.data(), n * sizeof(int))).c_str(),
            std::to_string(fnv1a(before_own.data(), 64)).c_str());
    for (int* p : {before, after, in_bounds, outside, fresh, copy, own, edge}) CK(cudaFree(p));
    return report("oob", "64 bytes either side, a stale allocation", fnv1a(got.data(), n * sizeof(int)), errors);
}
