// Separate compilation (-rdc): the kernel calls a device function defined in rdc_b.cu.
#include <cstdio>
#include <cuda_runtime.h>
extern __device__ float rdc_helper(float x, int k);
__global__ void rdc_kernel(float* out, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = rdc_helper((float)i, k);
}
int main() {
    float* d;
    if (cudaMalloc(&d, 1024 * sizeof(float)) != cudaSuccess) return 1;
    rdc_kernel<<<4, 256>>>(d, 1024, 3);
    float h[4];
    cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
    printf("rdc %.1f %.1f\n", h[1], h[3]);
    return 0;
}
