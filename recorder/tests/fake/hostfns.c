/* Host functions in client mode (cli/tests/run_remote_hostfns.rs): the program's functions run
 * on the client, in stream order on the server. Each section prints what its functions saw.
 *
 * - order: a host function after an async download reads the downloaded bytes, and writes
 *   pinned memory that an upload after it sends: the kernel after that sees the function's data
 *   (the device reads pinned memory when the copy runs, after the function);
 * - user data: three registrations with their own userData run in order;
 * - callback: cuStreamAddCallback gets its stream, CUDA_SUCCESS and its userData;
 * - cuda in a host function: a CUDA call there gets CUDA_ERROR_NOT_PERMITTED (800);
 * - spin: a function the program waits for without a CUDA call (it spins on a flag) runs;
 * - graph: a host node in an instantiated graph runs at each of 3 launches;
 * - captured: a captured download, host function and upload of pinned memory: at each of 3
 *   launches the function sees what that launch downloaded, and its upload what it wrote.
 * Any failing call prints `FAILED <call> <code>` to stderr and exits with 1. */
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "scale.h"

typedef void (*HostFn)(void *);
typedef void (*StreamCallback)(void *stream, CUresult status, void *user);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes);
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes);
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, void *stream);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes, void *stream);
CUresult cuStreamCreate(void **stream, unsigned flags);
CUresult cuStreamSynchronize(void *stream);
CUresult cuLaunchHostFunc(void *stream, HostFn fn, void *user);
/* Weak: the stand-in driver lacks it (the server runs it as cuLaunchHostFunc); the client has it. */
__attribute__((weak)) CUresult cuStreamAddCallback(void *stream, StreamCallback cb, void *user, unsigned flags);
CUresult cuStreamBeginCapture_v2(void *stream, int mode);
CUresult cuStreamEndCapture(void *stream, void **graph);
CUresult cuGraphCreate(void **graph, unsigned flags);
typedef struct { HostFn fn; void *user; } HostNodeParams;
CUresult cuGraphAddHostNode(void **node, void *graph, void *const *deps, size_t n, const HostNodeParams *p);
CUresult cuGraphGetNodes(void *graph, void **nodes, size_t *n);
CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t bytes);
CUresult cuMemAllocHost_v2(void **p, size_t bytes);

#define N 8
static float downloaded[N], *upload; /* upload: pinned, read by the device when the copy runs */
static char log_text[1024];
static size_t log_len;
static void logf_(const char *s) {
  size_t n = strlen(s);
  if (log_len + n + 1 < sizeof log_text) { memcpy(log_text + log_len, s, n); log_len += n; log_text[log_len++] = ' '; }
}
static void print_log(const char *what) {
  log_text[log_len] = 0;
  printf("%s: %s\n", what, log_text);
  log_len = 0;
}

/* Reads what the download before it brought back, and prepares what the upload after it sends. */
static void after_download(void *user) {
  (void)user;
  char s[64];
  snprintf(s, sizeof s, "saw=%g,%g", downloaded[0], downloaded[N - 1]);
  logf_(s);
  for (int i = 0; i < N; i++) upload[i] = downloaded[i] + 100.0f;
}
static void tagged(void *user) { logf_((const char *)user); }
static void *the_stream;
static void callback(void *stream, CUresult status, void *user) {
  char s[64];
  snprintf(s, sizeof s, "stream=%d status=%d user=%s", stream == the_stream, status, (const char *)user);
  logf_(s);
}
static void calls_cuda(void *user) {
  (void)user;
  char s[32];
  snprintf(s, sizeof s, "cuCtxSynchronize=%d", cuCtxSynchronize());
  logf_(s);
}
static atomic_int flag;
static void set_flag(void *user) { (void)user; atomic_store(&flag, 1); }
static int launches;
static void count_launch(void *user) { (void)user; launches++; }
/* Reads what the download before it brought, uploads one more (through pinned memory). */
static void bump(void *user) {
  (void)user;
  launches++;
  char s[32];
  snprintf(s, sizeof s, "saw=%g", downloaded[0]);
  logf_(s);
  upload[0] = downloaded[0] + 1.0f;
}

int main(void) {
  void *ctx, *mod, *fn, *s;
  OPEN_SCALE(ctx, mod, fn);
  CK(cuStreamCreate, &s, 0);
  the_stream = s;
  CUdeviceptr d;
  CK(cuMemAlloc_v2, &d, N * sizeof(float));
  CK(cuMemAllocHost_v2, (void **)&upload, N * sizeof(float));
  for (int i = 0; i < N; i++) upload[i] = -1.0f;
  float init[N];
  for (int i = 0; i < N; i++) init[i] = (float)i;
  CK(cuMemcpyHtoD_v2, d, init, sizeof init);
  int n = N;
  float k = 2.0f;
  void *params[] = {&d, &k, &n};

  /* order: kernel, download, host function, upload, kernel, synchronous download. */
  CK(cuLaunchKernel, fn, 1, 1, 1, N, 1, 1, 0, s, params, 0);
  CK(cuMemcpyDtoHAsync_v2, downloaded, d, sizeof downloaded, s);
  CK(cuLaunchHostFunc, s, after_download, 0);
  CK(cuMemcpyHtoDAsync_v2, d, upload, N * sizeof(float), s);
  CK(cuLaunchKernel, fn, 1, 1, 1, N, 1, 1, 0, s, params, 0);
  CK(cuStreamSynchronize, s);
  float back[N];
  CK(cuMemcpyDtoH_v2, back, d, sizeof back);
  print_log("order");
  printf("order: result %g %g\n", back[0], back[N - 1]);

  /* user data */
  CK(cuLaunchHostFunc, s, tagged, "first");
  CK(cuLaunchHostFunc, s, tagged, "second");
  CK(cuLaunchHostFunc, s, tagged, "third");
  CK(cuStreamSynchronize, s);
  print_log("user data");

  /* callback */
  CK(cuStreamAddCallback, s, callback, "cb", 0);
  CK(cuCtxSynchronize);
  print_log("callback");

  /* CUDA in a host function */
  CK(cuLaunchHostFunc, s, calls_cuda, 0);
  CK(cuStreamSynchronize, s);
  print_log("cuda in a host function");

  /* spin: no CUDA call until the function ran (at most 5 s) */
  CK(cuLaunchHostFunc, s, set_flag, 0);
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int seen = 0;
  for (;;) {
    if (atomic_load(&flag)) { seen = 1; break; }
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (t.tv_sec - t0.tv_sec > 5) break;
  }
  printf("spin: %d\n", seen);

  /* graph: a host node, 3 launches */
  void *g, *node, *exec;
  CK(cuGraphCreate, &g, 0);
  HostNodeParams hp = {count_launch, 0};
  CK(cuGraphAddHostNode, &node, g, 0, 0, &hp);
  CK(cuGraphInstantiateWithFlags, &exec, g, 0);
  for (int i = 0; i < 3; i++) CK(cuGraphLaunch, exec, s);
  CK(cuStreamSynchronize, s);
  printf("graph: %d launches seen\n", launches);

  /* captured: a download, a host function that reads it and writes pinned memory, an upload
   * of that memory, captured from the stream; 3 launches, each going on from the last */
  launches = 0;
  float five = 5.0f;
  CK(cuMemcpyHtoD_v2, d, &five, sizeof five);
  void *cg, *cexec;
  CK(cuStreamBeginCapture_v2, s, 0);
  CK(cuMemcpyDtoHAsync_v2, downloaded, d, sizeof(float), s);
  CK(cuLaunchHostFunc, s, bump, 0);
  CK(cuMemcpyHtoDAsync_v2, d, upload, sizeof(float), s);
  CK(cuStreamEndCapture, s, &cg);
  size_t nodes = 0;
  CK(cuGraphGetNodes, cg, 0, &nodes);
  printf("captured: %zu nodes\n", nodes);
  CK(cuGraphInstantiateWithFlags, &cexec, cg, 0);
  for (int i = 0; i < 3; i++) CK(cuGraphLaunch, cexec, s);
  CK(cuStreamSynchronize, s);
  CK(cuMemcpyDtoH_v2, back, d, sizeof(float));
  print_log("captured");
  printf("captured: %d launches seen, value %g\n", launches, back[0]);
  return 0;
}
