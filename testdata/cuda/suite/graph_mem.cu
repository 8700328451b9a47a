// Graph memory nodes (issue 35): (a) a stream capture of cudaMallocAsync, two kernels using
// that memory, a device-to-host cudaMemcpyAsync of it and cudaFreeAsync becomes a graph with
// memory-allocation and memory-free nodes (counted by type; the allocation node's size read
// back), instantiated once and launched 3 times, each launch with a different input uploaded
// before it and its result checked; (b) the same kind of graph built node by node:
// cudaGraphAddMemAllocNode twice, two kernel nodes, a memcpy node, cudaGraphAddMemFreeNode twice,
// launched twice with different inputs; then the graphs destroyed and cudaDeviceGraphMemTrim,
// with the graph allocator's used memory (cudaDeviceGetGraphMemAttribute) printed only as
// zero/nonzero. A client must create the graph's memory where the graph's kernels expect it
// at every launch. Node counts and checked values only, never an address. Shared cudart. Exits
// 1 if any value differs.
#include <cstring>
#include <vector>

#include "check.h"

static int bad = 0;
static void verdict(const char* what, int errors) {
    printf("%s: %s\n", what, errors ? "WRONG" : "ok");
    if (errors) fprintf(stderr, "%s: %d wrong values\n", what, errors);
    bad += errors != 0;
}

__global__ void scale(const int* in, int* tmp, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) tmp[i] = in[i] * 3 + 1;
}
__global__ void add_index(int* tmp, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) tmp[i] += i;
}
__global__ void split(const int* in, int* a, int* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        a[i] = in[i] * 2;
        b[i] = in[i] + i;
    }
}
__global__ void subtract(int* a, const int* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] -= b[i];
}

// "nodes: N (kernel K, memcpy M, mem alloc A, mem free F, other O)"
static void print_nodes(const char* label, cudaGraph_t g, int want_k, int want_m, int want_a, int want_f) {
    size_t count = 0;
    CK(cudaGraphGetNodes(g, nullptr, &count));
    std::vector<cudaGraphNode_t> nodes(count);
    CK(cudaGraphGetNodes(g, nodes.data(), &count));
    int k = 0, m = 0, a = 0, f = 0, o = 0;
    for (auto nd : nodes) {
        cudaGraphNodeType t;
        CK(cudaGraphNodeGetType(nd, &t));
        k += t == cudaGraphNodeTypeKernel;
        m += t == cudaGraphNodeTypeMemcpy;
        a += t == cudaGraphNodeTypeMemAlloc;
        f += t == cudaGraphNodeTypeMemFree;
        o += t != cudaGraphNodeTypeKernel && t != cudaGraphNodeTypeMemcpy && t != cudaGraphNodeTypeMemAlloc &&
             t != cudaGraphNodeTypeMemFree;
    }
    bool ok = k == want_k && m == want_m && a == want_a && f == want_f && o == 0;
    printf("%s: nodes: %zu (kernel %d, memcpy %d, mem alloc %d, mem free %d, other %d) %s\n", label, count, k, m, a,
           f, o, ok ? "ok" : "WRONG");
    bad += !ok;
}

static const char* graph_mem(cudaGraphMemAttributeType attr) {
    uint64_t v = 12345;
    CK(cudaDeviceGetGraphMemAttribute(0, attr, &v));
    return v == 0 ? "zero" : "nonzero";
}

int main() {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    CK(cudaSetDevice(0));
    const int n = 1 << 18;
    const size_t bytes = n * sizeof(int);
    const int grid = (n + 255) / 256;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int* in;
    CK(cudaMalloc(&in, bytes));
    int* out;  // pinned: the graphs' device-to-host copies land here
    CK(cudaMallocHost((void**)&out, bytes));
    std::vector<int> h(n);

    // (a) Captured.
    cudaGraph_t g;
    {
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        int* tmp;
        CK(cudaMallocAsync(&tmp, bytes, s));
        scale<<<grid, 256, 0, s>>>(in, tmp, n);
        add_index<<<grid, 256, 0, s>>>(tmp, n);
        CK(cudaMemcpyAsync(out, tmp, bytes, cudaMemcpyDeviceToHost, s));
        CK(cudaFreeAsync(tmp, s));
        CK(cudaStreamEndCapture(s, &g));
    }
    print_nodes("(a) captured graph", g, 2, 1, 1, 1);
    {
        size_t count = 0;
        CK(cudaGraphGetNodes(g, nullptr, &count));
        std::vector<cudaGraphNode_t> nodes(count);
        CK(cudaGraphGetNodes(g, nodes.data(), &count));
        for (auto nd : nodes) {
            cudaGraphNodeType t;
            CK(cudaGraphNodeGetType(nd, &t));
            if (t != cudaGraphNodeTypeMemAlloc) continue;
            cudaMemAllocNodeParams p;
            memset(&p, 0, sizeof p);
            CK(cudaGraphMemAllocNodeGetParams(nd, &p));
            bool ok = p.bytesize == bytes && p.poolProps.location.type == cudaMemLocationTypeDevice &&
                      p.poolProps.location.id == 0 && p.dptr != nullptr;
            printf("(a) allocation node: %zu bytes on device %d %s\n", p.bytesize, p.poolProps.location.id,
                   ok ? "ok" : "WRONG");
            bad += !ok;
        }
    }
    cudaGraphExec_t ge;
    CK(cudaGraphInstantiate(&ge, g, 0));
    for (int round = 0; round < 3; ++round) {
        for (int i = 0; i < n; ++i) h[i] = (i ^ (round * 0x1234)) - round * 1000;
        // Uploads are ordered on s: a cudaMemcpy from pageable memory may return before its DMA
        // has ended, and the non-blocking s would not wait for it.
        CK(cudaMemcpyAsync(in, h.data(), bytes, cudaMemcpyHostToDevice, s));
        memset(out, 0, bytes);
        CK(cudaGraphLaunch(ge, s));
        CK(cudaStreamSynchronize(s));
        int errors = 0;
        for (int i = 0; i < n; ++i) errors += out[i] != h[i] * 3 + 1 + i;
        char what[128];
        snprintf(what, sizeof what, "(a) launch %d: result checksum=0x%016llx", round + 1,
                 (unsigned long long)fnv1a(out, bytes));
        verdict(what, errors);
    }
    printf("(a) graph allocator's used memory after the launches (freed inside the graph): %s\n",
           graph_mem(cudaGraphMemAttrUsedMemCurrent));

    // (b) Built node by node.
    cudaGraph_t g2;
    CK(cudaGraphCreate(&g2, 0));
    cudaMemAllocNodeParams ap;
    memset(&ap, 0, sizeof ap);
    ap.poolProps.allocType = cudaMemAllocationTypePinned;
    ap.poolProps.handleTypes = cudaMemHandleTypeNone;
    ap.poolProps.location.type = cudaMemLocationTypeDevice;
    ap.poolProps.location.id = 0;
    ap.bytesize = bytes;
    cudaGraphNode_t na, nb, nk1, nk2, nc, nfa, nfb;
    CK(cudaGraphAddMemAllocNode(&na, g2, nullptr, 0, &ap));
    int* A = (int*)ap.dptr;
    CK(cudaGraphAddMemAllocNode(&nb, g2, nullptr, 0, &ap));
    int* B = (int*)ap.dptr;
    printf("(b) two allocation nodes, distinct addresses: %s\n", A != B && A && B ? "yes" : "no");
    bad += !(A != B && A && B);
    int nn = n;
    {
        void* args[] = {&in, &A, &B, &nn};
        cudaKernelNodeParams kp = {};
        kp.func = (void*)split;
        kp.gridDim = dim3(grid);
        kp.blockDim = dim3(256);
        kp.kernelParams = args;
        cudaGraphNode_t deps[] = {na, nb};
        CK(cudaGraphAddKernelNode(&nk1, g2, deps, 2, &kp));
    }
    {
        void* args[] = {&A, &B, &nn};
        cudaKernelNodeParams kp = {};
        kp.func = (void*)subtract;
        kp.gridDim = dim3(grid);
        kp.blockDim = dim3(256);
        kp.kernelParams = args;
        CK(cudaGraphAddKernelNode(&nk2, g2, &nk1, 1, &kp));
    }
    CK(cudaGraphAddMemcpyNode1D(&nc, g2, &nk2, 1, out, A, bytes, cudaMemcpyDeviceToHost));
    CK(cudaGraphAddMemFreeNode(&nfa, g2, &nc, 1, A));
    CK(cudaGraphAddMemFreeNode(&nfb, g2, &nk2, 1, B));
    print_nodes("(b) built graph", g2, 2, 1, 2, 2);
    void* freed = nullptr;
    CK(cudaGraphMemFreeNodeGetParams(nfa, &freed));
    printf("(b) free node frees the first allocation: %s\n", freed == (void*)A ? "yes" : "no");
    bad += freed != (void*)A;
    cudaGraphExec_t ge2;
    CK(cudaGraphInstantiate(&ge2, g2, 0));
    for (int round = 0; round < 2; ++round) {
        for (int i = 0; i < n; ++i) h[i] = i * (round + 2) - 77;
        CK(cudaMemcpyAsync(in, h.data(), bytes, cudaMemcpyHostToDevice, s));
        memset(out, 0, bytes);
        CK(cudaGraphLaunch(ge2, s));
        CK(cudaStreamSynchronize(s));
        int errors = 0;
        for (int i = 0; i < n; ++i) errors += out[i] != h[i] * 2 - (h[i] + i);
        char what[128];
        snprintf(what, sizeof what, "(b) launch %d: result checksum=0x%016llx", round + 1,
                 (unsigned long long)fnv1a(out, bytes));
        verdict(what, errors);
    }
    // Both graphs once more, one after the other on the same stream.
    for (int i = 0; i < n; ++i) h[i] = 5 * i;
    CK(cudaMemcpyAsync(in, h.data(), bytes, cudaMemcpyHostToDevice, s));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    int errors = 0;
    for (int i = 0; i < n; ++i) errors += out[i] != h[i] * 3 + 1 + i;
    CK(cudaGraphLaunch(ge2, s));
    CK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; ++i) errors += out[i] != h[i] * 2 - (h[i] + i);
    verdict("(a) then (b) on one stream", errors);
    printf("(b) graph allocator's used memory after the launches: %s\n", graph_mem(cudaGraphMemAttrUsedMemCurrent));

    CK(cudaGraphExecDestroy(ge2));
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g2));
    CK(cudaGraphDestroy(g));
    CK(cudaDeviceSynchronize());
    CK(cudaDeviceGraphMemTrim(0));
    printf("after the graphs were destroyed and cudaDeviceGraphMemTrim: used %s, reserved %s\n",
           graph_mem(cudaGraphMemAttrUsedMemCurrent), graph_mem(cudaGraphMemAttrReservedMemCurrent));
    CK(cudaFreeHost(out));
    CK(cudaFree(in));
    CK(cudaStreamDestroy(s));
    printf("graph_mem: %s\n", bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}
