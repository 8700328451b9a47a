// cuBLAS: one SGEMM, then cublasSgemmBatched whose A/B/C pointer arrays live in DEVICE memory
// (uploaded with cudaMemcpy): 24 A matrices in separate allocations, B as slices of one
// allocation, C as slices in reverse order. Inputs are multiples of 1/4 so every product and sum
// is exact in FP32 (and TF32): results are compared with a CPU reference (tolerance 1e-3) and the
// checksum is taken over the results rounded to 1/16.
#include <cmath>
#include <vector>
#include <cublas_v2.h>
#include "check.h"

#define CB(call)                                                                          \
    do {                                                                                  \
        cublasStatus_t s_ = (call);                                                       \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                \
            fprintf(stderr, "%s:%d: %s failed: status %d\n", __FILE__, __LINE__, #call,   \
                    (int)s_);                                                             \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static float val(int i, int mul, int mod) { return (float)((i * mul) % mod - mod / 2) * 0.25f; }

// Column-major C = alpha * A(m x k) * B(k x n) + beta * C.
static void gemm_ref(int m, int n, int k, float alpha, const float* A, const float* B, float beta,
                     float* C) {
    for (int j = 0; j < n; ++j)
        for (int i = 0; i < m; ++i) {
            double s = 0;
            for (int p = 0; p < k; ++p) s += (double)A[i + p * m] * B[p + j * k];
            C[i + j * m] = (float)(alpha * s + beta * C[i + j * m]);
        }
}

static int compare(const float* got, const float* want, size_t n, uint64_t* sum) {
    int errors = 0;
    for (size_t i = 0; i < n; ++i) {
        if (!(fabsf(got[i] - want[i]) <= 1e-3f * (1.0f + fabsf(want[i])))) {
            if (errors < 5) fprintf(stderr, "  [%zu] got %g want %g\n", i, got[i], want[i]);
            ++errors;
        }
        long long r = llroundf(got[i] * 16.0f);
        *sum = fnv1a(&r, sizeof(r), *sum);
    }
    return errors;
}

int main() {
    cublasHandle_t h;
    CB(cublasCreate(&h));
    int errors = 0;
    uint64_t sum = 1469598103934665603ull;

    // 1. SGEMM, 96 x 64 x 48, on the default stream.
    const int M = 96, N = 64, K = 48;
    std::vector<float> A(M * K), B(K * N), C(M * N), R;
    for (int i = 0; i < M * K; ++i) A[i] = val(i, 7, 9);
    for (int i = 0; i < K * N; ++i) B[i] = val(i, 5, 11);
    for (int i = 0; i < M * N; ++i) C[i] = val(i, 3, 7);
    R = C;
    const float alpha = 1.5f, beta = -0.5f;
    gemm_ref(M, N, K, alpha, A.data(), B.data(), beta, R.data());
    float *dA, *dB, *dC;
    CK(cudaMalloc(&dA, A.size() * 4));
    CK(cudaMalloc(&dB, B.size() * 4));
    CK(cudaMalloc(&dC, C.size() * 4));
    CK(cudaMemcpy(dA, A.data(), A.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, B.data(), B.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dC, C.data(), C.size() * 4, cudaMemcpyHostToDevice));
    CB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &alpha, dA, M, dB, K, &beta, dC, M));
    CK(cudaMemcpy(C.data(), dC, C.size() * 4, cudaMemcpyDeviceToHost));
    errors += compare(C.data(), R.data(), C.size(), &sum);

    // 2. Batched SGEMM, 24 x (32 x 32 x 32), pointer arrays in device memory, on a stream.
    const int batch = 24, n = 32, nn = n * n;
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    CB(cublasSetStream(h, s));
    std::vector<float> hA(batch * nn), hB(batch * nn), hC(batch * nn), hR;
    for (int i = 0; i < batch * nn; ++i) {
        hA[i] = val(i, 13, 9);
        hB[i] = val(i, 11, 7);
        hC[i] = val(i, 17, 5);
    }
    std::vector<float*> a_bufs(batch);
    float *b_all, *c_all;
    CK(cudaMalloc(&b_all, (size_t)batch * nn * 4));
    CK(cudaMalloc(&c_all, (size_t)batch * nn * 4));
    std::vector<const float*> pa(batch), pb(batch);
    std::vector<float*> pc(batch);
    for (int b = 0; b < batch; ++b) {
        CK(cudaMalloc(&a_bufs[b], nn * 4));
        CK(cudaMemcpy(a_bufs[b], &hA[b * nn], nn * 4, cudaMemcpyHostToDevice));
        pa[b] = a_bufs[b];
        pb[b] = b_all + (size_t)b * nn;
        pc[b] = c_all + (size_t)(batch - 1 - b) * nn;  // reverse order: pointers, not layout
    }
    CK(cudaMemcpy(b_all, hB.data(), hB.size() * 4, cudaMemcpyHostToDevice));
    // hC[b] is the C of problem b, stored at slice batch-1-b.
    for (int b = 0; b < batch; ++b)
        CK(cudaMemcpy(pc[b], &hC[b * nn], nn * 4, cudaMemcpyHostToDevice));
    const float **d_pa, **d_pb;
    float** d_pc;
    CK(cudaMalloc(&d_pa, batch * sizeof(float*)));
    CK(cudaMalloc(&d_pb, batch * sizeof(float*)));
    CK(cudaMalloc(&d_pc, batch * sizeof(float*)));
    CK(cudaMemcpy(d_pa, pa.data(), batch * sizeof(float*), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_pb, pb.data(), batch * sizeof(float*), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_pc, pc.data(), batch * sizeof(float*), cudaMemcpyHostToDevice));
    const float a2 = 0.75f, b2 = 2.0f;
    CB(cublasSgemmBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &a2, d_pa, n, d_pb, n, &b2, d_pc,
                          n, batch));
    // Second round through the same device pointer arrays: C accumulates.
    CB(cublasSgemmBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &a2, d_pa, n, d_pb, n, &b2, d_pc,
                          n, batch));
    CK(cudaStreamSynchronize(s));
    hR = hC;
    for (int b = 0; b < batch; ++b) {
        gemm_ref(n, n, n, a2, &hA[b * nn], &hB[b * nn], b2, &hR[b * nn]);
        gemm_ref(n, n, n, a2, &hA[b * nn], &hB[b * nn], b2, &hR[b * nn]);
    }
    std::vector<float> got(batch * nn);
    CK(cudaMemcpy(got.data(), c_all, got.size() * 4, cudaMemcpyDeviceToHost));
    for (int b = 0; b < batch; ++b)
        errors += compare(&got[(size_t)(batch - 1 - b) * nn], &hR[b * nn], nn, &sum);

    CB(cublasDestroy(h));
    for (float* p : a_bufs) CK(cudaFree(p));
    CK(cudaFree(b_all)); CK(cudaFree(c_all));
    CK(cudaFree(d_pa)); CK(cudaFree(d_pb)); CK(cudaFree(d_pc));
    CK(cudaFree(dA)); CK(cudaFree(dB)); CK(cudaFree(dC));
    CK(cudaStreamDestroy(s));
    return report("cublas_batched", "sgemm=96x64x48 batched=24x32^3", sum, errors);
}
