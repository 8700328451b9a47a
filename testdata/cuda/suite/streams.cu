// Streams, events and pinned memory: three streams with a chunked H2D -> kernel -> D2H pipeline
// (cudaMemcpyAsync both ways, page-locked buffers from cudaMallocHost and from cudaHostRegister),
// then kernels on different streams ordered only by events (cudaEventRecord +
// cudaStreamWaitEvent), waited for with cudaEventSynchronize and polled with cudaEventQuery.
// Built twice by the suite: shared cudart (default) and static cudart (streams_static).
#include <vector>
#include "check.h"

__global__ void affine(int* x, int n, int mul, int add) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * mul + add;
}

// c[i] = a[i] - b[n-1-i]: reads what other streams wrote, in the opposite order.
__global__ void combine(const int* a, const int* b, int* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] - b[n - 1 - i];
}

// A slow-ish kernel so that a missing dependency would be visible: iterates a hash.
__global__ void mix(int* x, int n, int rounds) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned v = (unsigned)x[i];
    for (int r = 0; r < rounds; ++r) v = v * 1664525u + 1013904223u;
    x[i] = (int)(v >> 2);  // < 2^30: later differences cannot overflow
}

static unsigned mix_ref(unsigned v, int rounds) {
    for (int r = 0; r < rounds; ++r) v = v * 1664525u + 1013904223u;
    return v >> 2;
}

int main() {
    const int n = 1 << 18, chunks = 6, cn = n / chunks + (n % chunks != 0), block = 256;
    const size_t bytes = (size_t)n * sizeof(int);
    const int rounds = 2000;
    cudaStream_t s[3];
    CK(cudaStreamCreate(&s[0]));
    CK(cudaStreamCreateWithFlags(&s[1], cudaStreamNonBlocking));
    CK(cudaStreamCreateWithPriority(&s[2], cudaStreamNonBlocking, 0));

    // Pinned memory two ways.
    int *h_a, *h_out;
    CK(cudaMallocHost(&h_a, bytes));
    CK(cudaHostAlloc(&h_out, bytes, cudaHostAllocDefault));
    std::vector<int> b_store(n);
    int* h_b = b_store.data();
    CK(cudaHostRegister(h_b, bytes, cudaHostRegisterDefault));
    for (int i = 0; i < n; ++i) { h_a[i] = i % 977; h_b[i] = (i * 31) % 1009; }

    int *d_a, *d_b, *d_c;
    CK(cudaMalloc(&d_a, bytes));
    CK(cudaMalloc(&d_b, bytes));
    CK(cudaMalloc(&d_c, bytes));
    CK(cudaMemsetAsync(d_c, 0xff, bytes, s[2]));

    // 1. Chunked pipeline of a over the three streams, results back into h_out.
    for (int c = 0; c < chunks; ++c) {
        int off = c * cn, len = off + cn > n ? n - off : cn;
        cudaStream_t st = s[c % 3];
        CK(cudaMemcpyAsync(d_a + off, h_a + off, len * sizeof(int), cudaMemcpyHostToDevice, st));
        affine<<<(len + block - 1) / block, block, 0, st>>>(d_a + off, len, 3, c);
        CK(cudaGetLastError());
        CK(cudaMemcpyAsync(h_out + off, d_a + off, len * sizeof(int), cudaMemcpyDeviceToHost, st));
    }
    for (auto st : s) CK(cudaStreamSynchronize(st));
    int errors = 0;
    for (int i = 0; i < n; ++i) errors += h_out[i] != (i % 977) * 3 + i / cn;
    uint64_t sum = fnv1a(h_out, bytes);

    // 2. Cross-stream dependencies through events only.
    cudaEvent_t ev_a, ev_b, ev_c, t0, t1;
    CK(cudaEventCreateWithFlags(&ev_a, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&ev_b, cudaEventDisableTiming));
    CK(cudaEventCreate(&ev_c));
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));
    CK(cudaEventRecord(t0, s[0]));
    mix<<<(n + block - 1) / block, block, 0, s[0]>>>(d_a, n, rounds);  // a = mix(a)
    CK(cudaEventRecord(ev_a, s[0]));
    CK(cudaMemcpyAsync(d_b, h_b, bytes, cudaMemcpyHostToDevice, s[1]));  // from registered memory
    affine<<<(n + block - 1) / block, block, 0, s[1]>>>(d_b, n, -2, 5);
    CK(cudaEventRecord(ev_b, s[1]));
    CK(cudaStreamWaitEvent(s[2], ev_a, 0));
    CK(cudaStreamWaitEvent(s[2], ev_b, 0));
    combine<<<(n + block - 1) / block, block, 0, s[2]>>>(d_a, d_b, d_c, n);
    CK(cudaEventRecord(ev_c, s[2]));
    // s[1] overwrites b only after combine has read it.
    CK(cudaStreamWaitEvent(s[1], ev_c, 0));
    affine<<<(n + block - 1) / block, block, 0, s[1]>>>(d_b, n, 1, 1);
    CK(cudaMemcpyAsync(h_b, d_b, bytes, cudaMemcpyDeviceToHost, s[1]));  // into registered memory
    CK(cudaEventRecord(t1, s[1]));
    CK(cudaStreamWaitEvent(s[0], ev_c, 0));
    CK(cudaMemcpyAsync(h_out, d_c, bytes, cudaMemcpyDeviceToHost, s[0]));

    CK(cudaEventSynchronize(ev_c));
    cudaError_t q;
    while ((q = cudaEventQuery(t1)) == cudaErrorNotReady) {}
    CK(q);
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, t0, t1));  // not printed: timing
    CK(cudaStreamSynchronize(s[0]));
    CK(cudaStreamQuery(s[0]));
    CK(cudaDeviceSynchronize());

    for (int i = 0; i < n; ++i) {
        int a = (int)mix_ref((unsigned)((i % 977) * 3 + i / cn), rounds);
        int j = n - 1 - i;
        int b = ((j * 31) % 1009) * -2 + 5;
        errors += h_out[i] != a - b;
        errors += h_b[i] != ((i * 31) % 1009) * -2 + 6;
    }
    sum = fnv1a(h_out, bytes, sum);
    sum = fnv1a(h_b, bytes, sum);

    for (auto e : {ev_a, ev_b, ev_c, t0, t1}) CK(cudaEventDestroy(e));
    CK(cudaHostUnregister(h_b));
    CK(cudaFreeHost(h_a));
    CK(cudaFreeHost(h_out));
    CK(cudaFree(d_a)); CK(cudaFree(d_b)); CK(cudaFree(d_c));
    for (auto st : s) CK(cudaStreamDestroy(st));
    char details[64];
    snprintf(details, sizeof details, "n=%d streams=3 chunks=%d", n, chunks);
    return report("streams", details, sum, errors);
}
