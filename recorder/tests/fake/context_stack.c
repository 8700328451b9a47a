/* The context stack and destroyed handles as the driver answers them
 * (cli/tests/run_remote_contexts.rs runs it with `gpuless run --remote` against a server on the
 * stand-in driver): the sequence of testdata/cuda/suite/driver_answers.c's `contexts` and the
 * end of its `stale_handles` — two created contexts pushed over the primary one, pops, a push,
 * cuCtxSetCurrent(NULL) popping to the primary context, queries of a destroyed context and a
 * destroyed event. Lines are printed
 * as driver_answers.c prints them (`NAME: RESULT [values]`, RESULT from cuGetErrorName), so the
 * test holds them to the answers of driver 580 on an H100. Every function is looked up by its
 * exported name in the libcuda.so.1 the program loads (the client library, under `gpuless run`),
 * as driver_answers.c links them. A function that is not there prints `FAILED dlsym NAME` and
 * exits 1; the program exits 0 when it gets to the end. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef int CUresult;
typedef void *CUcontext;
typedef void *CUevent;

static void *lib;

static void *sym(const char *name) {
  void *p = dlsym(lib, name);
  if (!p) {
    fprintf(stderr, "FAILED dlsym %s\n", name);
    exit(1);
  }
  return p;
}

static CUresult (*get_error_name)(CUresult, const char **);

/* Prints `name: RESULT[ values]`, as driver_answers.c does. */
static void out(const char *name, CUresult r, const char *fmt, ...) {
  const char *n = NULL;
  if (get_error_name(r, &n) == 0 && n) printf("%s: %s", name, n);
  else printf("%s: CUresult(%d)", name, r);
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    putchar(' ');
    vprintf(fmt, ap);
    va_end(ap);
  }
  putchar('\n');
}
static const char *yesno(int b) { return b ? "yes" : "no"; }

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) {
    fprintf(stderr, "FAILED dlopen %s\n", dlerror());
    return 1;
  }
  get_error_name = sym("cuGetErrorName");
  CUresult (*init)(unsigned) = sym("cuInit");
  CUresult (*device_get)(int *, int) = sym("cuDeviceGet");
  CUresult (*retain)(CUcontext *, int) = sym("cuDevicePrimaryCtxRetain");
  CUresult (*release)(int) = sym("cuDevicePrimaryCtxRelease_v2");
  CUresult (*create)(CUcontext *, void *, unsigned, int) = sym("cuCtxCreate_v4");
  CUresult (*destroy)(CUcontext) = sym("cuCtxDestroy_v2");
  CUresult (*get_current)(CUcontext *) = sym("cuCtxGetCurrent");
  CUresult (*set_current)(CUcontext) = sym("cuCtxSetCurrent");
  CUresult (*push)(CUcontext) = sym("cuCtxPushCurrent_v2");
  CUresult (*pop)(CUcontext *) = sym("cuCtxPopCurrent_v2");
  CUresult (*get_id)(CUcontext, unsigned long long *) = sym("cuCtxGetId");
  CUresult (*get_device)(int *) = sym("cuCtxGetDevice");
  CUresult (*get_flags)(unsigned *) = sym("cuCtxGetFlags");
  CUresult (*api_version)(CUcontext, unsigned *) = sym("cuCtxGetApiVersion");
  CUresult (*ctx_sync)(void) = sym("cuCtxSynchronize");
  CUresult (*event_create)(CUevent *, unsigned) = sym("cuEventCreate");
  CUresult (*event_destroy)(CUevent) = sym("cuEventDestroy_v2");
  CUresult (*event_query)(CUevent) = sym("cuEventQuery");
  CUresult (*event_sync)(CUevent) = sym("cuEventSynchronize");

  out("cuInit", init(0), NULL);
  int dev = -1;
  out("cuDeviceGet(0)", device_get(&dev, 0), NULL);
  CUcontext primary = NULL;
  out("cuDevicePrimaryCtxRetain(0)", retain(&primary, dev), NULL);
  out("cuCtxSetCurrent(primary)", set_current(primary), NULL);

  /* driver_answers.c's `contexts`: the stack is primary, c1, c2 after the two creations. */
  CUcontext c1 = NULL, c2 = NULL, cur = NULL, popped = NULL;
  out("cuCtxCreate(c1)", create(&c1, NULL, 0, dev), NULL);
  get_current(&cur);
  printf("current == c1: %s\n", yesno(cur == c1));
  printf("c1 == primary: %s\n", yesno(c1 == primary));
  out("cuCtxCreate(c2)", create(&c2, NULL, 0, dev), NULL);
  get_current(&cur);
  printf("current == c2: %s\n", yesno(cur == c2));
  CUresult r = pop(&popped);
  out("cuCtxPopCurrent", r, "popped == c2: %s", yesno(popped == c2));
  get_current(&cur);
  printf("current == c1 after the pop: %s\n", yesno(cur == c1));
  out("cuCtxPushCurrent(c2)", push(c2), NULL);
  get_current(&cur);
  printf("current == c2 after the push: %s\n", yesno(cur == c2));
  popped = NULL;
  r = pop(&popped);
  out("cuCtxPopCurrent again", r, "popped == c2: %s", yesno(popped == c2));
  unsigned long long id1 = 0, id2 = 0;
  CUresult r1 = get_id(c1, &id1), r2 = get_id(c2, &id2);
  out("cuCtxGetId(c1), cuCtxGetId(c2)", r1 ? r1 : r2, "ids differ: %s", yesno(id1 != id2));
  int d = -5;
  r = get_device(&d);
  out("cuCtxGetDevice in c1", r, r ? NULL : "== device: %s", yesno(d == dev));
  unsigned v = 0;
  r = get_flags(&v);
  out("cuCtxGetFlags in c1", r, r ? NULL : "0x%x", v);
  /* The stack is primary, c1: setting NULL pops c1; popping again leaves it empty. */
  out("cuCtxSetCurrent(NULL)", set_current(NULL), NULL);
  cur = NULL;
  r = get_current(&cur);
  out("cuCtxGetCurrent after setting NULL", r, "== primary: %s, NULL: %s", yesno(cur == primary), yesno(cur == NULL));
  popped = NULL;
  r = pop(&popped);
  out("cuCtxPopCurrent", r, "popped == primary: %s", yesno(popped == primary));
  cur = c1;
  r = get_current(&cur);
  out("cuCtxGetCurrent with an empty stack", r, "NULL: %s", yesno(cur == NULL));
  popped = c1;
  out("cuCtxPopCurrent with an empty stack", pop(&popped), NULL);
  out("cuCtxDestroy(c2)", destroy(c2), NULL);
  out("cuCtxGetApiVersion(destroyed c2)", api_version(c2, &v), NULL);
  out("cuCtxGetId(destroyed c2)", get_id(c2, &id2), NULL);
  out("cuCtxDestroy(c1, not current)", destroy(c1), NULL);
  out("cuCtxSetCurrent(primary)", set_current(primary), NULL);
  get_current(&cur);
  printf("current == primary: %s\n", yesno(cur == primary));

  /* driver_answers.c's `stale_handles`: an event used after its destruction. */
  CUevent e = NULL;
  out("cuEventCreate", event_create(&e, 0), NULL);
  out("cuEventDestroy", event_destroy(e), NULL);
  out("cuEventQuery(destroyed event)", event_query(e), NULL);
  out("cuEventSynchronize(destroyed event)", event_sync(e), NULL);

  /* The session is as good as before: nothing the server refused is waiting. */
  out("cuCtxSynchronize", ctx_sync(), NULL);
  out("cuDevicePrimaryCtxRelease(0)", release(dev), NULL);
  printf("context_stack: done\n");
  return 0;
}
