// A program that crashes (a fault in its own host code) after GPU work: 25 launches completed
// by a copy, then 7 launches nothing synchronized. The recorder must finish the trace with all
// 32 before the process dies of SIGSEGV, as it would have without the recorder.
#include <cstdint>
#include <cstdio>

__global__ void inc(int *p) { atomicAdd(p, 1); }

int main() {
  int *d = nullptr;
  if (cudaMalloc(&d, sizeof(int)) != cudaSuccess || cudaMemset(d, 0, sizeof(int)) != cudaSuccess) return 1;
  for (int i = 0; i < 25; i++) inc<<<1, 1>>>(d);
  int h = 0;
  if (cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess) return 2;
  printf("crash after %d launches completed and 7 more queued\n", h);
  fflush(stdout);
  for (int i = 0; i < 7; i++) inc<<<1, 1>>>(d);
  *(volatile int *)(uintptr_t)8 = 1;
  return 3;
}
