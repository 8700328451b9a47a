// Shared by the GPU-suite programs (runtime API): error checks and a deterministic checksum.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CK(call)                                                                         \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) {                                                         \
            fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call,    \
                    cudaGetErrorName(e_), cudaGetErrorString(e_));                       \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

// FNV-1a 64 over bytes: printed as the result checksum (never over pointers or timings).
static inline uint64_t fnv1a(const void* p, size_t n, uint64_t h = 1469598103934665603ull) {
    const unsigned char* b = (const unsigned char*)p;
    for (size_t i = 0; i < n; ++i) { h ^= b[i]; h *= 1099511628211ull; }
    return h;
}

// Prints `<name> <details> checksum=0x... OK|FAIL` and returns the exit code.
static inline int report(const char* name, const char* details, uint64_t sum, int errors) {
    printf("%s %s checksum=0x%016llx %s\n", name, details, (unsigned long long)sum,
           errors == 0 ? "OK" : "FAIL");
    if (errors) fprintf(stderr, "%s: %d wrong values\n", name, errors);
    return errors == 0 ? 0 : 1;
}
