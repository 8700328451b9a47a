// A synchronization waits for what it covers, not for everything sent before it (issue 34):
// stream A runs a kernel that spins for 300 ms (clock64 loops until the GPU's global timer has
// advanced 300 ms), stream B is idle or runs a short kernel. cuStreamSynchronize(B),
// cuEventSynchronize on an event recorded on B and cuStreamQuery(B) must return at once while A
// still runs; cuStreamQuery(A) must say it runs; synchronizing A must take the rest of the
// 300 ms. Rounds: B non-blocking, then B blocking (default flags); A is non-blocking in both,
// and a last spin that cuCtxSynchronize must wait for. Times are printed only as booleans
// against bounds far from the natural values (idle: < 20 ms, natively ~0.03 ms; the spin:
// >= 250 ms). Natively every line says yes.
// Shared cudart and -lcuda (driver calls on cudart's streams).
#include <cuda.h>
#include <time.h>

#include "check.h"

#include "cu_check.h"

// Spins for `ns` nanoseconds of the GPU's global timer, read every ~1000 SM clock cycles
// (clock64), then sets *done = 1. Nothing timing-dependent reaches the host: a replay of the
// recording verifies every result.
__global__ void spin(unsigned long long ns, int* done) {
    unsigned long long g0, g;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g0));
    do {
        long long c0 = clock64();
        while (clock64() - c0 < 1000) {
        }
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
    } while (g - g0 < ns);
    if (threadIdx.x == 0) *done = 1;
}

// A short kernel: out[i] = i * 3 + 1.
__global__ void quick(int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i * 3 + 1;
}

static double now_ms() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static const unsigned long long SPIN_NS = 300000000ull;  // 300 ms

static const char* yn(bool b) { return b ? "yes" : "no"; }
static const char* rname(CUresult r) {
    const char* n = nullptr;
    cuGetErrorName(r, &n);
    return n ? n : "?";
}

// One round: the spin on A, then B's synchronizations while A runs.
static int round_(const char* label, unsigned b_flags, int* done, int* dq) {
    cudaStream_t a, b;
    CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&b, b_flags));
    cudaEvent_t e;
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CU(cuCtxSynchronize());  // nothing in flight before the round
    int bad = 0;
    printf("round %s\n", label);

    double t0 = now_ms();
    spin<<<1, 32, 0, a>>>(SPIN_NS, done);
    CK(cudaGetLastError());

    double s = now_ms();
    CUresult r = cuStreamSynchronize((CUstream)b);
    double d = now_ms() - s;
    printf("cuStreamSynchronize(idle B): %s, < 20 ms: %s\n", rname(r), yn(d < 20));
    bad += r != CUDA_SUCCESS || d >= 20;

    s = now_ms();
    r = cuStreamQuery((CUstream)b);
    d = now_ms() - s;
    printf("cuStreamQuery(idle B): %s, < 20 ms: %s\n", rname(r), yn(d < 20));
    bad += r != CUDA_SUCCESS || d >= 20;

    CU(cuEventRecord((CUevent)e, (CUstream)b));
    s = now_ms();
    r = cuEventSynchronize((CUevent)e);
    d = now_ms() - s;
    printf("cuEventSynchronize(event recorded on idle B): %s, < 20 ms: %s\n", rname(r), yn(d < 20));
    bad += r != CUDA_SUCCESS || d >= 20;
    r = cuEventQuery((CUevent)e);
    printf("cuEventQuery(that event): %s\n", rname(r));

    // A short kernel on B runs beside the spin (which holds one SM) and B's wait covers it only.
    s = now_ms();
    quick<<<4, 256, 0, b>>>(dq, 1024);
    CK(cudaGetLastError());
    r = cuStreamSynchronize((CUstream)b);
    d = now_ms() - s;
    printf("cuStreamSynchronize(B after a short kernel): %s, < 100 ms: %s\n", rname(r), yn(d < 100));
    bad += r != CUDA_SUCCESS || d >= 100;
    int host[1024];
    CK(cudaMemcpyAsync(host, dq, sizeof host, cudaMemcpyDeviceToHost, b));
    CK(cudaStreamSynchronize(b));
    int wrong = 0;
    for (int i = 0; i < 1024; ++i) wrong += host[i] != i * 3 + 1;
    printf("short kernel's result on B: %s\n", wrong ? "wrong" : "ok");
    bad += wrong != 0;

    // The runtime's forms of the same waits.
    s = now_ms();
    cudaError_t ce = cudaStreamSynchronize(b);
    d = now_ms() - s;
    printf("cudaStreamSynchronize(B): %s, < 20 ms: %s\n", cudaGetErrorName(ce), yn(d < 20));
    bad += ce != cudaSuccess || d >= 20;
    ce = cudaStreamQuery(b);
    printf("cudaStreamQuery(B): %s\n", cudaGetErrorName(ce));

    // A is still running: its query says so (the spin has ~300 ms to go).
    double elapsed = now_ms() - t0;
    r = cuStreamQuery((CUstream)a);
    printf("cuStreamQuery(A) while it spins: %s\n", rname(r));
    printf("B's checks done while A still ran (< 200 ms since the launch): %s\n", yn(elapsed < 200));
    bad += r != CUDA_ERROR_NOT_READY || elapsed >= 200;

    r = cuStreamSynchronize((CUstream)a);
    double total = now_ms() - t0;
    printf("cuStreamSynchronize(A): %s, >= 250 ms since the launch: %s\n", rname(r), yn(total >= 250));
    bad += r != CUDA_SUCCESS || total < 250;
    r = cuStreamQuery((CUstream)a);
    printf("cuStreamQuery(A) after its synchronization: %s\n", rname(r));

    CK(cudaEventDestroy(e));
    CK(cudaStreamDestroy(a));
    CK(cudaStreamDestroy(b));
    return bad;
}

int main() {
    setvbuf(stdout, nullptr, _IOLBF, 0);  // every line out, even if the program dies
    int *done, *dq;
    CK(cudaMalloc(&done, sizeof(int)));
    CK(cudaMalloc(&dq, 1024 * sizeof(int)));
    // Load both kernels now: with lazy loading, a kernel's first launch loads it, which waits
    // for the kernels running in the context (the spin) and would time that instead.
    spin<<<1, 32>>>(1000000, done);
    quick<<<4, 256>>>(dq, 1024);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    int bad = 0;
    bad += round_("B non-blocking", cudaStreamNonBlocking, done, dq);
    bad += round_("B blocking", cudaStreamDefault, done, dq);
    // The whole context's wait covers A: cuCtxSynchronize after a spin takes the spin's time.
    cudaStream_t a;
    CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CK(cudaMemset(done, 0, sizeof(int)));
    double t0 = now_ms();
    spin<<<1, 32, 0, a>>>(SPIN_NS, done);
    CUresult r = cuCtxSynchronize();
    double total = now_ms() - t0;
    printf("cuCtxSynchronize with A spinning: %s, >= 250 ms: %s\n", rname(r), yn(total >= 250));
    bad += r != CUDA_SUCCESS || total < 250;
    int got = 0;
    CK(cudaMemcpy(&got, done, sizeof got, cudaMemcpyDeviceToHost));
    printf("the spin ran to its end: %s\n", yn(got == 1));
    bad += got != 1;
    CK(cudaStreamDestroy(a));
    CK(cudaFree(done));
    CK(cudaFree(dq));
    printf("stream_sync: %s\n", bad ? "FAIL" : "OK");
    return bad ? 1 : 0;
}
