// Device code for driver_api.cu, compiled to a cubin FILE (`nvcc -cubin -arch=sm_90`) that the
// program loads at run time with cuModuleLoad and with cuLibraryLoadFromFile.
__device__ int g_scale;        // set from the host through cuModuleGetGlobal / cuLibraryGetGlobal
__constant__ int c_offset = 7; // initialized in the image

extern "C" __global__ void axpb(const int* x, int* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * g_scale + c_offset;
}

// Launched with cuLaunchKernelEx and a cluster-dimension attribute: records the block's rank
// in its cluster and the cluster size, so the attribute's effect is checked.
extern "C" __global__ void cluster_ids(int* out, int n) {
    unsigned rank, size;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(size));
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (int)(blockIdx.x * 1000 + threadIdx.x + 1000000 * rank + 100000000 * size);
}
