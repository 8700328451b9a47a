// Allocation-heavy benchmark: a deterministic pseudo-random sequence of cudaMalloc/cudaFree of
// mixed sizes (256 B .. 64 MB, some buffers kept alive to the end), cudaMallocAsync/cudaFreeAsync
// on a stream, and cudaMallocPitch. A kernel writes a pattern into every new buffer (its first
// 4096 and last 1024 words) and another reads it back before the free, summing into a device
// accumulator with integer atomics (order-independent); the host computes the same sum.
// Prints ONE JSON line: {"checksum", "allocs", "alloc_us_mean", "async_alloc_us_mean",
// "total_s", "init_s", "ok"} — timings vary, the checksum does not.
#include <algorithm>
#include <chrono>
#include <vector>
#include "check.h"

typedef unsigned long long u64;
__host__ __device__ inline unsigned pattern(unsigned tag, unsigned i) {
    return tag * 2654435761u ^ (i * 40503u + 0x9e3779b9u);
}

// Index k < head is word k; head <= k < head+tail is word n-1-(k-head).
__host__ __device__ inline size_t word_at(size_t n, unsigned k, unsigned head) {
    return k < head ? k : n - 1 - (k - head);
}
__global__ void touch(unsigned* buf, size_t n, unsigned head, unsigned tail, unsigned tag) {
    unsigned k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= head + tail) return;
    size_t w = word_at(n, k, head);
    buf[w] = pattern(tag, (unsigned)w);
}
__global__ void verify(const unsigned* buf, size_t n, unsigned head, unsigned tail, unsigned tag,
                       u64* acc) {
    unsigned k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= head + tail) return;
    size_t w = word_at(n, k, head);
    unsigned v = buf[w];
    if (v != pattern(tag, (unsigned)w)) atomicAdd(&acc[0], 1ull);
    atomicAdd(&acc[1], (u64)v);
}
__global__ void touch2d(unsigned* buf, size_t pitch, unsigned wwords, unsigned tag) {
    unsigned x = threadIdx.x, y = blockIdx.x;
    if (x < wwords) ((unsigned*)((char*)buf + y * pitch))[x] = pattern(tag, y * 1000 + x);
}
__global__ void verify2d(const unsigned* buf, size_t pitch, unsigned wwords, unsigned tag,
                         u64* acc) {
    unsigned x = threadIdx.x, y = blockIdx.x;
    if (x >= wwords) return;
    unsigned v = ((const unsigned*)((const char*)buf + y * pitch))[x];
    if (v != pattern(tag, y * 1000 + x)) atomicAdd(&acc[0], 1ull);
    atomicAdd(&acc[1], (u64)v);
}

struct Rng {
    u64 s = 0x853c49e6748fea9bull;
    unsigned next() { s = s * 6364136223846793005ull + 1442695040888963407ull; return (unsigned)(s >> 33); }
};
struct Buf { unsigned* p = nullptr; size_t words = 0; unsigned tag = 0; };

static u64 expected = 0;  // host-side mirror of acc[1]
static void span(size_t words, unsigned* head, unsigned* tail) {
    *head = (unsigned)std::min<size_t>(words, 4096);
    *tail = (unsigned)std::min<size_t>(words, 1024);
}
static void fill(const Buf& b, cudaStream_t s) {
    unsigned head, tail;
    span(b.words, &head, &tail);
    touch<<<(head + tail + 255) / 256, 256, 0, s>>>(b.p, b.words, head, tail, b.tag);
}
static void check_buf(const Buf& b, cudaStream_t s, u64* acc) {
    unsigned head, tail;
    span(b.words, &head, &tail);
    verify<<<(head + tail + 255) / 256, 256, 0, s>>>(b.p, b.words, head, tail, b.tag, acc);
    for (unsigned k = 0; k < head + tail; ++k)
        expected += pattern(b.tag, (unsigned)word_at(b.words, k, head));
}
static size_t pick_size(Rng& r, int max_shift) {  // 256 B << e, plus up to half again
    size_t base = (size_t)256 << (r.next() % (max_shift + 1));
    size_t size = base + (r.next() % (unsigned)(base / 2 + 1));
    size = std::min(size, (size_t)64 << 20);
    return std::max<size_t>(size & ~(size_t)3, 256);
}
static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main() {
    double t_start = now();
    CK(cudaFree(0));  // context creation, not counted in total_s
    double t0 = now();
    u64* acc;
    CK(cudaMalloc(&acc, 2 * sizeof(u64)));
    CK(cudaMemset(acc, 0, 2 * sizeof(u64)));
    CK(cudaDeviceSynchronize());
    Rng r;
    unsigned tag = 1;
    int allocs = 0;

    // 1. cudaMalloc / cudaFree: 24 slots, 1000 operations; every 16th buffer is kept to the end.
    const int slots = 24, ops = 1000;
    std::vector<Buf> live(slots), kept;
    double alloc_s = 0;
    int timed = 0;
    for (int op = 0; op < ops; ++op) {
        Buf& b = live[r.next() % slots];
        if (b.p) {
            check_buf(b, 0, acc);
            CK(cudaFree(b.p));
            b = Buf();
            continue;
        }
        size_t bytes = pick_size(r, 18);  // 256 B .. 64 MB
        double a = now();
        CK(cudaMalloc(&b.p, bytes));
        alloc_s += now() - a;
        ++timed;
        ++allocs;
        b.words = bytes / 4;
        b.tag = tag++;
        fill(b, 0);
        if (allocs % 16 == 0) { kept.push_back(b); b = Buf(); }
    }

    // 2. cudaMallocAsync / cudaFreeAsync on a stream (default pool), 8 in flight, 256 B .. 6 MB.
    CK(cudaDeviceSynchronize());  // s is non-blocking: phase 1 must be done
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::vector<Buf> ring(8);
    double async_s = 0;
    int async_n = 0;
    for (int op = 0; op < 300; ++op) {
        Buf& b = ring[op % ring.size()];
        if (b.p) {
            check_buf(b, s, acc);
            CK(cudaFreeAsync(b.p, s));
        }
        size_t bytes = pick_size(r, 14);
        double a = now();
        CK(cudaMallocAsync((void**)&b.p, bytes, s));
        async_s += now() - a;
        ++async_n;
        ++allocs;
        b.words = bytes / 4;
        b.tag = tag++;
        fill(b, s);
    }
    for (Buf& b : ring) { check_buf(b, s, acc); CK(cudaFreeAsync(b.p, s)); b = Buf(); }
    CK(cudaStreamSynchronize(s));

    // 3. cudaMallocPitch: 20 pitched allocations, rows touched and verified.
    for (int k = 0; k < 20; ++k) {
        size_t width = 64 + r.next() % 4000, height = 1 + r.next() % 300, pitch = 0;
        unsigned* p;
        CK(cudaMallocPitch((void**)&p, &pitch, width, height));
        ++allocs;
        unsigned wwords = (unsigned)std::min<size_t>(width / 4, 256), t = tag++;
        touch2d<<<(unsigned)height, 256>>>(p, pitch, wwords, t);
        verify2d<<<(unsigned)height, 256>>>(p, pitch, wwords, t, acc);
        for (unsigned y = 0; y < height; ++y)
            for (unsigned x = 0; x < wwords; ++x) expected += pattern(t, y * 1000 + x);
        CK(cudaFree(p));
    }

    // Survivors: the live slots and the kept buffers.
    for (Buf& b : live) if (b.p) { check_buf(b, 0, acc); CK(cudaFree(b.p)); }
    for (Buf& b : kept) { check_buf(b, 0, acc); CK(cudaFree(b.p)); }
    u64 h_acc[2];
    CK(cudaMemcpy(h_acc, acc, sizeof(h_acc), cudaMemcpyDeviceToHost));
    CK(cudaFree(acc));
    CK(cudaStreamDestroy(s));
    double t_end = now();
    bool ok = h_acc[0] == 0 && h_acc[1] == expected;
    if (!ok)
        fprintf(stderr, "alloc_bench: %llu mismatching words, sum %016llx, expected %016llx\n",
                h_acc[0], h_acc[1], expected);
    printf("{\"checksum\": \"0x%016llx\", \"allocs\": %d, \"alloc_us_mean\": %.3f, "
           "\"async_alloc_us_mean\": %.3f, \"total_s\": %.4f, \"init_s\": %.4f, \"ok\": %s}\n",
           h_acc[1], allocs, 1e6 * alloc_s / std::max(timed, 1), 1e6 * async_s / std::max(async_n, 1),
           t_end - t0, t0 - t_start, ok ? "true" : "false");
    return ok ? 0 : 1;
}
