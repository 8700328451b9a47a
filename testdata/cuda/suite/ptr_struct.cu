// Pointers stored in device memory: a user struct holding device pointers (to other device
// structs, to interior offsets of separate allocations) uploaded with cudaMemcpy; the same
// struct passed by value as a kernel parameter; a linked list whose nodes span two allocations;
// and a pointer table written by a kernel and followed by another kernel. No pointer value is
// ever copied back to the host or printed, so results do not depend on addresses.
#include <vector>
#include "check.h"

struct Segment { const int* data; int len; int scale; };
struct Node { const Node* next; int value; int pad; };
struct Job { const Segment* segs; int nseg; long long* out; const Node* head; };

__global__ void seg_sums(const Job* job) {  // one thread per segment, fixed order: exact
    int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= job->nseg) return;
    const Segment seg = job->segs[s];
    long long acc = 0;
    for (int i = 0; i < seg.len; ++i) acc += (long long)seg.data[i] * seg.scale;
    job->out[s] = acc;
}

__global__ void walk(Job job, int* values, int max) {  // struct with pointers by value
    int k = 0;
    for (const Node* p = job.head; p && k < max; p = p->next) values[k++] = p->value;
    values[max] = k;
}

__global__ void make_table(const int** table, const int* base, int n, int stride) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) table[i] = base + (long long)(i * stride) % n;
}

__global__ void gather(const int* const* table, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = *table[i] * 2 + 1;
}

int main() {
    int errors = 0;
    // Three data buffers; segments point into their middles.
    const int sizes[3] = {5000, 777, 12000};
    std::vector<std::vector<int>> host(3);
    int* bufs[3];
    for (int b = 0; b < 3; ++b) {
        host[b].resize(sizes[b]);
        for (int i = 0; i < sizes[b]; ++i) host[b][i] = (i * (b + 3)) % 101 - 50;
        CK(cudaMalloc(&bufs[b], sizes[b] * sizeof(int)));
        CK(cudaMemcpy(bufs[b], host[b].data(), sizes[b] * sizeof(int), cudaMemcpyHostToDevice));
    }
    const int nseg = 40;
    std::vector<Segment> segs(nseg);
    std::vector<long long> want(nseg);
    for (int s = 0; s < nseg; ++s) {
        int b = s % 3, off = (s * 97) % (sizes[b] / 2), len = 1 + (s * 53) % (sizes[b] / 2);
        segs[s] = {bufs[b] + off, len, s - 20};
        long long acc = 0;
        for (int i = 0; i < len; ++i) acc += (long long)host[b][off + i] * (s - 20);
        want[s] = acc;
    }
    Segment* d_segs;
    long long* d_out;
    CK(cudaMalloc(&d_segs, nseg * sizeof(Segment)));
    CK(cudaMemcpy(d_segs, segs.data(), nseg * sizeof(Segment), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&d_out, nseg * sizeof(long long)));

    // Linked list: 64 nodes in two allocations, linked in a permuted order.
    const int nodes = 64;
    Node *pool_a, *pool_b;
    CK(cudaMalloc(&pool_a, 32 * sizeof(Node)));
    CK(cudaMalloc(&pool_b, 32 * sizeof(Node)));
    auto node_at = [&](int k) { return k < 32 ? pool_a + k : pool_b + (k - 32); };
    std::vector<int> order(nodes);
    for (int k = 0; k < nodes; ++k) order[k] = (k * 23) % nodes;  // 23 is coprime to 64
    std::vector<Node> ha(32), hb(32);
    for (int k = 0; k < nodes; ++k) {
        int slot = order[k];
        Node nd = {k + 1 < nodes ? node_at(order[k + 1]) : nullptr, 1000 + k * 7, 0};
        (slot < 32 ? ha[slot] : hb[slot - 32]) = nd;
    }
    CK(cudaMemcpy(pool_a, ha.data(), 32 * sizeof(Node), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(pool_b, hb.data(), 32 * sizeof(Node), cudaMemcpyHostToDevice));

    Job job = {d_segs, nseg, d_out, node_at(order[0])};
    Job* d_job;
    CK(cudaMalloc(&d_job, sizeof(Job)));
    CK(cudaMemcpy(d_job, &job, sizeof(Job), cudaMemcpyHostToDevice));

    seg_sums<<<1, 64>>>(d_job);
    CK(cudaGetLastError());
    std::vector<long long> got(nseg);
    CK(cudaMemcpy(got.data(), d_out, nseg * sizeof(long long), cudaMemcpyDeviceToHost));
    for (int s = 0; s < nseg; ++s) errors += got[s] != want[s];
    uint64_t sum = fnv1a(got.data(), nseg * sizeof(long long));

    int* d_values;
    CK(cudaMalloc(&d_values, (nodes + 1) * sizeof(int)));
    walk<<<1, 1>>>(job, d_values, nodes);
    std::vector<int> values(nodes + 1);
    CK(cudaMemcpy(values.data(), d_values, (nodes + 1) * sizeof(int), cudaMemcpyDeviceToHost));
    errors += values[nodes] != nodes;
    for (int k = 0; k < nodes; ++k) errors += values[k] != 1000 + k * 7;
    sum = fnv1a(values.data(), values.size() * sizeof(int), sum);

    // Pointers written by the device, followed by the device.
    const int n = 4096, stride = 37;
    const int** d_table;
    int* d_gather;
    CK(cudaMalloc(&d_table, n * sizeof(int*)));
    CK(cudaMalloc(&d_gather, n * sizeof(int)));
    make_table<<<n / 256, 256>>>(d_table, bufs[2], n, stride);
    gather<<<n / 256, 256>>>(d_table, d_gather, n);
    std::vector<int> gathered(n);
    CK(cudaMemcpy(gathered.data(), d_gather, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) errors += gathered[i] != host[2][(long long)(i * stride) % n] * 2 + 1;
    sum = fnv1a(gathered.data(), n * sizeof(int), sum);

    for (int b = 0; b < 3; ++b) CK(cudaFree(bufs[b]));
    for (void* p : {(void*)d_segs, (void*)d_out, (void*)pool_a, (void*)pool_b, (void*)d_job,
                    (void*)d_values, (void*)d_table, (void*)d_gather})
        CK(cudaFree(p));
    return report("ptr_struct", "segments=40 nodes=64 table=4096", sum, errors);
}
