/* simpleCallback's pattern over two devices (cli/tests/run_remote_devices.rs runs it with
 * `gpuless run --remote ... --gpus 2`): 8 workloads, each on a thread of its own that makes
 * device (i % 2)'s primary context current, creates a stream, allocates device and pinned
 * memory, uploads, downloads and queues a host callback, then ends. The callback (on the
 * client's runner thread) starts a thread that frees the memory and destroys the stream on
 * the same device and counts itself done; main waits for all 8 and checks every download.
 * Prints `callbacks_mt: N ok` and exits 0, or `FAILED <call> <code>` and exits 1. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void (*HostFn)(void *);

#define W 8
#define N 1024

static CUresult (*init_)(unsigned);
static CUresult (*retain)(void **, int);
static CUresult (*set_current)(void *);
static CUresult (*stream_create)(void **, unsigned);
static CUresult (*stream_destroy)(void *);
static CUresult (*mem_alloc)(CUdeviceptr *, size_t);
static CUresult (*mem_free)(CUdeviceptr);
static CUresult (*alloc_host)(void **, size_t);
static CUresult (*free_host)(void *);
static CUresult (*htod_async)(CUdeviceptr, const void *, size_t, void *);
static CUresult (*dtoh_async)(void *, CUdeviceptr, size_t, void *);
static CUresult (*host_func)(void *, HostFn, void *);

struct work {
  int id, dev;
  void *ctx, *stream;
  CUdeviceptr d;
  int *h;
  int ok;
};
static struct work works[W];
static atomic_int done;

#define CK(call)                                                                 \
  do {                                                                           \
    CUresult r_ = (call);                                                        \
    if (r_) { fprintf(stderr, "FAILED %s %d\n", #call, r_); exit(1); }           \
  } while (0)

static void *post(void *arg) {
  struct work *w = arg;
  CK(set_current(w->ctx));
  w->ok = 1;
  for (int i = 0; i < N; i++) w->ok &= w->h[i] == w->id + i;
  CK(mem_free(w->d));
  CK(free_host(w->h));
  CK(stream_destroy(w->stream));
  atomic_fetch_add(&done, 1);
  return 0;
}

static void callback(void *arg) {
  pthread_t t;
  pthread_create(&t, 0, post, arg);
  pthread_detach(t);
}

static void *launch(void *arg) {
  struct work *w = arg;
  CK(set_current(w->ctx));
  CK(stream_create(&w->stream, 0));
  CK(mem_alloc(&w->d, N * sizeof(int)));
  CK(alloc_host((void **)&w->h, N * sizeof(int)));
  for (int i = 0; i < N; i++) w->h[i] = w->id + i;
  CK(htod_async(w->d, w->h, N * sizeof(int), w->stream));
  memset(w->h, 0, N * sizeof(int));
  CK(dtoh_async(w->h, w->d, N * sizeof(int), w->stream));
  CK(host_func(w->stream, callback, w));
  return 0;
}

static void *sym(void *lib, const char *n) {
  void *p = dlsym(lib, n);
  if (!p) { fprintf(stderr, "FAILED dlsym %s\n", n); exit(2); }
  return p;
}

int main(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) { fprintf(stderr, "FAILED dlopen\n"); return 2; }
  init_ = sym(lib, "cuInit");
  retain = sym(lib, "cuDevicePrimaryCtxRetain");
  set_current = sym(lib, "cuCtxSetCurrent");
  stream_create = sym(lib, "cuStreamCreate");
  stream_destroy = sym(lib, "cuStreamDestroy_v2");
  mem_alloc = sym(lib, "cuMemAlloc_v2");
  mem_free = sym(lib, "cuMemFree_v2");
  alloc_host = sym(lib, "cuMemAllocHost_v2");
  free_host = sym(lib, "cuMemFreeHost");
  htod_async = sym(lib, "cuMemcpyHtoDAsync_v2");
  dtoh_async = sym(lib, "cuMemcpyDtoHAsync_v2");
  host_func = sym(lib, "cuLaunchHostFunc");
  CK(init_(0));
  void *ctx[2];
  CK(retain(&ctx[0], 0));
  CK(retain(&ctx[1], 1));
  pthread_t t[W];
  for (int i = 0; i < W; i++) {
    works[i] = (struct work){.id = i, .dev = i % 2, .ctx = ctx[i % 2]};
    pthread_create(&t[i], 0, launch, &works[i]);
  }
  for (int i = 0; i < W; i++) pthread_join(t[i], 0);
  for (int k = 0; k < 30000 && atomic_load(&done) < W; k++) usleep(1000);
  int ok = 0;
  for (int i = 0; i < W; i++) ok += works[i].ok;
  printf("callbacks_mt: %d ok of %d (%d done)\n", ok, W, atomic_load(&done));
  return ok == W ? 0 : 1;
}
