/* Cost of the driver queries PyTorch repeats on every inference, per call, natively and under
 * the recorder (scripts/query-cost/run.sh builds and runs it on a GPU machine).
 * Prints one line per query: name, calls, nanoseconds per call. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static const char *ptx =
    ".version 7.0\n.target sm_50\n.address_size 64\n"
    ".visible .entry k(.param .u64 p) { ret; }\n";

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

#define CHECK(x)                                                        \
    do {                                                                \
        CUresult r_ = (x);                                              \
        if (r_ != CUDA_SUCCESS) {                                       \
            fprintf(stderr, "%s failed: %d\n", #x, (int)r_);            \
            exit(1);                                                    \
        }                                                               \
    } while (0)

#define TIME(name, stmt)                                                \
    do {                                                                \
        for (int i = 0; i < n / 10; i++) stmt;                          \
        double t0 = now();                                              \
        for (int i = 0; i < n; i++) stmt;                               \
        printf("%-52s %9d %8.1f ns/call\n", name, n, (now() - t0) / n); \
    } while (0)

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1000000;
    CUdevice dev;
    CUcontext ctx;
    CUlibrary lib;
    CUkernel k;
    CUfunction f;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuLibraryLoadData(&lib, ptx, NULL, NULL, 0, NULL, NULL, 0));
    CHECK(cuLibraryGetKernel(&k, lib, "k"));
    CHECK(cuKernelGetFunction(&f, k));
    unsigned flags;
    int v, active;
    CUcontext cur;
    CUfunction g;
    TIME("cuDevicePrimaryCtxGetState", cuDevicePrimaryCtxGetState(dev, &flags, &active));
    TIME("cuKernelGetAttribute(MAX_THREADS_PER_BLOCK)",
         cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k, dev));
    TIME("cuFuncGetAttribute(NUM_REGS)", cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
    TIME("cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)",
         cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    TIME("cuCtxGetCurrent", cuCtxGetCurrent(&cur));
    TIME("cuKernelGetFunction", cuKernelGetFunction(&g, k));
    TIME("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
         cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&v, f, 256, 0, 0));
    return 0;
}
