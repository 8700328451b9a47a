//! `gpuless serve` (the server) and `gpuless __executor` (one session's executor process,
//! started by the server): flags over the TOML configuration, the partition an executor runs
//! on (`whole`, `sms:N`, a MIG profile), logs.

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use gpuless_replayer::partition::mig::{needs_instance, run_on_created};
use gpuless_replayer::partition::mig_nvml::NvmlMig;
use gpuless_replayer::partition::sm_split::SplitPreference;
use gpuless_replayer::replay::green::init_green_device;
use gpuless_replayer::server::cache::Dirs;
use gpuless_replayer::server::config::Config;
use gpuless_replayer::server::control::{Channel, Control};
use gpuless_replayer::server::executor::{self, Setup};
use gpuless_replayer::server::gate::Gate;
use gpuless_replayer::server::manager::CONTROL_FD;
use gpuless_traces::protocol::PartitionInfo;

use crate::partition::{self, PartitionArgs, Prepared};

/// The flags of `gpuless serve`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServeArgs {
    /// TOML configuration (gpuless.toml); flags override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// TCP address to listen on (default 127.0.0.1:7011; `:0` picks a port).
    #[arg(long)]
    pub listen: Option<String>,
    /// Unix-domain socket to listen on.
    #[arg(long)]
    pub socket: Option<String>,
    /// Address of the Prometheus endpoint (GET /metrics).
    #[arg(long)]
    pub metrics: Option<String>,
    /// File holding the bearer token `GET /metrics` must present (first line); the probes
    /// (/healthz, /readyz) stay open.
    #[arg(long, value_name = "FILE")]
    pub metrics_token_file: Option<String>,
    /// File holding the clients' token.
    #[arg(long)]
    pub token_file: Option<String>,
    /// File of tenants, one `NAME TOKEN` a line: each tenant's clients present their own token,
    /// and what one tenant's sessions keep on the GPU goes only to that tenant's sessions.
    #[arg(long, value_name = "FILE")]
    pub tenants_file: Option<String>,
    /// PEM certificate chain for the TCP listener, which then speaks only TLS (with --tls-key).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<String>,
    /// PEM private key of --tls-cert's certificate.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<String>,
    /// The GPUs to serve: `all` (default: every GPU NVML lists, or those of
    /// CUDA_VISIBLE_DEVICES), or indices or UUIDs separated by commas (`0,1`).
    #[arg(long, value_name = "all|LIST")]
    pub gpus: Option<String>,
    /// Warm executors per GPU and partition spec, e.g. `whole=2` or `sms:16=1` (repeatable).
    #[arg(long, value_name = "SPEC=N")]
    pub pool: Vec<String>,
    /// End sessions idle this many seconds.
    #[arg(long, value_name = "SECONDS")]
    pub idle_timeout: Option<f64>,
    /// Put both cache tiers under this directory.
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Keep a function's executor warm, with the function set up, this many seconds after a
    /// `gpuless invoke --remote` session for the next session of the same function (0: off;
    /// default 300).
    #[arg(long, value_name = "SECONDS")]
    pub function_keep_alive: Option<f64>,
    /// Most executors kept warm with a function at once (default 4); the least recently used
    /// is ended first.
    #[arg(long, value_name = "N")]
    pub warm_functions_max: Option<usize>,
    /// Warm constants: keep a live client's executor this many seconds after its session, with
    /// the session's uploads (weights) resident on the GPU, for the next session of the same
    /// program, which then does not copy them again (0: off, the default; see
    /// "Warm constants" in docs/FUNCTIONS.md for who may read them).
    #[arg(long, value_name = "SECONDS")]
    pub program_keep_alive: Option<f64>,
    /// Most executors kept with a program's uploads at once (default 2).
    #[arg(long, value_name = "N")]
    pub warm_programs_max: Option<usize>,
    /// Most of the GPU's memory executors kept after their session (warm functions and warm
    /// constants) may hold, as a fraction (default 0.5); beyond it the least recently used goes.
    #[arg(long, value_name = "FRACTION")]
    pub warm_memory_fraction: Option<f64>,
    /// Cached-trace execution: runs of a session's launches, copies and sets that repeat are
    /// captured as CUDA graphs and launched instead (docs/FUNCTIONS.md). `auto` (default): for
    /// clients that send whole segments (`replay --remote`), not live programs; `on`: every
    /// session; `off`: none.
    #[arg(long, value_name = "auto|on|off", value_parser = ["auto", "on", "off"])]
    pub cached_execution: Option<String>,
    /// When cached execution holds a piece for a graph: `busy` (default; only while the GPU
    /// still has earlier work of its stream or the piece's records have all arrived, so an
    /// idle GPU never waits) or `always`.
    #[arg(long, value_name = "busy|always", value_parser = ["busy", "always"])]
    pub cached_hold: Option<String>,
    /// How latency-critical sessions go ahead of best-effort ones: `preempt` (default; a
    /// best-effort session waits, at most 20 ms each time, before a segment and before each of
    /// its kernels while latency-critical work is in flight), `gate` (before a segment only),
    /// `off`.
    #[arg(long, value_name = "preempt|gate|off", value_parser = ["preempt", "gate", "off"])]
    pub priority_policy: Option<String>,
    /// With `preempt`: how many of a best-effort session's kernels may be on the GPU at once
    /// (default 4; 0: no bound).
    #[arg(long, value_name = "N")]
    pub best_effort_inflight: Option<u32>,
    /// With `preempt`: how much predicted GPU time of a best-effort session's kernels may be on
    /// the GPU at once, in microseconds (default 0: no bound).
    #[arg(long, value_name = "US")]
    pub best_effort_budget_us: Option<u32>,
    /// Measure latency-critical segments' preemption latency from GPU timestamps (arrival to
    /// first kernel start; the `gpuless_preemption_seconds` metric).
    #[arg(long)]
    pub measure_preemption: bool,
    /// The user executors run as where the server runs as root (default `nobody`).
    #[arg(long, value_name = "USER")]
    pub executor_user: Option<String>,
    /// Allow executors to run as root (`--executor-user root`, or confinement off as root).
    #[arg(long, env = "GPULESS_ALLOW_ROOT_EXECUTORS")]
    pub allow_root_executors: bool,
    /// Turn a layer of the executors' confinement off: `seccomp`, `namespaces` or `all`
    /// (repeatable or comma-separated; docs/SECURITY.md).
    #[arg(long, value_name = "LAYER", env = "GPULESS_CONFINE_OFF", value_delimiter = ',', value_parser = ["seccomp", "namespaces", "all"])]
    pub confine_off: Vec<String>,
}

/// Runs the server until SIGTERM/SIGINT.
pub fn run(args: &ServeArgs) -> anyhow::Result<ExitCode> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GPULESS_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let mut cfg = match &args.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    if let Some(l) = &args.listen {
        cfg.listen = l.clone();
    }
    if let Some(s) = &args.socket {
        cfg.socket = s.clone();
    }
    if let Some(m) = &args.metrics {
        cfg.metrics = m.clone();
    }
    if let Some(f) = &args.metrics_token_file {
        cfg.metrics_token_file = f.clone();
    }
    if let Some(g) = &args.gpus {
        cfg.gpus = g.clone();
    }
    if let Some(t) = &args.tenants_file {
        cfg.tenants_file = t.clone();
    }
    if let Some(t) = &args.token_file {
        cfg.token_file = t.clone();
    }
    if let Some(c) = &args.tls_cert {
        cfg.tls_cert = c.clone();
    }
    if let Some(k) = &args.tls_key {
        cfg.tls_key = k.clone();
    }
    if let Some(t) = args.idle_timeout {
        cfg.idle_timeout_s = t;
    }
    if let Some(k) = args.function_keep_alive {
        cfg.function_keep_alive_s = k;
    }
    if let Some(n) = args.warm_functions_max {
        cfg.warm_functions_max = n;
    }
    if let Some(k) = args.program_keep_alive {
        cfg.program_keep_alive_s = k;
    }
    if let Some(n) = args.warm_programs_max {
        cfg.warm_programs_max = n;
    }
    if let Some(f) = args.warm_memory_fraction {
        cfg.warm_memory_fraction = f;
    }
    if let Some(c) = args.cached_execution.as_deref().and_then(gpuless_replayer::server::config::CachedExecution::parse)
    {
        cfg.cached_execution = c;
    }
    if let Some(h) = args.cached_hold.as_deref().and_then(gpuless_traces::protocol::piece::policy::Hold::parse) {
        cfg.cached_hold = h;
    }
    if let Some(p) = args.priority_policy.as_deref().and_then(gpuless_replayer::server::config::PriorityPolicy::parse) {
        cfg.priority_policy = p;
    }
    if let Some(n) = args.best_effort_inflight {
        cfg.best_effort_inflight = n;
    }
    if let Some(n) = args.best_effort_budget_us {
        cfg.best_effort_budget_us = n;
    }
    if args.measure_preemption {
        cfg.measure_preemption = true;
    }
    if let Some(u) = &args.executor_user {
        cfg.confine.user = u.clone();
    }
    if args.allow_root_executors {
        cfg.confine.allow_root = true;
    }
    for layer in &args.confine_off {
        match layer.as_str() {
            "seccomp" => cfg.confine.seccomp = false,
            "namespaces" => cfg.confine.namespaces = gpuless_replayer::server::config::NamespaceMode::Off,
            _ => cfg.confine.enabled = false,
        }
    }
    if let Some(d) = &args.cache_dir {
        cfg.cache.memory_dir = d.join("memory").display().to_string();
        cfg.cache.disk_dir = d.join("disk").display().to_string();
    }
    if !args.pool.is_empty() {
        cfg.pool.clear();
        for p in &args.pool {
            let (spec, n) = p.rsplit_once('=').with_context(|| format!("--pool {p}: expected SPEC=N"))?;
            let n: usize = n.parse().with_context(|| format!("--pool {p}: N is not a number"))?;
            cfg.pool.insert(spec.to_string(), n);
        }
    }
    let cfg = cfg.resolve()?;
    let exe = if cfg.executor.is_empty() {
        std::env::current_exe().context("finding this program for the executors")?
    } else {
        PathBuf::from(&cfg.executor)
    };
    gpuless_replayer::server::serve(cfg, exe, |tcp, metrics| {
        // One line on stdout that scripts wait for.
        println!(
            "gpuless serve: listening{}{}",
            tcp.map(|a| format!(" tcp={a}")).unwrap_or_default(),
            metrics.map(|a| format!(" metrics={a}")).unwrap_or_default()
        );
    })?;
    Ok(ExitCode::SUCCESS)
}

/// The executor process: initializes its partition, then serves one session. With `create_mig`
/// (the server's `mig_create`) and a profile of which no instance exists on a GPU with MIG on,
/// it first creates a GPU and a compute instance of the profile (NVML), serves the session on
/// it, and destroys both when the session ends.
pub fn executor(spec: &str, create_mig: bool, confined: bool, seccomp: bool) -> anyhow::Result<ExitCode> {
    if confined {
        // Another executor of the same user cannot read this one's memory through /proc.
        // SAFETY: prctl with scalar arguments.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
            anyhow::bail!("PR_SET_DUMPABLE: {}", std::io::Error::last_os_error());
        }
    }
    // SAFETY: the server placed the control channel at CONTROL_FD for this process alone.
    let control = Channel::from_fd(unsafe { OwnedFd::from_raw_fd(CONTROL_FD) });
    let cache = Dirs {
        memory: std::env::var_os("GPULESS_CACHE_MEMORY")
            .map(PathBuf::from)
            .unwrap_or_else(|| "/tmp/gpuless-mem".into()),
        disk: std::env::var_os("GPULESS_CACHE_DISK").map(PathBuf::from).unwrap_or_else(|| "/tmp/gpuless-disk".into()),
    };
    let needs = create_mig
        && gpuless_replayer::partition::nvml::query()
            .ok()
            .and_then(|r| r.gpus.into_iter().find(|g| g.index == 0))
            .is_some_and(|g| needs_instance(&g, spec));
    if !needs {
        return serve_partition(spec, false, control, cache, seccomp);
    }
    let created = NvmlMig::open(None).map_err(anyhow::Error::from).and_then(|mut ops| {
        // The closure owns the channel; a failure before it runs is reported below.
        let channel = control.try_clone()?;
        run_on_created(&mut ops, 0, spec, |uuid| {
            // The executor's stderr is the server's log.
            eprintln!("gpuless executor: created a MIG instance of {spec} for this session: {uuid}");
            serve_partition(uuid, true, channel, cache, seccomp)
        })
        .map_err(anyhow::Error::from)
    });
    match created {
        Ok(run) => {
            match &run.teardown {
                Ok(()) => {
                    eprintln!("gpuless executor: destroyed the MIG instance {} created for the session", run.uuid)
                }
                Err(e) => eprintln!("gpuless executor: error: destroying the MIG instance {} failed: {e}", run.uuid),
            }
            run.value
        }
        Err(e) => {
            let e = e.context(format!("creating a MIG instance of {spec} for the session"));
            let _ = control.send(&Control::Failed(format!("{e:#}")), None);
            Err(e)
        }
    }
}

/// Initializes partition `spec` (a MIG instance `created` for this session, when so) and serves
/// one session on it.
fn serve_partition(
    spec: &str,
    created: bool,
    control: Channel,
    cache: Dirs,
    seccomp: bool,
) -> anyhow::Result<ExitCode> {
    let init = || -> anyhow::Result<(gpuless_replayer::replay::Device, PartitionInfo, Option<u64>)> {
        if let Some(n) = spec.strip_prefix("sms:") {
            let n: u32 = n.parse().with_context(|| format!("partition `{spec}`"))?;
            let (dev, part) = init_green_device(n, SplitPreference::Coscheduled)
                .with_context(|| format!("creating a green context of {n} SMs"))?;
            let info = PartitionInfo {
                kind: "emulated".into(),
                profile: spec.into(),
                sms: part.granted_sms,
                memory_limit: 0,
                isolation: partition::SOFT.into(),
            };
            return Ok((dev, info, None));
        }
        let prepared = if spec == "whole" {
            Prepared::Full
        } else {
            // An existing MIG instance of the profile where MIG is on, else a soft partition.
            let mig = PartitionArgs { mig: Some(spec.into()), created, ..PartitionArgs::default() };
            partition::prepare(&mig).or_else(|_| {
                partition::prepare(&PartitionArgs { mig: Some(spec.into()), emulate: true, ..PartitionArgs::default() })
            })?
        };
        let (dev, label, limit) = partition::init(&prepared)?;
        let info = PartitionInfo {
            kind: label.kind.into(),
            profile: label.profile.clone().unwrap_or_default(),
            sms: label.sms.unwrap_or(0),
            memory_limit: limit.unwrap_or(0),
            isolation: label.isolation.into(),
        };
        Ok((dev, info, limit))
    };
    match init() {
        Ok((device, partition, memory_limit)) => {
            let code = executor::run(Setup {
                control,
                device,
                partition,
                memory_limit,
                cache,
                gate: Gate::inherited(),
                seccomp,
            });
            Ok(ExitCode::from(code as u8))
        }
        Err(e) => {
            let _ = control.send(&Control::Failed(format!("{e:#}")), None);
            Err(e)
        }
    }
}
