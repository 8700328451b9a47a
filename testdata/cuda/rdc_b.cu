// Separate compilation (-rdc): device code referenced from rdc_a.cu.
__device__ float rdc_helper(float x, int k) { return x * k + 1.0f; }
__global__ void rdc_other(double* p, double v) { p[threadIdx.x] = v; }
