// A hostile tenant beside a victim (issue 37; scripts/gpu-suite-confine.sh). Two processes,
// natively or each through `gpuless run --remote` (each its own session, its own executor):
//
//   hostile victim DIR    allocates 1 MiB, fills it with 0xA5, writes its address to DIR/addr,
//                         waits for DIR/done (at most 120 s), then checks the bytes: prints
//                         `victim intact` (exit 0) or `victim CHANGED` (exit 1).
//   hostile attack DIR    reads DIR/addr and tries, at that address it never allocated: a copy
//                         out, a copy in, a memset; then allocates as much itself (through
//                         gpuless: at the same address, in its own context) and reads it, and
//                         runs a kernel that reads the address and, where that did not fault, one
//                         that writes it.
//                         Prints one `attack WHAT CODE` line each (the CUDA error name) and
//                         `attack saw-victim-bytes yes|no`; touches DIR/done; exit 0 when it saw
//                         none of the victim's bytes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
#include <cuda_runtime.h>

__global__ void peek(const unsigned char* p, unsigned* out) { *out = p[threadIdx.x]; }
__global__ void poke(unsigned char* p) { p[threadIdx.x] = 0; }

static const size_t N = 1 << 20;

static int victim(const std::string& dir) {
    unsigned char* d = nullptr;
    if (cudaMalloc(&d, N) != cudaSuccess) { printf("victim no-memory\n"); return 2; }
    unsigned char* h = (unsigned char*)malloc(N);
    memset(h, 0xA5, N);
    cudaMemcpy(d, h, N, cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();
    FILE* f = fopen((dir + "/addr.tmp").c_str(), "w");
    fprintf(f, "%llx\n", (unsigned long long)(uintptr_t)d);
    fclose(f);
    rename((dir + "/addr.tmp").c_str(), (dir + "/addr").c_str());
    for (int i = 0; i < 1200 && access((dir + "/done").c_str(), F_OK) != 0; ++i) usleep(100000);
    memset(h, 0, N);
    cudaError_t e = cudaMemcpy(h, d, N, cudaMemcpyDeviceToHost);
    size_t bad = 0;
    for (size_t i = 0; i < N; ++i) bad += h[i] != 0xA5;
    printf("victim %s\n", e == cudaSuccess && bad == 0 ? "intact" : "CHANGED");
    return e == cudaSuccess && bad == 0 ? 0 : 1;
}

static int attack(const std::string& dir) {
    FILE* f = nullptr;
    for (int i = 0; i < 1200 && !(f = fopen((dir + "/addr").c_str(), "r")); ++i) usleep(100000);
    if (!f) { printf("attack no-address\n"); return 2; }
    unsigned long long a = 0;
    if (fscanf(f, "%llx", &a) != 1) { printf("attack bad-address\n"); return 2; }
    fclose(f);
    unsigned char* p = (unsigned char*)(uintptr_t)a;
    cudaFree(0);  // a context of its own
    unsigned char* h = (unsigned char*)calloc(4096, 1);
    bool saw = false;
    cudaError_t e = cudaMemcpy(h, p, 4096, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 4096; ++i) saw |= h[i] == 0xA5;
    printf("attack copy-out %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    memset(h, 0, 4096);
    e = cudaMemcpy(p, h, 4096, cudaMemcpyHostToDevice);
    printf("attack copy-in %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    e = cudaMemset(p, 0, 4096);
    printf("attack memset %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    // Its own allocation of the same size: through gpuless the arena places it at the victim's
    // address (each session's executor has its own context, so its own memory): it must hold
    // none of the victim's bytes.
    unsigned char* q = nullptr;
    if (cudaMalloc(&q, N) == cudaSuccess) {
        printf("attack own-allocation-at-the-victim-address %s\n", q == p ? "yes" : "no");
        unsigned char* mine = (unsigned char*)malloc(N);
        if (cudaMemcpy(mine, q, N, cudaMemcpyDeviceToHost) == cudaSuccess)
            for (size_t i = 0; i < N; ++i) saw |= mine[i] == 0xA5;
        free(mine);
    }
    unsigned* out = nullptr;
    unsigned got = 0;
    if (cudaMalloc(&out, sizeof(unsigned)) == cudaSuccess) {
        peek<<<1, 1>>>(p, out);
        e = cudaDeviceSynchronize();
        printf("attack kernel-read %s\n", cudaGetErrorName(e));
        if (e == cudaSuccess && cudaMemcpy(&got, out, sizeof got, cudaMemcpyDeviceToHost) == cudaSuccess)
            saw |= got == 0xA5;
    }
    // A context that faulted is lost: the write is tried only where the read did not fault
    // (the address is then this session's own memory).
    if (e == cudaSuccess) {
        poke<<<1, 32>>>(p);
        e = cudaDeviceSynchronize();
        printf("attack kernel-write %s\n", cudaGetErrorName(e));
    }
    printf("attack saw-victim-bytes %s\n", saw ? "yes" : "no");
    fflush(stdout);
    FILE* d = fopen((dir + "/done").c_str(), "w");
    if (d) fclose(d);
    return saw ? 1 : 0;
}

int main(int argc, char** argv) {
    if (argc != 3) { fprintf(stderr, "usage: hostile victim|attack DIR\n"); return 2; }
    std::string mode = argv[1], dir = argv[2];
    return mode == "victim" ? victim(dir) : attack(dir);
}
