// Memory and events shared between two processes of one program (CUDA IPC, as NVIDIA's
// simpleIPC and PyTorch's multiprocessing share CUDA tensors): the parent allocates a small
// buffer (in a shared arena chunk through gpuless) and a large one (a range of its own), fills
// them, starts a long kernel that writes the small buffer's first value last and records an
// interprocess event after it; then it passes the memory and event handles to a child (fork
// and exec of itself, over a pipe). The child opens them, waits for the event on its stream
// (so it must see the long kernel's write), reads, adds 1 to every value with its own kernels,
// records the event; the parent waits for that event and reads the child's writes. Also the
// answers to a damaged handle, a pointer never opened and a second close. Shared cudart.
// Exits 1 if any value differs from the expected one.
#include <cstring>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static int bad = 0;
static void expect(const char* who, const char* what, long long got, long long want) {
    printf("%s: %s: %lld (expected %lld) %s\n", who, what, got, want, got == want ? "ok" : "WRONG");
    bad += got != want;
}

__global__ void fill(int* p, int n, int base) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = base + i;
}
__global__ void add(int* p, int n, int v) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] += v;
}
// Spins about `ns` nanoseconds, then writes `v` to p[0].
__global__ void late_write(int* p, int v, long long ns) {
    long long t0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (;;) {
        long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 >= ns) break;
    }
    p[0] = v;
}

static const int SMALL = 1000;        // 4 KB: shares a 2 MiB chunk through gpuless
static const int BIG = 3 << 20;       // 12 MiB: a range of its own

struct Handles {
    cudaIpcMemHandle_t small, big;
    cudaIpcEventHandle_t event;
};

static int count_wrong(const int* v, int n, int base, int first) {
    int wrong = v[0] != first;
    for (int i = 1; i < n; ++i) wrong += v[i] != base + i;
    return wrong;
}

static int child(int fd) {
    Handles h;
    if (read(fd, &h, sizeof h) != (ssize_t)sizeof h) {
        printf("child: no handles\n");
        return 1;
    }
    int *small = nullptr, *big = nullptr;
    cudaEvent_t ev;
    CK(cudaIpcOpenMemHandle((void**)&small, h.small, cudaIpcMemLazyEnablePeerAccess));
    CK(cudaIpcOpenMemHandle((void**)&big, h.big, cudaIpcMemLazyEnablePeerAccess));
    CK(cudaIpcOpenEventHandle(&ev, h.event));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    // The parent's long kernel writes small[0] last; the event follows it.
    CK(cudaStreamWaitEvent(s, ev, 0));
    static int v[BIG];
    CK(cudaMemcpyAsync(v, small, SMALL * sizeof(int), cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    expect("child", "small buffer as the parent wrote it (first value after the event)", count_wrong(v, SMALL, 100, 4242), 0);
    add<<<64, 256, 0, s>>>(small, SMALL, 1);
    add<<<256, 256, 0, s>>>(big, BIG, 1);
    CK(cudaGetLastError());
    CK(cudaEventRecord(ev, s));
    CK(cudaMemcpyAsync(v, big, BIG * sizeof(int), cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    expect("child", "big buffer after its own kernel", count_wrong(v, BIG, 8, 8), 0);
    // A handle that names nothing, a pointer never opened, and a second close.
    cudaIpcMemHandle_t zero;
    memset(&zero, 0, sizeof zero);
    void* p = nullptr;
    cudaError_t e = cudaIpcOpenMemHandle(&p, zero, cudaIpcMemLazyEnablePeerAccess);
    printf("child: open of a zeroed handle: %s\n", e == cudaSuccess ? "success" : "an error");
    cudaGetLastError();
    CK(cudaIpcCloseMemHandle(small));
    CK(cudaIpcCloseMemHandle(big));
    e = cudaIpcCloseMemHandle(big);
    printf("child: second close: %s\n", e == cudaSuccess ? "success" : "an error");
    cudaGetLastError();
    CK(cudaStreamDestroy(s));
    CK(cudaEventDestroy(ev));
    printf("child: done\n");
    fflush(stdout);
    return bad ? 1 : 0;
}

int main(int argc, char** argv) {
    if (argc == 3 && !strcmp(argv[1], "child")) return child(atoi(argv[2]));
    setvbuf(stdout, nullptr, _IOLBF, 0);
    int *small, *big;
    CK(cudaMalloc(&small, SMALL * sizeof(int)));
    CK(cudaMalloc(&big, BIG * sizeof(int)));
    fill<<<64, 256>>>(small, SMALL, 100);
    fill<<<256, 256>>>(big, BIG, 7);
    CK(cudaDeviceSynchronize());
    cudaEvent_t ev;
    CK(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming));
    // 300 ms, then small[0] = 4242; the event after it.
    late_write<<<1, 1>>>(small, 4242, 300LL * 1000 * 1000);
    CK(cudaEventRecord(ev, 0));
    Handles h;
    CK(cudaIpcGetMemHandle(&h.small, small));
    CK(cudaIpcGetMemHandle(&h.big, big));
    CK(cudaIpcGetEventHandle(&h.event, ev));
    cudaIpcMemHandle_t again;
    CK(cudaIpcGetMemHandle(&again, small));
    expect("parent", "the same allocation's handle again is the same", memcmp(&again, &h.small, sizeof again) == 0, 1);
    int fds[2];
    if (pipe(fds) != 0) return 2;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[1]);
        std::string fd = std::to_string(fds[0]);
        execl("/proc/self/exe", argv[0], "child", fd.c_str(), (char*)nullptr);
        _exit(127);
    }
    close(fds[0]);
    if (write(fds[1], &h, sizeof h) != (ssize_t)sizeof h) return 2;
    close(fds[1]);
    int status = 0;
    waitpid(pid, &status, 0);
    expect("parent", "the child's exit status", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), 0);
    // The child's last record of the event follows its writes.
    CK(cudaEventSynchronize(ev));
    static int v[BIG];
    CK(cudaMemcpy(v, small, SMALL * sizeof(int), cudaMemcpyDeviceToHost));
    expect("parent", "small buffer after the child's kernel", count_wrong(v, SMALL, 101, 4243), 0);
    CK(cudaMemcpy(v, big, BIG * sizeof(int), cudaMemcpyDeviceToHost));
    expect("parent", "big buffer after the child's kernel", count_wrong(v, BIG, 8, 8), 0);
    CK(cudaEventDestroy(ev));
    CK(cudaFree(small));
    CK(cudaFree(big));
    printf("ipc %s\n", bad ? "FAIL" : "OK");
    return bad ? 1 : 0;
}
