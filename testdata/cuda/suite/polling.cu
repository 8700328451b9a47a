// Issue 35: a kernel that polls memory the host writes while it runs (UnifiedMemoryPerf's
// latch, p2pBandwidthLatencyTest's flag): the kernel spins on a flag in host-shared memory
// until the host sets it; the program synchronizes another, idle stream first, then sets the
// flag, then synchronizes the kernel's stream. Natively the idle stream's synchronization
// returns at once and the kernel sees the host's write; through the client neither may wait for
// the spinning kernel. For plain pinned memory (cudaMallocHost), mapped memory
// (cudaHostAlloc(cudaHostAllocMapped)) and managed memory (cudaMallocManaged: natively the
// device's concurrent managed access allows the host's write while the kernel runs), and with
// work queued behind the spinner (a kernel on its stream, a prefetch or a kernel on the legacy
// stream), as UnifiedMemoryPerf's asynchronous round queues it. The kernel gives up after 3 s
// (globaltimer) and says so; the steps' times go to stderr.
//
// Exit status 0 when every round released its kernel.
#include <chrono>
#include <cstdio>
#include <cstring>

#include "check.h"

__device__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins until *flag is nonzero; *result = 1 when it saw it, 2 when it gave up.
__global__ void spin(volatile unsigned *flag, unsigned *result) {
  unsigned long long start = now_ns();
  while (*flag == 0) {
    if (now_ns() - start > 3ull * 1000 * 1000 * 1000) {
      *result = 2;
      return;
    }
  }
  *result = 1;
}

__global__ void add_one(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}

static int failures;

// Milliseconds since the program started, for the step times on stderr (not compared).
static double ms() {
  static const auto t0 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
#define STEP(what) fprintf(stderr, "[%8.1f ms] %s\n", ms(), what)

// What a round queues behind the spinner (bits): a kernel on its stream, a prefetch of managed
// memory to the host on the legacy stream, a kernel on the legacy stream (both of which wait for
// the blocking stream a).
enum { KERNEL_BEHIND = 1, PREFETCH_LEGACY = 2, KERNEL_LEGACY = 4 };

// One round with `flag` (host-shared memory of the kind `what`); `queued`: work behind it.
static void round_with(const char *what, unsigned *flag, cudaStream_t a, cudaStream_t b, unsigned *result,
                       float *managed, int n, int queued) {
  *flag = 0;
  CK(cudaMemset(result, 0, sizeof(unsigned)));
  CK(cudaDeviceSynchronize());
  STEP(what);
  spin<<<1, 1, 0, a>>>(flag, result);
  CK(cudaGetLastError());
  STEP("launched");
  if (queued & KERNEL_BEHIND) {
    add_one<<<(n + 255) / 256, 256, 0, a>>>(managed, n);
    CK(cudaGetLastError());
    STEP("queued a kernel on the spinner's stream");
  }
  if (queued & PREFETCH_LEGACY) {
    cudaMemLocation host_loc{};
    host_loc.type = cudaMemLocationTypeHost;
    CK(cudaMemPrefetchAsync(managed, n * sizeof(float), host_loc, 0, 0));
    STEP("queued a prefetch on the legacy stream");
  }
  if (queued & KERNEL_LEGACY) {
    add_one<<<(n + 255) / 256, 256, 0, 0>>>(managed, n);
    CK(cudaGetLastError());
    STEP("queued a kernel on the legacy stream");
  }
  CK(cudaStreamSynchronize(b));
  STEP("synchronized the idle stream");
  cudaError_t q = cudaStreamQuery(a);
  STEP("queried");
  *flag = 1;
  CK(cudaStreamSynchronize(a));
  STEP("synchronized the spinning stream");
  CK(cudaDeviceSynchronize());
  unsigned r = 0;
  CK(cudaMemcpy(&r, result, sizeof r, cudaMemcpyDeviceToHost));
  printf("%s%s%s%s: stream query while spinning %s, kernel %s\n", what,
         queued & KERNEL_BEHIND ? ", a kernel behind it" : "", queued & PREFETCH_LEGACY ? ", a prefetch on the legacy stream" : "",
         queued & KERNEL_LEGACY ? ", a kernel on the legacy stream" : "",
         q == cudaErrorNotReady ? "not ready" : cudaGetErrorName(q),
         r == 1 ? "saw the host's write" : r == 2 ? "GAVE UP" : "did not run");
  if (r != 1) failures++;
}

int main() {
  cudaStream_t a, b;
  CK(cudaStreamCreate(&a));
  CK(cudaStreamCreate(&b));
  unsigned *result;
  CK(cudaMalloc(&result, sizeof(unsigned)));
  const int n = 1 << 16;
  float *managed;
  CK(cudaMallocManaged(&managed, n * sizeof(float)));
  for (int i = 0; i < n; i++) managed[i] = (float)i;

  unsigned *pinned, *mapped, *mflag;
  CK(cudaMallocHost(&pinned, sizeof(unsigned)));
  CK(cudaHostAlloc(&mapped, sizeof(unsigned), cudaHostAllocMapped));
  CK(cudaMallocManaged(&mflag, sizeof(unsigned)));
  int concurrent = 0;
  CK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, 0));
  // On stderr (not compared): the client reports a device without concurrent managed access
  // (docs/FIDELITY.md), yet the host's write while the kernel runs reaches it at the next call,
  // so the managed round runs either way (natively it needs the attribute: the H200 has it).
  fprintf(stderr, "concurrent managed access: %d\n", concurrent);

  round_with("pinned", pinned, a, b, result, managed, n, 0);
  round_with("pinned", pinned, a, b, result, managed, n, KERNEL_BEHIND);
  round_with("pinned", pinned, a, b, result, managed, n, PREFETCH_LEGACY);
  round_with("pinned", pinned, a, b, result, managed, n, KERNEL_LEGACY);
  round_with("mapped", mapped, a, b, result, managed, n, 0);
  round_with("managed", mflag, a, b, result, managed, n, 0);

  // Two kernels added one to every element.
  double sum = 0, want = (double)n * (n - 1) / 2 + 2.0 * n;
  for (int i = 0; i < n; i++) sum += managed[i];
  printf("managed data after the queued work: %.0f (expected %.0f)\n", sum, want);
  if (sum != want) failures++;

  CK(cudaFreeHost(pinned));
  CK(cudaFreeHost(mapped));
  CK(cudaFree(mflag));
  CK(cudaFree(managed));
  CK(cudaFree(result));
  printf("%s\n", failures ? "FAILED" : "done");
  return failures ? 1 : 0;
}
