//! The resource manager: executor processes (a warm pool per GPU and partition spec, one process
//! per session, except a function's executor kept warm for the next session of the same
//! function: [`super::warm`]), admission of sessions to GPUs and partitions (`manager_admit.rs`:
//! placement, SMs of soft partitions, a session limit, a bounded queue ordered by priority), and
//! the cache index — one state behind one lock, changed by session tasks and by each executor's
//! control-reader thread.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Child;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gpuless_traces::protocol::{DeviceDescription, PartitionInfo, Priority};
use tokio::sync::Notify;

use super::cache::{Dirs, Index};
use super::config::Config;
use super::control::{self, Channel, Control};
use super::metrics::{kind, FunctionLabels, FunctionName, Metrics, Readiness, SessionLabels};
use super::warm::WarmSet;

/// The descriptor number an executor finds its control channel at.
pub const CONTROL_FD: RawFd = 3;

/// A refusal: a protocol error [`code`] and the message for the client.
pub type Refusal = (u16, String);

#[derive(Debug)]
enum ExecState {
    Starting,
    Ready,
    Busy(u64),
    /// Its session ended ([`Control::Done`]); it exits, or says it keeps a function warm.
    Finished,
    /// Kept warm with this function set up ([`Control::Warm`]), in [`Inner::warm`].
    Function(String),
    /// Kept with this program's uploads resident ([`Control::KeptProgram`]), in
    /// [`Inner::warm_programs`]: (what it is kept as — the tenant's program,
    /// [`Manager::warm_key`] —, resident bytes).
    Program(String, u64),
    Failed(String),
}

struct Exec {
    spec: String,
    /// The GPU it runs on (a position in [`Manager::gpus`]).
    gpu: usize,
    /// Its further GPUs, for a session of several (positions; empty for one GPU).
    more: Vec<usize>,
    pid: u32,
    state: ExecState,
    channel: Arc<Channel>,
    partition: PartitionInfo,
    device: DeviceDescription,
    /// What it is kept as after the session it serves, if it may be kept: the tenant's
    /// program (warm constants, [`Manager::warm_key`]) or function ([`super::warm::key`]).
    kept_as: Option<String>,
}

/// A session as the manager tracks it.
struct SessionEntry {
    spec: String,
    /// The GPU it was placed on (a position in [`Manager::gpus`]).
    gpu: usize,
    /// That GPU's number ([`super::gpus::Gpu::index`]).
    gpu_index: u32,
    /// Its further GPUs, a session of several (positions in [`Manager::gpus`]).
    more: Vec<usize>,
    /// Its tenant, on a server with tenants (what it uploads is marked as theirs).
    tenant: Option<String>,
    sms: u32,
    priority: Priority,
    exec: u64,
    started: Instant,
}

struct Inner {
    execs: HashMap<u64, Exec>,
    sessions: HashMap<u64, SessionEntry>,
    next_id: u64,
    /// Per GPU (positions of [`Manager::gpus`]): SMs held by soft partitions, and the GPU's
    /// SM count once an executor on it has said.
    load: Vec<GpuLoad>,
    /// Whether an executor has initialized the GPU since the server started ([`Manager::readiness`]).
    gpu_ready: bool,
    waiting: [usize; 2],
    draining: bool,
    cache: Index,
    /// Executors that exited before they were ready, and why (for the session that started them).
    died_starting: HashMap<u64, String>,
    /// Executors kept warm with a function.
    warm: WarmSet,
    /// Functions that have been kept warm (their gauge reads 0 when none is).
    warm_names: std::collections::BTreeSet<String>,
    /// Executors kept with a program's uploads resident (warm constants), by program.
    warm_programs: WarmSet,
}

/// What admission keeps per GPU.
#[derive(Debug, Default, Clone)]
struct GpuLoad {
    sms_in_use: u32,
    total_sms: Option<u32>,
}

/// The server's shared state.
pub struct Manager {
    inner: Mutex<Inner>,
    changed: Notify,
    /// The metrics.
    pub metrics: Metrics,
    /// The configuration.
    pub cfg: Config,
    cache_dirs: Dirs,
    exe: PathBuf,
    /// The GPUs it owns ([`super::gpus`]).
    gpus: Vec<super::gpus::Gpu>,
    /// How executors are confined.
    confine: super::confine::Plan,
    /// Held while the pool is topped up, so two top-ups never start the same executor twice.
    filling: Mutex<()>,
    /// Each GPU's priority gate ([`super::gate`]), handed to its executors.
    gates: Vec<Option<std::os::fd::OwnedFd>>,
    /// Memory the processes of a program share, offered by their executors.
    shares: Mutex<shares::Shares>,
}

/// A session admitted to a partition and handed an executor.
#[derive(Debug)]
pub struct Grant {
    /// Session id.
    pub session: u64,
    /// The executor's id.
    pub exec: u64,
    /// Its control channel.
    pub channel: Arc<Channel>,
    /// The GPU it was placed on (its number).
    pub gpu: u32,
    /// Its further GPUs (their numbers), a session of several.
    pub more: Vec<u32>,
}

impl SessionEntry {
    /// Whether the session uses GPU `p` (a position).
    fn on(&self, p: usize) -> bool {
        self.gpu == p || self.more.contains(&p)
    }
}

fn rank(p: Priority) -> usize {
    match p {
        Priority::LatencyCritical => 0,
        Priority::BestEffort => 1,
    }
}

impl Manager {
    /// A manager over `cfg` and one GPU, executors run from `exe`; `profiles` maps MIG profile
    /// names and ids to their SM counts (from NVML; empty without it).
    pub fn new(cfg: Config, exe: PathBuf, profiles: HashMap<String, u32>) -> std::io::Result<Arc<Manager>> {
        Self::with_confinement(cfg, exe, vec![super::gpus::Gpu::sole(profiles)], super::confine::Plan::off())
    }

    /// As [`Manager::new`], over `gpus` (at least one), executors started under `confine`.
    pub fn with_confinement(
        cfg: Config,
        exe: PathBuf,
        mut gpus: Vec<super::gpus::Gpu>,
        confine: super::confine::Plan,
    ) -> std::io::Result<Arc<Manager>> {
        if gpus.is_empty() {
            gpus.push(super::gpus::Gpu::sole(HashMap::new()));
        }
        let dirs = Dirs { memory: cfg.cache.memory_dir.clone().into(), disk: cfg.cache.disk_dir.clone().into() };
        let cache = Index::open(dirs.clone(), cfg.cache.memory_bytes, cfg.cache.disk_bytes)?;
        let m = Arc::new(Manager {
            inner: Mutex::new(Inner {
                execs: HashMap::new(),
                sessions: HashMap::new(),
                next_id: 1,
                load: vec![GpuLoad::default(); gpus.len()],
                gpu_ready: false,
                waiting: [0, 0],
                draining: false,
                cache,
                died_starting: HashMap::new(),
                warm: WarmSet::new(cfg.warm_functions_max, cfg.function_keep_alive().unwrap_or_default()),
                warm_names: Default::default(),
                warm_programs: WarmSet::new(cfg.warm_programs_max, cfg.program_keep_alive().unwrap_or_default()),
            }),
            changed: Notify::new(),
            metrics: Metrics::new(),
            cfg,
            cache_dirs: dirs,
            exe,
            filling: Mutex::new(()),
            confine,
            // Without one (no memfd) sessions still run, unordered.
            gates: gpus.iter().map(|_| super::gate::Gate::create().map(|(_, fd)| fd).ok()).collect(),
            shares: Mutex::new(shares::Shares::default()),
            gpus,
        });
        Ok(m)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lets executors go: their channel is closed for sending, so the executor, waiting for a
    /// session, exits (its reader thread then removes it).
    fn let_go(g: &Inner, ids: &[u64]) {
        for id in ids {
            if let Some(e) = g.execs.get(id) {
                tracing::info!(exec = id, state = ?e.state, "executor let go");
                e.channel.close_write();
            }
        }
    }

    /// Starts the configured warm executors.
    pub fn fill_pool(self: &Arc<Self>) {
        let _one = self.filling.lock().unwrap_or_else(|p| p.into_inner());
        if self.is_draining() {
            return;
        }
        let specs: Vec<(String, usize)> = self.cfg.pool.iter().map(|(k, v)| (k.clone(), *v)).collect();
        for gpu in 0..self.gpus.len() {
            for (spec, want) in &specs {
                let have = {
                    let g = self.lock();
                    g.execs
                        .values()
                        .filter(|e| {
                            e.gpu == gpu
                                && e.more.is_empty()
                                && &e.spec == spec
                                && matches!(e.state, ExecState::Starting | ExecState::Ready)
                        })
                        .count()
                };
                for _ in have..*want {
                    if let Err(e) = self.spawn(spec, gpu, &[]) {
                        tracing::error!(spec, gpu = self.gpus[gpu].index, error = %e, "could not start an executor");
                    }
                }
            }
        }
    }

    /// Starts an executor process for `spec` on GPU `gpu` (a position in [`Manager::gpus`]);
    /// its reader thread follows it.
    fn spawn(self: &Arc<Self>, spec: &str, gpu: usize, more: &[usize]) -> std::io::Result<u64> {
        let (chan, child_end) = control::pair()?;
        let on = &self.gpus[gpu];
        let all: Vec<&super::gpus::Gpu> =
            std::iter::once(gpu).chain(more.iter().copied()).map(|p| &self.gpus[p]).collect();
        let minors: Option<Vec<u32>> = all.iter().map(|g| g.minor).collect();
        let mut cmd = self.confine.executor_command(&self.exe, spec, minors.as_deref());
        // Only its GPUs are in the executor's view of CUDA (devices 0.. there, in the session's
        // order); its number (the NVML index where known) says where a MIG profile is placed
        // and what the Welcome says.
        let visible: Option<Vec<&str>> = all.iter().map(|g| g.visible.as_deref()).collect();
        match visible {
            Some(v) => {
                cmd.env("CUDA_VISIBLE_DEVICES", v.join(","));
            }
            None if !more.is_empty() => {
                return Err(std::io::Error::other(
                    "the server knows no CUDA identity of its GPUs (no NVML) to start an executor of several",
                ));
            }
            None => {}
        }
        cmd.env("GPULESS_GPU", on.index.to_string());
        if !more.is_empty() {
            let idx: Vec<String> = more.iter().map(|&p| self.gpus[p].index.to_string()).collect();
            cmd.env("GPULESS_MORE_GPUS", idx.join(","));
        }
        if let Some(n) = on.nvml {
            cmd.env("GPULESS_GPU_NVML", n.to_string());
        }
        // A MIG profile (not the whole GPU, not an SM count) may get an instance created for it.
        if self.cfg.mig_create && spec != "whole" && !spec.starts_with("sms:") {
            cmd.arg("--create-mig");
        }
        if self.cfg.measure_preemption {
            cmd.env("GPULESS_MEASURE_PREEMPTION", "1");
        }
        cmd.env("GPULESS_CACHE_MEMORY", &self.cache_dirs.memory).env("GPULESS_CACHE_DISK", &self.cache_dirs.disk);
        cmd.stdin(std::process::Stdio::null());
        // The executor's stdout (a driver's or library's messages) goes to the server's log.
        if let Ok(err) = std::io::stderr().as_fd().try_clone_to_owned() {
            cmd.stdout(std::process::Stdio::from(err));
        }
        let raw = child_end.as_raw_fd();
        let gate = self.gates.get(gpu).and_then(|g| g.as_ref()).map(|g| g.as_raw_fd());
        // SAFETY: between fork and exec only async-signal-safe calls: dup2 places the channel at
        // CONTROL_FD and the priority gate at GATE_FD, without close-on-exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(raw, CONTROL_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(g) = gate {
                    if libc::dup2(g, super::gate::GATE_FD) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        drop(child_end);
        let channel = Arc::new(chan);
        let id = {
            let mut g = self.lock();
            let id = g.next_id;
            g.next_id += 1;
            g.execs.insert(
                id,
                Exec {
                    spec: spec.to_string(),
                    gpu,
                    more: more.to_vec(),
                    pid: child.id(),
                    state: ExecState::Starting,
                    channel: channel.clone(),
                    partition: PartitionInfo::default(),
                    device: DeviceDescription::default(),
                    kept_as: None,
                },
            );
            id
        };
        tracing::info!(exec = id, pid = child.id(), spec, gpu = on.index, "executor starting");
        let me = self.clone();
        std::thread::Builder::new().name(format!("exec-{id}")).spawn(move || me.follow(id, channel, child))?;
        Ok(id)
    }

    /// An executor of GPU `gpu` said whether MPS serves its contexts: the `gpuless_gpu_mps`
    /// gauge, and a line the first time it is seen on (gpuless neither starts nor changes MPS).
    fn saw_mps(&self, gpu: usize, mps: bool) {
        let index = self.gpus.get(gpu).map_or(gpu as u32, |g| g.index);
        let label = super::metrics::GpuLabel { gpu: index.to_string() };
        let gauge = self.metrics.gpu_mps.get_or_create(&label);
        if mps && gauge.get() == 0 {
            tracing::warn!(
                gpu = index,
                "MPS is enabled on this GPU: sessions' kernels run concurrently through the operator's MPS server; \
                 the priority gate still orders latency-critical and best-effort work (docs/SCHEDULING.md)"
            );
        }
        gauge.set(i64::from(mps));
    }

    /// The executor's control messages, until it exits.
    fn follow(self: Arc<Self>, id: u64, channel: Arc<Channel>, mut child: Child) {
        loop {
            match channel.recv() {
                Ok(Some((Control::Ready { partition, device, more: _, mps }, _))) => {
                    let mut g = self.lock();
                    // The device's SM count (a green context's executor reports the whole device's).
                    let gpu = g.execs.get(&id).map_or(0, |e| e.gpu);
                    self.saw_mps(gpu, mps);
                    if let Some(l) = g.load.get_mut(gpu) {
                        if l.total_sms.is_none() && device.sm_count() > 0 {
                            l.total_sms = Some(device.sm_count());
                        }
                    }
                    g.gpu_ready = true;
                    if let Some(e) = g.execs.get_mut(&id) {
                        e.state = ExecState::Ready;
                        e.partition = partition;
                        e.device = device;
                    }
                    drop(g);
                    tracing::info!(exec = id, "executor ready");
                    self.changed.notify_waiters();
                }
                Ok(Some((Control::Failed(why), _))) => {
                    tracing::error!(exec = id, why, "executor could not initialize the GPU");
                    if let Some(e) = self.lock().execs.get_mut(&id) {
                        e.state = ExecState::Failed(why);
                    }
                    self.changed.notify_waiters();
                }
                Ok(Some((Control::Cache { added, hits }, _))) => {
                    let mut g = self.lock();
                    for (h, n) in added {
                        g.cache.added(h, n);
                        self.metrics.upload_bytes.inc_by(n);
                    }
                    for h in hits {
                        g.cache.hit(h);
                    }
                }
                Ok(Some((Control::Samples(s), _))) => {
                    // The class of the session this executor serves, for the latencies by class.
                    let class = self.lock().sessions.values().find(|se| se.exec == id).map(|se| se.priority.name());
                    for (k, v) in s {
                        // Kinds 4 and 5 are nanoseconds, the others microseconds (`notes.rs`).
                        let (h, unit) = match k {
                            0 => (&self.metrics.segment_seconds, 1e-6),
                            1 => (&self.metrics.answer_seconds, 1e-6),
                            3 => (&self.metrics.best_effort_window_seconds, 1e-6),
                            4 => (&self.metrics.preemption_seconds, 1e-9),
                            5 => (&self.metrics.preemption_clock_seconds, 1e-9),
                            _ => (&self.metrics.best_effort_hold_seconds, 1e-6),
                        };
                        h.observe(f64::from(v) * unit);
                        if let (1, Some(c)) = (k, class) {
                            self.metrics.answer_seconds_by_class.get_or_create(&kind(c)).observe(f64::from(v) * 1e-6);
                        }
                    }
                }
                Ok(Some((Control::Invocations(v), _))) => {
                    for (function, mode, n) in v {
                        self.metrics.function_invocations.get_or_create(&FunctionLabels { function, mode }).inc_by(n);
                    }
                }
                Ok(Some((Control::Done { stats, error }, _))) => {
                    self.forget_shares(id);
                    let session = self.finished(id);
                    let outcome = if error.is_empty() { "closed" } else { "error" };
                    self.metrics.sessions_total.get_or_create(&kind(outcome)).inc();
                    self.metrics.cache_lookups.get_or_create(&kind("hit")).inc_by(stats.blob_hits);
                    self.metrics.cache_lookups.get_or_create(&kind("miss")).inc_by(stats.blob_misses);
                    let pieces = [
                        ("graph", stats.pieces_graph),
                        ("capture", stats.pieces_captured),
                        ("eager", stats.pieces_eager),
                    ];
                    for (run, n) in pieces.into_iter().filter(|(_, n)| *n > 0) {
                        self.metrics.piece_runs.get_or_create(&super::metrics::piece_run(run)).inc_by(n);
                    }
                    if stats.records_graph > 0 {
                        self.metrics
                            .piece_records
                            .get_or_create(&super::metrics::piece_run("graph"))
                            .inc_by(stats.records_graph);
                    }
                    tracing::info!(
                        session,
                        exec = id,
                        records = stats.records,
                        launches = stats.launches,
                        answers = stats.answers,
                        blob_bytes = stats.blob_bytes_received,
                        pieces_graph = stats.pieces_graph,
                        pieces_captured = stats.pieces_captured,
                        pieces_eager = stats.pieces_eager,
                        error,
                        "session ended"
                    );
                }
                Ok(Some((Control::Warm { function }, _))) => self.warm(id, &function),
                Ok(Some((Control::KeptProgram { program, resident_bytes, skipped_bytes }, _))) => {
                    self.metrics.resident_skipped_bytes.inc_by(skipped_bytes);
                    self.keep_program(id, &program, resident_bytes);
                }
                Ok(Some((Control::Store(entries), fd))) => {
                    let added = self.store(id, &entries, fd);
                    let mut g = self.lock();
                    for (h, n) in added {
                        g.cache.added(h, n);
                        self.metrics.upload_bytes.inc_by(n);
                    }
                }
                Ok(Some((Control::Templates { key, len }, fd))) => self.templates(id, key, len, fd),
                Ok(Some((Control::Register { name, hash, len }, _))) => self.register(id, &channel, &name, hash, len),
                Ok(Some((Control::Barrier, _))) => self.barrier(id, &channel),
                Ok(Some((Control::Offer { token }, fd))) => self.offer_share(id, &channel, token, fd),
                Ok(Some((Control::Take { token }, _))) => self.take_share(id, &channel, token),
                Ok(Some((Control::Images(images), _))) => {
                    crate::replay::warm_images::remember(&self.cache_dirs.disk, &images)
                }
                Ok(Some((Control::Start { .. } | Control::Registered(_) | Control::Given(_), _))) => {}
                Ok(None) | Err(_) => break,
            }
        }
        let status = child.wait();
        self.forget_shares(id);
        let mut g = self.lock();
        let e = g.execs.remove(&id);
        g.warm.remove(id);
        g.warm_programs.remove(id);
        match &e {
            Some(Exec { state: ExecState::Starting, .. }) => {
                g.died_starting.insert(id, format!("exited with {status:?} before it was ready"));
            }
            Some(Exec { state: ExecState::Failed(why), .. }) => {
                g.died_starting.insert(id, why.clone());
            }
            _ => {}
        }
        if g.died_starting.len() > 1024 {
            g.died_starting.clear();
        }
        // Its session had not ended (no Done): it died during it.
        if let Some(Exec { state: ExecState::Busy(s), .. }) = &e {
            self.metrics.executor_crashes.inc();
            self.metrics.sessions_total.get_or_create(&kind("executor-died")).inc();
            tracing::error!(session = s, exec = id, ?status, "executor died during its session");
            Self::end_session(&mut g, &self.metrics, *s);
        }
        drop(g);
        self.changed.notify_waiters();
        // Replace an executor that served (or was ready to); one that could not start is not
        // restarted in a loop: the next session that needs one starts it.
        let served = matches!(e, Some(Exec { state: ExecState::Busy(_) | ExecState::Finished | ExecState::Ready, .. }));
        if served && !self.is_draining() {
            self.fill_pool();
        }
    }

    /// Executor `id` reported [`Control::Done`]: its session is over, and its partition free for
    /// the next, even while the executor is still exiting or kept warm. Returns the session.
    fn finished(&self, id: u64) -> u64 {
        let mut g = self.lock();
        let session = match g.execs.get(&id).map(|e| &e.state) {
            Some(ExecState::Busy(s)) => *s,
            _ => 0,
        };
        if let Some(e) = g.execs.get_mut(&id) {
            e.state = ExecState::Finished;
        }
        Self::end_session(&mut g, &self.metrics, session);
        drop(g);
        self.changed.notify_waiters();
        session
    }

    fn end_session(g: &mut Inner, metrics: &Metrics, s: u64) {
        if let Some(se) = g.sessions.remove(&s) {
            if let Some(l) = g.load.get_mut(se.gpu) {
                l.sms_in_use -= se.sms;
            }
            metrics.session_memory.remove(&SessionLabels {
                session: s.to_string(),
                priority: se.priority.name().into(),
                partition: se.spec.clone(),
                gpu: se.gpu_index.to_string(),
            });
            tracing::debug!(session = s, secs = se.started.elapsed().as_secs_f64(), "session freed");
        }
    }

    /// Whether SIGTERM arrived.
    pub fn is_draining(&self) -> bool {
        self.lock().draining
    }

    /// Whether sessions are accepted: not draining, and an executor has initialized the GPU —
    /// or no warm pool is configured (then none starts before a session).
    pub fn readiness(&self) -> Readiness {
        let g = self.lock();
        if g.draining {
            Readiness::Draining
        } else if g.gpu_ready || self.cfg.pool.values().all(|n| *n == 0) {
            Readiness::Ready
        } else {
            Readiness::Starting
        }
    }

    /// Refuse new sessions from now on; executors kept warm with a function are let go.
    pub fn drain(&self) {
        let mut g = self.lock();
        g.draining = true;
        let mut warm = g.warm.clear();
        warm.extend(g.warm_programs.clear());
        Self::let_go(&g, &warm);
        drop(g);
        self.changed.notify_waiters();
    }

    /// Live sessions.
    pub fn sessions(&self) -> usize {
        self.lock().sessions.len()
    }

    /// Waits until sessions change.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// Kills every executor (after the drain timeout).
    pub fn kill_all(&self) {
        for e in self.lock().execs.values() {
            // SAFETY: signalling a child process of ours.
            unsafe { libc::kill(e.pid as libc::pid_t, libc::SIGKILL) };
        }
    }

    /// Refreshes the gauges (called before each scrape).
    pub fn refresh_metrics(&self) {
        let mut g = self.lock();
        Self::expire_warm(&mut g);
        let m = &self.metrics;
        // A function once warm reads 0 when no executor is (not absent).
        let counts = g.warm.counts();
        g.warm_names.extend(counts.keys().cloned());
        for function in &g.warm_names {
            let n = counts.get(function).copied().unwrap_or(0);
            m.warm_functions.get_or_create(&FunctionName { function: super::warm::shown(function) }).set(n as i64);
        }
        for p in [Priority::LatencyCritical, Priority::BestEffort] {
            m.sessions
                .get_or_create(&kind(p.name()))
                .set(g.sessions.values().filter(|s| s.priority == p).count() as i64);
        }
        let resident: Vec<u64> = g
            .execs
            .values()
            .filter_map(|e| match e.state {
                ExecState::Program(_, bytes) => Some(bytes),
                _ => None,
            })
            .collect();
        m.warm_programs.set(resident.len() as i64);
        m.warm_resident_bytes.set(resident.iter().sum::<u64>() as i64);
        m.sms_in_use.set(g.load.iter().map(|l| i64::from(l.sms_in_use)).sum());
        for (n, gpu) in self.gpus.iter().enumerate() {
            let label = super::metrics::GpuLabel { gpu: gpu.index.to_string() };
            m.gpu_sessions.get_or_create(&label).set(g.sessions.values().filter(|s| s.on(n)).count() as i64);
            m.gpu_sms_in_use.get_or_create(&label).set(i64::from(g.load[n].sms_in_use));
        }
        m.queue.set(g.waiting.iter().sum::<usize>() as i64);
        let mut counts: HashMap<&str, i64> =
            HashMap::from([("warm", 0), ("busy", 0), ("starting", 0), ("failed", 0), ("function", 0), ("program", 0)]);
        for e in g.execs.values() {
            let k = match e.state {
                ExecState::Starting => "starting",
                ExecState::Ready => "warm",
                ExecState::Busy(_) | ExecState::Finished => "busy",
                ExecState::Function(_) => "function",
                ExecState::Program(..) => "program",
                ExecState::Failed(_) => "failed",
            };
            *counts.entry(k).or_insert(0) += 1;
        }
        for (k, v) in counts {
            m.executors.get_or_create(&kind(k)).set(v);
        }
        let (mem, disk) = g.cache.bytes();
        m.cache_bytes.get_or_create(&kind("memory")).set(mem as i64);
        m.cache_bytes.get_or_create(&kind("disk")).set(disk as i64);
        let used = super::gpus::memory_by_pid();
        for (id, s) in &g.sessions {
            let pid = g.execs.get(&s.exec).map(|e| e.pid);
            if let Some(bytes) = pid.and_then(|p| used.get(&p)) {
                m.session_memory
                    .get_or_create(&SessionLabels {
                        session: id.to_string(),
                        priority: s.priority.name().into(),
                        partition: s.spec.clone(),
                        gpu: s.gpu_index.to_string(),
                    })
                    .set(*bytes as i64);
            }
        }
    }

    /// Ends a granted session whose hand-off failed; its executor (waiting for a session that
    /// will not come) is ended.
    pub fn abandon(&self, session: u64, exec: u64) {
        let mut g = self.lock();
        if let Some(e) = g.execs.get(&exec) {
            // SAFETY: signalling a child process of ours.
            unsafe { libc::kill(e.pid as libc::pid_t, libc::SIGKILL) };
        }
        Self::end_session(&mut g, &self.metrics, session);
        drop(g);
        self.changed.notify_waiters();
    }

    /// Pids of live executors (for tests and the drain).
    pub fn executor_pids(&self) -> Vec<u32> {
        self.lock().execs.values().map(|e| e.pid).collect()
    }

    /// How long to wait for sessions at SIGTERM.
    pub fn drain_timeout(&self) -> Duration {
        Config::secs(self.cfg.drain_timeout_s)
    }
}

#[path = "manager_admit.rs"]
mod admit;
pub use admit::Request;
#[path = "manager_kept.rs"]
mod kept;
#[path = "manager_shares.rs"]
mod shares;
#[path = "manager_store.rs"]
pub mod store;

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
