/* What reading the time costs on this machine: RDTSC, RDTSCP, and clock_gettime through the
 * vDSO (monotonic and coarse), ns per read over N reads.   cc -O2 clock.c -o clock && ./clock */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>
static double ns(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000000;
  volatile uint64_t sink = 0; unsigned aux; struct timespec t;
  double t0 = ns(); for (long i = 0; i < n; i++) sink += __rdtsc(); double a = (ns() - t0) / n;
  t0 = ns(); for (long i = 0; i < n; i++) sink += __rdtscp(&aux); double b = (ns() - t0) / n;
  t0 = ns(); for (long i = 0; i < n; i++) { clock_gettime(CLOCK_MONOTONIC, &t); sink += t.tv_nsec; } double c = (ns() - t0) / n;
  t0 = ns(); for (long i = 0; i < n; i++) { clock_gettime(CLOCK_MONOTONIC_COARSE, &t); sink += t.tv_nsec; } double d = (ns() - t0) / n;
  printf("rdtsc %.1f ns, rdtscp %.1f ns, clock_gettime(MONOTONIC) %.1f ns, clock_gettime(MONOTONIC_COARSE) %.1f ns\n", a, b, c, d);
  return (int)(sink & 0);
}
