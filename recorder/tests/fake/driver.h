/* How the stand-in programs reach libcuda, the way cudart does: dlopen, dlsym of
 * cuGetProcAddress_v2, then every entry point through it (see libcuda.c). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*gpa_t)(const char *, void **, int, uint64_t, int *);
static gpa_t gpa;

/* The entry point `name` (CUDA 13.0 semantics); exits with 3 when the driver lacks it. */
static void *get(const char *name) {
  void *p = 0; int st = 0;
  if (gpa(name, &p, 13000, 0, &st) || !p) { fprintf(stderr, "no %s\n", name); exit(3); }
  return p; }

/* Loads libcuda.so.1 and its cuGetProcAddress_v2; exits with 2 when it cannot. */
static void open_driver(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) { fprintf(stderr, "%s\n", dlerror()); exit(2); }
  gpa = (gpa_t)dlsym(lib, "cuGetProcAddress_v2");
  if (!gpa) { fprintf(stderr, "no cuGetProcAddress_v2\n"); exit(2); } }
