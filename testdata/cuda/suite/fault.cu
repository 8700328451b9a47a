// A kernel that writes through an invalid pointer: the launch succeeds, the synchronization
// reports CUDA_ERROR_ILLEGAL_ADDRESS. The server section of the GPU suite runs it remotely
// beside healthy sessions: its session must end with that error, the others must not notice.
#include "check.h"

__global__ void bad(int* p) { p[threadIdx.x] = 1; }

int main() {
    int* ok;
    CK(cudaMalloc(&ok, 4096));
    CK(cudaMemset(ok, 0, 4096));
    bad<<<1, 32>>>((int*)0x10);
    cudaError_t e = cudaDeviceSynchronize();
    printf("fault %s\n", cudaGetErrorName(e));
    return e == cudaErrorIllegalAddress ? 0 : 1;
}
