// A synchronization waits for what it covers, not for everything sent before it (issue 34):
// stream A runs a kernel that spins for ~300 ms (clock64, calibrated on this GPU), stream B is
// idle or runs a short kernel. cuStreamSynchronize(B), cuEventSynchronize on an event recorded
// on B and cuStreamQuery(B) must return at once while A still runs; synchronizing A must take
// the rest of the 300 ms. Rounds: B non-blocking, then B blocking (default flags); A is
// non-blocking in both. Times are printed only as booleans against bounds far from the natural
// values (idle: < 20 ms, natively ~0.03 ms; the spin: >= 250 ms). Natively every line says yes.
// Shared cudart and -lcuda (driver calls on cudart's streams).
#include <cuda.h>
#include <time.h>

#include "check.h"

#define CU(call)                                                                         \
    do {                                                                                 \
        CUresult r_ = (call);                                                            \
        if (r_ != CUDA_SUCCESS) {                                                        \
            const char* n_ = nullptr;                                                    \
            cuGetErrorName(r_, &n_);                                                     \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,         \
                    n_ ? n_ : "?");                                                      \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

// Spins for `cycles` SM clock cycles; writes how many it spun (so the work cannot be elided).
__global__ void spin(long long cycles, long long* spun) {
    long long t0 = clock64(), t = t0;
    while (t - t0 < cycles) t = clock64();
    if (threadIdx.x == 0) *spun = t - t0;
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

static const char* yn(bool b) { return b ? "yes" : "no"; }
static const char* rname(CUresult r) {
    const char* n = nullptr;
    cuGetErrorName(r, &n);
    return n ? n : "?";
}

// Cycles per millisecond: a spin of 20M cycles timed with events on the GPU itself.
static double calibrate(long long* spun) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    const long long cycles = 20000000;
    float best = 1e9f;
    for (int k = 0; k < 3; ++k) {  // the first run may pay for module loading and clocks
        CK(cudaEventRecord(a));
        spin<<<1, 32>>>(cycles, spun);
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (ms < best) best = ms;
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return cycles / (double)best;
}

// One round: the spin on A, then B's synchronizations while A runs.
static int round_(const char* label, unsigned b_flags, long long spin_cycles, long long* spun, int* dq) {
    cudaStream_t a, b;
    CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&b, b_flags));
    cudaEvent_t e;
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CU(cuCtxSynchronize());  // nothing in flight before the round
    int bad = 0;
    printf("round %s\n", label);

    double t0 = now_ms();
    spin<<<1, 32, 0, a>>>(spin_cycles, spun);
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
    long long* spun;
    int* dq;
    CK(cudaMalloc(&spun, sizeof(long long)));
    CK(cudaMalloc(&dq, 1024 * sizeof(int)));
    double per_ms = calibrate(spun);
    // Load the short kernel now: with lazy loading, its first launch loads its module, which
    // waits for the kernels running in the context (the spin) and would time that instead.
    quick<<<4, 256>>>(dq, 1024);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    long long cycles = (long long)(per_ms * 300);
    int bad = 0;
    bad += round_("B non-blocking", cudaStreamNonBlocking, cycles, spun, dq);
    bad += round_("B blocking", cudaStreamDefault, cycles, spun, dq);
    // The whole context's wait covers A: cuCtxSynchronize after a spin takes the spin's time.
    cudaStream_t a;
    CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    double t0 = now_ms();
    spin<<<1, 32, 0, a>>>(cycles, spun);
    CUresult r = cuCtxSynchronize();
    double total = now_ms() - t0;
    printf("cuCtxSynchronize with A spinning: %s, >= 250 ms: %s\n", rname(r), yn(total >= 250));
    bad += r != CUDA_SUCCESS || total < 250;
    long long got = 0;
    CK(cudaMemcpy(&got, spun, sizeof got, cudaMemcpyDeviceToHost));
    printf("the spin ran its cycles: %s\n", yn(got >= cycles));
    CK(cudaStreamDestroy(a));
    CK(cudaFree(spun));
    CK(cudaFree(dq));
    printf("stream_sync: %s\n", bad ? "FAIL" : "OK");
    return bad ? 1 : 0;
}
