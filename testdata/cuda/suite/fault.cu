// A program that runs correctly but whose replay elsewhere faults: its kernel writes to host
// memory mapped for the device (cudaHostAllocMapped), which a replay does not map (issue 21), so
// the launch there reports CUDA_ERROR_ILLEGAL_ADDRESS at the next synchronization. The server
// section of the GPU suite replays it remotely beside healthy sessions: its session must end
// with that error, the others must not notice.
#include "check.h"

__global__ void fill(int* p) { p[threadIdx.x] = threadIdx.x + 1; }

int main() {
    int *h, *d;
    CK(cudaHostAlloc(&h, 4096, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer(&d, h, 0));
    fill<<<1, 32>>>(d);
    CK(cudaDeviceSynchronize());
    int errors = 0;
    for (int i = 0; i < 32; ++i) errors += h[i] != i + 1;
    return report("fault", "mapped host memory", fnv1a(h, 32 * sizeof(int)), errors);
}
