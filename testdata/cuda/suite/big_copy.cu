// Copies of any size (issue 34: a 64 MiB copy to/from cuMemHostRegister'ed memory ended the
// client's session): 1 B, 64 MiB - 1, 64 MiB, 64 MiB + 1 and 200 MiB host-to-device,
// device-to-host and device-to-device, with pageable, cudaHostAlloc'd and cudaHostRegister'ed
// host memory, synchronous and asynchronous; host-to-host through cudaMemcpyDefault; and
// cudaMemcpy2D (synchronous and asynchronous) of a pitched region larger than 64 MiB.
// Every copy prints its result and a checksum of what arrived — computed on the device for
// device destinations, on the host for host destinations, with the same formula, so equal
// sizes show equal checksums — and whether the byte after the copied range is untouched.
// Shared cudart. Exits 1 if any copy failed or any checksum differs from its source's.
#include <cstring>
#include <vector>

#include "check.h"

static const size_t MiB = 1 << 20;
static const size_t sizes[] = {1, 64 * MiB - 1, 64 * MiB, 64 * MiB + 1, 200 * MiB};
static const size_t cap = 200 * MiB + 4096;  // every buffer: the largest copy and a guard
static const unsigned char guard = 0xEE;

// Order-independent checksum: sum over i of (byte_i + 1) * odd(i), mod 2^64.
__host__ __device__ static inline unsigned long long term(unsigned char b, unsigned long long i) {
    return (b + 1ull) * ((i * 0x9E3779B97F4A7C15ull) | 1ull);
}

__global__ void dsum(const unsigned char* p, size_t n, unsigned long long* out) {
    unsigned long long acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        acc += term(p[i], i);
    atomicAdd(out, acc);
}

static unsigned long long hsum(const unsigned char* p, size_t n) {
    unsigned long long acc = 0;
    for (size_t i = 0; i < n; ++i) acc += term(p[i], i);
    return acc;
}

static unsigned long long* d_acc;

// The device checksum of p[0, n) and whether p[n] is the guard byte.
static unsigned long long device_sum(const unsigned char* p, size_t n, bool* guard_ok) {
    CK(cudaMemset(d_acc, 0, sizeof *d_acc));
    dsum<<<1024, 256>>>(p, n, d_acc);
    CK(cudaGetLastError());
    unsigned long long s = 0;
    CK(cudaMemcpy(&s, d_acc, sizeof s, cudaMemcpyDeviceToHost));
    unsigned char g = 0;
    CK(cudaMemcpy(&g, p + n, 1, cudaMemcpyDeviceToHost));
    *guard_ok = g == guard;
    return s;
}

// Fills p[0, n) with bytes that depend on n (xorshift, eight bytes a step).
static void pattern(unsigned char* p, size_t n) {
    unsigned long long x = 0x243F6A8885A308D3ull ^ (n * 0x100000001B3ull);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
    for (; i < n; ++i) p[i] = (unsigned char)(i * 31 + 7);
}

static int bad = 0;

static void line(const char* what, const char* kind, const char* mode, size_t n, cudaError_t e, unsigned long long sum,
                 unsigned long long want, bool guard_ok) {
    printf("%s %s %s %zu: %s", what, kind, mode, n, cudaGetErrorName(e));
    if (e == cudaSuccess)
        printf(" checksum=0x%016llx matches the source: %s, guard intact: %s", sum, sum == want ? "yes" : "no",
               guard_ok ? "yes" : "no");
    printf("\n");
    bad += e != cudaSuccess || sum != want || !guard_ok;
}

int main() {
    setvbuf(stdout, nullptr, _IOLBF, 0);  // every line out, even if the program dies
    CK(cudaMalloc(&d_acc, sizeof *d_acc));
    unsigned char *d0, *d1;
    CK(cudaMalloc(&d0, cap));
    CK(cudaMalloc(&d1, cap));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    const char* kinds[] = {"pageable", "cudaHostAlloc", "cudaHostRegister"};
    for (int k = 0; k < 3; ++k) {
        unsigned char *src = nullptr, *dst = nullptr;
        if (k == 1) {
            CK(cudaHostAlloc((void**)&src, cap, cudaHostAllocDefault));
            CK(cudaHostAlloc((void**)&dst, cap, cudaHostAllocDefault));
        } else {
            src = (unsigned char*)aligned_alloc(4096, cap);
            dst = (unsigned char*)aligned_alloc(4096, cap);
            if (!src || !dst) { fprintf(stderr, "out of host memory\n"); return 2; }
            if (k == 2) {
                CK(cudaHostRegister(src, cap, cudaHostRegisterDefault));
                CK(cudaHostRegister(dst, cap, cudaHostRegisterDefault));
            }
        }
        for (int async = 0; async < 2; ++async) {
            const char* mode = async ? "async" : "sync";
            for (size_t n : sizes) {
                pattern(src, n);
                src[n] = 0x11;  // not copied
                unsigned long long want = hsum(src, n);
                // Host to device.
                CK(cudaMemset(d0, guard, n + 1));
                // `s` does not wait for the legacy stream's memset: wait for it here.
                CK(cudaDeviceSynchronize());
                cudaError_t e = async ? cudaMemcpyAsync(d0, src, n, cudaMemcpyHostToDevice, s)
                                      : cudaMemcpy(d0, src, n, cudaMemcpyHostToDevice);
                if (async && e == cudaSuccess) e = cudaStreamSynchronize(s);
                bool g = false;
                unsigned long long got = e == cudaSuccess ? device_sum(d0, n, &g) : 0;
                line("H2D", kinds[k], mode, n, e, got, want, g);
                // Device to host.
                memset(dst, guard, n + 1);
                e = async ? cudaMemcpyAsync(dst, d0, n, cudaMemcpyDeviceToHost, s)
                          : cudaMemcpy(dst, d0, n, cudaMemcpyDeviceToHost);
                if (async && e == cudaSuccess) e = cudaStreamSynchronize(s);
                got = hsum(dst, n);
                line("D2H", kinds[k], mode, n, e, got, want, dst[n] == guard);
                // Host to host (the runtime infers the direction).
                if (!async) {
                    memset(dst, guard, n + 1);
                    e = cudaMemcpy(dst, src, n, cudaMemcpyDefault);
                    line("H2H", kinds[k], mode, n, e, hsum(dst, n), want, dst[n] == guard);
                }
            }
        }
        if (k == 1) {
            CK(cudaFreeHost(src));
            CK(cudaFreeHost(dst));
        } else {
            if (k == 2) {
                CK(cudaHostUnregister(src));
                CK(cudaHostUnregister(dst));
            }
            free(src);
            free(dst);
        }
    }

    // Device to device: d0 holds the 200 MiB pattern from the last round.
    for (int async = 0; async < 2; ++async) {
        for (size_t n : sizes) {
            std::vector<unsigned char> h(n);
            pattern(h.data(), n);
            unsigned long long want = hsum(h.data(), n);
            CK(cudaMemcpy(d0, h.data(), n, cudaMemcpyHostToDevice));
            CK(cudaMemset(d1, guard, n + 1));
            CK(cudaDeviceSynchronize());  // as above: `s` is non-blocking
            cudaError_t e = async ? cudaMemcpyAsync(d1, d0, n, cudaMemcpyDeviceToDevice, s)
                                  : cudaMemcpy(d1, d0, n, cudaMemcpyDeviceToDevice);
            if (async && e == cudaSuccess) e = cudaStreamSynchronize(s);
            bool g = false;
            unsigned long long got = e == cudaSuccess ? device_sum(d1, n, &g) : 0;
            line("D2D", "device", async ? "async" : "sync", n, e, got, want, g);
        }
    }

    // cudaMemcpy2D of a pitched region over 64 MiB: 8,200 bytes by 8,500 rows (69.7 MB), host
    // rows padded to 8,256 bytes; up, then down into other host rows of 8,320 bytes.
    const size_t width = 8200, height = 8500, hp_up = 8256, hp_down = 8320;
    unsigned char* dp;
    size_t pitch = 0;
    CK(cudaMallocPitch((void**)&dp, &pitch, width, height));
    printf("cudaMallocPitch %zu x %zu: pitch >= width: %s\n", width, height, pitch >= width ? "yes" : "no");
    for (int pinned = 0; pinned < 2; ++pinned) {
        unsigned char *up, *down;
        if (pinned) {
            CK(cudaHostAlloc((void**)&up, hp_up * height, cudaHostAllocDefault));
            CK(cudaHostAlloc((void**)&down, hp_down * height, cudaHostAllocDefault));
        } else {
            up = (unsigned char*)malloc(hp_up * height);
            down = (unsigned char*)malloc(hp_down * height);
        }
        pattern(up, hp_up * height);
        unsigned long long want = 0;
        for (size_t r = 0; r < height; ++r) want += hsum(up + r * hp_up, width) * (r + 1);
        memset(down, guard, hp_down * height);
        const char* mode = pinned ? "async cudaHostAlloc" : "sync pageable";
        cudaError_t e = pinned ? cudaMemcpy2DAsync(dp, pitch, up, hp_up, width, height, cudaMemcpyHostToDevice, s)
                               : cudaMemcpy2D(dp, pitch, up, hp_up, width, height, cudaMemcpyHostToDevice);
        cudaError_t e2 = e;
        if (e == cudaSuccess)
            e2 = pinned ? cudaMemcpy2DAsync(down, hp_down, dp, pitch, width, height, cudaMemcpyDeviceToHost, s)
                        : cudaMemcpy2D(down, hp_down, dp, pitch, width, height, cudaMemcpyDeviceToHost);
        if (pinned && e2 == cudaSuccess) e2 = cudaStreamSynchronize(s);
        unsigned long long got = 0;
        bool pad_ok = true;
        for (size_t r = 0; r < height; ++r) {
            got += hsum(down + r * hp_down, width) * (r + 1);
            for (size_t c = width; c < hp_down; ++c) pad_ok &= down[r * hp_down + c] == guard;
        }
        printf("2D H2D %s %zux%zu: %s\n", mode, width, height, cudaGetErrorName(e));
        line("2D D2H", "rows", mode, width * height, e2, got, want, pad_ok);
        bad += e != cudaSuccess;
        if (pinned) {
            CK(cudaFreeHost(up));
            CK(cudaFreeHost(down));
        } else {
            free(up);
            free(down);
        }
    }
    CK(cudaFree(dp));
    CK(cudaStreamDestroy(s));
    CK(cudaFree(d0));
    CK(cudaFree(d1));
    CK(cudaFree(d_acc));
    printf("big_copy: %s\n", bad ? "FAIL" : "OK");
    return bad ? 1 : 0;
}
