// Device-to-host copies completed by events (issue 21): the host reads a result after
// cudaEventSynchronize, or after polling cudaEventQuery, of an event recorded behind an
// asynchronous copy on the legacy default stream, the per-thread default stream and a created
// stream; then a copy on a created stream completed by an event on the legacy default stream,
// one completed through another stream that waited for its event (cudaStreamWaitEvent +
// cudaStreamSynchronize), and one queued after an event, which that event must not complete.
// Every such result must be verified by a replay.
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
    // 5. A copy on a blocking stream, an event on the legacy default stream after it.
    int* h2;
    CK(cudaMallocHost(&h2, bytes));
    iota<<<(n + 255) / 256, 256, 0, s>>>(d, n, 11);
    CK(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, s));
    CK(cudaEventRecord(ev, 0));
    CK(cudaEventSynchronize(ev));
    for (int i = 0; i < n; ++i) errors += h[i] != i * 11 + 1;
    sum = fnv1a(h, bytes, sum);
    // 6. A copy completed through another stream that waited for the event behind it.
    cudaStream_t s2;
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    iota<<<(n + 255) / 256, 256, 0, s>>>(d, n, 13);
    CK(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, s));
    CK(cudaEventRecord(ev, s));
    CK(cudaStreamWaitEvent(s2, ev, 0));
    CK(cudaStreamSynchronize(s2));
    for (int i = 0; i < n; ++i) errors += h[i] != i * 13 + 1;
    sum = fnv1a(h, bytes, sum);
    // 7. An event covers what was queued before it, not a copy queued after it.
    CK(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, s));
    CK(cudaEventRecord(ev, s));
    iota<<<(n + 255) / 256, 256, 0, s>>>(d, n, 17);
    CK(cudaMemcpyAsync(h2, d, bytes, cudaMemcpyDeviceToHost, s));
    CK(cudaEventSynchronize(ev));
    for (int i = 0; i < n; ++i) errors += h[i] != i * 13 + 1;
    sum = fnv1a(h, bytes, sum);
    CK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; ++i) errors += h2[i] != i * 17 + 1;
    sum = fnv1a(h2, bytes, sum);
    CK(cudaStreamDestroy(s2));
    CK(cudaFreeHost(h2));
    CK(cudaEventDestroy(ev));
    CK(cudaStreamDestroy(s));
    CK(cudaFreeHost(h));
    CK(cudaFree(d));
    return report("event_d2h", "8 copies completed by events and streams", sum, errors);
}
