// Preemption probe (docs/SCHEDULING.md, issue "REEF-style preemption on NVIDIA"): how soon a
// latency-critical (RT) kernel starts while best-effort (BE) work keeps one GPU busy, under each
// mechanism NVIDIA offers. The design question: can RT work reach a p99 of <= 100 us from
// submission to kernel start, and with which mechanism?
//
// RT probe: a 1x1 kernel that writes %globaltimer into pinned mapped host memory. Latency of one
// probe = (stamp - CLOCK_REALTIME just before the launch) - base, where base is the smallest such
// difference over 50 probes on the idle GPU right before and right after the scenario, averaged:
// the time added over an idle launch. (The GPU timer drifts against CLOCK_REALTIME, about 1 us/s
// on an H100, so one base for the whole run skews later scenarios by tens of us.) The rows
// `idle launch (start|end)` and `clock drift` show the drift over the whole run.
// Probes come every 1-3 ms (uniform, fixed seed), PROBES (default 400) per scenario.
//
// BE work: `spin` kernels (128 threads, thread 0 spins on %globaltimer for block_ns) with grids
// of exactly `waves` full waves at the kernel's occupancy, at most 4 kernels in flight:
//   long   1 ms blocks x 4 waves (4 ms kernels)      short  20 us blocks x 100 waves (2 ms)
//   tiny   20 us blocks x 1 wave (20 us kernels)
// Mechanisms, each with each BE variant (scenario NAME-VARIANT, e.g. priority-long):
//   process     BE in another process (its own context: time-sliced against RT's); the process
//               is forked before this one touches CUDA, runs each variant on command and drops
//               its context (cudaDeviceReset) after each
//   priority    one context, BE on a lowest-priority stream from a host thread, RT on the highest
//   nopriority  one context, both streams default priority (the baseline for priority)
//   green       green contexts: RT on 8 SMs, BE on the rest (cuDevSmResourceSplitByCount)
//   procgreen   the same split across two processes: BE in the other process on a green context
//               of the rest, RT here on its green context (do disjoint SMs let two processes'
//               contexts run at once, or do they still time-slice?)
// and `idle` (no BE). SCENARIOS=idle,priority-long,... selects some (default: all).
// Prints `row|preempt probe: NAME|INFO|p50 .., p90 .., p99 .., max .. us; details` per scenario,
// then one JSON line with everything (latencies included).
//
// Build: nvcc -O2 -std=c++17 -gencode arch=compute_90,code=sm_90 -cudart shared preempt_probe.cu
//        -lcuda (scripts/preempt-probe.sh builds and runs it).
#include <cuda.h>
#include <cuda_runtime.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

[[noreturn]] static void die(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(nullptr);
    _exit(1);  // not exit(): a BE thread may be inside CUDA
}

static void check_rt(cudaError_t e, const char* call, const char* file, int line) {
    if (e != cudaSuccess) die("%s at %s:%d: %s", call, file, line, cudaGetErrorName(e));
}
static const char* cu_name(CUresult r) {
    const char* n = "?";
    cuGetErrorName(r, &n);
    return n;
}
static void check_cu(CUresult r, const char* call, const char* file, int line) {
    if (r != CUDA_SUCCESS) die("%s at %s:%d: %s", call, file, line, cu_name(r));
}
#define CHECK(call) check_rt((call), #call, __FILE__, __LINE__)
#define CU_CHECK(call) check_cu((call), #call, __FILE__, __LINE__)
// Soft checks for the green-context set-up: the enclosing function returns the error's name.
#define TRY_CU(call)                                                                  \
    do {                                                                              \
        CUresult r_ = (call);                                                         \
        if (r_ != CUDA_SUCCESS) return std::string(cu_name(r_)) + " from " #call;     \
    } while (0)
#define TRY_RT(call)                                                                  \
    do {                                                                              \
        cudaError_t e_ = (call);                                                      \
        if (e_ != cudaSuccess) return std::string(cudaGetErrorName(e_)) + " from " #call; \
    } while (0)

constexpr int kThreads = 128;    // BE block size
constexpr int kInflight = 4;     // BE kernels submitted and not finished, at most
constexpr int kSlots = 1024;     // probe stamps in mapped host memory (a ring)
constexpr int kBaseProbes = 200;
constexpr unsigned kRtSms = 8;   // the RT green context's SMs (sm_90: groups of 8)
constexpr int kAloneMs = 500;    // BE alone, measured for each variant

// ---- kernels ----

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void probe_kernel(unsigned long long* slots, int slot) {
    slots[slot] = global_ns();
    __threadfence_system();
}

__global__ void spin_kernel(unsigned long long block_ns) {
    if (threadIdx.x == 0) {
        unsigned long long start = global_ns();
        while (global_ns() - start < block_ns) {
        }
    }
    __syncthreads();
}

// ---- host clocks and small helpers ----

static int64_t clock_ns(clockid_t id) {
    timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
static int64_t realtime_ns() { return clock_ns(CLOCK_REALTIME); }
static int64_t mono_ns() { return clock_ns(CLOCK_MONOTONIC); }
static void sleep_us(int64_t us) { std::this_thread::sleep_for(std::chrono::microseconds(us)); }

static void appendf(std::string& s, const char* fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(nullptr, 0, fmt, ap);
    va_end(ap);
    if (n > 0) {
        size_t old = s.size();
        s.resize(old + n + 1);
        vsnprintf(&s[old], n + 1, fmt, ap2);
        s.resize(old + n);
    }
    va_end(ap2);
}

static std::string json_str(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += (c == '\n' || c == '\t') ? ' ' : c;
    }
    return out + "\"";
}

// Nearest-rank percentile of a sorted vector.
static double pct(const std::vector<double>& sorted, double q) {
    if (sorted.empty()) return 0;
    size_t k = (size_t)std::ceil(q * sorted.size());
    return sorted[std::min(std::max<size_t>(k, 1), sorted.size()) - 1];
}

// ---- configuration ----

struct Variant {
    const char* tag;
    const char* what;
    unsigned long long block_ns;
    int waves;
};
static const Variant kVariants[3] = {
    {"long", "long blocks: 1 ms blocks x 4 waves", 1000000ULL, 4},
    {"short", "short blocks: 20 us blocks x 100 waves", 20000ULL, 100},
    {"tiny", "short kernels: 20 us blocks x 1 wave", 20000ULL, 1},
};
static const char* kMechanisms[5] = {"process", "priority", "nopriority", "green", "procgreen"};

static int g_probes = 400;
static std::vector<std::string> g_selected;  // empty: every scenario

static bool wanted(const std::string& name) {
    return g_selected.empty() || std::find(g_selected.begin(), g_selected.end(), name) != g_selected.end();
}

static bool known(const std::string& name) {
    for (const Variant& v : kVariants)
        for (const char* m : kMechanisms)
            if (name == std::string(m) + "-" + v.tag) return true;
    return name == "idle";
}

static void parse_selection(const char* list) {
    if (!list) return;
    std::string cur;
    for (const char* p = list;; ++p) {
        if (*p == ',' || *p == '\0') {
            if (!cur.empty() && !known(cur)) fprintf(stderr, "preempt_probe: unknown scenario %s\n", cur.c_str());
            if (!cur.empty()) g_selected.push_back(cur);
            cur.clear();
            if (*p == '\0') break;
        } else if (*p != ' ') {
            cur += *p;
        }
    }
}

// ---- BE submission (a host thread here, or the BE process) ----

// Lives in shared memory for the BE process, on the stack for a BE thread.
struct BeControl {
    std::atomic<int> stop{0}, ready{0}, done{0};
    std::atomic<long long> kernels{0}, ns{0};  // completed after the first, and over how long
    void reset() {
        stop.store(0), ready.store(0), done.store(0), kernels.store(0), ns.store(0);
    }
};

static double be_rate(const BeControl& c) {
    long long ns = c.ns.load();
    return ns > 0 ? c.kernels.load() * 1e9 / ns : -1;
}

// Keeps `kInflight` spin kernels queued on `s` until c->stop; sets c->ready once the first has
// completed (the queue then full); on stop records the rate and waits for what is in flight.
static void run_be(BeControl* c, cudaStream_t s, long long grid, unsigned long long block_ns) {
    cudaEvent_t ev[kInflight];
    for (auto& e : ev) CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    long long launched = 0, completed = 0;
    int64_t t0 = 0;
    while (!c->stop.load()) {
        if (launched - completed == kInflight) {
            CHECK(cudaEventSynchronize(ev[completed % kInflight]));
            if (++completed == 1) {
                t0 = mono_ns();
                c->ready.store(1);
            }
        }
        spin_kernel<<<(unsigned)grid, kThreads, 0, s>>>(block_ns);
        CHECK(cudaGetLastError());
        CHECK(cudaEventRecord(ev[launched % kInflight], s));
        ++launched;
    }
    c->kernels.store(completed > 0 ? completed - 1 : 0);
    c->ns.store(completed > 0 ? mono_ns() - t0 : 0);
    while (completed < launched) CHECK(cudaEventSynchronize(ev[completed++ % kInflight]));
    for (auto& e : ev) CHECK(cudaEventDestroy(e));
}

static void gpu_shape(int* sms, int* occupancy) {
    CHECK(cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, 0));
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(occupancy, spin_kernel, kThreads, 0));
}

static bool wait_flag(const std::atomic<int>& f, double seconds, pid_t child = -1);

// ---- the BE process: forked before this process touches CUDA ----

static BeControl* g_ctl = nullptr;  // shared with the BE process
static pid_t g_child = -1;
static int g_cmd_fd = -1;

// The device's SMs split into RT's group of kRtSms and the rest: "" or why not.
static std::string split_sms(CUdevice dev, CUdevResource* rt, CUdevResource* rest) {
    CUdevResource all;
    memset(&all, 0, sizeof all);
    memset(rt, 0, sizeof *rt);
    memset(rest, 0, sizeof *rest);
    TRY_CU(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
    unsigned int groups = 1;
    TRY_CU(cuDevSmResourceSplitByCount(rt, &groups, &all, rest, 0, kRtSms));
    if (groups != 1 || rest->sm.smCount == 0) return "split left no SMs for BE";
    return "";
}

// In the BE process: a green context of the SMs the RT split leaves (the same split as the RT
// process makes: cuDevSmResourceSplitByCount is deterministic), current, and a stream in it.
static void be_green(CUgreenCtx* gc, cudaStream_t* s, int* sms) {
    CU_CHECK(cuInit(0));
    CUdevice dev;
    CU_CHECK(cuDeviceGet(&dev, 0));
    CUdevResource rt, rest;
    std::string e = split_sms(dev, &rt, &rest);
    if (!e.empty()) die("BE process: %s", e.c_str());
    CUdevResourceDesc desc;
    CU_CHECK(cuDevResourceGenerateDesc(&desc, &rest, 1));
    CU_CHECK(cuGreenCtxCreate(gc, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CUcontext ctx;
    CU_CHECK(cuCtxFromGreenCtx(&ctx, *gc));
    CU_CHECK(cuCtxSetCurrent(ctx));
    CUstream cs;
    CU_CHECK(cuGreenCtxStreamCreate(&cs, *gc, CU_STREAM_NON_BLOCKING, 0));
    *s = (cudaStream_t)cs;
    *sms = (int)rest.sm.smCount;
}

// Command byte '0'..'2': run that variant until stop, then drop the context; '3'..'5': the same
// on a green context of the SMs RT's green context leaves; 'q' or EOF: exit.
[[noreturn]] static void be_worker(int cmd_fd, pid_t parent) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(0);
    char cmd;
    while (read(cmd_fd, &cmd, 1) == 1 && cmd >= '0' && cmd <= '5') {
        bool green = cmd >= '3';
        const Variant& v = kVariants[(cmd - '0') % 3];
        CHECK(cudaSetDevice(0));
        CHECK(cudaFree(nullptr));
        int sms = 0, occ = 0;
        gpu_shape(&sms, &occ);
        cudaStream_t s;
        CUgreenCtx gc = nullptr;
        if (green)
            be_green(&gc, &s, &sms);
        else
            CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        run_be(g_ctl, s, (long long)occ * sms * v.waves, v.block_ns);
        CHECK(cudaStreamDestroy(s));
        if (gc) CU_CHECK(cuGreenCtxDestroy(gc));
        CHECK(cudaDeviceReset());  // no idle context of ours during the other scenarios
        g_ctl->done.store(1);
    }
    _exit(0);
}

static void start_be_process() {
    void* p = mmap(nullptr, sizeof(BeControl), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) die("mmap: %s", strerror(errno));
    g_ctl = new (p) BeControl();
    int fds[2];
    if (pipe(fds) != 0) die("pipe: %s", strerror(errno));
    fflush(nullptr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) die("fork: %s", strerror(errno));
    if (pid == 0) {
        close(fds[1]);
        be_worker(fds[0], parent);
    }
    close(fds[0]);
    g_cmd_fd = fds[1];
    g_child = pid;
}

static void lose_child() {
    if (g_child > 0) {
        kill(g_child, SIGKILL);
        waitpid(g_child, nullptr, 0);
    }
    g_child = -1;
}

static void stop_be_process() {
    if (g_child <= 0) return;
    char q = 'q';
    ssize_t w = write(g_cmd_fd, &q, 1);
    (void)w;
    close(g_cmd_fd);
    waitpid(g_child, nullptr, 0);
    g_child = -1;
}

// Waits until f is set (false on timeout, or when `child` has exited).
static bool wait_flag(const std::atomic<int>& f, double seconds, pid_t child) {
    int64_t end = mono_ns() + (int64_t)(seconds * 1e9);
    while (!f.load()) {
        if (mono_ns() > end) return false;
        if (child > 0 && waitpid(child, nullptr, WNOHANG) == child) {
            g_child = -1;
            return false;
        }
        sleep_us(200);
    }
    return true;
}

// ---- this process's GPU state and the probe ----

struct Gpu {
    char name[256] = {0};
    int sms = 0, occ = 0, least = 0, greatest = 0;
    CUcontext primary = nullptr;
    cudaStream_t rt_plain, rt_high, be_plain, be_low;
    volatile unsigned long long* slots_host = nullptr;
    unsigned long long* slots_dev = nullptr;
};
static Gpu g;
static std::mt19937 g_rng(20240917u);

static void init_gpu() {
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(nullptr));
    CU_CHECK(cuInit(0));
    CU_CHECK(cuCtxGetCurrent(&g.primary));
    CU_CHECK(cuDeviceGetName(g.name, (int)sizeof g.name - 1, 0));
    gpu_shape(&g.sms, &g.occ);
    CHECK(cudaDeviceGetStreamPriorityRange(&g.least, &g.greatest));
    CHECK(cudaStreamCreateWithPriority(&g.rt_plain, cudaStreamNonBlocking, 0));
    CHECK(cudaStreamCreateWithPriority(&g.rt_high, cudaStreamNonBlocking, g.greatest));
    CHECK(cudaStreamCreateWithPriority(&g.be_plain, cudaStreamNonBlocking, 0));
    CHECK(cudaStreamCreateWithPriority(&g.be_low, cudaStreamNonBlocking, g.least));
    void* host = nullptr;
    void* dev = nullptr;
    CHECK(cudaHostAlloc(&host, kSlots * sizeof(unsigned long long), cudaHostAllocMapped | cudaHostAllocPortable));
    memset(host, 0, kSlots * sizeof(unsigned long long));
    CHECK(cudaHostGetDevicePointer(&dev, host, 0));
    g.slots_host = (volatile unsigned long long*)host;
    g.slots_dev = (unsigned long long*)dev;
    // Warm-up: module load and first launches on every stream.
    spin_kernel<<<1, kThreads, 0, g.be_plain>>>(1000ULL);
    CHECK(cudaGetLastError());
    for (int i = 0; i < 20; ++i) {
        probe_kernel<<<1, 1, 0, g.rt_plain>>>(g.slots_dev, 0);
        probe_kernel<<<1, 1, 0, g.rt_high>>>(g.slots_dev, 1);
    }
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
}

// One probe on s: stamp - CLOCK_REALTIME at launch, in ns (offset between the clocks included).
static int64_t probe_once(cudaStream_t s, int i) {
    int slot = i % kSlots;
    g.slots_host[slot] = 0;
    int64_t t_launch = realtime_ns();
    probe_kernel<<<1, 1, 0, s>>>(g.slots_dev, slot);
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(s));
    unsigned long long stamp = g.slots_host[slot];
    if (stamp == 0) die("probe %d wrote no stamp", i);
    return (int64_t)stamp - t_launch;
}

static std::vector<int64_t> probe_series(cudaStream_t s, int n) {
    std::uniform_int_distribution<int> gap_us(1000, 3000);
    std::vector<int64_t> raw;
    raw.reserve(n);
    for (int i = 0; i < n; ++i) {
        sleep_us(gap_us(g_rng));
        raw.push_back(probe_once(s, i));
    }
    return raw;
}

static std::vector<double> sorted_us(const std::vector<int64_t>& raw, int64_t base) {
    std::vector<double> us;
    for (int64_t r : raw) us.push_back((r - base) / 1000.0);
    std::sort(us.begin(), us.end());
    return us;
}

// The idle launch: smallest (stamp - t_launch) over kBaseProbes probes, and what lies above it.
static int64_t measure_base(const char* when) {
    std::vector<int64_t> raw = probe_series(g.rt_plain, kBaseProbes);
    int64_t base = *std::min_element(raw.begin(), raw.end());
    std::vector<double> us = sorted_us(raw, base);
    printf("row|preempt probe: idle launch (%s)|INFO|base %lld ns (globaltimer - CLOCK_REALTIME at launch, "
           "launch included); over base p50 %.1f us, p99 %.1f us (%d probes)\n",
           when, (long long)base, pct(us, 0.5), pct(us, 0.99), kBaseProbes);
    return base;
}

// The idle launch again, quietly (50 probes): each scenario is bracketed by two, so the
// GPU timer's drift against CLOCK_REALTIME (about 1 us/s on an H100) stays out of its figures.
static int64_t quick_base() {
    std::vector<int64_t> raw = probe_series(g.rt_plain, 50);
    return *std::min_element(raw.begin(), raw.end());
}

// ---- scenarios ----

struct Row {
    std::string name, mechanism, variant, how, error;
    std::vector<int64_t> raw;
    std::vector<double> us;  // sorted, over the scenario's base
    int64_t base = 0;        // the idle launch around the scenario
    double be_rate = -1, be_alone = -1, be_kernel_ms = 0;
    long long be_grid = 0;
    int be_sms = 0, rt_sms = 0;
};
static std::vector<Row> g_rows;

// Runs BE on a host thread of this process (be_ctx current there when not null) while `during`
// runs here; returns BE kernels completed per second meanwhile.
template <class F>
static double with_thread_be(const Variant& v, cudaStream_t be, CUcontext be_ctx, long long grid, F during) {
    BeControl c;
    std::thread t([&] {
        if (be_ctx)
            CU_CHECK(cuCtxSetCurrent(be_ctx));
        else
            CHECK(cudaSetDevice(0));
        run_be(&c, be, grid, v.block_ns);
    });
    if (!wait_flag(c.ready, 30.0)) die("BE thread completed no kernel in 30 s");
    during();
    c.stop.store(1);
    t.join();
    return be_rate(c);
}

static double measure_alone(const Variant& v) {
    long long grid = (long long)g.occ * g.sms * v.waves;
    double rate = with_thread_be(v, g.be_plain, nullptr, grid, [] { sleep_us(kAloneMs * 1000); });
    printf("row|preempt probe: be-alone-%s|INFO|%.1f kernels/s, %.3f ms each (nominal %.3f ms; %s, %lld blocks on "
           "%d SMs at %d/SM)\n",
           v.tag, rate, rate > 0 ? 1000.0 / rate : 0.0, v.waves * v.block_ns / 1e6, v.what, grid, g.sms, g.occ);
    return rate;
}

static std::string green_rt_stream(cudaStream_t* s);

// `green`: BE on a green context of the SMs RT's leaves, RT probing on its own green context
// (two processes: whether disjoint SMs let their contexts run at once).
static void scenario_process(Row& r, int vi, bool green) {
    r.how = green ? "BE in another process on a green context of the other SMs, RT on its green context of 8"
                  : "BE in another process (its own context, time-sliced)";
    r.be_sms = g.sms;
    r.be_grid = (long long)g.occ * g.sms * kVariants[vi].waves;
    if (g_child <= 0) {
        r.error = "BE process not running";
        return;
    }
    cudaStream_t rt = g.rt_plain;
    if (green) {
        r.error = green_rt_stream(&rt);
        if (!r.error.empty()) return;
        r.be_sms = g.sms - (int)kRtSms;
        r.be_grid = (long long)g.occ * r.be_sms * kVariants[vi].waves;
    }
    g_ctl->reset();
    char cmd = (char)('0' + vi + (green ? 3 : 0));
    if (write(g_cmd_fd, &cmd, 1) != 1) {
        r.error = "BE process pipe closed";
        return lose_child();
    }
    if (!wait_flag(g_ctl->ready, 60.0, g_child)) {
        r.error = "BE process completed no kernel in 60 s";
        return lose_child();
    }
    r.raw = probe_series(rt, g_probes);
    g_ctl->stop.store(1);
    if (green) CU_CHECK(cuCtxSetCurrent(g.primary));
    if (!wait_flag(g_ctl->done, 60.0, g_child)) {
        r.error = "BE process did not stop";
        return lose_child();
    }
    r.be_rate = be_rate(*g_ctl);
}

static void scenario_same_context(Row& r, const Variant& v, bool priorities) {
    char how[160];
    if (priorities)
        snprintf(how, sizeof how, "one context, RT stream priority %d over BE %d", g.greatest, g.least);
    else
        snprintf(how, sizeof how, "one context, both streams default priority");
    r.how = how;
    r.be_sms = g.sms;
    r.be_grid = (long long)g.occ * g.sms * v.waves;
    cudaStream_t be = priorities ? g.be_low : g.be_plain;
    cudaStream_t rt = priorities ? g.rt_high : g.rt_plain;
    r.be_rate = with_thread_be(v, be, nullptr, r.be_grid, [&] { r.raw = probe_series(rt, g_probes); });
}

struct Green {
    bool tried = false;
    std::string error;
    CUgreenCtx rt = nullptr, be = nullptr;
    CUcontext rt_ctx = nullptr, be_ctx = nullptr;
    CUstream rt_s = nullptr, be_s = nullptr;
    int rt_sms = 0, be_sms = 0;
};
static Green g_green;

static std::string granted_sms(CUgreenCtx gc, int* sms) {
    CUdevResource res;
    memset(&res, 0, sizeof res);
    TRY_CU(cuGreenCtxGetDevResource(gc, &res, CU_DEV_RESOURCE_TYPE_SM));
    *sms = (int)res.sm.smCount;
    return "";
}

// A launch in each green context through the runtime, the way the scenario launches.
static std::string trial_green_launches(Green& gr) {
    TRY_CU(cuCtxSetCurrent(gr.be_ctx));
    spin_kernel<<<1, kThreads, 0, gr.be_s>>>(1000ULL);
    TRY_RT(cudaGetLastError());
    TRY_RT(cudaStreamSynchronize(gr.be_s));
    TRY_CU(cuCtxSetCurrent(gr.rt_ctx));
    probe_kernel<<<1, 1, 0, gr.rt_s>>>(g.slots_dev, 0);
    TRY_RT(cudaGetLastError());
    TRY_RT(cudaStreamSynchronize(gr.rt_s));
    return "";
}

static std::string create_green(Green& gr) {
    CUdevice dev;
    TRY_CU(cuCtxGetDevice(&dev));
    CUdevResource rt, rest;
    std::string split = split_sms(dev, &rt, &rest);
    if (!split.empty()) return split;
    CUdevResourceDesc rt_desc, be_desc;
    TRY_CU(cuDevResourceGenerateDesc(&rt_desc, &rt, 1));
    TRY_CU(cuDevResourceGenerateDesc(&be_desc, &rest, 1));
    TRY_CU(cuGreenCtxCreate(&gr.rt, rt_desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    TRY_CU(cuGreenCtxCreate(&gr.be, be_desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    TRY_CU(cuCtxFromGreenCtx(&gr.rt_ctx, gr.rt));
    TRY_CU(cuCtxFromGreenCtx(&gr.be_ctx, gr.be));
    TRY_CU(cuGreenCtxStreamCreate(&gr.rt_s, gr.rt, CU_STREAM_NON_BLOCKING, 0));
    TRY_CU(cuGreenCtxStreamCreate(&gr.be_s, gr.be, CU_STREAM_NON_BLOCKING, 0));
    std::string e = granted_sms(gr.rt, &gr.rt_sms);
    if (e.empty()) e = granted_sms(gr.be, &gr.be_sms);
    return e.empty() ? trial_green_launches(gr) : e;
}

static void destroy_green() {
    Green& gr = g_green;
    if (gr.rt_s) cuStreamDestroy(gr.rt_s);
    if (gr.be_s) cuStreamDestroy(gr.be_s);
    if (gr.rt) cuGreenCtxDestroy(gr.rt);
    if (gr.be) cuGreenCtxDestroy(gr.be);
    gr = Green();
    gr.tried = true;
    CU_CHECK(cuCtxSetCurrent(g.primary));
}

static void scenario_green(Row& r, const Variant& v) {
    if (!g_green.tried) {
        g_green.tried = true;
        g_green.error = create_green(g_green);
        CU_CHECK(cuCtxSetCurrent(g.primary));
    }
    if (!g_green.error.empty()) {
        r.error = g_green.error;
        return;
    }
    char how[160];
    snprintf(how, sizeof how, "green contexts, RT on %d SMs, BE on %d SMs", g_green.rt_sms, g_green.be_sms);
    r.how = how;
    r.rt_sms = g_green.rt_sms;
    r.be_sms = g_green.be_sms;
    r.be_grid = (long long)g.occ * g_green.be_sms * v.waves;
    CU_CHECK(cuCtxSetCurrent(g_green.rt_ctx));
    r.be_rate = with_thread_be(v, g_green.be_s, g_green.be_ctx, r.be_grid,
                               [&] { r.raw = probe_series(g_green.rt_s, g_probes); });
    CU_CHECK(cuCtxSetCurrent(g.primary));
}

// RT's green context (made once) current, and its stream: "" or why not.
static std::string green_rt_stream(cudaStream_t* s) {
    if (!g_green.tried) {
        g_green.tried = true;
        g_green.error = create_green(g_green);
        CU_CHECK(cuCtxSetCurrent(g.primary));
    }
    if (!g_green.error.empty()) return g_green.error;
    CU_CHECK(cuCtxSetCurrent(g_green.rt_ctx));
    *s = (cudaStream_t)g_green.rt_s;
    return "";
}

static void finish_row(Row& r, int64_t before) {
    // The base: the idle launch before and after the scenario, averaged (the drift is linear).
    int64_t after = quick_base();
    int64_t base = before + (after - before) / 2;
    r.base = base;
    if (!r.error.empty()) {
        printf("row|preempt probe: %s|INFO|not available: %s\n", r.name.c_str(), r.error.c_str());
        g_rows.push_back(r);
        return;
    }
    r.us = sorted_us(r.raw, base);
    double p99 = pct(r.us, 0.99);
    std::string d = r.how;
    if (!r.variant.empty()) {
        const Variant* v = nullptr;
        for (const Variant& x : kVariants)
            if (r.variant == x.tag) v = &x;
        appendf(d, "; BE %s (%.3f ms kernels, %lld blocks on %d SMs); BE %.1f kernels/s = x%.2f of alone",
                v->what, r.be_kernel_ms, r.be_grid, r.be_sms, r.be_rate,
                r.be_alone > 0 && r.be_rate > 0 ? r.be_rate / r.be_alone : 0.0);
    }
    appendf(d, "; n=%zu; base drifted %.1f us over it; p99 <= 100 us: %s", r.us.size(), (after - before) / 1000.0,
            p99 <= 100.0 ? "yes" : "no");
    printf("row|preempt probe: %s|INFO|p50 %.1f us, p90 %.1f us, p99 %.1f us, max %.1f us; %s\n", r.name.c_str(),
           pct(r.us, 0.5), pct(r.us, 0.9), p99, r.us.empty() ? 0.0 : r.us.back(), d.c_str());
    g_rows.push_back(r);
}

static void run_variant(int vi) {
    const Variant& v = kVariants[vi];
    bool any = false;
    for (const char* m : kMechanisms) any = any || wanted(std::string(m) + "-" + v.tag);
    if (!any) return;
    double alone = measure_alone(v);
    for (int m = 0; m < 5; ++m) {
        Row r;
        r.name = std::string(kMechanisms[m]) + "-" + v.tag;
        if (!wanted(r.name)) continue;
        r.mechanism = kMechanisms[m];
        r.variant = v.tag;
        r.be_alone = alone;
        r.be_kernel_ms = v.waves * v.block_ns / 1e6;
        int64_t before = quick_base();
        if (m == 0) scenario_process(r, vi, false);
        if (m == 4) scenario_process(r, vi, true);
        if (m == 1) scenario_same_context(r, v, true);
        if (m == 2) scenario_same_context(r, v, false);
        if (m == 3) scenario_green(r, v);
        finish_row(r, before);
    }
}

static void print_json(int64_t base_start, int64_t base_end) {
    std::string j = "{\"preempt_probe\":{";
    appendf(j, "\"device\":%s,\"sms\":%d,\"occupancy_per_sm\":%d,\"threads_per_block\":%d,", json_str(g.name).c_str(),
            g.sms, g.occ, kThreads);
    appendf(j, "\"priority_least\":%d,\"priority_greatest\":%d,\"probes\":%d,\"be_inflight\":%d,", g.least,
            g.greatest, g_probes, kInflight);
    appendf(j, "\"base_start_ns\":%lld,\"base_end_ns\":%lld,\"drift_ns\":%lld,\"rows\":[", (long long)base_start,
            (long long)base_end, (long long)(base_end - base_start));
    for (size_t i = 0; i < g_rows.size(); ++i) {
        const Row& r = g_rows[i];
        bool ok = r.error.empty();
        appendf(j, "%s{\"name\":%s,\"mechanism\":%s,\"variant\":%s,\"how\":%s,\"available\":%s,\"error\":%s,",
                i ? "," : "", json_str(r.name).c_str(), json_str(r.mechanism).c_str(), json_str(r.variant).c_str(),
                json_str(r.how).c_str(), ok ? "true" : "false", json_str(r.error).c_str());
        if (ok)
            appendf(j, "\"p50_us\":%.3f,\"p90_us\":%.3f,\"p99_us\":%.3f,\"max_us\":%.3f,", pct(r.us, 0.5),
                    pct(r.us, 0.9), pct(r.us, 0.99), r.us.empty() ? 0.0 : r.us.back());
        appendf(j, "\"be_kernel_ms\":%.3f,\"be_grid\":%lld,\"be_sms\":%d,\"rt_sms\":%d,", r.be_kernel_ms, r.be_grid,
                r.be_sms, r.rt_sms);
        if (r.be_rate > 0) appendf(j, "\"be_per_s\":%.3f,", r.be_rate);
        if (r.be_alone > 0) appendf(j, "\"be_alone_per_s\":%.3f,", r.be_alone);
        j += "\"latency_us\":[";
        // In probe order (r.us is sorted): the raw series over the start base.
        for (size_t k = 0; k < r.raw.size(); ++k) appendf(j, "%s%.2f", k ? "," : "", (r.raw[k] - r.base) / 1000.0);
        j += "]}";
    }
    j += "]}}";
    printf("%s\n", j.c_str());
}

int main() {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    if (const char* p = getenv("PROBES")) g_probes = std::max(10, atoi(p));
    parse_selection(getenv("SCENARIOS"));
    bool any_process = false;
    for (const Variant& v : kVariants)
        any_process = any_process || wanted(std::string("process-") + v.tag) || wanted(std::string("procgreen-") + v.tag);
    // Before the first CUDA call: a child of a process that has used CUDA cannot use it.
    if (any_process) start_be_process();
    init_gpu();
    printf("row|preempt probe: device|INFO|%s, %d SMs, spin kernel %d blocks/SM at %d threads, stream priorities "
           "least %d greatest %d, %d probes per scenario every 1-3 ms\n",
           g.name, g.sms, g.occ, kThreads, g.least, g.greatest, g_probes);

    int64_t base = measure_base("start");
    if (wanted("idle")) {
        Row r;
        r.name = r.mechanism = "idle";
        r.how = "no BE, RT stream default priority";
        r.raw = probe_series(g.rt_plain, g_probes);
        finish_row(r, quick_base());
    }
    for (int vi = 0; vi < 3; ++vi) run_variant(vi);
    destroy_green();
    stop_be_process();

    int64_t base_end = measure_base("end");
    printf("row|preempt probe: clock drift|INFO|base at start %lld ns, at end %lld ns: drift %lld ns\n",
           (long long)base, (long long)base_end, (long long)(base_end - base));
    print_json(base, base_end);
    return 0;
}
