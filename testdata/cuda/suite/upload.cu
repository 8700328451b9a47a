// One large upload (256 MiB of pseudo-random bytes, incompressible) and a small download of
// what arrived: the server section of the GPU suite times how fast a client's blob reaches the
// server.   upload [MIB]
#include "check.h"

__global__ void fold(const unsigned long long* d, size_t n, unsigned long long* out) {
    unsigned long long x = 0;
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x ^= d[i] * (i | 1);
    atomicXor(out, x);
}

int main(int argc, char** argv) {
    size_t mib = argc > 1 ? strtoull(argv[1], nullptr, 10) : 256;
    size_t n = mib << 17;  // 8-byte words
    unsigned long long* h = (unsigned long long*)malloc(n * 8);
    unsigned long long s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; ++i) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; h[i] = s; }
    unsigned long long *d, *out, got = 0;
    CK(cudaMalloc(&d, n * 8));
    CK(cudaMalloc(&out, 8));
    CK(cudaMemset(out, 0, 8));
    CK(cudaMemcpy(d, h, n * 8, cudaMemcpyHostToDevice));
    fold<<<264, 256>>>(d, n, out);
    CK(cudaMemcpy(&got, out, 8, cudaMemcpyDeviceToHost));
    unsigned long long want = 0;
    for (size_t i = 0; i < n; ++i) want ^= h[i] * (i | 1);
    char details[64];
    snprintf(details, sizeof details, "mib=%zu", mib);
    return report("upload", details, fnv1a(&got, 8), got == want ? 0 : 1);
}
