// A program of two devices (issue 37): what a program does with two GPUs of one machine —
// device count and properties, peer queries, allocations, kernels and pointer attributes on
// each device, peer copies (explicit, default-kind, asynchronous after a cross-device event
// wait), peer access and a kernel reading the peer's memory, a thread per device, stream-ordered
// allocations on each, managed memory made on each (the host writing it while the other device
// is current), memory information, and the driver API's view of contexts and devices.
// Everything printed is deterministic (no pointers, no timings), so the output through the
// client (`gpuless run --remote ADDR --gpus 2 -- multi_gpu`) must equal the native run's; with
// the two GPUs of two servers (`--remote A,B`), all but the lines beginning with "peer" (their
// GPUs do not reach each other).
// Exit 2 (waived) with fewer than two devices.
#include <cuda.h>

#include <cstring>
#include <thread>
#include <vector>

#include "check.h"

__global__ void fill(float* p, int n, float v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v + 0.5f * (i % 97);
}

__global__ void axpy(float* y, const float* x, int n, float a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}

static const int N = 1 << 20;
static const size_t BYTES = N * sizeof(float);

static uint64_t download(const float* d, int dev) {
    std::vector<float> h(N);
    CK(cudaSetDevice(dev));
    CK(cudaMemcpy(h.data(), d, BYTES, cudaMemcpyDeviceToHost));
    return fnv1a(h.data(), BYTES);
}

// A thread of its own on `dev`: its own stream, kernels and download (a checksum).
static void worker(int dev, uint64_t* sum) {
    CK(cudaSetDevice(dev));
    float* p;
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    CK(cudaMallocAsync(&p, BYTES, s));
    fill<<<N / 256, 256, 0, s>>>(p, N, 10.0f * (dev + 1));
    for (int k = 0; k < 8; ++k) axpy<<<N / 256, 256, 0, s>>>(p, p, N, 0.25f);
    std::vector<float> h(N);
    CK(cudaMemcpyAsync(h.data(), p, BYTES, cudaMemcpyDeviceToHost, s));
    CK(cudaFreeAsync(p, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamDestroy(s));
    *sum = fnv1a(h.data(), BYTES);
}

int main() {
    int n = 0;
    CK(cudaGetDeviceCount(&n));
    printf("devices %d\n", n);
    if (n < 2) {
        printf("multi_gpu needs two devices\n");
        return 2;
    }
    cudaDeviceProp p[2];
    for (int d = 0; d < 2; ++d) {
        CK(cudaGetDeviceProperties(&p[d], d));
        printf("device %d: %s sm_%d%d %d SMs %zu MiB pci %x:%x\n", d, p[d].name, p[d].major, p[d].minor,
               p[d].multiProcessorCount, p[d].totalGlobalMem >> 20, p[d].pciBusID, p[d].pciDeviceID);
    }
    printf("uuids differ %d\n", memcmp(&p[0].uuid, &p[1].uuid, sizeof p[0].uuid) != 0);
    int can01 = -1, can10 = -1, can00 = -1, access = -1, atomics = -1;
    CK(cudaDeviceCanAccessPeer(&can01, 0, 1));
    CK(cudaDeviceCanAccessPeer(&can10, 1, 0));
    CK(cudaDeviceCanAccessPeer(&can00, 0, 0));
    CK(cudaDeviceGetP2PAttribute(&access, cudaDevP2PAttrAccessSupported, 0, 1));
    CK(cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, 0, 1));
    printf("peer 0->1 %d 1->0 %d 0->0 %d access %d atomics %d\n", can01, can10, can00, access, atomics);
    cudaError_t self = cudaDeviceGetP2PAttribute(&access, cudaDevP2PAttrAccessSupported, 0, 0);
    printf("p2p attribute of a device with itself: %s\n", cudaGetErrorName(self));
    cudaGetLastError();
    int bad = 0;
    printf("cudaSetDevice(2): %s\n", cudaGetErrorName(cudaSetDevice(2)));
    cudaGetLastError();
    printf("cudaDeviceCanAccessPeer(0, 2): %s\n", cudaGetErrorName(cudaDeviceCanAccessPeer(&bad, 0, 2)));
    cudaGetLastError();

    // Memory and kernels on each device; pointer attributes name the device.
    float *a0, *a1, *b0;
    CK(cudaSetDevice(0));
    CK(cudaMalloc(&a0, BYTES));
    CK(cudaMalloc(&b0, BYTES));
    fill<<<N / 256, 256>>>(a0, N, 1.0f);
    CK(cudaSetDevice(1));
    CK(cudaMalloc(&a1, BYTES));
    fill<<<N / 256, 256>>>(a1, N, 2.0f);
    CK(cudaDeviceSynchronize());
    cudaPointerAttributes at0, at1;
    CK(cudaPointerGetAttributes(&at0, a0));
    CK(cudaPointerGetAttributes(&at1, a1));
    printf("pointer devices %d %d types %d %d\n", at0.device, at1.device, (int)at0.type, (int)at1.type);
    int current = -1;
    CK(cudaGetDevice(&current));
    printf("current device %d\n", current);

    // The driver API's view: the current context's device, each device's primary context.
    CUdevice cd = -1;
    CUcontext c0 = nullptr, c1 = nullptr, cur = nullptr;
    cuCtxGetDevice(&cd);
    cuDevicePrimaryCtxRetain(&c0, 0);
    cuDevicePrimaryCtxRetain(&c1, 1);
    cuCtxGetCurrent(&cur);
    int count = 0;
    cuDeviceGetCount(&count);
    printf("driver: count %d current device %d primaries differ %d current is device 1's %d\n", count, cd,
           c0 != c1, cur == c1);
    cuDevicePrimaryCtxRelease(0);
    cuDevicePrimaryCtxRelease(1);

    // Copies between the devices: explicit peer, default kind.
    CK(cudaMemcpyPeer(b0, 0, a1, 1, BYTES));
    printf("cudaMemcpyPeer 1->0 checksum=0x%016llx\n", (unsigned long long)download(b0, 0));
    CK(cudaMemcpy(b0, a0, BYTES, cudaMemcpyDefault));
    CK(cudaMemcpy(a1, b0, BYTES, cudaMemcpyDefault));
    printf("default copies 0->0->1 checksum=0x%016llx\n", (unsigned long long)download(a1, 1));

    // Peer access, where device 0 reaches device 1 (not between two servers' GPUs): a kernel on
    // device 0 reads device 1's memory. Lines that depend on it begin with "peer".
    CK(cudaSetDevice(1));
    fill<<<N / 256, 256>>>(a1, N, 3.0f);
    CK(cudaDeviceSynchronize());
    CK(cudaSetDevice(0));
    if (can01) {
        CK(cudaDeviceEnablePeerAccess(1, 0));
        printf("peer enable again: %s\n", cudaGetErrorName(cudaDeviceEnablePeerAccess(1, 0)));
        cudaGetLastError();
        axpy<<<N / 256, 256>>>(a0, a1, N, 2.0f);
        CK(cudaDeviceSynchronize());
        printf("peer kernel on 0 reading 1 checksum=0x%016llx\n", (unsigned long long)download(a0, 0));
    } else {
        printf("peer access: none: %s\n", cudaGetErrorName(cudaDeviceEnablePeerAccess(1, 0)));
        cudaGetLastError();
    }

    // An event on device 1's stream that device 0's stream waits for, then an async peer copy.
    cudaStream_t s0, s1;
    cudaEvent_t e1;
    CK(cudaSetDevice(1));
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));
    for (int k = 0; k < 16; ++k) axpy<<<N / 256, 256, 0, s1>>>(a1, a1, N, 0.125f);
    CK(cudaEventRecord(e1, s1));
    CK(cudaSetDevice(0));
    CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
    CK(cudaStreamWaitEvent(s0, e1, 0));
    CK(cudaMemcpyPeerAsync(b0, 0, a1, 1, BYTES, s0));
    CK(cudaStreamSynchronize(s0));
    printf("event-ordered async peer copy checksum=0x%016llx\n", (unsigned long long)download(b0, 0));
    CK(cudaSetDevice(0));
    if (can01) {
        CK(cudaDeviceDisablePeerAccess(1));
        printf("peer disable again: %s\n", cudaGetErrorName(cudaDeviceDisablePeerAccess(1)));
        cudaGetLastError();
    }

    // A thread per device.
    uint64_t sums[2] = {0, 0};
    std::thread t0(worker, 0, &sums[0]), t1(worker, 1, &sums[1]);
    t0.join();
    t1.join();
    printf("threads checksums 0x%016llx 0x%016llx\n", (unsigned long long)sums[0], (unsigned long long)sums[1]);

    // Managed memory made on each device, written by the host, updated by a kernel on its
    // device while the other device is current between the steps, read back by the host
    // (through the client: each allocation's copies and comparisons in its device's context).
    for (int d = 0; d < 2; ++d) {
        const int m = 1 << 16;
        float* u = nullptr;
        CK(cudaSetDevice(d));
        CK(cudaMallocManaged(&u, m * sizeof(float)));
        for (int i = 0; i < m; ++i) u[i] = (float)(i % 13);
        CK(cudaSetDevice(1 - d));
        CK(cudaDeviceSynchronize());
        CK(cudaSetDevice(d));
        axpy<<<(m + 255) / 256, 256>>>(u, u, m, 1.0f);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        CK(cudaSetDevice(1 - d));
        u[1] += 100.0f;
        CK(cudaSetDevice(d));
        axpy<<<(m + 255) / 256, 256>>>(u, u, m, 1.0f);
        CK(cudaDeviceSynchronize());
        printf("managed on device %d: %g %g checksum=0x%016llx\n", d, u[1], u[12],
               (unsigned long long)fnv1a(u, m * sizeof(float)));
        CK(cudaFree(u));
    }

    // Memory information per device (values differ run to run: only that they are sane).
    for (int d = 0; d < 2; ++d) {
        size_t fr = 0, tot = 0;
        CK(cudaSetDevice(d));
        CK(cudaMemGetInfo(&fr, &tot));
        printf("device %d memory info sane %d\n", d, fr > 0 && fr <= tot && tot == p[d].totalGlobalMem);
    }
    CK(cudaSetDevice(0));
    CK(cudaFree(a0));
    CK(cudaFree(b0));
    CK(cudaSetDevice(1));
    CK(cudaFree(a1));
    CK(cudaStreamDestroy(s1));
    CK(cudaEventDestroy(e1));
    CK(cudaSetDevice(0));
    CK(cudaStreamDestroy(s0));
    printf("multi_gpu OK\n");
    return 0;
}
