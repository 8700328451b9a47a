// A small synchronizing segment, repeated: per iteration a 4 KB upload, 64 launches of a tiny
// kernel and one 4 KB synchronous download — what a remote client sends between two
// synchronization points. Used by the server section of the GPU suite to time what the network
// adds to a segment (`gpuless replay --remote --iterations N` against local hot replay).
//   segment [ITERATIONS]
#include "check.h"

__global__ void step(float* b, const float* in, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) b[i] = (k == 0 ? in[i] : b[i]) * 1.0001f + 1.0f;
}

int main(int argc, char** argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 20;
    const int n = 1024;  // 4 KB of floats
    float *in, *b;
    CK(cudaMalloc(&in, n * sizeof(float)));
    CK(cudaMalloc(&b, n * sizeof(float)));
    float host[n], out[n];
    for (int i = 0; i < n; ++i) host[i] = (float)(i % 97);
    uint64_t sum = 0;
    for (int it = 0; it < iters; ++it) {
        CK(cudaMemcpy(in, host, sizeof host, cudaMemcpyHostToDevice));
        for (int k = 0; k < 64; ++k) step<<<(n + 255) / 256, 256>>>(b, in, n, k);
        CK(cudaMemcpy(out, b, sizeof out, cudaMemcpyDeviceToHost));
        sum = fnv1a(out, sizeof out, sum);
    }
    char details[64];
    snprintf(details, sizeof details, "iterations=%d", iters);
    return report("segment", details, sum, 0);
}
