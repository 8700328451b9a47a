/* JIT linking through `gpuless run --remote` (cli/tests/run_remote_link.rs), on the stand-in
 * driver, which "links" by concatenating its inputs: a link of PTX data and a PTX file with the
 * options ptxjit passes (wall time, info and error logs, verbose), completed on the server; its
 * image loaded, both kernels found, one launched; the info log, its size and the wall time read
 * back. Then a link whose damaged PTX input the driver refuses when it is added (its error and
 * error log, at the add as natively), completed with a good input after it; a link whose
 * creation the driver refuses; a missing file, a link destroyed twice — and the session goes
 * on.
 *
 * Prints one line per fact; any unexpected failure prints `FAILED <call> <code>` to stderr and
 * exits with 1. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scale.h"

CUresult cuLinkCreate_v2(unsigned n, int *options, void **values, void **state);
CUresult cuLinkAddData_v2(void *state, int type, void *data, size_t size, const char *name, unsigned n,
                          int *options, void **values);
CUresult cuLinkAddFile_v2(void *state, int type, const char *path, unsigned n, int *options, void **values);
CUresult cuLinkComplete(void *state, void **cubin, size_t *size);
CUresult cuLinkDestroy(void *state);

enum { WALL_TIME = 2, INFO_LOG = 3, INFO_SIZE = 4, ERROR_LOG = 5, ERROR_SIZE = 6, LOG_VERBOSE = 12 };
enum { INPUT_PTX = 1 };

/* The stand-in's second kernel, for the file: wide(float *, float, int, struct { char[640]; }). */
static const char wide_ptx[] =
  ".version 8.0\n.target sm_90\n.address_size 64\n"
  ".visible .entry wide(\n\t.param .u64 a,\n\t.param .f32 b,\n\t.param .u32 c,\n\t.param .align 8 .b8 meta[640]\n)\n"
  "{\n\tret;\n}\n";

/* scale by k of the n floats at d, read back into out. */
static void run_scale(void *fn, CUdeviceptr d, float k, int n, float *out) {
  void *params[] = {&d, &k, &n};
  CK(cuLaunchKernel, fn, 1, 1, 1, (unsigned)n, 1, 1, 0, 0, params, 0);
  CK(cuMemcpyDtoH_v2, out, d, (size_t)n * sizeof(float)); }

int main(void) {
  void *ctx, *mod, *scale, *wide, *link, *image = NULL;
  CUresult r;
  size_t size = 0;
  int dev;
  CK(cuInit, 0);
  CK(cuDeviceGet, &dev, 0);
  CK(cuDevicePrimaryCtxRetain, &ctx, dev);
  CK(cuCtxSetCurrent, ctx);

  /* The file input: the text without a NUL, as a file holds it. */
  char path[] = "/tmp/gpuless-link-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0 || write(fd, wide_ptx, strlen(wide_ptx)) != (ssize_t)strlen(wide_ptx)) { perror("temp file"); return 1; }
  close(fd);

  float wall = -1.0f;
  char info[256], error[256];
  memset(info, 'x', sizeof info);
  memset(error, 'x', sizeof error);
  int opts[] = {WALL_TIME, INFO_LOG, INFO_SIZE, ERROR_LOG, ERROR_SIZE, LOG_VERBOSE};
  void *vals[] = {&wall, info, (void *)(uintptr_t)sizeof info, error, (void *)(uintptr_t)sizeof error, (void *)1};
  CK(cuLinkCreate_v2, 6, opts, vals, &link);
  CK(cuLinkAddData_v2, link, INPUT_PTX, (void *)ptx, sizeof ptx, "scale.ptx", 0, NULL, NULL);
  CK(cuLinkAddFile_v2, link, INPUT_PTX, path, 0, NULL, NULL);
  CK(cuLinkComplete, link, &image, &size);
  printf("linked %s\n", image && size > sizeof ptx + strlen(wide_ptx) ? "yes" : "no");
  printf("info %s\n", info);
  printf("info_size %lu of %zu\n", (unsigned long)(uintptr_t)vals[2], strlen(info));
  printf("error_size %lu\n", (unsigned long)(uintptr_t)vals[4]);
  printf("wall %g\n", wall);

  /* Symbols relocated to addresses the program gives (CU_JIT_GLOBAL_SYMBOL_NAMES, _ADDRESSES,
   * _COUNT): the arrays travel to the server's driver by value. */
  {
    void *link2, *image2 = NULL;
    size_t size2 = 0;
    const char *sym_names[] = {"g_table", "g_scale"};
    unsigned long long sym_addrs[] = {0x640000001000ull, 0x640000002000ull};
    int opts2[] = {17, 18, 19};
    void *vals2[] = {sym_names, sym_addrs, (void *)2};
    CK(cuLinkCreate_v2, 3, opts2, vals2, &link2);
    CK(cuLinkAddData_v2, link2, INPUT_PTX, (void *)ptx, sizeof ptx, "scale.ptx", 0, NULL, NULL);
    CK(cuLinkComplete, link2, &image2, &size2);
    const char *a = strstr((const char *)image2, "// symbol g_table=");
    const char *b = strstr((const char *)image2, "// symbol g_scale=");
    printf("symbols %.*s %.*s\n", a ? (int)strcspn(a, "\n") : 0, a ? a : "", b ? (int)strcspn(b, "\n") : 0, b ? b : "");
    CK(cuLinkDestroy, link2);
  }

  /* The linked image holds both kernels; the image stays valid until the link is destroyed. */
  CK(cuModuleLoadData, &mod, image);
  CK(cuModuleGetFunction, &scale, mod, "scale");
  CK(cuModuleGetFunction, &wide, mod, "wide");
  CK(cuLinkDestroy, link);
  CUdeviceptr d;
  float out[8];
  iota_buffer(&d, 8);
  run_scale(scale, d, 3.0f, 8, out);
  printf("scaled %g %g\n", out[1], out[7]);

  /* Damaged PTX: the driver refuses it when it is added, with its error log; the link goes on
   * with a good input, completes, and writes its info log and wall time again. */
  void *bad;
  memset(error, 'x', sizeof error);
  memset(info, 'x', sizeof info);
  wall = -1.0f;
  vals[2] = (void *)(uintptr_t)sizeof info;
  vals[4] = (void *)(uintptr_t)sizeof error;
  CK(cuLinkCreate_v2, 6, opts, vals, &bad);
  static const char damaged[] = "this is not PTX\n";
  printf("damaged add %d\n", cuLinkAddData_v2(bad, INPUT_PTX, (void *)damaged, sizeof damaged, "damaged.ptx", 0, NULL, NULL));
  printf("error %s\n", error);
  printf("error_size %lu of %zu\n", (unsigned long)(uintptr_t)vals[4], strlen(error));
  printf("wall before completion %g\n", wall);
  CK(cuLinkAddData_v2, bad, INPUT_PTX, (void *)ptx, sizeof ptx, "scale.ptx", 0, NULL, NULL);
  image = NULL;
  printf("completed after the refused input %d\n", cuLinkComplete(bad, &image, &size));
  printf("info %s\n", info);
  printf("info_size %lu of %zu\n", (unsigned long)(uintptr_t)vals[2], strlen(info));
  printf("wall %g\n", wall);
  CK(cuLinkDestroy, bad);

  /* Options the driver refuses when the link is created (the stand-in takes at most 16):
   * natively cuLinkCreate fails; through a session the creation is not waited for, and its
   * failure is the answer to the first add. Either way the first failing step's status. */
  int many_opts[17];
  void *many_vals[17];
  for (int i = 0; i < 17; i++) { many_opts[i] = LOG_VERBOSE; many_vals[i] = (void *)1; }
  r = cuLinkCreate_v2(17, many_opts, many_vals, &bad);
  if (r == 0) {
    r = cuLinkAddData_v2(bad, INPUT_PTX, (void *)ptx, sizeof ptx, "scale.ptx", 0, NULL, NULL);
    cuLinkDestroy(bad); }
  printf("too many options %d\n", r);

  /* A file that is not there; a link destroyed twice. */
  CK(cuLinkCreate_v2, 0, NULL, NULL, &bad);
  printf("missing file %d\n", cuLinkAddFile_v2(bad, INPUT_PTX, "/nonexistent/gpuless.ptx", 0, NULL, NULL));
  CK(cuLinkDestroy, bad);
  printf("destroyed again %d\n", cuLinkDestroy(bad));

  /* The session goes on. */
  run_scale(scale, d, 3.0f, 8, out);
  printf("after %g %g\n", out[1], out[7]);
  unlink(path);
  return 0; }
