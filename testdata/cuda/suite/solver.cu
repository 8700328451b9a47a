// An adaptive ODE solver in the shape of Rodinia's myocyte (issue 21: its replays reported
// mismatches that differed from one replay to the next), written here from its description:
// every evaluation of the right-hand side is a synchronous upload of the state (pageable
// memory), one launch of a kernel heavy in transcendental functions, and a synchronous download
// of the derivatives; the host takes an embedded Runge-Kutta step from them and chooses the next
// step size from the error estimate, so the host's control flow depends on every result. A
// scratch buffer is allocated and freed around every step (the allocator's reuse), and the
// kernel reads a parameter block uploaded once at the start.
//
//   solver [EVALUATIONS]   (default 3900: 7,800 synchronous copies around 3,900 launches)
#include <cmath>
#include <vector>
#include "check.h"

constexpr int EQ = 91;      // equations
constexpr int THREADS = 128;

__global__ void rhs(const float* y, float* dy, const float* params, float* scratch, float t) {
    __shared__ float s[THREADS];
    int i = threadIdx.x;
    float v = 0.f;
    if (i < EQ) {
        float k = params[i], a = params[EQ + i], b = params[2 * EQ + i];
        float yi = y[i], yn = y[(i + 1) % EQ], yp = y[(i + EQ - 1) % EQ];
        // Gating variables, exchange with neighbours, a forcing term.
        float alpha = a * expf(-yi / (1.f + fabsf(b))) / (1.f + expf(-(yn - 0.5f) * 4.f));
        float beta = b * logf(1.f + yp * yp) + powf(fabsf(yi) + 1e-3f, 0.75f);
        float force = 0.1f * sinf(t * (1.f + 0.01f * i)) * cosf(0.5f * t + yn);
        v = -k * yi + alpha * (1.f - tanhf(yi)) - 0.05f * beta + force + 0.02f * (yn + yp - 2.f * yi);
        scratch[i] = v;
    }
    s[i] = v;
    __syncthreads();
    if (i < EQ) dy[i] = s[i] + 1e-3f * scratch[(i * 7) % EQ] * (i % 2 ? 1.f : -1.f);
}

int main(int argc, char** argv) {
    const int evaluations = argc > 1 ? atoi(argv[1]) : 3900;
    std::vector<float> params(3 * EQ), y(EQ), dy(EQ), k[3], trial(EQ);
    for (auto& v : k) v.resize(EQ);
    for (int i = 0; i < EQ; ++i) {
        params[i] = 0.5f + 0.01f * (i % 17);
        params[EQ + i] = 0.2f + 0.003f * (i % 29);
        params[2 * EQ + i] = 0.1f + 0.002f * (i % 13);
        y[i] = 0.1f * std::sin(0.3f * i);
    }
    float *d_y, *d_dy, *d_params;
    CK(cudaMalloc(&d_y, EQ * sizeof(float)));
    CK(cudaMalloc(&d_dy, EQ * sizeof(float)));
    CK(cudaMalloc(&d_params, params.size() * sizeof(float)));
    CK(cudaMemcpy(d_params, params.data(), params.size() * sizeof(float), cudaMemcpyHostToDevice));
    float* scratch = nullptr;
    int done = 0;
    uint64_t sum = 1469598103934665603ull;
    auto f = [&](float t, const std::vector<float>& in, std::vector<float>& out) {
        CK(cudaMemcpy(d_y, in.data(), EQ * sizeof(float), cudaMemcpyHostToDevice));
        rhs<<<1, THREADS>>>(d_y, d_dy, d_params, scratch, t);
        CK(cudaGetLastError());
        CK(cudaMemcpy(out.data(), d_dy, EQ * sizeof(float), cudaMemcpyDeviceToHost));
        sum = fnv1a(out.data(), EQ * sizeof(float), sum);
        ++done;
    };
    // Bogacki-Shampine 3(2): three evaluations a step (first-same-as-last not used).
    float t = 0.f, h = 0.01f;
    int steps = 0, rejected = 0;
    while (done + 3 <= evaluations) {
        CK(cudaMalloc(&scratch, EQ * sizeof(float) * (1 + steps % 3)));
        f(t, y, k[0]);
        for (int i = 0; i < EQ; ++i) trial[i] = y[i] + 0.5f * h * k[0][i];
        f(t + 0.5f * h, trial, k[1]);
        for (int i = 0; i < EQ; ++i) trial[i] = y[i] + 0.75f * h * k[1][i];
        f(t + 0.75f * h, trial, k[2]);
        CK(cudaFree(scratch));
        float err = 0.f;
        for (int i = 0; i < EQ; ++i) {
            float y3 = y[i] + h * (2.f / 9 * k[0][i] + 1.f / 3 * k[1][i] + 4.f / 9 * k[2][i]);
            float y2 = y[i] + h * (7.f / 24 * k[0][i] + 0.25f * k[1][i] + 1.f / 3 * k[2][i]);
            err = std::fmax(err, std::fabs(y3 - y2));
            trial[i] = y3;
        }
        if (err < 1e-5f) {
            y = trial;
            t += h;
        } else {
            ++rejected;
        }
        h = std::fmin(0.5f, std::fmax(1e-4f, 0.9f * h * std::pow(1e-5f / std::fmax(err, 1e-12f), 1.f / 3)));
        ++steps;
    }
    int errors = 0;
    for (float v : y) errors += !std::isfinite(v);
    char details[160];
    snprintf(details, sizeof details, "evaluations=%d steps=%d rejected=%d t=%.6f y0=%.6f", done, steps,
             rejected, t, y[0]);
    return report("solver", details, sum, errors);
}
