// Textures and surfaces: texture objects over a cudaArray (cudaMallocArray +
// cudaMemcpy2DToArray; point sampling with clamping, and linear filtering), over linear memory
// (cudaResourceTypeLinear, tex1Dfetch) and over pitched memory (cudaMallocPitch,
// cudaResourceTypePitch2D); a surface object written and read by kernels and copied back with
// cudaMemcpy2DFromArray.
#include <cmath>
#include <vector>
#include "check.h"

static const int W = 64, H = 32;
static float texel(int x, int y) { return (float)(x + 100 * y) * 0.5f; }

__global__ void sample_point(cudaTextureObject_t t, float* out, float* clamped) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x >= W) return;
    out[y * W + x] = tex2D<float>(t, x + 0.5f, y + 0.5f);
    clamped[y * W + x] = tex2D<float>(t, x - 10.5f, y + 40.5f);  // clamped to (max(x-11,0), H-1)
}

__global__ void sample_linear(cudaTextureObject_t t, float* out) {  // halfway between columns
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < W - 1) out[y * (W - 1) + x] = tex2D<float>(t, x + 1.0f, y + 0.5f);
}

__global__ void fetch_linear(cudaTextureObject_t t, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex1Dfetch<int>(t, n - 1 - i) * 3;
}

__global__ void sample_pitch(cudaTextureObject_t t, float* out) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < W) out[y * W + x] = tex2D<float>(t, x + 0.5f, y + 0.5f) + 1.0f;
}

__global__ void surf_write(cudaSurfaceObject_t s) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < W) surf2Dwrite((float)(x * y) - 7.0f, s, x * (int)sizeof(float), y);
}

__global__ void surf_transform(cudaSurfaceObject_t s) {  // read, then write back in place
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x >= W) return;
    float v = surf2Dread<float>(s, x * (int)sizeof(float), y);
    surf2Dwrite(v * 2.0f, s, x * (int)sizeof(float), y);
}

static int check(const float* got, int n, float (*want)(int), uint64_t* sum, const char* what) {
    int errors = 0;
    for (int i = 0; i < n; ++i) {
        float w = want(i);
        if (fabsf(got[i] - w) > 1e-2f * (1.0f + fabsf(w))) {
            if (errors < 3) fprintf(stderr, "  %s[%d] = %g, want %g\n", what, i, got[i], w);
            ++errors;
        }
        long long r = llroundf(got[i] * 64.0f);
        *sum = fnv1a(&r, sizeof(r), *sum);
    }
    return errors;
}

int main() {
    int errors = 0;
    uint64_t sum = 1469598103934665603ull;
    std::vector<float> img(W * H);
    for (int y = 0; y < H; ++y)
        for (int x = 0; x < W; ++x) img[y * W + x] = texel(x, y);
    dim3 grid(1, H), block(W);

    // 1. cudaArray + two texture objects (point, linear).
    cudaChannelFormatDesc fdesc = cudaCreateChannelDesc<float>();
    cudaArray_t arr;
    CK(cudaMallocArray(&arr, &fdesc, W, H));
    CK(cudaMemcpy2DToArray(arr, 0, 0, img.data(), W * sizeof(float), W * sizeof(float), H,
                           cudaMemcpyHostToDevice));
    cudaResourceDesc rd = {};
    rd.resType = cudaResourceTypeArray;
    rd.res.array.array = arr;
    cudaTextureDesc td = {};
    td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModePoint;
    td.readMode = cudaReadModeElementType;
    td.normalizedCoords = 0;
    cudaTextureObject_t t_point, t_linear;
    CK(cudaCreateTextureObject(&t_point, &rd, &td, nullptr));
    td.filterMode = cudaFilterModeLinear;
    CK(cudaCreateTextureObject(&t_linear, &rd, &td, nullptr));

    float *d_out, *d_clamped, *d_lin_out;
    CK(cudaMalloc(&d_out, W * H * sizeof(float)));
    CK(cudaMalloc(&d_clamped, W * H * sizeof(float)));
    CK(cudaMalloc(&d_lin_out, (W - 1) * H * sizeof(float)));
    sample_point<<<grid, block>>>(t_point, d_out, d_clamped);
    sample_linear<<<grid, block>>>(t_linear, d_lin_out);
    CK(cudaGetLastError());
    std::vector<float> out(W * H), clamped(W * H), lin((W - 1) * H);
    CK(cudaMemcpy(out.data(), d_out, out.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(clamped.data(), d_clamped, clamped.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(lin.data(), d_lin_out, lin.size() * 4, cudaMemcpyDeviceToHost));
    errors += check(out.data(), W * H, [](int i) { return texel(i % W, i / W); }, &sum, "point");
    errors += check(clamped.data(), W * H,
                    [](int i) { return texel(i % W >= 11 ? i % W - 11 : 0, H - 1); }, &sum,
                    "clamped");
    errors += check(lin.data(), (W - 1) * H,
                    [](int i) {
                        int x = i % (W - 1), y = i / (W - 1);
                        return 0.5f * (texel(x, y) + texel(x + 1, y));
                    },
                    &sum, "linear");

    // 2. Texture over linear memory.
    const int n = 5000;
    std::vector<int> lin_in(n), lin_back(n);
    for (int i = 0; i < n; ++i) lin_in[i] = (i * 13) % 1000 - 300;
    // devPtr must be aligned to the device's texture alignment: align inside a larger buffer.
    int align = 0;
    CK(cudaDeviceGetAttribute(&align, cudaDevAttrTextureAlignment, 0));
    char* d_lin_raw;
    int *d_lin, *d_fetch;
    CK(cudaMalloc(&d_lin_raw, n * sizeof(int) + align));
    d_lin = (int*)(((uintptr_t)d_lin_raw + align - 1) / align * align);
    CK(cudaMalloc(&d_fetch, n * sizeof(int)));
    CK(cudaMemcpy(d_lin, lin_in.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    cudaResourceDesc rl = {};
    rl.resType = cudaResourceTypeLinear;
    rl.res.linear.devPtr = d_lin;
    rl.res.linear.desc = cudaCreateChannelDesc<int>();
    rl.res.linear.sizeInBytes = n * sizeof(int);
    cudaTextureDesc tl = {};
    tl.readMode = cudaReadModeElementType;
    cudaTextureObject_t t_lin;
    CK(cudaCreateTextureObject(&t_lin, &rl, &tl, nullptr));
    fetch_linear<<<(n + 255) / 256, 256>>>(t_lin, d_fetch, n);
    CK(cudaMemcpy(lin_back.data(), d_fetch, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) errors += lin_back[i] != lin_in[n - 1 - i] * 3;
    sum = fnv1a(lin_back.data(), n * sizeof(int), sum);

    // 3. Texture over pitched memory.
    float* d_pitched;
    size_t pitch = 0;
    CK(cudaMallocPitch(&d_pitched, &pitch, W * sizeof(float), H));
    CK(cudaMemcpy2D(d_pitched, pitch, img.data(), W * sizeof(float), W * sizeof(float), H,
                    cudaMemcpyHostToDevice));
    cudaResourceDesc rp = {};
    rp.resType = cudaResourceTypePitch2D;
    rp.res.pitch2D.devPtr = d_pitched;
    rp.res.pitch2D.desc = fdesc;
    rp.res.pitch2D.width = W;
    rp.res.pitch2D.height = H;
    rp.res.pitch2D.pitchInBytes = pitch;
    td.filterMode = cudaFilterModePoint;
    cudaTextureObject_t t_pitch;
    CK(cudaCreateTextureObject(&t_pitch, &rp, &td, nullptr));
    sample_pitch<<<grid, block>>>(t_pitch, d_out);
    CK(cudaMemcpy(out.data(), d_out, out.size() * 4, cudaMemcpyDeviceToHost));
    errors += check(out.data(), W * H, [](int i) { return texel(i % W, i / W) + 1.0f; }, &sum,
                    "pitch2d");

    // 4. Surface object.
    cudaArray_t sarr;
    CK(cudaMallocArray(&sarr, &fdesc, W, H, cudaArraySurfaceLoadStore));
    cudaResourceDesc rs = {};
    rs.resType = cudaResourceTypeArray;
    rs.res.array.array = sarr;
    cudaSurfaceObject_t surf;
    CK(cudaCreateSurfaceObject(&surf, &rs));
    surf_write<<<grid, block>>>(surf);
    surf_transform<<<grid, block>>>(surf);
    CK(cudaGetLastError());
    std::vector<float> sback(W * H);
    CK(cudaMemcpy2DFromArray(sback.data(), W * sizeof(float), sarr, 0, 0, W * sizeof(float), H,
                             cudaMemcpyDeviceToHost));
    errors += check(sback.data(), W * H,
                    [](int i) { return 2.0f * ((float)((i % W) * (i / W)) - 7.0f); }, &sum,
                    "surface");

    CK(cudaDestroyTextureObject(t_point));
    CK(cudaDestroyTextureObject(t_linear));
    CK(cudaDestroyTextureObject(t_lin));
    CK(cudaDestroyTextureObject(t_pitch));
    CK(cudaDestroySurfaceObject(surf));
    CK(cudaFreeArray(arr));
    CK(cudaFreeArray(sarr));
    for (void* p : {(void*)d_out, (void*)d_clamped, (void*)d_lin_out, (void*)d_lin_raw,
                    (void*)d_fetch, (void*)d_pitched})
        CK(cudaFree(p));
    return report("texture", "array=64x32 linear=5000 pitch2d surface", sum, errors);
}
