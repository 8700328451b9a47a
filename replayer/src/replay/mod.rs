//! Re-executing a trace on the local GPU: every call that changes device state is replayed
//! with translated handles, allocations are re-created at their recorded addresses where the
//! VMM API allows, and every device-to-host result is compared with the recording.

mod allocs;
mod args;
mod blobs;
mod blockhash;
mod code_warm;
pub mod compat;
pub mod crash;
pub mod dataflow;
pub mod devices;
mod dry_model;
pub mod dryrun;
pub(crate) mod exec;
mod exec_array;
mod exec_graph;
mod exec_node;
mod exec_ops;
mod graph_answer;
mod graph_nodes;
mod graph_query;
pub mod green;
pub mod handled;
mod handles;
pub(crate) mod host_calls;
mod hostview;
pub mod hot;
pub(crate) mod ipc_events;
mod jit;
pub(crate) mod launch;
mod load;
pub mod lower;
mod managed;
mod managed_ctx;
pub(crate) mod median;
mod memory;
pub(crate) mod objects;
pub mod piece_graph;
pub(crate) mod preload;
pub mod profile;
pub mod query;
mod raw;
pub mod resident;
pub(crate) mod results;
pub mod share;
mod side;
pub mod stall;
pub mod stream;
mod unified;
mod vmm;
pub mod warm_images;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::c_int;
use std::path::Path;
use std::time::Instant;

use cudarc::driver::sys;
use serde::Serialize;

pub use load::{load, load_bytes, load_calls, load_mapped, load_partial, load_shared, LoadedTrace};
pub use memory::Memory;

/// Errors of a replay. Verification mismatches are not errors: they are in the [`Report`].
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The trace could not be read.
    #[error("{0}")]
    Trace(String),
    /// No usable GPU or driver.
    #[error("no GPU to replay on: {0}")]
    NoGpu(String),
    /// A replayed driver call failed.
    #[error("call #{seq} {what} failed with {code:?}")]
    Driver {
        /// Sequence number of the recorded call.
        seq: u64,
        /// The driver function.
        what: String,
        /// Its result.
        code: sys::CUresult,
    },
    /// The replay would exceed the memory limit of its partition.
    #[error(
        "call #{seq}: the replay needs {needed} bytes of device memory, more than the partition's limit of {limit} \
         bytes; choose a larger profile"
    )]
    MemoryLimit {
        /// Sequence number of the allocating call.
        seq: u64,
        /// The limit.
        limit: u64,
        /// Bytes in use with this allocation.
        needed: u64,
    },
    /// The GPU ran out of memory.
    #[error(
        "call #{seq}: this GPU has too little free memory for the trace: an allocation of {needed} bytes ({}) \
         failed with {in_use} bytes already in use and {free} bytes ({}) free; free the GPU or replay on a larger one",
        gib(*needed),
        gib(*free)
    )]
    DeviceTooSmall {
        /// Sequence number of the allocating call.
        seq: u64,
        /// Bytes asked for.
        needed: u64,
        /// Bytes the replay had allocated.
        in_use: u64,
        /// Free device memory reported by the driver.
        free: u64,
    },
    /// The trace's GPU code cannot run on this GPU.
    #[error(
        "this GPU (sm_{device_sm}) cannot run the trace's code, recorded on sm_{recorded_sm}:\n  {}\nreplay on a GPU \
         of the recording's architecture, or record again with `gpuless record --code all` from a program whose \
         binaries carry PTX or SASS for this GPU",
        problems.join("\n  ")
    )]
    IncompatibleCode {
        /// SM of this GPU.
        device_sm: u32,
        /// SM of the recording GPU (trace header).
        recorded_sm: u32,
        /// One line per code image that has nothing for this GPU.
        problems: Vec<String>,
    },
    /// A device fault after allocations had to move from their recorded addresses: most likely a
    /// kernel read a pointer stored in device memory, which translation cannot rewrite.
    #[error(
        "{fault}\n{moved} allocations of this replay live at other addresses than recorded{}; a kernel that reads \
         a pointer stored in device memory (not passed as a parameter) uses the recorded address, which translation \
         cannot rewrite. Replay where the recorded addresses are free",
        why.as_ref().map_or(String::new(), |w| format!(" ({w})"))
    )]
    MovedFault {
        /// The failed call (shown in the message, not as a separate cause).
        fault: Box<ReplayError>,
        /// Allocations that moved.
        moved: u64,
        /// Why they moved (the arena warning), if known.
        why: Option<String>,
    },
    /// The trace holds a call the replayer cannot execute.
    #[error("call #{seq} {what}: {problem}; this trace cannot be replayed")]
    Unsupported {
        /// Sequence number of the recorded call.
        seq: u64,
        /// The recorded function.
        what: String,
        /// What it does that cannot be replayed.
        problem: String,
    },
    /// The trace refers to something it never created or stored.
    #[error("call #{seq} {what}: {problem}")]
    Inconsistent {
        /// Sequence number of the recorded call.
        seq: u64,
        /// The recorded function.
        what: String,
        /// What is missing.
        problem: String,
    },
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
}

/// A device fault after allocations moved is most likely a stale pointer in device memory:
/// `e` with that explanation (and the arena warning, which the report would have shown).
fn explain(e: ReplayError, moved: u64, warnings: &[String]) -> ReplayError {
    use sys::CUresult as R;
    let fault = matches!(
        e,
        ReplayError::Driver {
            code: R::CUDA_ERROR_ILLEGAL_ADDRESS
                | R::CUDA_ERROR_LAUNCH_FAILED
                | R::CUDA_ERROR_MISALIGNED_ADDRESS
                | R::CUDA_ERROR_INVALID_ADDRESS_SPACE,
            ..
        }
    );
    if !fault || moved == 0 {
        return e;
    }
    let why = warnings.iter().find(|w| w.contains("arena")).cloned();
    ReplayError::MovedFault { fault: Box::new(e), moved, why }
}

pub(crate) fn check(r: sys::CUresult, seq: u64, what: &str) -> Result<(), ReplayError> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(ReplayError::Driver { seq, what: what.to_string(), code: r })
    }
}

/// What a replay did and found.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    /// Records in the trace.
    pub calls: u64,
    /// Records executed on the GPU.
    pub executed: u64,
    /// Records not re-executed (queries, attributes, ...), by function.
    pub not_replayed: BTreeMap<String, u64>,
    /// Kernel launches replayed.
    pub launches: u64,
    /// Allocations re-created at their recorded address.
    pub allocations_exact: u64,
    /// Allocations that moved (pointers translated).
    pub allocations_translated: u64,
    /// Of the exact ones, those inside the recorder's arena.
    pub allocations_in_arena: u64,
    /// Managed and mapped host memory re-created as device memory: (at the recorded address,
    /// moved with its pointers translated). Not counted in the two above.
    pub shared_memory: (u64, u64),
    /// Most device memory held by the replay at once, in bytes.
    pub peak_memory: u64,
    /// Things the user should know (an arena that could not be re-reserved, ...).
    pub warnings: Vec<String>,
    /// Kernel parameter words rewritten by translation.
    pub params_translated: u64,
    /// Device-to-host results compared with the recording and equal.
    pub results_verified: u64,
    /// Device-to-host results that differ: call, sizes, the last kernels before it.
    pub mismatches: Vec<String>,
    /// Device-to-host results the recording holds no hash for (async copies).
    pub results_unverified: u64,
    /// Seconds from process start to the first device-to-host result.
    pub first_result_s: Option<f64>,
    /// Seconds spent replaying (after the trace was read).
    pub replay_s: f64,
    /// Seconds from process start to the end of the replay.
    pub total_s: f64,
    /// Hot replay timing (`--iterations`).
    pub hot: Option<hot::HotReport>,
    /// What the reader lost at the end of a damaged trace.
    pub trace_lost: Option<String>,
    /// When set (a server's executor), every device-to-host result is kept here for the
    /// client: (sequence number of the copy, bytes).
    #[serde(skip)]
    pub outputs: Option<Vec<(u64, Vec<u8>)>>,
}

/// Seconds since this process started (as the workloads measure it).
pub fn since_process_start() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let uptime = std::fs::read_to_string("/proc/uptime").unwrap_or_default();
    let start_ticks: f64 = stat
        .rsplit_once(')')
        .and_then(|(_, r)| r.split_whitespace().nth(19))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.0);
    let up: f64 = uptime.split_whitespace().next().and_then(|s| s.parse().ok()).unwrap_or(0.0);
    // Linux reports process start in clock ticks of USER_HZ, 100 on every mainstream kernel.
    const USER_HZ: f64 = 100.0;
    up - start_ticks / USER_HZ
}

/// Options of [`replay`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Skip comparing device-to-host results.
    pub no_verify: bool,
    /// Replay the trace's body this many times after set-up and time each (0: replay once).
    pub iterations: u32,
    /// Most bytes of device memory the replay may allocate (e.g. an emulated MIG profile's
    /// memory size); an allocation beyond it fails with a clear error. `None`: no limit.
    pub memory_limit: Option<u64>,
    /// With `iterations`: time every launch of the body ([`profile`]).
    pub profile: bool,
    /// Priority of every stream the trace creates, instead of the recorded one (a server
    /// session's priority class: latency-critical work goes first on the GPU's queues).
    pub stream_priority: Option<i32>,
}

/// Handle maps and device memory of a replay in progress.
pub(crate) struct State {
    pub mem: Memory,
    pub modules: HashMap<u64, sys::CUmodule>,
    pub libraries: HashMap<u64, sys::CUlibrary>,
    pub functions: HashMap<u64, sys::CUfunction>,
    pub kernels: HashMap<u64, sys::CUkernel>,
    pub streams: HashMap<u64, sys::CUstream>,
    pub events: HashMap<u64, sys::CUevent>,
    /// Memory pools the program created: recorded handle → live pool (`exec_ops.rs`).
    pub pools: HashMap<u64, sys::CUmemoryPool>,
    /// Conditional handles created, by the record that created them (a client's answer).
    pub conditionals: HashMap<u64, u64>,
    /// Graphs, arrays, texture objects, pinned buffers, deferred results.
    pub objects: objects::Objects,
    /// Recorded function/kernel handle → kernel name.
    pub names: HashMap<u64, String>,
    /// Recorded handles of the last kernels launched, for mismatch reports.
    pub recent: VecDeque<u64>,
    pub opts: Options,
    pub start: Instant,
    /// While a hot body is captured into a graph: the stream every recorded stream maps to.
    pub stream_override: Option<sys::CUstream>,
    /// Launches (by sequence number) whose parameter words pointing into a recorded range
    /// are pointed at that range's new place instead (`dataflow.rs`).
    pub relocations: HashMap<u64, Vec<(blockhash::Span, u64)>>,
    /// The last call executed (sequence number, function), for errors that surface later.
    pub last_call: Option<(u64, &'static str)>,
    /// Code images loaded ahead ([`preload`]), by the sequence number of their load.
    pub preloaded: preload::Preloads,
    /// Code images a server's executor loaded before its session, by content
    /// ([`warm_images`]), and the images the session loaded.
    pub warm_images: warm_images::WarmImages,
    /// Uploads that stay on the GPU for the next session of the program ([`resident`]).
    pub resident: resident::Resident,
    /// Code images this replay loaded itself (unloaded when a kept executor ends its session).
    pub loaded: Vec<preload::Preloaded>,
    /// Modules and libraries whose kernels were loaded at their first lookup (`code_warm.rs`).
    pub warmed: code_warm::Warmed,
    /// A client's session: where its host functions run ([`host_calls`]); `None` in a local
    /// replay (they run as no-ops).
    pub host_calls: Option<std::sync::Arc<host_calls::HostCalls>>,
    /// A client's session: the server that brokers memory between a program's processes
    /// ([`share`]); `None` in a local replay.
    pub broker: Option<std::sync::Arc<dyn share::Broker>>,
    /// Events the program's processes share ([`ipc_events`]).
    pub ipc_events: ipc_events::IpcEvents,
    /// The recorded program shared device memory with other processes (a `=local(share)`
    /// call): results from then on are not verified (`results::verify_value`).
    pub shared_with_processes: bool,
    /// A client's managed memory, as the client last saw it (`managed::Managed`).
    pub managed: managed::Managed,
    /// Per recorded stream, the user data of the host function captured last in the capture
    /// in progress: late reads captured after it are attached to it (`host_calls`).
    pub captured_host_fn: HashMap<u64, usize>,
    /// Graph memory (recorded addresses): what a graph's allocation node or a stream-ordered
    /// allocation captured into a graph made. It is mapped once and kept for every launch of
    /// every graph that allocates it (a graph's allocation gets the same address again after
    /// its free); frees of it, inside a graph or not, leave it mapped.
    pub graph_memory: std::collections::HashSet<u64>,
    /// The empty nodes standing for graph memory nodes (live node → the type the program
    /// sees, `CU_GRAPH_NODE_TYPE_MEM_ALLOC` or `_MEM_FREE`, the recorded address and size),
    /// answered by `cuGraphNodeGetType` and the memory nodes' parameter queries.
    pub memory_nodes: HashMap<usize, (sys::CUgraphNodeType, u64, u64)>,
    /// Pinned host memory of the recording not re-created (start → length): with unified
    /// addressing a kernel may read it directly; the first launch given a pointer into it
    /// re-creates it as device memory at its address (`launch::reach_pinned`).
    pub pinned: std::collections::BTreeMap<u64, u64>,
    /// A client's JIT links, by the client's handles (`jit.rs`); destroyed with the state.
    pub links: jit::Links,
    /// A session of several devices: each device's primary context, by ordinal
    /// ([`devices`]); empty for one device.
    pub contexts: Vec<usize>,
    /// A synchronous host-to-device copy from the replayer's own (pageable) bytes may still be
    /// in flight on the legacy stream when it returns (the driver returns once the bytes are
    /// staged), where the program's copy from pinned memory had completed: work on another
    /// stream waits for it first ([`State::stream`], [`State::copied_in`]).
    pub unsettled: std::cell::Cell<bool>,
}

impl State {
    pub(crate) fn new(mem: Memory, opts: Options) -> Self {
        crash::install();
        State {
            mem,
            modules: HashMap::new(),
            libraries: HashMap::new(),
            functions: HashMap::new(),
            kernels: HashMap::new(),
            streams: HashMap::new(),
            events: HashMap::new(),
            pools: HashMap::new(),
            conditionals: HashMap::new(),
            objects: Default::default(),
            names: HashMap::new(),
            recent: VecDeque::new(),
            opts,
            start: Instant::now(),
            stream_override: None,
            relocations: HashMap::new(),
            last_call: None,
            preloaded: preload::Preloads::default(),
            warmed: Default::default(),
            warm_images: warm_images::WarmImages::default(),
            resident: resident::Resident::default(),
            loaded: Vec::new(),
            host_calls: None,
            broker: None,
            ipc_events: Default::default(),
            shared_with_processes: false,
            managed: Default::default(),
            captured_host_fn: HashMap::new(),
            graph_memory: Default::default(),
            memory_nodes: HashMap::new(),
            pinned: Default::default(),
            links: Default::default(),
            contexts: Vec::new(),
            unsettled: std::cell::Cell::new(false),
        }
    }

    /// Notes a synchronous host-to-device copy just issued from pageable bytes (see
    /// [`State::unsettled`]).
    pub(crate) fn copied_in(&self) {
        self.unsettled.set(true);
    }

    /// The result of a call of the replayer's own (timing events), named by the recorded call
    /// it follows.
    pub(crate) fn own(&self, r: sys::CUresult, what: &str) -> Result<(), ReplayError> {
        let (seq, after) = self.last_call.map_or((0, String::new()), |(s, f)| (s, format!(" after {f}")));
        check(r, seq, &format!("(the replayer's own {what}{after})"))
    }

    /// Waits for all replayed work. An error of work queued earlier (a kernel's fault) surfaces
    /// here: it names the last call executed before the synchronization and the last kernels
    /// launched, not the replayer's own `cuCtxSynchronize`.
    pub(crate) fn synchronize(&self) -> Result<(), ReplayError> {
        // SAFETY: a plain synchronization of the current context (of every device's, in a
        // session of several: the current one stays current).
        let r = unsafe { devices::synchronize_all(&self.contexts) };
        if r == sys::CUresult::CUDA_SUCCESS {
            return Ok(());
        }
        let recent: Vec<String> = self.recent.iter().map(|&h| self.kernel_name(h)).collect();
        let kernels = if recent.is_empty() { String::new() } else { format!("; last kernels: {}", recent.join(", ")) };
        Err(match self.last_call {
            Some((seq, f)) => ReplayError::Driver {
                seq,
                what: format!("{f} (work queued up to it failed at the replayer's synchronization after it{kernels})"),
                code: r,
            },
            None => ReplayError::Driver { seq: 0, what: format!("cuCtxSynchronize before any call{kernels}"), code: r },
        })
    }
}

/// A device ready to replay on: the primary context of device 0.
#[derive(Debug, Clone, Copy)]
pub struct Device {
    ctx: usize,
}

impl Device {
    /// Makes the device's primary context current on the calling thread.
    pub(crate) fn make_current(self) -> Result<(), ReplayError> {
        // SAFETY: the context was retained by init_device and stays alive for the process.
        unsafe { check(sys::cuCtxSetCurrent(self.ctx as sys::CUcontext), 0, "cuCtxSetCurrent") }
    }
}

/// Initializes the driver and retains device 0's primary context. This is the slowest step of a
/// cold replay, so callers start it on a thread while the trace is read.
pub fn init_device() -> Result<Device, ReplayError> {
    // SAFETY: plain driver calls with valid out-pointers.
    unsafe {
        if !sys::is_culib_present() {
            return Err(ReplayError::NoGpu("libcuda.so.1 not found (is the NVIDIA driver installed?)".into()));
        }
        check(sys::cuInit(0), 0, "cuInit").map_err(|e| ReplayError::NoGpu(e.to_string()))?;
        memory::reserve_early();
        let mut dev: c_int = 0;
        check(sys::cuDeviceGet(&mut dev, 0), 0, "cuDeviceGet")?;
        let mut ctx = std::ptr::null_mut();
        check(sys::cuDevicePrimaryCtxRetain(&mut ctx, dev), 0, "cuDevicePrimaryCtxRetain")?;
        Ok(Device { ctx: ctx as usize })
    }
}

/// SM of the current context's device (10·major + minor), 0 if unknown.
pub(crate) fn device_sm() -> u32 {
    use sys::CUdevice_attribute as A;
    // SAFETY: plain queries with valid out-pointers; a context is current.
    unsafe {
        let (mut dev, mut ma, mut mi) = (0, 0, 0);
        if sys::cuCtxGetDevice(&mut dev) != sys::CUresult::CUDA_SUCCESS
            || sys::cuDeviceGetAttribute(&mut ma, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
                != sys::CUresult::CUDA_SUCCESS
            || sys::cuDeviceGetAttribute(&mut mi, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
                != sys::CUresult::CUDA_SUCCESS
        {
            return 0;
        }
        (ma * 10 + mi) as u32
    }
}

/// Replays `trace` on device 0.
pub fn replay(trace: &LoadedTrace, opts: Options) -> Result<Report, ReplayError> {
    replay_on(init_device()?, trace, opts)
}

/// Replays `trace` on a device prepared by [`init_device`].
pub fn replay_on(device: Device, trace: &LoadedTrace, opts: Options) -> Result<Report, ReplayError> {
    // SAFETY: the context was retained by init_device and stays alive for the process.
    unsafe { check(sys::cuCtxSetCurrent(device.ctx as sys::CUcontext), 0, "cuCtxSetCurrent")? };
    let mut st = State::new(Memory::with_limit(opts.memory_limit), opts);
    let device_sm = device_sm();
    if device_sm != 0 {
        let problems = compat::incompatible_code(trace, device_sm);
        if !problems.is_empty() {
            return Err(ReplayError::IncompatibleCode { device_sm, recorded_sm: trace.meta.sm, problems });
        }
    }
    let mut report = Report { calls: trace.calls.len() as u64, trace_lost: trace.lost.clone(), ..Report::default() };
    report.warnings.extend(st.mem.reserve_arena(trace.meta.arena_base, trace.meta.arena_size));
    let run = |st: &mut State, report: &mut Report| -> Result<(), ReplayError> {
        if opts.iterations == 0 {
            // A call that never returns ends the replay naming it (`stall.rs`).
            let watch = stall::Watch::start();
            for rec in &trace.calls {
                if let Some(w) = &watch {
                    w.enter(rec);
                }
                exec::call(st, trace, rec, report)?;
                if let Some(w) = &watch {
                    w.leave();
                }
            }
            st.synchronize()
        } else {
            report.hot = Some(replay_hot(st, trace, report, opts.iterations)?);
            Ok(())
        }
    };
    run(&mut st, &mut report).map_err(|e| explain(e, st.mem.translated, &report.warnings))?;
    report.allocations_exact = st.mem.exact;
    report.allocations_translated = st.mem.translated;
    report.shared_memory = st.mem.shared;
    report.allocations_in_arena = st.mem.in_arena;
    report.peak_memory = st.mem.peak();
    report.replay_s = st.start.elapsed().as_secs_f64();
    report.total_s = since_process_start();
    Ok(report)
}

/// Set-up once, the body once to warm up (verified), then the body `iterations` times, timed.
fn replay_hot(
    st: &mut State,
    trace: &LoadedTrace,
    report: &mut Report,
    iterations: u32,
) -> Result<hot::HotReport, ReplayError> {
    let split = hot::split(&trace.calls);
    let t0 = Instant::now();
    for &i in &split.setup {
        exec::call(st, trace, &trace.calls[i], report)?;
    }
    st.synchronize()?;
    let setup_s = t0.elapsed().as_secs_f64();
    let launches_before = report.launches;
    let run_body = |st: &mut State, report: &mut Report| -> Result<(), ReplayError> {
        for &i in &split.body {
            exec::call(st, trace, &trace.calls[i], report)?;
        }
        Ok(())
    };
    // The warm-up pass; when the body can become a verified graph, it also finds what each call
    // wrote (for the graph's side branch).
    let effects = if lower::refusal(trace, &split.body).is_none() && !st.opts.no_verify {
        side::first_pass(st, trace, report, &split.body)?
    } else {
        run_body(st, report)?;
        None
    };
    st.synchronize()?;
    let body_launches = report.launches - launches_before;
    let (mut wall, mut gpu) = (Vec::new(), Vec::new());
    // SAFETY: events created, recorded on the default stream and destroyed here.
    unsafe {
        let (mut a, mut b) = (std::ptr::null_mut(), std::ptr::null_mut());
        st.own(sys::cuEventCreate(&mut a, 0), "cuEventCreate")?;
        st.own(sys::cuEventCreate(&mut b, 0), "cuEventCreate")?;
        for _ in 0..iterations {
            let t = Instant::now();
            st.own(sys::cuEventRecord(a, std::ptr::null_mut()), "cuEventRecord")?;
            run_body(st, report)?;
            st.own(sys::cuEventRecord(b, std::ptr::null_mut()), "cuEventRecord")?;
            st.synchronize()?;
            wall.push(t.elapsed().as_secs_f64() * 1e3);
            let mut ms = 0f32;
            sys::cuEventElapsedTime_v2(&mut ms, a, b);
            gpu.push(f64::from(ms));
        }
        sys::cuEventDestroy_v2(a);
        sys::cuEventDestroy_v2(b);
    }
    // The same body as one CUDA graph per iteration.
    let graph = lower_hot(st, trace, report, &split.body, iterations, effects.as_deref());
    let profile = if st.opts.profile {
        match profile::run(st, trace, report, &split.body, 5) {
            Ok(p) => Some(p),
            Err(e) => {
                report.warnings.push(format!("profiling the body: {e}"));
                None
            }
        }
    } else {
        None
    };
    let mean = wall.iter().sum::<f64>() / wall.len().max(1) as f64;
    let min = wall.iter().copied().fold(f64::INFINITY, f64::min);
    Ok(hot::HotReport {
        iterations,
        setup_calls: split.setup.len() as u64,
        body_calls: split.body.len() as u64,
        body_launches,
        setup_s,
        wall_ms_median: hot::median(&mut wall),
        wall_ms_min: min,
        wall_ms_mean: mean,
        gpu_ms_median: hot::median(&mut gpu),
        graph: graph.as_ref().ok().cloned(),
        graph_refused: graph.err(),
        profile,
    })
}

/// The body as one CUDA graph; then, when its first pass showed launches whose inputs the body
/// never writes (`side.rs`), the same graph with them on a side branch and with them moved to
/// the set-up, each kept only when every result is the recorded one.
fn lower_hot(
    st: &mut State,
    trace: &LoadedTrace,
    report: &mut Report,
    body: &[usize],
    iterations: u32,
    effects: Option<&[dataflow::Effect]>,
) -> Result<lower::GraphTiming, String> {
    let mut g = lower::run(st, trace, report, body, iterations, None)?;
    let plan = match effects {
        Some(e) => side::plan(st, trace, report, body, e),
        None => Err("the body's first pass could not see what its calls wrote".into()),
    };
    let plan = match plan {
        Ok(p) => p,
        Err(why) => {
            st.relocations.clear();
            g.moved_note = Some(why);
            return Ok(g);
        }
    };
    if plan.rejected > 0 {
        g.moved_note = Some(format!("{} candidates read their output's old bytes and stayed", plan.rejected));
    }
    if plan.side.is_empty() {
        plan.drop_from(st);
        return Ok(g);
    }
    for to in [lower::Side::Setup, lower::Side::Branch] {
        let (mismatches, verified) = (report.mismatches.len(), report.results_verified);
        match lower::run(st, trace, report, body, iterations, Some((&plan.side, to))) {
            Ok(m) if m.mismatches == 0 && m.results_verified > 0 => g.moved.push(lower::Moved {
                to,
                launches: plan.side.len() as u64,
                bytes: plan.bytes,
                wall_ms_median: m.wall_ms_median,
                wall_ms_min: m.wall_ms_min,
                results_verified: m.results_verified,
                mismatches: 0,
            }),
            other => {
                // Not the recorded results (or none to compare): the variant is dropped.
                report.mismatches.truncate(mismatches);
                report.results_verified = verified;
                g.moved_note = Some(match other {
                    Ok(m) if m.mismatches > 0 => format!(
                        "{to:?} dropped: {} of {} results differed",
                        m.mismatches,
                        m.mismatches + m.results_verified
                    ),
                    Ok(_) => format!("{to:?} dropped: no result to verify it with"),
                    Err(e) => format!("{to:?} dropped: {e}"),
                });
            }
        }
    }
    plan.drop_from(st);
    Ok(g)
}

/// Reads and replays the trace at `path`.
pub fn replay_file(path: &Path, opts: Options) -> Result<Report, ReplayError> {
    let t = load(path)?;
    replay(&t, opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_faults_after_moved_allocations_are_explained() {
        let fault = |code| ReplayError::Driver { seq: 148, what: "cuMemcpyDtoH".into(), code };
        let warn = vec!["the recorder's arena 0x640000000000..0x650000000000 is taken in this process".to_string()];
        let e = explain(fault(sys::CUresult::CUDA_ERROR_ILLEGAL_ADDRESS), 3, &warn).to_string();
        assert!(e.starts_with("call #148 cuMemcpyDtoH failed with CUDA_ERROR_ILLEGAL_ADDRESS\n3 allocations"), "{e}");
        assert!(e.contains("is taken in this process") && e.contains("translation cannot rewrite"), "{e}");
        // Nothing moved, or not a device fault: the error as it was.
        let e = explain(fault(sys::CUresult::CUDA_ERROR_ILLEGAL_ADDRESS), 0, &warn);
        assert!(matches!(e, ReplayError::Driver { .. }));
        let e = explain(fault(sys::CUresult::CUDA_ERROR_INVALID_VALUE), 3, &warn);
        assert!(matches!(e, ReplayError::Driver { .. }));
    }

    #[test]
    fn device_too_small_names_needed_and_free_bytes() {
        let e = ReplayError::DeviceTooSmall { seq: 1, needed: 200 << 30, in_use: 0, free: 140 << 30 }.to_string();
        assert!(
            e.contains("214748364800 bytes (200.0 GiB)") && e.contains("150323855360 bytes (140.0 GiB) free"),
            "{e}"
        );
    }
}
