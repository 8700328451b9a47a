/* The programs of the registration tests. Built as:
 *   global: with kernels.c (TAG=prog), linked against libcudart.so and libdep.so (TAG=dep, which
 *           links libcudart.so too): registrations bound through the global scope, from the
 *           program and from a library's constructor; then dlopens libother.so (TAG=other,
 *           linked against a second copy, libcudart2.so) with RTLD_LOCAL: its registrations still
 *           bind to the global libcudart.so first, with or without the recorder.
 *   local:  -DLOCAL_ONLY, no runtime at all: dlopens libloc.so (TAG=loc, libcudart.so) with
 *           RTLD_LOCAL, so the runtime is only in a local scope; with argument "two" also
 *           libother.so (libcudart2.so): two runtimes outside the global scope.
 *   static: with kernels.c (TAG=stat) and libcudart.c compiled in (a static runtime). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static void report(const char *lib, const char *fn) {
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) { printf("%s\n", dlerror()); return; }
  void (*r)(void) = (void (*)(void))dlsym(h, fn);
  if (r) r();
}

#ifdef LOCAL_ONLY
int main(int argc, char **argv) {
  report("libloc.so", "loc_report");
  if (argc > 1 && !strcmp(argv[1], "two")) report("libother.so", "other_report");
  return 0;
}
#else
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
void CAT(TAG, _report)(void);
#ifndef STATIC_RUNTIME
void dep_report(void);
int fakeFatbinsEnded(void);
#endif
int main(void) {
  CAT(TAG, _report)();
#ifndef STATIC_RUNTIME
  dep_report();
  report("libother.so", "other_report");
  printf("fat binaries ended in the global runtime: %d\n", fakeFatbinsEnded());
#endif
  return 3; /* an exit code the recorder must pass on */
}
#endif
