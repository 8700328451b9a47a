// Memory the host and the device share (issue 21): managed memory (cudaMallocManaged, advised
// and prefetched, written by the host before each of two kernels and read after them), host
// memory mapped for the device (cudaHostAlloc with cudaHostAllocMapped) and registered host
// memory mapped for the device (cudaHostRegister with cudaHostRegisterMapped), each used by a
// kernel through its device pointer and read by the host after a synchronization. A replay
// must re-create them where the kernels expect them and verify what the host read.
#include <cstdlib>
#include <cstring>
#include <vector>
#include "check.h"

__global__ void step(int* p, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = p[i] * k + 1;
}

int main() {
    const int n = 1 << 16;
    const size_t bytes = n * sizeof(int);
    const int grid = (n + 255) / 256;
    int errors = 0;
    uint64_t sum = 1469598103934665603ull;
    int dev = 0;
    CK(cudaGetDevice(&dev));

    // 1. Managed memory.
    int* m;
    CK(cudaMallocManaged(&m, bytes));
    for (int i = 0; i < n; ++i) m[i] = i;
    cudaMemLocation loc{};
    loc.type = cudaMemLocationTypeDevice;
    loc.id = dev;
    CK(cudaMemAdvise(m, bytes, cudaMemAdviseSetPreferredLocation, loc));
    CK(cudaMemPrefetchAsync(m, bytes, loc, 0, 0));
    step<<<grid, 256>>>(m, n, 3);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < n; ++i) errors += m[i] != 3 * i + 1;
    sum = fnv1a(m, bytes, sum);
    for (int i = 0; i < n; i += 2) m[i] += 5;  // the host changes half of it
    step<<<grid, 256>>>(m, n, 2);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < n; ++i) errors += m[i] != (3 * i + 1 + (i % 2 == 0 ? 5 : 0)) * 2 + 1;
    sum = fnv1a(m, bytes, sum);
    // A copy out of managed memory as well (a result of the ordinary kind).
    std::vector<int> copy(n);
    CK(cudaMemcpy(copy.data(), m, bytes, cudaMemcpyDeviceToHost));
    errors += memcmp(copy.data(), m, bytes) != 0;
    CK(cudaFree(m));

    // 2. Host memory mapped for the device.
    int *h, *dh;
    CK(cudaHostAlloc(&h, bytes, cudaHostAllocMapped));
    for (int i = 0; i < n; ++i) h[i] = 7 * i;
    CK(cudaHostGetDevicePointer(&dh, h, 0));
    step<<<grid, 256>>>(dh, n, 5);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < n; ++i) errors += h[i] != 35 * i + 1;
    sum = fnv1a(h, bytes, sum);
    CK(cudaFreeHost(h));

    // 3. Registered host memory mapped for the device; completion through an event.
    size_t padded = (bytes + 4095) / 4096 * 4096;
    int* r = (int*)aligned_alloc(4096, padded);
    for (int i = 0; i < n; ++i) r[i] = n - i;
    CK(cudaHostRegister(r, padded, cudaHostRegisterMapped));
    int* dr;
    CK(cudaHostGetDevicePointer(&dr, r, 0));
    cudaEvent_t ev;
    CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    step<<<grid, 256>>>(dr, n, -1);
    CK(cudaGetLastError());
    CK(cudaEventRecord(ev, 0));
    CK(cudaEventSynchronize(ev));
    for (int i = 0; i < n; ++i) errors += r[i] != -(n - i) + 1;
    sum = fnv1a(r, bytes, sum);
    CK(cudaEventDestroy(ev));
    CK(cudaHostUnregister(r));
    free(r);
    return report("managed", "managed, mapped and registered memory", sum, errors);
}
