/* Conditional graph nodes in client mode (cli/tests/run_remote_pools.rs): two IF nodes, one
 * whose handle's default launch value is 1 and one whose is 0, each with the stand-in's `scale`
 * in its body graph (the driver makes the body; the program fills it); the graph is launched and
 * only the first body ran. Prints what it saw; any failing call prints `FAILED <call> <code>` to
 * stderr and exits with 1. */
#include <string.h>

#include "scale.h"

CUresult cuGraphAddKernelNode_v2(void **n, void *g, void *const *deps, size_t nd, const KernelParams *p);

typedef struct { int type, reserved[3]; unsigned long long handle; int ctype; unsigned size; void **bodies; void *ctx;
                 unsigned char rest[256 - 48]; } NodeParams;
__attribute__((weak)) CUresult cuGraphConditionalHandleCreate(unsigned long long *h, void *g, void *ctx, unsigned def,
                                                               unsigned flags);
__attribute__((weak)) CUresult cuGraphAddNode(void **n, void *g, void *const *deps, size_t nd, NodeParams *p);

#define N 8
/* Adds an IF node; its body graph goes to `*body`, read from the CUDA-owned array the driver
 * points phGraph_out (`bodies`) at, as the real driver does. */
static void *add_if(void *g, void *ctx, unsigned def, void **body) {
  unsigned long long h = 0;
  CK(cuGraphConditionalHandleCreate, &h, g, ctx, def, 0);
  NodeParams p;
  memset(&p, 0, sizeof p);
  p.type = 13; /* CU_GRAPH_NODE_TYPE_CONDITIONAL */
  p.handle = h;
  p.ctype = 0; /* IF */
  p.size = 1;
  p.bodies = 0; /* an output: the driver writes where its body array is */
  p.ctx = ctx;
  void *n;
  CK(cuGraphAddNode, &n, g, 0, 0, &p);
  *body = p.bodies ? p.bodies[0] : 0;
  return n; }

int main(void) {
  void *ctx, *mod, *fn, *g, *body_on = 0, *body_off = 0, *k1, *k2, *exec;
  OPEN_SCALE(ctx, mod, fn);
  CUdeviceptr a, b;
  iota_buffer(&a, N);
  iota_buffer(&b, N);
  CK(cuGraphCreate, &g, 0);
  add_if(g, ctx, 1, &body_on);
  add_if(g, ctx, 0, &body_off);
  printf("bodies given: %d\n", body_on != 0 && body_off != 0 && body_on != body_off);
  float k = 5.0f;
  int n = N;
  void *pa[] = {&a, &k, &n}, *pb[] = {&b, &k, &n};
  KernelParams kp = scale_node(fn, N, pa);
  CK(cuGraphAddKernelNode_v2, &k1, body_on, 0, 0, &kp);
  kp.params = pb;
  CK(cuGraphAddKernelNode_v2, &k2, body_off, 0, 0, &kp);
  CK(cuGraphInstantiateWithFlags, &exec, g, 0);
  CK(cuGraphLaunch, exec, 0);
  CK(cuCtxSynchronize);
  float data[N];
  CK(cuMemcpyDtoH_v2, data, a, sizeof data);
  printf("if (1) body ran: %g %g\n", data[1], data[N - 1]);
  CK(cuMemcpyDtoH_v2, data, b, sizeof data);
  printf("if (0) body did not: %g %g\n", data[1], data[N - 1]);
  printf("done\n");
  return 0;
}
