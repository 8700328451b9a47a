// Ends through _exit (atexit skipped, as Python's os._exit does) after 25 completed and 7 queued
// launches. With an argument, a vfork child whose exec fails first calls _exit (it shares this
// process's memory), and the program then ends normally. Recorded, the trace must be finished
// with all 32 launches either way, and the exit status must be the program's (5, or 0).
#include <cstdio>
#include <sys/wait.h>
#include <unistd.h>

__global__ void inc(int *p) { atomicAdd(p, 1); }

int main(int argc, char **argv) {
  int *d = nullptr;
  if (cudaMalloc(&d, sizeof(int)) != cudaSuccess || cudaMemset(d, 0, sizeof(int)) != cudaSuccess) return 1;
  for (int i = 0; i < 25; i++) inc<<<1, 1>>>(d);
  int h = 0;
  if (cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess) return 2;
  printf("%d launches completed\n", h);
  fflush(stdout);
  if (argc > 1) {
    pid_t pid = vfork();
    if (pid == 0) {
      execl("/nonexistent/gpuless-test", "x", (char *)nullptr);
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 127) return 3;
  }
  for (int i = 0; i < 7; i++) inc<<<1, 1>>>(d);
  if (argc > 1) return cudaDeviceSynchronize() == cudaSuccess ? 0 : 4;
  _exit(5);
}
