// Copies whose direction the driver infers from the addresses (cudaMemcpyDefault: the runtime
// passes unified addresses to cuMemcpy / cuMemcpyAsync): host to device, device to host, device
// to device and host to host, synchronous and on a stream, from pageable and pinned memory,
// with kernels between them. A recording must carry the host bytes a copy reads and the
// result a copy brings to the host; a replay must verify every such result; a client must
// send the bytes up and write what comes back.
#include <vector>
#include "check.h"

__global__ void affine(float* p, int n, float a, float b) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = p[i] * a + b;
}

int main() {
    const int n = 1 << 15;
    const size_t bytes = n * sizeof(float);
    const int blocks = (n + 255) / 256;
    int errors = 0;
    uint64_t sum = 1469598103934665603ull;
    std::vector<float> in(n), out(n), back(n), plain(n);
    for (int i = 0; i < n; ++i) in[i] = float(i % 97) * 0.25f;
    float *d, *d2, *pinned;
    CK(cudaMalloc(&d, bytes));
    CK(cudaMalloc(&d2, bytes));
    CK(cudaMallocHost(&pinned, bytes));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));

    // Synchronous: pageable host to device, a kernel, device to host, device to device.
    CK(cudaMemcpy(d, in.data(), bytes, cudaMemcpyDefault));
    affine<<<blocks, 256>>>(d, n, 2.0f, 1.0f);
    CK(cudaGetLastError());
    CK(cudaMemcpy(out.data(), d, bytes, cudaMemcpyDefault));
    for (int i = 0; i < n; ++i) errors += out[i] != in[i] * 2.0f + 1.0f;
    sum = fnv1a(out.data(), bytes, sum);
    CK(cudaMemcpy(d2, d, bytes, cudaMemcpyDefault));

    // On a stream: pinned host to device, a kernel, device to pinned host, then pageable.
    for (int i = 0; i < n; ++i) pinned[i] = float(i % 13);
    CK(cudaMemcpyAsync(d, pinned, bytes, cudaMemcpyDefault, s));
    affine<<<blocks, 256, 0, s>>>(d, n, 3.0f, -1.0f);
    CK(cudaGetLastError());
    CK(cudaMemcpyAsync(pinned, d, bytes, cudaMemcpyDefault, s));
    CK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; ++i) errors += pinned[i] != float(i % 13) * 3.0f - 1.0f;
    sum = fnv1a(pinned, bytes, sum);
    affine<<<blocks, 256, 0, s>>>(d2, n, 0.5f, 0.0f);
    CK(cudaMemcpyAsync(back.data(), d2, bytes, cudaMemcpyDefault, s));
    CK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; ++i) errors += back[i] != (in[i] * 2.0f + 1.0f) * 0.5f;
    sum = fnv1a(back.data(), bytes, sum);

    // Host to host through the driver.
    CK(cudaMemcpy(plain.data(), in.data(), bytes, cudaMemcpyDefault));
    for (int i = 0; i < n; ++i) errors += plain[i] != in[i];
    sum = fnv1a(plain.data(), bytes, sum);

    CK(cudaStreamDestroy(s));
    CK(cudaFreeHost(pinned));
    CK(cudaFree(d2));
    CK(cudaFree(d));
    return report("memcpy_default", "8 copies of unknown direction", sum, errors);
}
