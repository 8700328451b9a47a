// A complete program: vector add with the runtime API (static cudart by default).
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : (1 << 20);
    size_t bytes = (size_t)n * sizeof(float);
    float *ha = (float*)malloc(bytes), *hb = (float*)malloc(bytes), *hc = (float*)malloc(bytes);
    for (int i = 0; i < n; ++i) { ha[i] = (float)i; hb[i] = 2.0f * i; }
    float *da, *db, *dc;
    if (cudaMalloc(&da, bytes) != cudaSuccess) { fprintf(stderr, "no GPU\n"); return 1; }
    cudaMalloc(&db, bytes);
    cudaMalloc(&dc, bytes);
    cudaMemcpy(da, ha, bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(db, hb, bytes, cudaMemcpyHostToDevice);
    vector_add<<<(n + 255) / 256, 256>>>(da, db, dc, n);
    cudaMemcpy(hc, dc, bytes, cudaMemcpyDeviceToHost);
    double sum = 0;
    for (int i = 0; i < n; ++i) sum += hc[i];
    printf("vecadd n=%d sum=%.1f\n", n, sum);
    cudaFree(da); cudaFree(db); cudaFree(dc);
    free(ha); free(hb); free(hc);
    return 0;
}
