// Host callbacks (issue 34: cuLaunchHostFunc and cuStreamAddCallback returned success through
// the client and never ran; issue 35 builds them): a host function on a stream reads what a
// device-to-host copy before it brought back and writes host memory that a host-to-device copy
// after it uploads; each registration's userData; stream callbacks with their status and
// stream; a callback on one stream while another stream is busy; a callback after a wait on
// another stream's event; a graph with a host node launched 3 times; a captured host function
// launched 3 times. Callbacks append to a log, printed in order after each synchronization.
// Shared cudart. Exits 1 if any value differs from the expected one.
#include <atomic>
#include <cstdarg>
#include <cstring>
#include <time.h>

#include "check.h"

// ---- the log the callbacks write (they must not call CUDA) --------------------------------
static char log_lines[256][160];
static std::atomic<int> log_n{0};
static void logf(const char* fmt, ...) {
    int i = log_n.fetch_add(1);
    if (i >= 256) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(log_lines[i], sizeof log_lines[i], fmt, ap);
    va_end(ap);
}
static void print_log(const char* section) {
    int n = log_n.exchange(0);
    printf("%s: %d callback line(s)\n", section, n);
    for (int i = 0; i < n && i < 256; ++i) printf("  %s\n", log_lines[i]);
}
static int bad = 0;
static void expect(const char* what, long long got, long long want) {
    printf("%s: %lld (expected %lld) %s\n", what, got, want, got == want ? "ok" : "WRONG");
    bad += got != want;
}

static double now_ms() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// ---- kernels ------------------------------------------------------------------------------
__global__ void set(int* p, int v) { *p = v; }
__global__ void add(int* p, int v) { *p += v; }
__global__ void inc(int* p) { *p += 1; }
// Spins for `ms` milliseconds of the GPU's global timer, then writes v.
__global__ void spin_then_set(int* p, int v, unsigned long long ms) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ms * 1000000ull);
    *p = v;
}

// ---- callbacks ----------------------------------------------------------------------------
struct Chain {  // what a host function of the chain reads and writes (pinned host memory)
    int id;
    const int* read;
    int* write;
    int factor;
};
static void CUDART_CB chain_fn(void* user) {
    Chain* c = (Chain*)user;
    int v = *c->read;
    logf("host func (userData id %d) saw %d, writes %d", c->id, v, v * c->factor);
    if (c->write) *c->write = v * c->factor;
}

struct Tagged {
    int id;
    cudaStream_t expected;
    const int* read;
};
static void CUDART_CB stream_cb(cudaStream_t stream, cudaError_t status, void* user) {
    Tagged* t = (Tagged*)user;
    logf("stream callback (userData id %d): status %s, its stream: %s, saw %d", t->id, cudaGetErrorName(status),
         stream == t->expected ? "yes" : "no", *t->read);
}

static std::atomic<int> flag{0};
static void CUDART_CB set_flag(void*) { flag.store(1); }

int main() {
    setvbuf(stdout, nullptr, _IOLBF, 0);  // every line out, even if the program dies
    cudaStream_t s, s2;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    int* d;  // 16 device ints
    CK(cudaMalloc(&d, 16 * sizeof(int)));
    CK(cudaMemset(d, 0, 16 * sizeof(int)));
    int* h;  // 16 pinned host ints: async copies read and write them in stream order
    CK(cudaHostAlloc((void**)&h, 16 * sizeof(int), cudaHostAllocDefault));
    memset(h, 0, 16 * sizeof(int));

    // 1. A chain: kernel -> D2H -> host func (reads it, writes x2) -> H2D -> kernel (+1) -> D2H
    //    -> host func (reads the result).
    Chain c1 = {1, &h[0], &h[1], 2}, c2 = {2, &h[2], nullptr, 1};
    set<<<1, 1, 0, s>>>(&d[0], 21);
    CK(cudaMemcpyAsync(&h[0], &d[0], sizeof(int), cudaMemcpyDeviceToHost, s));
    CK(cudaLaunchHostFunc(s, chain_fn, &c1));
    CK(cudaMemcpyAsync(&d[1], &h[1], sizeof(int), cudaMemcpyHostToDevice, s));
    add<<<1, 1, 0, s>>>(&d[1], 1);
    CK(cudaMemcpyAsync(&h[2], &d[1], sizeof(int), cudaMemcpyDeviceToHost, s));
    CK(cudaLaunchHostFunc(s, chain_fn, &c2));
    CK(cudaStreamSynchronize(s));
    print_log("chain of copies and host functions");
    expect("chain result", h[2], 43);

    // 2. Stream callbacks with their own userData, each after a kernel and a copy.
    Tagged t[3];
    for (int i = 0; i < 3; ++i) {
        t[i] = {10 + i, s, &h[3 + i]};
        inc<<<1, 1, 0, s>>>(&d[2]);
        CK(cudaMemcpyAsync(&h[3 + i], &d[2], sizeof(int), cudaMemcpyDeviceToHost, s));
        CK(cudaStreamAddCallback(s, stream_cb, &t[i], 0));
    }
    CK(cudaStreamSynchronize(s));
    print_log("cudaStreamAddCallback x3");
    expect("counter after three callbacks", h[5], 3);

    // 3. A host function on s while s2 runs a 300 ms kernel: it runs at once.
    flag.store(0);
    double t0 = now_ms();
    spin_then_set<<<1, 1, 0, s2>>>(&d[3], 5, 300);
    CK(cudaGetLastError());
    CK(cudaLaunchHostFunc(s, set_flag, nullptr));
    while (!flag.load() && now_ms() - t0 < 150) {
    }
    bool ran = flag.load() != 0;
    cudaError_t busy = cudaStreamQuery(s2);
    printf("host func on s ran within 150 ms while s2 was busy: %s (s2 then: %s)\n", ran ? "yes" : "no",
           cudaGetErrorName(busy));
    bad += !ran || busy != cudaErrorNotReady;
    CK(cudaStreamSynchronize(s2));
    CK(cudaStreamSynchronize(s));

    // 4. A host function after a wait on another stream's event: it sees that stream's result.
    cudaEvent_t e;
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    h[6] = -1;
    Chain c3 = {3, &h[6], nullptr, 1};
    spin_then_set<<<1, 1, 0, s2>>>(&d[4], 77, 50);
    CK(cudaEventRecord(e, s2));
    CK(cudaStreamWaitEvent(s, e, 0));
    CK(cudaMemcpyAsync(&h[6], &d[4], sizeof(int), cudaMemcpyDeviceToHost, s));
    CK(cudaLaunchHostFunc(s, chain_fn, &c3));
    CK(cudaStreamSynchronize(s));
    print_log("host func after a wait on s2's event");
    expect("value s2 wrote, seen on s", h[6], 77);

    // 5. A graph: kernel (+1) -> D2H -> host node (reads, writes x10) -> H2D; launched 3 times.
    cudaGraph_t g;
    CK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t nk, nd, nh, nu;
    int* gp = &d[5];
    void* kargs[] = {&gp};
    cudaKernelNodeParams kp = {};
    kp.func = (void*)inc;
    kp.gridDim = dim3(1);
    kp.blockDim = dim3(1);
    kp.kernelParams = kargs;
    CK(cudaGraphAddKernelNode(&nk, g, nullptr, 0, &kp));
    CK(cudaGraphAddMemcpyNode1D(&nd, g, &nk, 1, &h[7], &d[5], sizeof(int), cudaMemcpyDeviceToHost));
    Chain c4 = {4, &h[7], &h[8], 10};
    cudaHostNodeParams hp = {};
    hp.fn = chain_fn;
    hp.userData = &c4;
    CK(cudaGraphAddHostNode(&nh, g, &nd, 1, &hp));
    CK(cudaGraphAddMemcpyNode1D(&nu, g, &nh, 1, &d[6], &h[8], sizeof(int), cudaMemcpyHostToDevice));
    cudaGraphExec_t ge;
    CK(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    print_log("graph with a host node, launched 3 times");
    int back = 0;
    CK(cudaMemcpy(&back, &d[6], sizeof back, cudaMemcpyDeviceToHost));
    expect("value the graph's last upload brought", back, 30);

    // 6. A captured host function: kernel (+1) -> D2H -> host func (x100) -> H2D, 3 launches.
    cudaGraph_t cg;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    inc<<<1, 1, 0, s>>>(&d[7]);
    CK(cudaMemcpyAsync(&h[9], &d[7], sizeof(int), cudaMemcpyDeviceToHost, s));
    Chain c5 = {5, &h[9], &h[10], 100};
    CK(cudaLaunchHostFunc(s, chain_fn, &c5));
    CK(cudaMemcpyAsync(&d[8], &h[10], sizeof(int), cudaMemcpyHostToDevice, s));
    CK(cudaStreamEndCapture(s, &cg));
    size_t nodes = 0;
    CK(cudaGraphGetNodes(cg, nullptr, &nodes));
    printf("captured graph nodes: %zu\n", nodes);
    cudaGraphExec_t cge;
    CK(cudaGraphInstantiate(&cge, cg, 0));
    for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(cge, s));
    CK(cudaStreamSynchronize(s));
    print_log("captured host func, launched 3 times");
    CK(cudaMemcpy(&back, &d[8], sizeof back, cudaMemcpyDeviceToHost));
    expect("value the captured graph's last upload brought", back, 300);

    // 7. Host functions on the legacy default stream, between synchronous copies.
    Chain c6 = {6, &h[11], nullptr, 1};
    set<<<1, 1>>>(&d[9], 606);
    CK(cudaMemcpyAsync(&h[11], &d[9], sizeof(int), cudaMemcpyDeviceToHost, 0));
    CK(cudaLaunchHostFunc(0, chain_fn, &c6));
    CK(cudaDeviceSynchronize());
    print_log("host func on the legacy stream");

    CK(cudaGraphExecDestroy(cge));
    CK(cudaGraphDestroy(cg));
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaEventDestroy(e));
    CK(cudaStreamDestroy(s));
    CK(cudaStreamDestroy(s2));
    CK(cudaFreeHost(h));
    CK(cudaFree(d));
    printf("callbacks: %s\n", bad ? "FAIL" : "OK");
    return bad ? 1 : 0;
}
