// Device-to-host copies completed by events (issue 21): the host reads a result after
// cudaEventSynchronize, or after polling cudaEventQuery, of an event recorded behind an
// asynchronous copy on the legacy default stream, the per-thread default stream and a created
// stream. Every such result must be verified by a replay.
#include <vector>
#include "check.h"

__global__ void iota(int* p, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = i * k + 1;
}

int main() {
    const int n = 1 << 16;
    const size_t bytes = n * sizeof(int);
    int errors = 0;
    uint64_t sum = 1469598103934665603ull;
    int *d, *h;
    CK(cudaMalloc(&d, bytes));
    CK(cudaMallocHost(&h, bytes));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    cudaEvent_t ev;
    CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    cudaStream_t streams[] = {0, cudaStreamPerThread, s, 0};
    for (int round = 0; round < 4; ++round) {
        cudaStream_t st = streams[round];
        iota<<<(n + 255) / 256, 256, 0, st>>>(d, n, round + 2);
        CK(cudaGetLastError());
        CK(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, st));
        CK(cudaEventRecord(ev, st));
        if (round == 3) {
            while (cudaEventQuery(ev) == cudaErrorNotReady) {
            }
        } else {
            CK(cudaEventSynchronize(ev));
        }
        for (int i = 0; i < n; ++i) errors += h[i] != i * (round + 2) + 1;
        sum = fnv1a(h, bytes, sum);
    }
    CK(cudaEventDestroy(ev));
    CK(cudaStreamDestroy(s));
    CK(cudaFreeHost(h));
    CK(cudaFree(d));
    return report("event_d2h", "4 copies completed by events", sum, errors);
}
