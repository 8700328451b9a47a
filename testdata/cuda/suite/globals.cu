// __constant__ and __device__ globals: cudaMemcpyToSymbol (whole and at an offset, sync and
// async), cudaMemcpyFromSymbol, cudaGetSymbolAddress / cudaGetSymbolSize, a global initialized
// in the image, and a device pointer stored in a __device__ global that a kernel writes through.
// Every value is a small multiple of 1/8, so all arithmetic is exact.
#include <cmath>
#include <vector>
#include "check.h"

__constant__ float c_coef[16];
__constant__ int c_params[4];             // written at an offset: [1] = add, [2] = n
__device__ int g_counter;
__device__ float g_table[256];
__device__ float* g_out;                  // set with cudaMemcpyToSymbol(&pointer)
__device__ int g_init[4] = {1, 2, 3, 4};  // from the image

__global__ void fill_tail(int from) {  // writes the second half of g_table
    int i = from + blockIdx.x * blockDim.x + threadIdx.x;
    if (i < 256) g_table[i] = -0.25f * (float)i;
}

__global__ void apply(const float* in) {
    int n = c_params[2];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    g_out[i] = in[i] * c_coef[i % 16] + g_table[i % 256] + (float)(g_init[i % 4] + c_params[1]);
    atomicAdd(&g_counter, 1);
}

__global__ void bump_init() {  // device-side write to an initialized global
    if (threadIdx.x < 4) g_init[threadIdx.x] *= 10;
}

int main() {
    const int n = 10000, block = 128;
    int errors = 0;
    std::vector<float> in(n), coef(16), table(256), out(n);
    for (int i = 0; i < n; ++i) in[i] = 0.5f * (float)(i % 13);
    for (int k = 0; k < 16; ++k) coef[k] = 0.25f * (float)(k - 8);
    for (int i = 0; i < 256; ++i) table[i] = i < 128 ? 0.125f * (float)i : -0.25f * (float)i;

    float *d_in, *d_out;
    CK(cudaMalloc(&d_in, n * sizeof(float)));
    CK(cudaMalloc(&d_out, n * sizeof(float)));
    CK(cudaMemcpy(d_in, in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemset(d_out, 0, n * sizeof(float)));

    CK(cudaMemcpyToSymbol(c_coef, coef.data(), 16 * sizeof(float)));
    int params[2] = {3, n};  // c_params[1], c_params[2]
    CK(cudaMemcpyToSymbol(c_params, params, sizeof(params), sizeof(int)));
    float* p_table = nullptr;
    size_t table_size = 0;
    CK(cudaGetSymbolAddress((void**)&p_table, g_table));
    CK(cudaGetSymbolSize(&table_size, g_table));
    errors += table_size != 256 * sizeof(float);
    CK(cudaMemcpy(p_table, table.data(), 128 * sizeof(float), cudaMemcpyHostToDevice));
    fill_tail<<<1, 128>>>(128);
    CK(cudaMemcpyToSymbol(g_out, &d_out, sizeof(d_out)));

    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    int zero = 0;
    CK(cudaMemcpyToSymbolAsync(g_counter, &zero, sizeof(int), 0, cudaMemcpyHostToDevice, s));
    CK(cudaStreamSynchronize(s));
    apply<<<(n + block - 1) / block, block>>>(d_in);
    CK(cudaGetLastError());
    CK(cudaMemcpy(out.data(), d_out, n * sizeof(float), cudaMemcpyDeviceToHost));

    int counter = -1;
    CK(cudaMemcpyFromSymbol(&counter, g_counter, sizeof(int)));
    errors += counter != n;
    std::vector<float> table_back(256);
    CK(cudaMemcpyFromSymbol(table_back.data(), g_table, 256 * sizeof(float)));
    for (int i = 0; i < 256; ++i) errors += table_back[i] != table[i];
    for (int i = 0; i < n; ++i) {
        float want = in[i] * coef[i % 16] + table[i % 256] + (float)((i % 4 + 1) + 3);
        if (fabsf(out[i] - want) > 1e-4f) {
            if (errors < 5) fprintf(stderr, "  out[%d] = %g, want %g\n", i, out[i], want);
            ++errors;
        }
    }
    bump_init<<<1, 32, 0, s>>>();
    int init_back[4] = {0, 0, 0, 0};
    CK(cudaMemcpyFromSymbolAsync(init_back, g_init, sizeof(init_back), 0, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    for (int k = 0; k < 4; ++k) errors += init_back[k] != (k + 1) * 10;
    int const_back[4] = {-1, -1, -1, -1};
    CK(cudaMemcpyFromSymbol(&const_back[1], c_params, 2 * sizeof(int), sizeof(int)));
    errors += const_back[1] != 3 || const_back[2] != n;

    uint64_t sum = fnv1a(out.data(), n * sizeof(float));
    sum = fnv1a(table_back.data(), 256 * sizeof(float), sum);
    sum = fnv1a(init_back, sizeof(init_back), sum);
    sum = fnv1a(&counter, sizeof(counter), sum);
    CK(cudaStreamDestroy(s));
    CK(cudaFree(d_in));
    CK(cudaFree(d_out));
    return report("globals", "n=10000", sum, errors);
}
