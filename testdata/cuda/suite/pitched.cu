// Asynchronous 2D and 3D copies into host memory (cudaMemcpy2DAsync, cudaMemcpy3DAsync on a
// stream, completed by cudaStreamSynchronize), from pitched device memory a kernel wrote, into
// host rows wider than the copy (their padding must stay). A recording must hash the packed rows
// at the synchronization; a replay must compare them; a client must write them into the rows
// when the server's answer brings them.
#include <vector>
#include "check.h"

__global__ void fill(float* p, size_t pitch, int w, int h, float k) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h) {
        float* row = (float*)((char*)p + y * pitch);
        row[x] = float(y * w + x) * k;
    }
}

int main() {
    const int w = 300, h = 64, d = 3;
    int errors = 0;
    uint64_t sum = 1469598103934665603ull;
    cudaStream_t s;
    CK(cudaStreamCreate(&s));

    // 2D: pitched device rows into host rows of 320 floats (20 floats of padding each).
    float* dev;
    size_t pitch;
    CK(cudaMallocPitch(&dev, &pitch, w * sizeof(float), h));
    fill<<<dim3((w + 127) / 128, h), 128, 0, s>>>(dev, pitch, w, h, 0.5f);
    CK(cudaGetLastError());
    const int hw = 320;
    std::vector<float> host(hw * h, -1.0f);
    CK(cudaMemcpy2DAsync(host.data(), hw * sizeof(float), dev, pitch, w * sizeof(float), h,
                         cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < hw; ++x) errors += host[y * hw + x] != (x < w ? float(y * w + x) * 0.5f : -1.0f);
    sum = fnv1a(host.data(), host.size() * sizeof(float), sum);

    // 3D: a pitched volume of d slices, each slice written by the kernel with its own factor,
    // into a host volume whose rows are wider, on the stream.
    cudaPitchedPtr vol;
    cudaExtent ext = make_cudaExtent(w * sizeof(float), h, d);
    CK(cudaMalloc3D(&vol, ext));
    for (int z = 0; z < d; ++z) {
        float* slice = (float*)((char*)vol.ptr + z * vol.pitch * h);
        fill<<<dim3((w + 127) / 128, h), 128, 0, s>>>(slice, vol.pitch, w, h, float(z + 2));
    }
    CK(cudaGetLastError());
    std::vector<float> back(hw * h * d, -2.0f);
    cudaMemcpy3DParms p = {};
    p.srcPtr = vol;
    p.dstPtr = make_cudaPitchedPtr(back.data(), hw * sizeof(float), w, h);
    p.extent = ext;
    p.kind = cudaMemcpyDeviceToHost;
    CK(cudaMemcpy3DAsync(&p, s));
    CK(cudaStreamSynchronize(s));
    for (int z = 0; z < d; ++z)
        for (int y = 0; y < h; ++y)
            for (int x = 0; x < hw; ++x)
                errors += back[(z * h + y) * hw + x] != (x < w ? float(y * w + x) * float(z + 2) : -2.0f);
    sum = fnv1a(back.data(), back.size() * sizeof(float), sum);

    CK(cudaFree(vol.ptr));
    CK(cudaFree(dev));
    CK(cudaStreamDestroy(s));
    return report("pitched", "async 2D and 3D copies into padded host rows", sum, errors);
}
