// A program's bad arguments get the driver's error and the session goes on (issue 34): launches
// with too many threads per block, a zero or too large grid, too much shared memory (with and
// without the opt-in), a null function; cudaMemcpy with a wrong or invalid kind, out of bounds
// of its allocation; cudaFree of a host pointer, of an address inside an allocation, twice;
// cudaFreeHost of pageable memory; then a good kernel whose output is checked. One line per
// check, `NAME: cudaError name`, and whether the error stuck (cudaGetLastError after it).
// Shared cudart. Exits 1 if the good kernel's output is wrong.
#include <cstring>

#include "check.h"

__global__ void fill(int* out, int n, int base) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = base + 3 * i;
}

__global__ void uses_smem(int* out) {
    extern __shared__ int smem[];
    smem[threadIdx.x] = threadIdx.x;
    __syncthreads();
    if (threadIdx.x == 0) out[0] = smem[blockDim.x - 1];
}

static int* d_out;
static int bad = 0;

// Prints the call's error, then what cudaGetLastError holds after it (the error it left, if
// any, then cleared), and what cudaGetLastError says again (nothing: the error did not stick).
static void show(const char* name, cudaError_t e) {
    cudaError_t last = cudaGetLastError();
    cudaError_t again = cudaGetLastError();
    printf("%s: %s (last error %s, then %s)\n", name, cudaGetErrorName(e), cudaGetErrorName(last),
           cudaGetErrorName(again));
}

// The good kernel: 1000 values, all checked.
static void good(const char* label, int base) {
    fill<<<4, 256>>>(d_out, 1000, base);
    cudaError_t e = cudaGetLastError();
    int host[1000];
    if (e == cudaSuccess) e = cudaMemcpy(host, d_out, sizeof host, cudaMemcpyDeviceToHost);
    int wrong = 0;
    if (e == cudaSuccess)
        for (int i = 0; i < 1000; ++i) wrong += host[i] != base + 3 * i;
    printf("%s: %s, %s\n", label, cudaGetErrorName(e), e != cudaSuccess ? "not run" : wrong ? "WRONG" : "ok");
    bad += e != cudaSuccess || wrong != 0;
}

int main() {
    setvbuf(stdout, nullptr, _IOLBF, 0);  // every line out, even if the program dies
    CK(cudaMalloc(&d_out, 4096 * sizeof(int)));
    good("good kernel first", 1);

    // Launch configurations the device cannot run.
    fill<<<1, 2048>>>(d_out, 1, 0);
    show("launch with 2048 threads per block", cudaPeekAtLastError());
    fill<<<1, dim3(32, 32, 2)>>>(d_out, 1, 0);
    show("launch with a block of 32x32x2", cudaPeekAtLastError());
    fill<<<1, dim3(1, 1, 128)>>>(d_out, 1, 0);
    show("launch with block z = 128", cudaPeekAtLastError());
    fill<<<0, 32>>>(d_out, 1, 0);
    show("launch with a grid of 0", cudaPeekAtLastError());
    fill<<<dim3(1, 70000), 32>>>(d_out, 1, 0);
    show("launch with grid y = 70000", cudaPeekAtLastError());
    void* args[] = {&d_out};
    show("cudaLaunchKernel(1 MiB dynamic shared memory)",
         cudaLaunchKernel((const void*)uses_smem, dim3(1), dim3(32), args, 1 << 20, 0));
    show("cudaLaunchKernel(64 KiB dynamic shared memory, no opt-in)",
         cudaLaunchKernel((const void*)uses_smem, dim3(1), dim3(32), args, 64 << 10, 0));
    show("cudaFuncSetAttribute(MaxDynamicSharedMemorySize, 64 KiB)",
         cudaFuncSetAttribute((const void*)uses_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10));
    show("cudaLaunchKernel(64 KiB dynamic shared memory, opted in)",
         cudaLaunchKernel((const void*)uses_smem, dim3(1), dim3(32), args, 64 << 10, 0));
    show("cudaDeviceSynchronize", cudaDeviceSynchronize());
    int smem_out = 0;
    CK(cudaMemcpy(&smem_out, d_out, sizeof smem_out, cudaMemcpyDeviceToHost));
    printf("opted-in kernel's result: %d\n", smem_out);
    show("cudaFuncSetAttribute(MaxDynamicSharedMemorySize, 1 MiB)",
         cudaFuncSetAttribute((const void*)uses_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 1 << 20));
    show("cudaLaunchKernel(null function)", cudaLaunchKernel((const void*)nullptr, dim3(1), dim3(1), args, 0, 0));
    show("cudaLaunchKernel(a host function)",
         cudaLaunchKernel((const void*)&good, dim3(1), dim3(1), args, 0, 0));
    cudaFuncAttributes fa;
    show("cudaFuncGetAttributes(null function)", cudaFuncGetAttributes(&fa, (const void*)nullptr));
    good("good kernel after the bad launches", 2);

    // Copies with a wrong direction, an invalid one, out of bounds.
    int hbuf[64];
    memset(hbuf, 0, sizeof hbuf);
    show("cudaMemcpy(device <- host, kind DeviceToHost)", cudaMemcpy(d_out, hbuf, sizeof hbuf, cudaMemcpyDeviceToHost));
    show("cudaMemcpy(host <- device, kind HostToDevice)", cudaMemcpy(hbuf, d_out, sizeof hbuf, cudaMemcpyHostToDevice));
    show("cudaMemcpy(kind 7)", cudaMemcpy(d_out, hbuf, sizeof hbuf, (cudaMemcpyKind)7));
    show("cudaMemcpy(null destination)", cudaMemcpy(nullptr, hbuf, sizeof hbuf, cudaMemcpyHostToDevice));
    show("cudaMemcpy(host <- null device source)", cudaMemcpy(hbuf, nullptr, sizeof hbuf, cudaMemcpyDeviceToHost));
    show("cudaMemcpy(0 bytes)", cudaMemcpy(d_out, hbuf, 0, cudaMemcpyHostToDevice));
    show("cudaMemset(null, 0, 64)", cudaMemset(nullptr, 0, 64));
    good("good kernel after the bad copies", 3);

    // Frees of what is not a device allocation.
    int* host_ptr = (int*)malloc(256);
    show("cudaFree(a host pointer)", cudaFree(host_ptr));
    show("cudaFree(inside a device allocation)", cudaFree(d_out + 4));
    int* once;
    CK(cudaMalloc(&once, 256));
    show("cudaFree(an allocation)", cudaFree(once));
    show("cudaFree(the same allocation again)", cudaFree(once));
    show("cudaFree(nullptr)", cudaFree(nullptr));
    show("cudaFreeHost(pageable memory)", cudaFreeHost(host_ptr));
    free(host_ptr);
    void* huge = nullptr;
    show("cudaMalloc(1 PiB)", cudaMalloc(&huge, (size_t)1 << 50));
    show("cudaMalloc(null out-pointer)", cudaMalloc((void**)nullptr, 64));
    show("cudaStreamCreate(null out-pointer)", cudaStreamCreate(nullptr));
    show("cudaSetDevice(99)", cudaSetDevice(99));
    int dev = -1;
    show("cudaGetDevice", cudaGetDevice(&dev));
    printf("current device after the bad cudaSetDevice: %d\n", dev);
    good("good kernel at the end", 4);

    CK(cudaFree(d_out));
    printf("bad_inputs: %s\n", bad ? "FAIL" : "OK");
    return bad ? 1 : 0;
}
