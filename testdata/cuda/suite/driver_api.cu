// Pure driver-API program (no cudart: built with `-cudart none -lcuda`). Loads the cubin named by
// argv[1] twice — cuModuleLoad and cuLibraryLoadFromFile — sets a __device__ global through
// cuModuleGetGlobal / cuLibraryGetGlobal, launches with cuLaunchKernel and with cuLaunchKernelEx
// (cluster-dimension attribute), and checks every result on the host.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda.h>

#include "cu_check.h"

static uint64_t fnv1a(const void* p, size_t n, uint64_t h) {
    const unsigned char* b = (const unsigned char*)p;
    for (size_t i = 0; i < n; ++i) { h ^= b[i]; h *= 1099511628211ull; }
    return h;
}

int main(int argc, char** argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s KERNELS.cubin\n", argv[0]); return 2; }
    const char* cubin = argv[1];
    const int n = 4096, block = 128, grid = n / block;  // grid divisible by the cluster size
    const size_t bytes = n * sizeof(int);

    CU(cuInit(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CU(cuCtxCreate(&ctx, nullptr, 0, dev));  // CUDA 13: cuCtxCreate_v4 (params may be NULL)

    std::vector<int> hx(n), hy(n);
    for (int i = 0; i < n; ++i) hx[i] = (i * 37) % 1001 - 500;
    CUdeviceptr dx, dy;
    CU(cuMemAlloc(&dx, bytes));
    CU(cuMemAlloc(&dy, bytes));
    CU(cuMemcpyHtoD(dx, hx.data(), bytes));

    int errors = 0;
    uint64_t sum = 1469598103934665603ull;

    // 1. cuModuleLoad + cuModuleGetFunction + cuModuleGetGlobal + cuLaunchKernel.
    CUmodule mod;
    CU(cuModuleLoad(&mod, cubin));
    CUfunction f_axpb, f_cluster;
    CU(cuModuleGetFunction(&f_axpb, mod, "axpb"));
    CU(cuModuleGetFunction(&f_cluster, mod, "cluster_ids"));
    CUdeviceptr g_scale;
    size_t g_size = 0;
    CU(cuModuleGetGlobal(&g_scale, &g_size, mod, "g_scale"));
    if (g_size != sizeof(int)) { fprintf(stderr, "g_scale size %zu\n", g_size); ++errors; }
    int scale = 3;
    CU(cuMemcpyHtoD(g_scale, &scale, sizeof(int)));
    int nn = n;
    void* args[] = {&dx, &dy, &nn};
    CU(cuLaunchKernel(f_axpb, grid, 1, 1, block, 1, 1, 0, nullptr, args, nullptr));
    CU(cuMemcpyDtoH(hy.data(), dy, bytes));
    for (int i = 0; i < n; ++i) errors += hy[i] != hx[i] * 3 + 7;
    sum = fnv1a(hy.data(), bytes, sum);

    // 2. cuLaunchKernelEx with a cluster-dimension attribute (sm_90) on a created stream.
    CUstream stream;
    CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CUlaunchAttribute attr[1];
    memset(attr, 0, sizeof(attr));
    attr[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr[0].value.clusterDim.x = 2;
    attr[0].value.clusterDim.y = 1;
    attr[0].value.clusterDim.z = 1;
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.gridDimX = grid; cfg.gridDimY = 1; cfg.gridDimZ = 1;
    cfg.blockDimX = block; cfg.blockDimY = 1; cfg.blockDimZ = 1;
    cfg.sharedMemBytes = 0;
    cfg.hStream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    void* cargs[] = {&dy, &nn};
    CU(cuLaunchKernelEx(&cfg, f_cluster, cargs, nullptr));
    CU(cuStreamSynchronize(stream));
    CU(cuMemcpyDtoH(hy.data(), dy, bytes));
    for (int i = 0; i < n; ++i) {
        int b = i / block, t = i % block;
        errors += hy[i] != b * 1000 + t + 1000000 * (b % 2) + 100000000 * 2;
    }
    sum = fnv1a(hy.data(), bytes, sum);

    // 3. The same image through the library API: its globals are its own.
    CUlibrary lib;
    CU(cuLibraryLoadFromFile(&lib, cubin, nullptr, nullptr, 0, nullptr, nullptr, 0));
    CUkernel k_axpb;
    CU(cuLibraryGetKernel(&k_axpb, lib, "axpb"));
    CUdeviceptr lg_scale;
    CU(cuLibraryGetGlobal(&lg_scale, &g_size, lib, "g_scale"));
    scale = -5;
    CU(cuMemcpyHtoD(lg_scale, &scale, sizeof(int)));
    CUfunction f_lib;
    CU(cuKernelGetFunction(&f_lib, k_axpb));
    CU(cuLaunchKernel(f_lib, grid, 1, 1, block, 1, 1, 0, stream, args, nullptr));
    CU(cuStreamSynchronize(stream));
    CU(cuMemcpyDtoH(hy.data(), dy, bytes));
    for (int i = 0; i < n; ++i) errors += hy[i] != hx[i] * -5 + 7;
    sum = fnv1a(hy.data(), bytes, sum);
    // A CUkernel may be launched as a CUfunction in the current context.
    CU(cuLaunchKernel((CUfunction)k_axpb, grid, 1, 1, block, 1, 1, 0, nullptr, args, nullptr));
    CU(cuCtxSynchronize());
    CU(cuMemcpyDtoH(hy.data(), dy, bytes));
    for (int i = 0; i < n; ++i) errors += hy[i] != hx[i] * -5 + 7;
    // The module's global kept its own value.
    int back = 0;
    CU(cuMemcpyDtoH(&back, g_scale, sizeof(int)));
    errors += back != 3;
    sum = fnv1a(&back, sizeof(back), sum);

    CU(cuLibraryUnload(lib));
    CU(cuModuleUnload(mod));
    CU(cuStreamDestroy(stream));
    CU(cuMemFree(dx));
    CU(cuMemFree(dy));
    CU(cuCtxDestroy(ctx));

    printf("driver_api n=%d checksum=0x%016llx %s\n", n, (unsigned long long)sum,
           errors == 0 ? "OK" : "FAIL");
    if (errors) fprintf(stderr, "driver_api: %d wrong values\n", errors);
    return errors == 0 ? 0 : 1;
}
