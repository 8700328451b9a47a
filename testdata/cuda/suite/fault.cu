// A program whose kernel faults: it writes through a pointer 1 TiB past its allocation (no
// memory is mapped there, in the recorded run or at replay), and the fault surfaces as
// CUDA_ERROR_ILLEGAL_ADDRESS at the next synchronization. The program expects that error and
// exits 0; its replay reports it. The server section of the GPU suite replays it remotely
// beside healthy sessions: its session must end with that error, the others must not notice.
// (Until issue 21 this program wrote to mapped host memory, which replays did not re-create;
// they do now.)
#include "check.h"

__global__ void wild(int* p) { p[threadIdx.x] = threadIdx.x + 1; }

int main() {
    int* d;
    CK(cudaMalloc(&d, 4096));
    wild<<<1, 32>>>(d + (1ull << 38));
    cudaError_t e = cudaDeviceSynchronize();
    printf("fault %s\n", cudaGetErrorName(e));
    return e == cudaErrorIllegalAddress ? 0 : 1;
}
