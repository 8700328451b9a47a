// CUDA graphs: (1) stream capture of a memset, kernels on two streams joined by events, a
// device-to-device and a device-to-host memcpy; instantiated once, uploaded, launched 5 times.
// (2) A graph built with the explicit API (cudaGraphAddKernelNode x2 + a memcpy node),
// launched, then one kernel node's parameters changed in the executable graph and launched again.
// (3) Graphs built with the generic cudaGraphAddNode (memcpy, memset and kernel nodes) and
// extended by cudaStreamBeginCaptureToGraph (a captured kernel after them); the first is
// instantiated and launched, then updated from the second with cudaGraphExecUpdate, launched,
// its kernel node changed with cudaGraphExecKernelNodeSetParams, launched.
#include <vector>
#include "check.h"

__global__ void add(int* dst, const int* src, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] += src[i];
}
__global__ void scale(int* x, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= k;
}
__global__ void square_mod(int* z, const int* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] = (x[i] * x[i]) % 1000;
}
__global__ void accum(int* acc, const int* y, const int* z, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) acc[i] += y[i] + z[i];
}
__global__ void fill(int* w, int n, int v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) w[i] = v + i % 5;
}

int main() {
    const int n = 100000, block = 256, grid = (n + block - 1) / block, launches = 5;
    const size_t bytes = n * sizeof(int);
    int errors = 0;
    std::vector<int> hx(n);
    for (int i = 0; i < n; ++i) hx[i] = i % 211 - 100;
    int *x, *tmp, *y, *z, *acc, *h_acc;
    for (int** p : {&x, &tmp, &y, &z, &acc}) CK(cudaMalloc(p, bytes));
    CK(cudaMallocHost(&h_acc, bytes));
    CK(cudaMemcpy(x, hx.data(), bytes, cudaMemcpyHostToDevice));
    CK(cudaMemset(acc, 0, bytes));
    CK(cudaDeviceSynchronize());  // the streams below are non-blocking

    // 1. Stream capture.
    cudaStream_t s, s2;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    cudaEvent_t fork, join;
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    cudaGraph_t g1;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CK(cudaMemsetAsync(tmp, 0, bytes, s));
    add<<<grid, block, 0, s>>>(tmp, x, n);
    CK(cudaEventRecord(fork, s));
    CK(cudaStreamWaitEvent(s2, fork, 0));
    square_mod<<<grid, block, 0, s2>>>(z, x, n);
    CK(cudaEventRecord(join, s2));
    scale<<<grid, block, 0, s>>>(tmp, n, 3);
    CK(cudaMemcpyAsync(y, tmp, bytes, cudaMemcpyDeviceToDevice, s));
    CK(cudaStreamWaitEvent(s, join, 0));
    accum<<<grid, block, 0, s>>>(acc, y, z, n);
    CK(cudaMemcpyAsync(h_acc, acc, bytes, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamEndCapture(s, &g1));
    size_t nodes = 0;
    CK(cudaGraphGetNodes(g1, nullptr, &nodes));
    errors += nodes != 7;
    cudaGraphExec_t e1;
    CK(cudaGraphInstantiate(&e1, g1, 0));
    CK(cudaGraphUpload(e1, s));
    uint64_t sum = 1469598103934665603ull;
    for (int l = 1; l <= launches; ++l) {
        CK(cudaGraphLaunch(e1, s));
        CK(cudaStreamSynchronize(s));
        for (int i = 0; i < n; ++i) errors += h_acc[i] != l * (3 * hx[i] + (hx[i] * hx[i]) % 1000);
        sum = fnv1a(h_acc, bytes, sum);
    }

    // 2. Explicit graph: fill -> scale -> memcpy(D2D).
    int *w, *w2;
    CK(cudaMalloc(&w, bytes));
    CK(cudaMalloc(&w2, bytes));
    cudaGraph_t g2;
    CK(cudaGraphCreate(&g2, 0));
    int nn = n, v = 7, k = 2;
    void* fill_args[] = {&w, &nn, &v};
    void* scale_args[] = {&w, &nn, &k};
    cudaKernelNodeParams kp = {};
    kp.func = (void*)fill;
    kp.gridDim = dim3(grid);
    kp.blockDim = dim3(block);
    kp.sharedMemBytes = 0;
    kp.kernelParams = fill_args;
    cudaGraphNode_t n_fill, n_scale, n_copy;
    CK(cudaGraphAddKernelNode(&n_fill, g2, nullptr, 0, &kp));
    kp.func = (void*)scale;
    kp.kernelParams = scale_args;
    CK(cudaGraphAddKernelNode(&n_scale, g2, &n_fill, 1, &kp));
    CK(cudaGraphAddMemcpyNode1D(&n_copy, g2, &n_scale, 1, w2, w, bytes, cudaMemcpyDeviceToDevice));
    cudaGraphExec_t e2;
    CK(cudaGraphInstantiate(&e2, g2, 0));
    std::vector<int> hw(n);
    for (int round = 0; round < 2; ++round) {
        if (round == 1) {  // new value for the fill node, in the executable graph only
            v = -40;
            kp.func = (void*)fill;
            kp.kernelParams = fill_args;
            CK(cudaGraphExecKernelNodeSetParams(e2, n_fill, &kp));
        }
        CK(cudaGraphLaunch(e2, s));
        CK(cudaStreamSynchronize(s));
        CK(cudaMemcpy(hw.data(), w2, bytes, cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; ++i) errors += hw[i] != 2 * (v + i % 5);
        sum = fnv1a(hw.data(), bytes, sum);
    }

    // 3. u = x (memcpy node); v = m (memset node); u += v (kernel node, after both);
    //    u *= k (kernel captured into the same graph, after the kernel node).
    int *u, *vbuf;
    CK(cudaMalloc(&u, bytes));
    CK(cudaMalloc(&vbuf, bytes));
    void* add_args[] = {&u, &vbuf, &nn};
    auto build = [&](unsigned m, int* k, cudaGraphNode_t* kernel_node) {
        cudaGraph_t g;
        CK(cudaGraphCreate(&g, 0));
        cudaGraphNodeParams p = {};
        p.type = cudaGraphNodeTypeMemcpy;
        p.memcpy.copyParams.srcPtr = make_cudaPitchedPtr(x, bytes, n, 1);
        p.memcpy.copyParams.dstPtr = make_cudaPitchedPtr(u, bytes, n, 1);
        p.memcpy.copyParams.extent = make_cudaExtent(bytes, 1, 1);
        p.memcpy.copyParams.kind = cudaMemcpyDeviceToDevice;
        cudaGraphNode_t first[2];
        CK(cudaGraphAddNode(&first[0], g, nullptr, nullptr, 0, &p));
        p = {};
        p.type = cudaGraphNodeTypeMemset;
        p.memset.dst = vbuf;
        p.memset.value = m;
        p.memset.elementSize = 4;
        p.memset.width = n;
        p.memset.height = 1;
        CK(cudaGraphAddNode(&first[1], g, nullptr, nullptr, 0, &p));
        p = {};
        p.type = cudaGraphNodeTypeKernel;
        p.kernel.func = (void*)add;
        p.kernel.gridDim = dim3(grid);
        p.kernel.blockDim = dim3(block);
        p.kernel.kernelParams = add_args;
        CK(cudaGraphAddNode(kernel_node, g, first, nullptr, 2, &p));
        void* scale_k[] = {&u, &nn, k};
        CK(cudaStreamBeginCaptureToGraph(s, g, kernel_node, nullptr, 1, cudaStreamCaptureModeGlobal));
        CK(cudaLaunchKernel((void*)scale, dim3(grid), dim3(block), scale_k, 0, s));
        cudaGraph_t same;
        CK(cudaStreamEndCapture(s, &same));
        errors += same != g;
        size_t count = 0;
        CK(cudaGraphGetNodes(g, nullptr, &count));
        errors += count != 4;
        return g;
    };
    int k3 = 3, k4 = 2;
    cudaGraphNode_t n3, n4;
    cudaGraph_t g3 = build(7, &k3, &n3), g4 = build(9, &k4, &n4);
    cudaGraphExec_t e3;
    CK(cudaGraphInstantiate(&e3, g3, 0));
    for (int round = 0; round < 3; ++round) {
        if (round == 1) {  // memset 9 and factor 2, from g4
            cudaGraphExecUpdateResultInfo info = {};
            CK(cudaGraphExecUpdate(e3, g4, &info));
            errors += info.result != cudaGraphExecUpdateSuccess;
        }
        if (round == 2) {  // u += x instead of u += v
            cudaKernelNodeParams kp3 = {};
            void* add_x[] = {&u, &x, &nn};
            kp3.func = (void*)add;
            kp3.gridDim = dim3(grid);
            kp3.blockDim = dim3(block);
            kp3.kernelParams = add_x;
            CK(cudaGraphExecKernelNodeSetParams(e3, n3, &kp3));
        }
        CK(cudaGraphLaunch(e3, s));
        CK(cudaStreamSynchronize(s));
        CK(cudaMemcpy(hw.data(), u, bytes, cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; ++i) {
            int want = round == 0 ? 3 * (hx[i] + 7) : round == 1 ? 2 * (hx[i] + 9) : 2 * (2 * hx[i]);
            errors += hw[i] != want;
        }
        sum = fnv1a(hw.data(), bytes, sum);
    }

    CK(cudaGraphExecDestroy(e1));
    CK(cudaGraphExecDestroy(e2));
    CK(cudaGraphExecDestroy(e3));
    CK(cudaGraphDestroy(g1));
    CK(cudaGraphDestroy(g2));
    CK(cudaGraphDestroy(g3));
    CK(cudaGraphDestroy(g4));
    CK(cudaEventDestroy(fork));
    CK(cudaEventDestroy(join));
    CK(cudaStreamDestroy(s));
    CK(cudaStreamDestroy(s2));
    for (int* p : {x, tmp, y, z, acc, w, w2, u, vbuf}) CK(cudaFree(p));
    CK(cudaFreeHost(h_acc));
    return report("graph", "n=100000 captured=5 explicit=2 generic=3", sum, errors);
}
