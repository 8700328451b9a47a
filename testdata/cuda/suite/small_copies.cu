// A program bound by many small synchronous copies (issue 34's target: ≤ ×1.2 of native over
// loopback TCP, ≤ ×1.05 over the Unix socket): an iterative computation that reads a few bytes
// back after every step, the way a convergence test or a dynamic loop bound does. Four shapes,
// each ITERS times (default 2,000), timed per iteration:
//
//   step_read   a kernel step, then cudaMemcpy of its 4-byte result to pageable memory
//   read        cudaMemcpy of 8 bytes from the device, nothing else
//   async_read  a kernel step, cudaMemcpyAsync of 4 bytes into pinned memory on a created stream,
//               cudaStreamSynchronize
//   write_step_read  cudaMemcpy of 4 bytes to the device, a kernel step, a 4-byte read back
//
//   small_copies [ITERS]
//
// stdout: one deterministic line (the values read back, checksummed; verified against the host's
// own computation); stderr: one JSON line with each shape's median and p99 per iteration in µs.
#include <algorithm>
#include <chrono>
#include <vector>
#include "check.h"

// One step of a toy fixed-point iteration on one value per block; thread 0 of block 0 writes
// the value the host reads.
__global__ void step(unsigned* v, unsigned k) {
    if (blockIdx.x == 0 && threadIdx.x == 0) v[0] = v[0] * 1664525u + 1013904223u + k;
}

static unsigned host_step(unsigned x, unsigned k) { return x * 1664525u + 1013904223u + k; }

struct Times {
    std::vector<double> us;
    void add(std::chrono::steady_clock::time_point t0) {
        us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    double q(double p) {
        std::vector<double> s = us;
        std::sort(s.begin(), s.end());
        return s.empty() ? 0 : s[std::min(s.size() - 1, (size_t)(p * s.size()))];
    }
};

int main(int argc, char** argv) {
    const int iters = argc > 1 ? atoi(argv[1]) : 2000;
    unsigned* d;
    unsigned long long* d8;
    unsigned* pinned;
    CK(cudaMalloc(&d, sizeof(unsigned)));
    CK(cudaMalloc(&d8, sizeof(unsigned long long)));
    CK(cudaMallocHost(&pinned, sizeof(unsigned)));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned long long eight = 0x0123456789abcdefull;
    CK(cudaMemcpy(d8, &eight, sizeof(eight), cudaMemcpyHostToDevice));
    uint64_t sum = 1469598103934665603ull;
    int errors = 0;
    unsigned expect = 7;
    CK(cudaMemcpy(d, &expect, sizeof(unsigned), cudaMemcpyHostToDevice));
    Times t[4];
    const char* names[4] = {"step_read", "read", "async_read", "write_step_read"};
    for (int warm = 0; warm < 2; ++warm) {
        for (int shape = 0; shape < 4; ++shape) {
            const int n = warm ? iters : 20;
            for (int i = 0; i < n; ++i) {
                auto t0 = std::chrono::steady_clock::now();
                unsigned got = 0;
                unsigned long long got8 = 0;
                switch (shape) {
                case 0:
                    step<<<1, 32>>>(d, i);
                    CK(cudaMemcpy(&got, d, sizeof(unsigned), cudaMemcpyDeviceToHost));
                    expect = host_step(expect, i);
                    break;
                case 1:
                    CK(cudaMemcpy(&got8, d8, sizeof(got8), cudaMemcpyDeviceToHost));
                    break;
                case 2:
                    step<<<1, 32, 0, s>>>(d, i);
                    CK(cudaMemcpyAsync(pinned, d, sizeof(unsigned), cudaMemcpyDeviceToHost, s));
                    CK(cudaStreamSynchronize(s));
                    got = *pinned;
                    expect = host_step(expect, i);
                    break;
                case 3: {
                    unsigned start = (unsigned)i * 2654435761u;
                    CK(cudaMemcpy(d, &start, sizeof(unsigned), cudaMemcpyHostToDevice));
                    step<<<1, 32>>>(d, i);
                    CK(cudaMemcpy(&got, d, sizeof(unsigned), cudaMemcpyDeviceToHost));
                    expect = host_step(start, i);
                    break;
                }
                }
                if (warm) t[shape].add(t0);
                if (shape == 1) {
                    errors += got8 != eight;
                    sum = fnv1a(&got8, sizeof(got8), sum);
                } else {
                    errors += got != expect;
                    sum = fnv1a(&got, sizeof(got), sum);
                }
            }
        }
    }
    CK(cudaGetLastError());
    fprintf(stderr, "{");
    for (int shape = 0; shape < 4; ++shape)
        fprintf(stderr, "%s\"%s\": {\"median_us\": %.2f, \"p99_us\": %.2f}", shape ? ", " : "", names[shape],
                t[shape].q(0.5), t[shape].q(0.99));
    fprintf(stderr, "}\n");
    char details[64];
    snprintf(details, sizeof details, "iterations=%d shapes=4", iters);
    return report("small_copies", details, sum, errors);
}
