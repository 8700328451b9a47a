/* Kernel node parameters asked of graphs, as graph_query.cu asks them through cudart
 * (cli/tests/run_remote_graph.rs runs it on the stand-in driver and through `gpuless run
 * --remote`; the two outputs must be the same): two launches captured — one of a module's
 * function, one of a library's CUkernel passed as a function, as cudart launches — then each
 * node's parameters read (function, kernel, context, geometry, the arguments' values behind
 * kernelParams), changed and read again; a node added with the kernel's function, a clone's
 * node found and changed, and both graphs launched. Prints no addresses or handles, only
 * whether they are the ones they should be.
 * Any failing call prints `FAILED <call> <code>` to stderr and exits with 1. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The prototypes of cuda.h, by the symbols it maps them to. */
typedef int CUresult;
typedef int CUdevice;
typedef uint64_t CUdeviceptr;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream, *CUlibrary, *CUkernel, *CUgraph, *CUgraphNode,
    *CUgraphExec;
/* CUDA_KERNEL_NODE_PARAMS (v2) and its first 56 bytes, v1. */
typedef struct {
  CUfunction func;
  unsigned grid[3], block[3], smem;
  void **params, **extra;
  CUkernel kern;
  CUcontext ctx;
} knode;
typedef struct {
  CUfunction func;
  unsigned grid[3], block[3], smem;
  void **params, **extra;
} knode_v1;
CUresult cuInit(unsigned flags);
CUresult cuDeviceGet(CUdevice *dev, int ordinal);
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleGetFunction(CUfunction *fn, CUmodule module, const char *name);
CUresult cuLibraryLoadData(CUlibrary *lib, const void *code, void *jo, void *jv, unsigned nj, void *lo, void *lv,
                           unsigned nl);
CUresult cuLibraryGetKernel(CUkernel *k, CUlibrary lib, const char *name);
CUresult cuKernelGetFunction(CUfunction *fn, CUkernel k);
CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t bytes);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes);
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes);
CUresult cuLaunchKernel(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned smem, CUstream stream, void **params, void **extra);
CUresult cuStreamCreate(CUstream *stream, unsigned flags);
CUresult cuStreamBeginCapture_v2(CUstream stream, int mode);
CUresult cuStreamEndCapture(CUstream stream, CUgraph *graph);
CUresult cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *n);
CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode n, knode *p);
CUresult cuGraphKernelNodeGetParams(CUgraphNode n, knode_v1 *p);
CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode n, const knode *p);
CUresult cuGraphAddKernelNode_v2(CUgraphNode *n, CUgraph g, const CUgraphNode *deps, size_t nd, const knode *p);
CUresult cuGraphClone(CUgraph *c, CUgraph g);
CUresult cuGraphNodeFindInClone(CUgraphNode *n, CUgraphNode orig, CUgraph clone);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags);
CUresult cuGraphLaunch(CUgraphExec e, CUstream s);
CUresult cuGraphExecDestroy(CUgraphExec e);
CUresult cuGraphDestroy(CUgraph g);

#include "scale.h"

enum { N = 64 };
static CUdeviceptr d;
static CUcontext ctx;

/* One line about a node's parameters: whether `func` is `want`, the geometry, whether extra is
 * null, and the values behind kernelParams. */
static void show(const char *what, const knode *p, CUfunction want, int v2) {
  printf("%s func %d grid %u %u %u block %u %u %u smem %u extra_null %d", what, p->func == want, p->grid[0],
         p->grid[1], p->grid[2], p->block[0], p->block[1], p->block[2], p->smem, p->extra == 0);
  if (!p->params) { printf(" no_params\n"); return; }
  printf(" data %d factor %.1f n %d", *(CUdeviceptr *)p->params[0] == d, *(float *)p->params[1], *(int *)p->params[2]);
  if (v2) printf(" ctx %d", p->ctx == ctx);
  printf("\n"); }

static double run(CUgraph g, CUstream s) {
  static float back[N];
  CUgraphExec e;
  CK(cuGraphInstantiateWithFlags, &e, g, 0);
  CK(cuGraphLaunch, e, s);
  CK(cuMemcpyDtoH_v2, back, d, sizeof back);
  CK(cuGraphExecDestroy, e);
  double sum = 0;
  for (int i = 0; i < N; i++) sum += back[i];
  return sum; }

int main(void) {
  CUmodule mod;
  CUfunction fn, kfn;
  CUlibrary lib;
  CUkernel kern;
  CUstream s;
  OPEN_SCALE(ctx, mod, fn);
  CK(cuLibraryLoadData, &lib, ptx, 0, 0, 0, 0, 0, 0);
  CK(cuLibraryGetKernel, &kern, lib, "scale");
  static float h[N];
  for (int i = 0; i < N; i++) h[i] = (float)(i + 1);
  CK(cuMemAlloc_v2, &d, sizeof h);
  CK(cuMemcpyHtoD_v2, d, h, sizeof h);
  CK(cuStreamCreate, &s, 1);

  float two = 2, three = 3, five = 5, half = 0.5f, seven = 7;
  int n = N;
  void *a2[] = {&d, &two, &n}, *a3[] = {&d, &three, &n}, *a5[] = {&d, &five, &n}, *ah[] = {&d, &half, &n},
       *a7[] = {&d, &seven, &n};
  CUgraph g, c;
  CK(cuStreamBeginCapture_v2, s, 0);
  CK(cuLaunchKernel, fn, 2, 1, 1, 32, 1, 1, 0, s, a2, 0);
  CK(cuLaunchKernel, (CUfunction)kern, 1, 2, 1, 64, 1, 1, 16, s, a3, 0);
  CK(cuStreamEndCapture, s, &g);
  CUgraphNode nodes[8];
  size_t count = 0;
  CK(cuGraphGetNodes, g, 0, &count);
  CK(cuGraphGetNodes, g, nodes, &count);
  printf("nodes %zu\n", count);

  /* The module function's launch: the function it was launched with, no kernel. */
  knode p, again, k;
  memset(&p, 0xcc, sizeof p);
  CK(cuGraphKernelNodeGetParams_v2, nodes[0], &p);
  show("captured_function", &p, fn, 1);
  printf("captured_function kern_null %d\n", p.kern == 0);
  CK(cuGraphKernelNodeGetParams_v2, nodes[0], &again);
  printf("asked_again same_array %d\n", again.params == p.params);
  /* The CUkernel's launch: the kernel, and the kernel's function, which cudart looks up after. */
  CK(cuGraphKernelNodeGetParams_v2, nodes[1], &k);
  CK(cuKernelGetFunction, &kfn, kern);
  show("captured_kernel", &k, kfn, 1);
  printf("captured_kernel kern %d\n", k.kern == kern);
  knode_v1 v1;
  CK(cuGraphKernelNodeGetParams, nodes[1], &v1);
  show("captured_kernel_v1", (const knode *)&v1, kfn, 0);

  /* Changed as graph_query.cu changes them: the parameters read, new arguments, set back. */
  p.params = a5;
  CK(cuGraphKernelNodeSetParams_v2, nodes[0], &p);
  CK(cuGraphKernelNodeGetParams_v2, nodes[0], &p);
  show("set", &p, fn, 1);
  /* Added after the kernel's node, as cudart adds one: the kernel's function and the kernel. */
  knode q = {kfn, {1, 1, 1}, {N, 1, 1}, 0, ah, 0, kern, ctx};
  CUgraphNode added, in_clone;
  CK(cuGraphAddKernelNode_v2, &added, g, &nodes[1], 1, &q);
  knode r;
  CK(cuGraphKernelNodeGetParams_v2, added, &r);
  show("added", &r, kfn, 1);
  /* A clone's copy of the kernel's node, found and changed. */
  CK(cuGraphClone, &c, g);
  CK(cuGraphNodeFindInClone, &in_clone, nodes[1], c);
  CK(cuGraphKernelNodeGetParams_v2, in_clone, &r);
  show("in_clone", &r, kfn, 1);
  r.params = a7;
  CK(cuGraphKernelNodeSetParams_v2, in_clone, &r);
  CK(cuGraphKernelNodeGetParams_v2, in_clone, &r);
  show("in_clone_set", &r, kfn, 1);

  printf("graph sum %.1f\n", run(g, s));
  printf("clone sum %.1f\n", run(c, s));
  CK(cuGraphDestroy, c);
  CK(cuGraphDestroy, g);
  printf("done\n");
  return 0;
}
