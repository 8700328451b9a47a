// A graph used through the handles of its queries (issue 21): a captured graph's nodes are
// found with cudaGraphGetNodes, cudaGraphGetRootNodes, cudaGraphNodeGetDependencies and
// cudaGraphNodeGetDependentNodes and cudaGraphGetEdges; a kernel node found that way gets new
// parameters, a new kernel node is added after a queried leaf, a clone's node is found with
// cudaGraphNodeFindInClone and changed, and both graphs are instantiated, launched and their
// results copied back.
#include <vector>
#include "check.h"

__global__ void fill(int* p, int n, int v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v + i % 7;
}
__global__ void scale(int* p, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] *= k;
}
__global__ void add_one(int* p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1;
}

int main() {
    const int n = 1 << 14, block = 256, grid = (n + block - 1) / block;
    const size_t bytes = n * sizeof(int);
    int errors = 0;
    int *d, *h;
    CK(cudaMalloc(&d, bytes));
    CK(cudaMallocHost(&h, bytes));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    fill<<<grid, block, 0, s>>>(d, n, 3);
    scale<<<grid, block, 0, s>>>(d, n, 2);
    CK(cudaStreamEndCapture(s, &g));

    size_t count = 0, roots = 0, edges = 0;
    CK(cudaGraphGetNodes(g, nullptr, &count));
    std::vector<cudaGraphNode_t> nodes(count);
    CK(cudaGraphGetNodes(g, nodes.data(), &count));
    CK(cudaGraphGetRootNodes(g, nullptr, &roots));
    std::vector<cudaGraphNode_t> root(roots);
    CK(cudaGraphGetRootNodes(g, root.data(), &roots));
    CK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &edges));
    std::vector<cudaGraphNode_t> from(edges), to(edges);
    CK(cudaGraphGetEdges(g, from.data(), to.data(), nullptr, &edges));
    size_t deps = 0, dependents = 0;
    cudaGraphNode_t leaf = nullptr, first = root.empty() ? nullptr : root[0];
    CK(cudaGraphNodeGetDependentNodes(first, nullptr, nullptr, &dependents));
    std::vector<cudaGraphNode_t> next(dependents);
    CK(cudaGraphNodeGetDependentNodes(first, next.data(), nullptr, &dependents));
    if (!next.empty()) leaf = next[0];
    CK(cudaGraphNodeGetDependencies(leaf, nullptr, nullptr, &deps));
    std::vector<cudaGraphNode_t> back(deps);
    CK(cudaGraphNodeGetDependencies(leaf, back.data(), nullptr, &deps));
    printf("nodes %zu roots %zu edges %zu dependents %zu deps %zu root-is-back %d\n", count, roots, edges, dependents,
           deps, deps == 1 && back[0] == first);

    // The queried root: fill with 10 instead of 3 (a kernel node's parameters changed).
    cudaKernelNodeParams p{};
    CK(cudaGraphKernelNodeGetParams(first, &p));
    int v = 10;
    void* args[] = {&d, (void*)&n, &v};
    p.kernelParams = args;
    CK(cudaGraphKernelNodeSetParams(first, &p));
    // A node added after the queried leaf.
    cudaKernelNodeParams q{};
    void* qargs[] = {&d, (void*)&n};
    q.func = (void*)add_one;
    q.gridDim = dim3(grid);
    q.blockDim = dim3(block);
    q.kernelParams = qargs;
    cudaGraphNode_t added;
    CK(cudaGraphAddKernelNode(&added, g, &leaf, 1, &q));

    // A clone whose scale node (found from the original's leaf) multiplies by 5.
    cudaGraph_t c;
    CK(cudaGraphClone(&c, g));
    cudaGraphNode_t in_clone;
    CK(cudaGraphNodeFindInClone(&in_clone, leaf, c));
    cudaKernelNodeParams r{};
    CK(cudaGraphKernelNodeGetParams(in_clone, &r));
    int k = 5;
    void* rargs[] = {&d, (void*)&n, &k};
    r.kernelParams = rargs;
    CK(cudaGraphKernelNodeSetParams(in_clone, &r));

    uint64_t sum = 1469598103934665603ull;
    int expect_k[] = {2, 5};
    cudaGraph_t both[] = {g, c};
    for (int i = 0; i < 2; ++i) {
        cudaGraphExec_t e;
        CK(cudaGraphInstantiate(&e, both[i], 0));
        CK(cudaGraphLaunch(e, s));
        CK(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        for (int j = 0; j < n; ++j) errors += h[j] != (10 + j % 7) * expect_k[i] + 1;
        sum = fnv1a(h, bytes, sum);
        CK(cudaGraphExecDestroy(e));
    }
    CK(cudaGraphDestroy(c));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(s));
    CK(cudaFreeHost(h));
    CK(cudaFree(d));
    return report("graph_query", "nodes from queries, changed, extended, cloned", sum, errors);
}
