// Managed memory as programs really use it (issue 35): (a) one managed array that a kernel and
// the host update in turn over 5 steps, cudaDeviceSynchronize between; (b) a linked structure:
// a managed array of nodes, each holding a pointer to its own managed payload array and a
// `next` pointer, that a kernel walks through the pointers (recording the order it visited and
// updating each payload), after which the host changes some payloads, gives one node a new
// payload allocation and relinks another node to the head, and the kernel walks again; (c)
// cudaMemAdvise (read-mostly, preferred location, accessed-by) and cudaMemPrefetchAsync to the
// device and back to the host, with a kernel and the host using the memory between; (d) what
// cudaMemRangeGetAttribute answers after that advice and cudaPointerGetAttributes answers for a
// managed pointer; (e) cudaStreamAttachMemAsync of memory allocated with cudaMemAttachHost: to
// one stream (cudaMemAttachSingle), back to the host, to one stream again, a kernel on that
// stream each time. A client that copies managed memory must follow every pointer the kernels
// follow, in both directions, after every synchronization. Every value is checked against a
// CPU model; no pointer is printed. Shared cudart. Exits 1 if any value differs.
#include <cstring>
#include <vector>

#include "check.h"

static int bad = 0;
static void expect(const char* what, long long got, long long want) {
    printf("%s: %lld (expected %lld) %s\n", what, got, want, got == want ? "ok" : "WRONG");
    bad += got != want;
}
static void verdict(const char* what, int errors) {
    printf("%s: %s\n", what, errors ? "WRONG" : "ok");
    if (errors) fprintf(stderr, "%s: %d wrong values\n", what, errors);
    bad += errors != 0;
}

// ---- (a) ------------------------------------------------------------------------------------
__global__ void step_kernel(unsigned* p, int n, unsigned s) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = p[i] * 3u + s + (unsigned)i;
}

// ---- (b) ------------------------------------------------------------------------------------
struct Node {
    int id;
    int len;
    int* payload;  // its own managed allocation
    Node* next;    // another node of the same managed array, or null
};
// One block walks the list: every node's payload[j] = payload[j] * 2 + position (+ round);
// thread 0 records the node ids in the order visited.
__global__ void walk(Node* head, int* order, int round) {
    int pos = 0;
    for (Node* n = head; n != nullptr; n = n->next, ++pos) {
        if (threadIdx.x == 0) order[pos] = n->id;
        for (int j = threadIdx.x; j < n->len; j += blockDim.x) n->payload[j] = n->payload[j] * 2 + pos + round;
        __syncthreads();
    }
    if (threadIdx.x == 0) order[pos] = -1;
}

// ---- (c) and (e) ----------------------------------------------------------------------------
__global__ void sum_into(const int* in, int n, unsigned long long* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(out, (unsigned long long)in[i]);
}
__global__ void scale_add(int* p, int n, int k, int a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = p[i] * k + a;
}

int main() {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    int dev = 0;
    CK(cudaSetDevice(dev));
    int cma = 0;
    CK(cudaDeviceGetAttribute(&cma, cudaDevAttrConcurrentManagedAccess, dev));
    // On stderr: through the client it is "no" by design (docs/FIDELITY.md), and nothing below
    // depends on it.
    fprintf(stderr, "concurrent managed access: %s\n", cma ? "yes" : "no");

    // (a) A managed array: kernel, then host, in turn.
    {
        const int n = 1 << 18;
        unsigned* m;
        CK(cudaMallocManaged(&m, n * sizeof(unsigned)));
        std::vector<unsigned> model(n);
        for (int i = 0; i < n; ++i) m[i] = model[i] = (unsigned)i * 2654435761u;
        for (unsigned s = 0; s < 5; ++s) {
            step_kernel<<<(n + 255) / 256, 256>>>(m, n, s);
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            int errors = 0;
            for (int i = 0; i < n; ++i) {
                model[i] = model[i] * 3u + s + (unsigned)i;
                errors += m[i] != model[i];
            }
            // The host changes every (s+2)th value and the last one before the next kernel.
            for (int i = (int)s; i < n; i += (int)s + 2) m[i] = model[i] = model[i] ^ 0x5a5a5a5au;
            m[n - 1] = model[n - 1] = 1000u + s;
            char what[96];
            snprintf(what, sizeof what, "(a) step %u: kernel result checksum=0x%016llx", s,
                     (unsigned long long)fnv1a(model.data(), n * sizeof(unsigned)));
            verdict(what, errors);
        }
        step_kernel<<<(n + 255) / 256, 256>>>(m, n, 99);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        int errors = 0;
        for (int i = 0; i < n; ++i) errors += m[i] != model[i] * 3u + 99u + (unsigned)i;
        verdict("(a) last kernel saw the host's last writes", errors);
        CK(cudaFree(m));
    }

    // (b) A linked structure through managed pointers.
    {
        const int N = 12;
        Node* nodes;
        CK(cudaMallocManaged(&nodes, N * sizeof(Node)));
        int* order;
        CK(cudaMallocManaged(&order, (N + 2) * sizeof(int)));
        // CPU model: payload values, lengths, next indices.
        std::vector<std::vector<int>> pay(N);
        std::vector<int> next(N);
        // List order: 0 -> 5 -> 10 -> 3 -> 8 -> 1 -> 6 -> 11 -> 4 -> 9 -> 2 -> 7 (i * 5 mod 12).
        std::vector<int> seq(N);
        for (int k = 0; k < N; ++k) seq[k] = (k * 5) % N;
        for (int k = 0; k < N; ++k) next[seq[k]] = k + 1 < N ? seq[k + 1] : -1;
        int head = seq[0];
        for (int i = 0; i < N; ++i) {
            int len = 100 + 37 * i;
            nodes[i].id = i;
            nodes[i].len = len;
            CK(cudaMallocManaged(&nodes[i].payload, len * sizeof(int)));
            pay[i].resize(len);
            for (int j = 0; j < len; ++j) nodes[i].payload[j] = pay[i][j] = i * 1000 + j;
        }
        for (int i = 0; i < N; ++i) nodes[i].next = next[i] >= 0 ? &nodes[next[i]] : nullptr;

        auto model_walk = [&](int round, std::vector<int>& visited) {
            visited.clear();
            int pos = 0;
            for (int i = head; i >= 0; i = next[i], ++pos) {
                visited.push_back(i);
                for (int& v : pay[i]) v = v * 2 + pos + round;
            }
        };
        auto check_walk = [&](const char* label, const std::vector<int>& visited) {
            int errors = 0;
            printf("(b) %s: visited", label);
            for (size_t k = 0; k <= visited.size(); ++k) {
                printf(" %d", order[k]);
                errors += order[k] != (k < visited.size() ? visited[k] : -1);
            }
            printf("\n");
            uint64_t sum = 1469598103934665603ull;
            for (int i = 0; i < N; ++i) {
                errors += nodes[i].len != (int)pay[i].size();
                for (int j = 0; j < (int)pay[i].size(); ++j) errors += nodes[i].payload[j] != pay[i][j];
                sum = fnv1a(pay[i].data(), pay[i].size() * sizeof(int), sum);
            }
            char what[128];
            snprintf(what, sizeof what, "(b) %s: visit order and payloads checksum=0x%016llx", label,
                     (unsigned long long)sum);
            verdict(what, errors);
        };
        std::vector<int> visited;
        walk<<<1, 128>>>(&nodes[head], order, 0);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        model_walk(0, visited);
        check_walk("first walk", visited);

        // The host: changes payloads of nodes 2 and 7, gives node 4 a new, longer payload
        // allocation (the old one freed), and moves node 9 to the head of the list.
        for (int j = 0; j < (int)pay[2].size(); j += 3) nodes[2].payload[j] = pay[2][j] = -j;
        nodes[7].payload[0] = pay[7][0] = 424242;
        int* fresh;
        CK(cudaMallocManaged(&fresh, 500 * sizeof(int)));
        for (int j = 0; j < 500; ++j) fresh[j] = 7 * j + 1;
        CK(cudaFree(nodes[4].payload));
        nodes[4].payload = fresh;
        nodes[4].len = 500;
        pay[4].assign(500, 0);
        for (int j = 0; j < 500; ++j) pay[4][j] = 7 * j + 1;
        int prev9 = -1;
        for (int i = 0; i < N; ++i)
            if (next[i] == 9) prev9 = i;
        next[prev9] = next[9];
        nodes[prev9].next = next[9] >= 0 ? &nodes[next[9]] : nullptr;
        next[9] = head;
        nodes[9].next = &nodes[head];
        head = 9;

        walk<<<1, 128>>>(&nodes[head], order, 1);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        model_walk(1, visited);
        check_walk("after the host relinked node 9 and replaced node 4's payload", visited);

        // A third walk from the same head after host reads only (nothing changed by the host).
        walk<<<1, 128>>>(&nodes[head], order, 2);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        model_walk(2, visited);
        check_walk("third walk", visited);
        for (int i = 0; i < N; ++i) CK(cudaFree(nodes[i].payload));
        CK(cudaFree(order));
        CK(cudaFree(nodes));
    }

    // (c) Advice and prefetches, then use; (d) what the range and the pointer say.
    {
        const int n = 1 << 20;
        const size_t bytes = n * sizeof(int);
        int* ro;   // read-mostly input
        int* rw;   // preferred on the device, accessed by it
        unsigned long long* total;
        CK(cudaMallocManaged(&ro, bytes));
        CK(cudaMallocManaged(&rw, bytes));
        CK(cudaMallocManaged(&total, sizeof *total));
        for (int i = 0; i < n; ++i) ro[i] = i % 1000, rw[i] = i;
        *total = 0;
        cudaMemLocation gpu{};
        gpu.type = cudaMemLocationTypeDevice;
        gpu.id = dev;
        cudaMemLocation host{};
        host.type = cudaMemLocationTypeHost;
        host.id = 0;
        CK(cudaMemAdvise(ro, bytes, cudaMemAdviseSetReadMostly, gpu));
        CK(cudaMemAdvise(rw, bytes, cudaMemAdviseSetPreferredLocation, gpu));
        CK(cudaMemAdvise(rw, bytes, cudaMemAdviseSetAccessedBy, gpu));
        cudaStream_t s;
        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        CK(cudaMemPrefetchAsync(ro, bytes, gpu, 0, s));
        CK(cudaMemPrefetchAsync(rw, bytes, gpu, 0, s));
        sum_into<<<(n + 255) / 256, 256, 0, s>>>(ro, n, total);
        scale_add<<<(n + 255) / 256, 256, 0, s>>>(rw, n, 3, 1);
        CK(cudaGetLastError());
        CK(cudaMemPrefetchAsync(rw, bytes, host, 0, s));
        CK(cudaStreamSynchronize(s));
        unsigned long long want = 0;
        for (int i = 0; i < n; ++i) want += (unsigned long long)(i % 1000);
        expect("(c) sum of the read-mostly array, computed on the device", (long long)*total, (long long)want);
        int errors = 0;
        for (int i = 0; i < n; ++i) errors += rw[i] != 3 * i + 1;
        verdict("(c) device-preferred array after a kernel and a prefetch to the host", errors);
        // The host writes, the kernel uses it again after a prefetch back to the device.
        for (int i = 0; i < n; i += 7) rw[i] = -i;
        CK(cudaMemPrefetchAsync(rw, bytes, gpu, 0, s));
        scale_add<<<(n + 255) / 256, 256, 0, s>>>(rw, n, 2, 5);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(s));
        errors = 0;
        for (int i = 0; i < n; ++i) errors += rw[i] != (i % 7 == 0 ? -i : 3 * i + 1) * 2 + 5;
        verdict("(c) host writes seen by the next kernel after a prefetch to the device", errors);

        // (d) Range attributes.
        int v = -100;
        CK(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributeReadMostly, ro, bytes));
        expect("(d) read-mostly array: READ_MOSTLY", v, 1);
        CK(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributeReadMostly, rw, bytes));
        expect("(d) device-preferred array: READ_MOSTLY", v, 0);
        CK(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributePreferredLocation, rw, bytes));
        expect("(d) device-preferred array: PREFERRED_LOCATION", v, dev);
        CK(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributePreferredLocationType, rw, bytes));
        expect("(d) device-preferred array: PREFERRED_LOCATION_TYPE", v, cudaMemLocationTypeDevice);
        CK(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributePreferredLocationId, rw, bytes));
        expect("(d) device-preferred array: PREFERRED_LOCATION_ID", v, dev);
        CK(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributePreferredLocation, ro, bytes));
        expect("(d) read-mostly array: PREFERRED_LOCATION (none: cudaInvalidDeviceId)", v, cudaInvalidDeviceId);
        CK(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributeLastPrefetchLocation, rw, bytes));
        expect("(d) device-preferred array: LAST_PREFETCH_LOCATION", v, dev);
        CK(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributeLastPrefetchLocationType, rw, bytes));
        expect("(d) device-preferred array: LAST_PREFETCH_LOCATION_TYPE", v, cudaMemLocationTypeDevice);
        int accessed[4] = {-100, -100, -100, -100};
        CK(cudaMemRangeGetAttribute(accessed, sizeof accessed, cudaMemRangeAttributeAccessedBy, rw, bytes));
        printf("(d) device-preferred array: ACCESSED_BY %d %d %d %d\n", accessed[0], accessed[1], accessed[2],
               accessed[3]);
        bad += accessed[0] != dev || accessed[1] != cudaInvalidDeviceId;
        // Advice undone.
        CK(cudaMemAdvise(ro, bytes, cudaMemAdviseUnsetReadMostly, gpu));
        CK(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributeReadMostly, ro, bytes));
        expect("(d) read-mostly array after UnsetReadMostly: READ_MOSTLY", v, 0);

        // Pointer attributes of managed memory, inside the allocation too.
        cudaPointerAttributes a;
        memset(&a, 0, sizeof a);
        CK(cudaPointerGetAttributes(&a, rw + 1000));
        printf("(d) cudaPointerGetAttributes(managed + 1000): type %d (%s), device %d, devicePointer %s, "
               "hostPointer %s\n",
               (int)a.type, a.type == cudaMemoryTypeManaged ? "managed" : "NOT managed", a.device,
               a.devicePointer == (void*)(rw + 1000) ? "== the pointer" : "!= the pointer",
               a.hostPointer == (void*)(rw + 1000) ? "== the pointer" : "!= the pointer");
        bad += a.type != cudaMemoryTypeManaged || a.device != dev || a.devicePointer != (void*)(rw + 1000) ||
               a.hostPointer != (void*)(rw + 1000);
        CK(cudaStreamDestroy(s));
        CK(cudaFree(total));
        CK(cudaFree(rw));
        CK(cudaFree(ro));
    }

    // (e) Stream attachment.
    {
        const int n = 1 << 16;
        const size_t bytes = n * sizeof(int);
        int* p;
        CK(cudaMallocManaged(&p, bytes, cudaMemAttachHost));
        for (int i = 0; i < n; ++i) p[i] = i;
        cudaStream_t s;
        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        CK(cudaStreamAttachMemAsync(s, p, 0, cudaMemAttachSingle));
        scale_add<<<(n + 255) / 256, 256, 0, s>>>(p, n, 2, 3);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(s));
        int errors = 0;
        for (int i = 0; i < n; ++i) errors += p[i] != 2 * i + 3;
        verdict("(e) attached to one stream: kernel on it, host read after cudaStreamSynchronize", errors);
        CK(cudaStreamAttachMemAsync(s, p, 0, cudaMemAttachHost));
        CK(cudaStreamSynchronize(s));
        for (int i = 0; i < n; i += 2) p[i] = -p[i];
        CK(cudaStreamAttachMemAsync(s, p, 0, cudaMemAttachSingle));
        scale_add<<<(n + 255) / 256, 256, 0, s>>>(p, n, 1, 10);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(s));
        errors = 0;
        for (int i = 0; i < n; ++i) errors += p[i] != (i % 2 == 0 ? -(2 * i + 3) : 2 * i + 3) + 10;
        verdict("(e) attached to the host, written, attached to the stream again: kernel saw the writes", errors);
        CK(cudaStreamAttachMemAsync(s, p, 0, cudaMemAttachGlobal));
        CK(cudaStreamSynchronize(s));
        scale_add<<<(n + 255) / 256, 256>>>(p, n, 1, -10);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        errors = 0;
        for (int i = 0; i < n; ++i) errors += p[i] != (i % 2 == 0 ? -(2 * i + 3) : 2 * i + 3);
        verdict("(e) attached globally: kernel on the legacy stream", errors);
        CK(cudaStreamDestroy(s));
        CK(cudaFree(p));
    }

    printf("managed_linked: %s\n", bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}
