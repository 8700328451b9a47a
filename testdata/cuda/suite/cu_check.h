// Shared by the GPU-suite programs on the driver API: CU(call) ends the program with the
// call's CUresult name when it fails.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda.h>

#define CU(call)                                                                         \
    do {                                                                                 \
        CUresult r_ = (call);                                                            \
        if (r_ != CUDA_SUCCESS) {                                                        \
            const char* n_ = nullptr;                                                    \
            cuGetErrorName(r_, &n_);                                                     \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,         \
                    n_ ? n_ : "?");                                                      \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)
