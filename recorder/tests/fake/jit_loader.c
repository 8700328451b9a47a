/* The loaders' JIT list options in client mode (cli/tests/run_remote_link.rs): symbol names and
 * addresses given to cuModuleLoadDataEx or cuLibraryLoadData change what loads (the driver
 * refuses them with CUDA_ERROR_INVALID_VALUE or fails the kernel's launch), and the client does
 * not carry them outside the linker: refused with CUDA_ERROR_NOT_SUPPORTED, said once, never
 * dropped; other options load as before. Prints each status. */
#include "scale.h"

/* Weak: answered by the client in these tests. */
__attribute__((weak)) CUresult cuModuleLoadDataEx(void **m, const void *image, unsigned n, int *opts, void **vals);
__attribute__((weak)) CUresult cuLibraryLoadData(void **l, const void *code, int *opts, void **vals, unsigned n,
                                                 int *lopts, void **lvals, unsigned ln);

int main(void) {
  void *ctx, *mod, *fn;
  OPEN_SCALE(ctx, mod, fn);
  const char *names[] = {"g_table"};
  unsigned long long addrs[] = {0x640000001000ull};
  int lists[] = {17, 18, 19};
  void *lvals[] = {names, addrs, (void *)1};
  void *m = NULL, *l = NULL;
  printf("module with lists %d\n", cuModuleLoadDataEx(&m, ptx, 3, lists, lvals));
  printf("library with lists %d\n", cuLibraryLoadData(&l, ptx, lists, lvals, 3, NULL, NULL, 0));
  int plain[] = {0 /* CU_JIT_MAX_REGISTERS */};
  void *pvals[] = {(void *)32};
  printf("module with a plain option %d\n", cuModuleLoadDataEx(&m, ptx, 1, plain, pvals));
  return 0;
}
