// Kernels whose parameter layouts exercise the cubin analyzer: scalars of every width,
// structs with padding, arrays inside structs, templates, restrict pointers and globals.
#include <cstdint>

struct DC { double d; char c; };                 // 16 bytes, align 8
struct Vec3 { float x, y, z; };                   // 12 bytes, align 4
struct Arr { int v[5]; short s; };               // 24 bytes, align 4
struct alignas(16) Big { float m[16]; int tag; }; // 80 bytes, align 16

__constant__ float g_scale[4];
__device__ int g_counter;

// The example from REFERENCE.md §2: offsets 0, 8, 16, 32, 40; sizes 8, 4, 16, 8, 1.
extern "C" __global__ void mixed(float* out, int n, DC dc, const double* __restrict__ in, char tag) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (float)(in[i] * dc.d) + dc.c + tag + g_scale[i & 3];
}

extern "C" __global__ void scalars(char a, short b, int c, long long d, float e, double f,
                                   unsigned char g, bool h, uint64_t* out) {
    out[0] = a + b + c + d + (long long)e + (long long)f + g + h;
}

extern "C" __global__ void structs(Vec3 v, Arr a, Big b, char c, Vec3* out) {
    out[0].x = v.x + a.v[4] + a.s + b.m[15] + b.tag + c;
    atomicAdd(&g_counter, 1);
}

extern "C" __global__ void no_params() { atomicAdd(&g_counter, 1); }

template <typename T, int N>
__global__ void scale_array(T* data, T factor, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n * N) data[i] *= factor;
}
template __global__ void scale_array<float, 2>(float*, float, int);
template __global__ void scale_array<double, 4>(double*, double, int);
template __global__ void scale_array<char, 1>(char*, char, int);

namespace ns {
struct Pair { int a; double b; };
__global__ void __launch_bounds__(256) bounded(Pair p, Pair* out) {
    __shared__ double tile[256];
    tile[threadIdx.x] = p.b + p.a;
    __syncthreads();
    if (threadIdx.x == 0) out[0].b = tile[255];
}
}  // namespace ns

extern "C" __global__ void big_struct_by_value(Big b0, Big b1, Big b2, int n, float* out) {
    if (n > 0) out[0] = b0.m[0] + b1.m[1] + b2.m[2];
}
