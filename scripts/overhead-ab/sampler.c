/* A wall-clock sampling profiler for one thread, loaded with ctypes by sample_thread.py: a POSIX timer
 * on CLOCK_MONOTONIC delivers SIGPROF to the thread that started it (CPU-time timers tick at the
 * kernel's HZ in the device's VMs: too coarse); the handler keeps the interrupted instruction
 * address. sampler_start(period_ns), sampler_stop(), sampler_take(out, max) -> count (and reset).
 * x86-64 Linux. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>
#define CAP (1 << 22)
static uint64_t buf[CAP];
static volatile long n;
static timer_t timer;
static int made;
static void on_prof(int s, siginfo_t *i, void *c) {
  (void)s; (void)i;
  ucontext_t *u = c; long k = n;
  if (k < CAP) { buf[k] = (uint64_t)u->uc_mcontext.gregs[REG_RIP]; n = k + 1; }
}
int sampler_start(long ns) {
  if (!made) {
    struct sigaction sa; memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_prof; sa.sa_flags = SA_SIGINFO | SA_RESTART; sigaction(SIGPROF, &sa, 0);
    struct sigevent ev; memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD_ID; ev.sigev_signo = SIGPROF; ev._sigev_un._tid = (int)syscall(SYS_gettid);
    if (timer_create(CLOCK_MONOTONIC, &ev, &timer)) return -1;
    made = 1;
  }
  struct itimerspec it = {{0, ns}, {0, ns}};
  return timer_settime(timer, 0, &it, 0);
}
int sampler_stop(void) { struct itimerspec it; memset(&it, 0, sizeof it); return timer_settime(timer, 0, &it, 0); }
long sampler_take(uint64_t *out, long max) { long k = n < max ? n : max; memcpy(out, buf, k * 8); n = 0; return k; }
