// Device printf (issue 34): what kernels print must reach the program's stdout at the points
// where the driver flushes it — synchronizations (device, stream, event, context), a blocking
// copy, a module's unload, the context's destruction (cudaDeviceReset) — in order with the
// program's own output. The order is made deterministic: host lines are flushed before every
// launch and printed only after a flush point; blocks of a kernel print one at a time (block b
// waits for block b-1), threads of a block one at a time. The output must be identical natively
// and through the client. Shared cudart and -lcuda (a module loaded from PTX, unloaded).
#include <cuda.h>

#include <cstring>

#include "check.h"

static void host(const char* line) {
    printf("host: %s\n", line);
    fflush(stdout);
}

__global__ void hello(int launch) { printf("device: hello from launch %d\n", launch); }

// Blocks print in order (block b waits until *turn == b), threads of a block in order.
__global__ void ordered(int launch, unsigned* turn) {
    if (threadIdx.x == 0)
        while (*(volatile unsigned*)turn != blockIdx.x) {
        }
    __syncthreads();
    for (unsigned t = 0; t < blockDim.x; ++t) {
        if (threadIdx.x == t) printf("device: launch %d block %u thread %u\n", launch, blockIdx.x, t);
        __syncthreads();
    }
    __threadfence();
    if (threadIdx.x == 0) atomicAdd(turn, 1u);
}

// Conversions and widths the driver formats on the host.
__global__ void formats(const char* word) {
    const char* local = "device literal";
    printf("device: int %d unsigned %u negative %d hex %x HEX %X octal %o\n", 42, 4000000000u, -17, 0xbeef, 0xcafe, 8);
    printf("device: long %ld long long %lld unsigned long long %llu\n", -1234567890L, -9000000000000LL,
           18000000000000000000ull);
    printf("device: float %f %.3f %10.4f|%-10.2f| exp %e %E general %g %G\n", 3.5f, 2.0 / 3.0, -1.25, 6.5, 12345.678,
           0.000123, 1e-10, 1e20);
    printf("device: char %c%c%c string '%s' '%s' width '%8s' '%-8s' percent %%\n", 'a', 'b', 'c', local, word, "ab",
           "cd");
    printf("device: padded '%05d' '%+d' '% d' '%5d' '%-5d' '%.0f'\n", 42, 7, 7, 123, 123, 2.5);
    printf("device: no arguments at all\n");
    printf("device: many %d %d %d %d %d %d %d %d %d %d %d %d\n", 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12);
}

__global__ void many_lines(int n) {
    for (int i = 0; i < n; ++i) printf("device: line %03d of %d\n", i, n);
}

// The module kernel say(int v): printf("module kernel says %d\n", v), as nvcc 13.0 compiles it.
static const char* say_ptx =
    ".version 8.0\n"
    ".target sm_90\n"
    ".address_size 64\n"
    ".extern .func (.param .b32 func_retval0) vprintf (.param .b64 vprintf_param_0, .param .b64 vprintf_param_1);\n"
    ".global .align 1 .b8 $str[23] = {109, 111, 100, 117, 108, 101, 32, 107, 101, 114, 110, 101, 108, 32, 115, 97, "
    "121, 115, 32, 37, 100, 10};\n"
    ".visible .entry say(.param .u32 say_param_0)\n"
    "{\n"
    "  .local .align 8 .b8 __local_depot0[8];\n"
    "  .reg .b64 %SP; .reg .b64 %SPL; .reg .b32 %r<3>; .reg .b64 %rd<5>;\n"
    "  mov.u64 %SPL, __local_depot0;\n"
    "  cvta.local.u64 %SP, %SPL;\n"
    "  ld.param.u32 %r1, [say_param_0];\n"
    "  add.u64 %rd1, %SP, 0;\n"
    "  add.u64 %rd2, %SPL, 0;\n"
    "  st.local.u32 [%rd2], %r1;\n"
    "  mov.u64 %rd3, $str;\n"
    "  cvta.global.u64 %rd4, %rd3;\n"
    "  {\n"
    "  .param .b64 param0; st.param.b64 [param0+0], %rd4;\n"
    "  .param .b64 param1; st.param.b64 [param1+0], %rd1;\n"
    "  .param .b32 retval0;\n"
    "  call.uni (retval0), vprintf, (param0, param1);\n"
    "  ld.param.b32 %r2, [retval0+0];\n"
    "  }\n"
    "  ret;\n"
    "}\n";

#include "cu_check.h"

int main() {
    host("start");
    CK(cudaFree(0));  // the context, before anything prints

    hello<<<1, 1>>>(1);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    host("after cudaDeviceSynchronize");

    unsigned* turn;
    CK(cudaMalloc(&turn, 2 * sizeof(unsigned)));
    CK(cudaMemset(turn, 0, 2 * sizeof(unsigned)));
    ordered<<<4, 4>>>(2, turn);
    ordered<<<4, 4>>>(3, turn + 1);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(0));
    host("after cudaStreamSynchronize(0): two launches of 4 blocks x 4 threads above");

    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const char text[] = "uploaded word";
    char* word;
    CK(cudaMalloc(&word, sizeof text));
    CK(cudaMemcpy(word, text, sizeof text, cudaMemcpyHostToDevice));
    formats<<<1, 1, 0, s>>>(word);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(s));
    host("after cudaStreamSynchronize(s)");

    cudaEvent_t e;
    CK(cudaEventCreate(&e));
    many_lines<<<1, 1, 0, s>>>(200);
    CK(cudaGetLastError());
    CK(cudaEventRecord(e, s));
    CK(cudaEventSynchronize(e));
    host("after cudaEventSynchronize");

    hello<<<1, 1, 0, s>>>(5);
    CK(cudaGetLastError());
    CU(cuCtxSynchronize());
    host("after cuCtxSynchronize");

    hello<<<1, 1>>>(6);
    CK(cudaGetLastError());
    unsigned back[2] = {0, 0};
    CK(cudaMemcpy(back, turn, sizeof back, cudaMemcpyDeviceToHost));
    printf("host: after a blocking cudaMemcpy (turns %u %u)\n", back[0], back[1]);
    fflush(stdout);

    // A module of the program's own, launched through the driver and unloaded without a
    // synchronization: the unload flushes.
    CUmodule mod;
    CUfunction say;
    CU(cuModuleLoadData(&mod, say_ptx));
    CU(cuModuleGetFunction(&say, mod, "say"));
    int v = 7;
    void* args[] = {&v};
    CU(cuLaunchKernel(say, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr));
    CU(cuModuleUnload(mod));
    host("after cuModuleUnload");

    // Host lines between launches, each flushed, with a synchronization after each launch.
    for (int k = 0; k < 3; ++k) {
        printf("host: loop %d before its launch\n", k);
        fflush(stdout);
        hello<<<1, 1, 0, s>>>(100 + k);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(s));
        printf("host: loop %d after its synchronization\n", k);
        fflush(stdout);
    }

    CK(cudaEventDestroy(e));
    CK(cudaStreamDestroy(s));
    CK(cudaFree(word));
    CK(cudaFree(turn));
    hello<<<1, 1>>>(8);
    CK(cudaGetLastError());
    CK(cudaDeviceReset());
    host("after cudaDeviceReset");

    // A new context after the reset prints too.
    hello<<<1, 1>>>(9);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    host("end");
    return 0;
}
