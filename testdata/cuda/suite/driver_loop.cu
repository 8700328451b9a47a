// Pure driver-API hot loop (no cudart: built with `-cudart none -lcuda`), the shape of one
// inference: upload an input, run a chain of kernels, download the result, repeated. Used to
// time client mode (`gpuless run --remote`) against the native run per iteration.
//
//   driver_loop KERNELS.cubin [ITERATIONS=200] [LAUNCHES=64]
//
// stdout: one deterministic line (iterations, launches, a checksum of every result);
// stderr: one JSON line with the per-iteration wall times (median, min, first) in µs.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda.h>

#define CU(call)                                                                          \
    do {                                                                                  \
        CUresult r_ = (call);                                                             \
        if (r_ != CUDA_SUCCESS) {                                                         \
            fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, (int)r_); \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

int main(int argc, char** argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s KERNELS.cubin [ITERATIONS] [LAUNCHES]\n", argv[0]); return 2; }
    const int iters = argc > 2 ? atoi(argv[2]) : 200;
    const int launches = argc > 3 ? atoi(argv[3]) : 64;
    const int n = 4096, block = 128, grid = n / block;
    const size_t bytes = n * sizeof(int);

    CU(cuInit(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CUmodule mod;
    CU(cuModuleLoad(&mod, argv[1]));
    CUfunction f;
    CU(cuModuleGetFunction(&f, mod, "axpb"));
    CUdeviceptr g_scale;
    size_t g_size = 0;
    CU(cuModuleGetGlobal(&g_scale, &g_size, mod, "g_scale"));
    int one = 1;
    CU(cuMemcpyHtoD(g_scale, &one, sizeof(int)));
    CUdeviceptr a, b;
    CU(cuMemAlloc(&a, bytes));
    CU(cuMemAlloc(&b, bytes));
    std::vector<int> in(n), out(n);
    uint64_t sum = 1469598103934665603ull;
    std::vector<double> us;
    us.reserve(iters);
    for (int it = 0; it < iters; ++it) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < n; ++i) in[i] = (i * 31 + it) % 1000;
        CU(cuMemcpyHtoD(a, in.data(), bytes));
        for (int k = 0; k < launches; ++k) {
            CUdeviceptr* x = (k % 2) ? &b : &a;
            CUdeviceptr* y = (k % 2) ? &a : &b;
            int nn = n;
            void* args[] = {x, y, &nn};
            CU(cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, nullptr, args, nullptr));
        }
        CU(cuMemcpyDtoH(out.data(), (launches % 2) ? b : a, bytes));
        auto t1 = std::chrono::steady_clock::now();
        us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        for (int i = 0; i < n; ++i) { sum ^= (uint64_t)(uint32_t)out[i]; sum *= 1099511628211ull; }
    }
    CU(cuMemFree(a));
    CU(cuMemFree(b));
    printf("driver_loop iterations=%d launches=%d checksum=0x%016llx\n", iters, launches, (unsigned long long)sum);
    double first = us.empty() ? 0 : us[0];
    std::sort(us.begin(), us.end());
    fprintf(stderr, "{\"median_us\": %.1f, \"min_us\": %.1f, \"first_us\": %.1f}\n",
            us.empty() ? 0 : us[us.size() / 2], us.empty() ? 0 : us[0], first);
    return 0;
}
