//! `gpuless serve`'s configuration: a TOML file (`--config`) under the command-line flags.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Which sessions run cached-trace execution ([`Config::cached_execution`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CachedExecution {
    /// None.
    Off,
    /// Every session.
    On,
    /// Sessions whose client sends whole segments (`Hello::whole_segments`).
    #[default]
    Auto,
}

impl CachedExecution {
    /// The mode named `s`: `auto`, `on`/`true`, `off`/`false`.
    pub fn parse(s: &str) -> Option<CachedExecution> {
        match s {
            "auto" => Some(CachedExecution::Auto),
            "on" | "true" => Some(CachedExecution::On),
            "off" | "false" => Some(CachedExecution::Off),
            _ => None,
        }
    }

    /// Whether a session whose client says `whole_segments` runs it.
    pub fn for_session(self, whole_segments: bool) -> bool {
        match self {
            CachedExecution::Off => false,
            CachedExecution::On => true,
            CachedExecution::Auto => whole_segments,
        }
    }
}

impl<'de> Deserialize<'de> for CachedExecution {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Name(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bool(true) => Ok(CachedExecution::On),
            Raw::Bool(false) => Ok(CachedExecution::Off),
            Raw::Name(s) => CachedExecution::parse(&s).ok_or_else(|| {
                serde::de::Error::custom(format!("cached_execution = \"{s}\": expected \"auto\", \"on\" or \"off\""))
            }),
        }
    }
}

/// How latency-critical sessions go ahead of best-effort ones on a GPU ([`super::gate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PriorityPolicy {
    /// Best-effort work is never held.
    Off,
    /// A best-effort segment waits before it starts while latency-critical work is in flight.
    Gate,
    /// As `gate`, and inside a segment before each kernel too (the default).
    Preempt,
}

impl PriorityPolicy {
    /// The policy of a name (`off`, `gate`, `preempt`).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "off" => Some(Self::Off),
            "gate" => Some(Self::Gate),
            "preempt" => Some(Self::Preempt),
            _ => None,
        }
    }
}

/// The server's settings. Every field has a default; `gpuless.toml` overrides them and the
/// command line overrides the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// TCP address to listen on (`127.0.0.1:7011`); empty: no TCP listener.
    pub listen: String,
    /// Unix-domain socket path; empty: none.
    pub socket: String,
    /// Prometheus metrics endpoint (`127.0.0.1:7012`, `GET /metrics`); empty: none.
    pub metrics: String,
    /// A file holding the bearer token `GET /metrics` must present (first line), kept out of
    /// the config; empty: the scrape is open. The probes (`/healthz`, `/readyz`) stay open.
    pub metrics_token_file: String,
    /// The token read from `metrics_token_file` (filled in by [`Config::resolve`]); empty: none.
    #[serde(skip)]
    pub metrics_token: String,
    /// Access token clients must present. Empty: none needed (then TCP listens on loopback
    /// only). Read from `token_file` if that is set.
    pub token: String,
    /// A file holding the token (first line), kept out of the config.
    pub token_file: String,
    /// Tenants, each with its own token (name → token): the server tells their clients apart
    /// ([`super::tenants`]); what one tenant's sessions keep on the GPU (warm constants) is
    /// only handed to that tenant's sessions. With `token` set too, its clients are the tenant
    /// `""`.
    pub tenants: BTreeMap<String, String>,
    /// A file of tenants, one `NAME TOKEN` a line (`#` comments), kept out of the config;
    /// added to `tenants`.
    pub tenants_file: String,
    /// Who a client is, from `token` and `tenants` (filled in by [`Config::resolve`]).
    #[serde(skip)]
    pub identities: super::tenants::Tenants,
    /// The GPUs the server owns: `all` (the default: every GPU NVML lists, or those of the
    /// server's `CUDA_VISIBLE_DEVICES` where that is set), or GPU indices or UUIDs separated by
    /// commas (`0,1`). Each gets its own executors, warm pool, partitions and priority gate
    /// ([`super::gpus`]).
    pub gpus: String,
    /// Warm executors kept per GPU and partition spec (`whole`, `sms:N`, a profile name):
    /// started ahead with their CUDA context initialized.
    pub pool: BTreeMap<String, usize>,
    /// Most sessions at once.
    pub max_sessions: usize,
    /// Most sessions waiting for a partition; beyond, new sessions are refused.
    pub queue: usize,
    /// Whether the server may create a MIG instance for a session that asks for a profile
    /// of which none exists (MIG on; the instance is destroyed when the session's executor
    /// ends). Off by default: creating instances is the operator's decision. MIG mode itself
    /// is never changed.
    pub mig_create: bool,
    /// How long a session waits in the queue before it is refused, in seconds.
    pub queue_timeout_s: f64,
    /// A session with no message for this long is ended, in seconds.
    pub idle_timeout_s: f64,
    /// How long a client may take to say Hello, in seconds.
    pub handshake_timeout_s: f64,
    /// How long an executor may take to initialize the GPU, in seconds.
    pub executor_start_timeout_s: f64,
    /// On SIGTERM, how long running sessions may go on before they are ended, in seconds.
    pub drain_timeout_s: f64,
    /// How long the executor of a function session (`gpuless invoke --remote`) stays warm
    /// after the session ends, with the function set up on the GPU, for the next session of
    /// the same function, in seconds; 0: off (every session's executor exits).
    pub function_keep_alive_s: f64,
    /// Most executors kept warm with a function at once; the least recently used is ended
    /// when one more would exceed it. 0: off.
    pub warm_functions_max: usize,
    /// Warm constants: how long the executor of a live client's session stays after the
    /// session ends with the session's uploads that still hold their content resident on the
    /// GPU (weights), for the next session of the same program (the Hello's `program`, on the
    /// same partition spec), in seconds; that session's identical uploads are not copied again
    /// (`replay::resident`). 0 (the default): off. A session can read the kept uploads before it
    /// makes them itself, so they go only to the same tenant's next session of the program
    /// (`tenants`); with only the shared `token` every client is one tenant: turn it on there
    /// only where that is acceptable.
    pub program_keep_alive_s: f64,
    /// Most executors kept with a program's uploads at once; the least recently used is ended
    /// when one more would exceed it, or when an executor cannot start (its memory is needed).
    pub warm_programs_max: usize,
    /// Most of the GPU's memory the executors kept after their session (warm functions and
    /// warm constants together) may hold, as a fraction of its total; beyond it the least
    /// recently used is let go (memory pressure). 1: no bound but the caps.
    pub warm_memory_fraction: f64,
    /// Cached-trace execution: runs of launches, copies and sets that repeat run as CUDA graphs
    /// (`server::pieces`). `auto` (the default): for sessions whose client sends each
    /// synchronization's records whole (`replay --remote`: its repeated work runs as graphs,
    /// faster than local eager replay), not for live programs (on an H100 it ran most of a
    /// PyTorch program's repeated work as graphs, correctly, but made no live client faster:
    /// docs/BENCHMARKS.md); `on` (or `true`): every session; `off` (or `false`): none.
    pub cached_execution: CachedExecution,
    /// When cached execution holds a piece for a graph: `busy` (only while the GPU still has
    /// earlier work of the piece's stream, or the records that complete the piece have all
    /// arrived, so an idle GPU never waits for a piece's last record) or `always`.
    pub cached_hold: gpuless_traces::protocol::piece::policy::Hold,
    /// How latency-critical sessions go ahead of best-effort ones: `off`, `gate` (a best-effort
    /// segment waits before it starts while latency-critical work is in flight, at most 20 ms)
    /// or `preempt` (the default: also before each of its kernels inside a segment).
    pub priority_policy: PriorityPolicy,
    /// Under policy `preempt`: how many of a best-effort session's kernels may be on the GPU at
    /// once (its executor waits for the oldest before it submits another), so latency-critical
    /// work arriving finds at most that many ahead of it; 0: no bound. Default 4: in REEF's
    /// scenario on an H100 it kept RT p50/p99 within ×1.05 of RT alone where no bound let p99
    /// reach ×1.31 (docs/SCHEDULING.md).
    pub best_effort_inflight: u32,
    /// Under policy `preempt`: how much predicted GPU time of a best-effort session's kernels
    /// may be on the GPU at once, microseconds (each kernel's duration predicted from the
    /// earlier runs of its shape; a kernel longer than it runs alone), so latency-critical work
    /// arriving waits at most about that long, or one such kernel; 0 (the default): no bound.
    /// Both bounds hold where both are set (docs/SCHEDULING.md).
    pub best_effort_budget_us: u32,
    /// Measure each latency-critical segment's preemption latency (its arrival at the executor
    /// to its first kernel's start on the GPU) from GPU timestamps: a one-thread kernel ahead of
    /// the segment's first kernel (`gpuless_preemption_seconds`; docs/SCHEDULING.md). Off by
    /// default (the stamp costs a launch per segment).
    pub measure_preemption: bool,
    /// The blob cache.
    pub cache: CacheConfig,
    /// The executor binary (default: this `gpuless`).
    pub executor: String,
    /// PEM file of the TCP listener's certificate chain (the server's certificate first). With
    /// `tls_key`, the TCP listener speaks only TLS; empty: plain TCP. The Unix socket is not
    /// affected.
    pub tls_cert: String,
    /// PEM file of the private key of `tls_cert`'s certificate.
    pub tls_key: String,
    /// How executors are confined ([`super::confine`]).
    pub confine: ConfineConfig,
}

/// How executor processes are confined: each executes a tenant's driver calls and kernels, so
/// each runs as an unprivileged user, in namespaces of its own with only the driver's device
/// nodes and libraries in view, under a seccomp allow-list (docs/SECURITY.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConfineConfig {
    /// Whether executors are confined at all (default true).
    pub enabled: bool,
    /// The user executors run as where the server runs as root (default `nobody`).
    pub user: String,
    /// Whether executors may run as root (the server runs as root and `user` is `root`, or
    /// confinement is off). Off by default: the server refuses to start.
    pub allow_root: bool,
    /// Namespaces (mount, network, IPC, UTS; a user namespace where the server is not root)
    /// and the executor's file-system view: `auto` (the default: where the kernel allows
    /// them, else one warning), `on` (required) or `off`.
    pub namespaces: NamespaceMode,
    /// Whether the executor installs its seccomp allow-list once the GPU is initialized
    /// (default true).
    pub seccomp: bool,
    /// More paths the executor may read (besides the driver's libraries and device nodes).
    pub read_only: Vec<String>,
    /// More paths the executor may write.
    pub read_write: Vec<String>,
    /// More environment variables executors keep (besides `CUDA_*`, `NVIDIA_*`, `GPULESS_*`,
    /// `LD_LIBRARY_PATH`, `PATH` and the stand-in driver's `FAKE_CUDA_*`).
    pub keep_env: Vec<String>,
    /// Most files an executor may have open.
    pub open_files: u64,
    /// Bytes of the executor's private /tmp.
    pub tmp_bytes: u64,
}

/// Whether executors get namespaces of their own ([`ConfineConfig::namespaces`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NamespaceMode {
    /// Where the kernel allows them.
    #[default]
    Auto,
    /// Required: the server does not start without them.
    On,
    /// Never.
    Off,
}

impl Default for ConfineConfig {
    fn default() -> Self {
        ConfineConfig {
            enabled: true,
            user: "nobody".into(),
            allow_root: false,
            namespaces: NamespaceMode::Auto,
            seccomp: true,
            read_only: Vec::new(),
            read_write: Vec::new(),
            keep_env: Vec::new(),
            open_files: 65536,
            tmp_bytes: 1 << 30,
        }
    }
}

/// The content cache: a memory tier (a tmpfs directory) and a disk tier, each size-bounded,
/// least recently used out first.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Memory tier directory (on tmpfs); default `/dev/shm/gpuless-cache-<uid>`.
    pub memory_dir: String,
    /// Bytes the memory tier may hold.
    pub memory_bytes: u64,
    /// Disk tier directory; default `$XDG_CACHE_HOME/gpuless/blobs`.
    pub disk_dir: String,
    /// Bytes the disk tier may hold.
    pub disk_bytes: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig { memory_dir: String::new(), memory_bytes: 4 << 30, disk_dir: String::new(), disk_bytes: 32 << 30 }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:7011".into(),
            socket: String::new(),
            metrics: String::new(),
            metrics_token_file: String::new(),
            metrics_token: String::new(),
            token: String::new(),
            token_file: String::new(),
            tenants: BTreeMap::new(),
            tenants_file: String::new(),
            identities: Default::default(),
            gpus: "all".into(),
            pool: BTreeMap::from([("whole".to_string(), 1)]),
            max_sessions: 64,
            queue: 64,
            queue_timeout_s: 30.0,
            mig_create: false,
            idle_timeout_s: 300.0,
            handshake_timeout_s: 10.0,
            executor_start_timeout_s: 120.0,
            drain_timeout_s: 30.0,
            function_keep_alive_s: 300.0,
            warm_functions_max: 4,
            program_keep_alive_s: 0.0,
            warm_programs_max: 2,
            warm_memory_fraction: 0.5,
            cached_execution: CachedExecution::Auto,
            cached_hold: Default::default(),
            priority_policy: PriorityPolicy::Preempt,
            best_effort_inflight: 4,
            best_effort_budget_us: 0,
            measure_preemption: false,
            cache: CacheConfig::default(),
            executor: String::new(),
            tls_cert: String::new(),
            tls_key: String::new(),
            confine: ConfineConfig::default(),
        }
    }
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct ConfigError {
    /// The file.
    pub path: String,
    /// What is wrong, and where.
    pub reason: String,
}

impl Config {
    /// Reads a TOML file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let err = |reason: String| ConfigError { path: path.display().to_string(), reason };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        toml::from_str(&text).map_err(|e| err(e.to_string()))
    }

    /// The tenant a client presenting `token` is ([`super::tenants::Tenants::identify`]; the
    /// shared `token` alone where the configuration was not resolved), or `None`: refused.
    pub fn tenant_of(&self, token: &str) -> Option<String> {
        if self.identities.any() {
            return self.identities.identify(token);
        }
        super::token_matches(token, &self.token).then(String::new)
    }

    /// Checks the settings and fills in what depends on the machine: the token from its file,
    /// the cache directories.
    pub fn resolve(mut self) -> Result<Config, ConfigError> {
        let err = |reason: String| ConfigError { path: "configuration".into(), reason };
        if !self.token_file.is_empty() {
            let t = std::fs::read_to_string(&self.token_file).map_err(|e| err(format!("token_file: {e}")))?;
            self.token = t.lines().next().unwrap_or("").trim().to_string();
        }
        if !self.metrics_token_file.is_empty() {
            let f = &self.metrics_token_file;
            let t = std::fs::read_to_string(f).map_err(|e| err(format!("metrics_token_file {f}: {e}")))?;
            self.metrics_token = t.lines().next().unwrap_or("").trim().to_string();
            if self.metrics_token.is_empty() {
                return Err(err(format!("metrics_token_file {f}: its first line is empty: put the token there")));
            }
        }
        if let Some(warning) = self.metrics_warning() {
            tracing::warn!(metrics = self.metrics, "{warning}");
        }
        if !self.tenants_file.is_empty() {
            let f = &self.tenants_file;
            let text = std::fs::read_to_string(f).map_err(|e| err(format!("tenants_file {f}: {e}")))?;
            for (name, token) in super::tenants::parse_file(&text).map_err(|e| err(format!("tenants_file {f}: {e}")))? {
                if self.tenants.insert(name.clone(), token).is_some() {
                    return Err(err(format!("tenant `{name}` is named both in `tenants` and in tenants_file {f}")));
                }
            }
        }
        self.identities = super::tenants::Tenants::new(&self.tenants, &self.token).map_err(err)?;
        match (self.tls_cert.is_empty(), self.tls_key.is_empty()) {
            (false, true) => {
                return Err(err("`tls_cert` is set but `tls_key` is not: set both (PEM files) or neither".into()))
            }
            (true, false) => {
                return Err(err("`tls_key` is set but `tls_cert` is not: set both (PEM files) or neither".into()))
            }
            _ => {}
        }
        if self.listen.is_empty() && self.socket.is_empty() {
            return Err(err("neither `listen` nor `socket` is set: the server would accept no client".into()));
        }
        if !self.identities.any() && !self.listen.is_empty() && !is_loopback(&self.listen) {
            return Err(err(format!(
                "`listen = {}` is not a loopback address and no token is set: set `token`, `token_file` or `tenants`",
                self.listen
            )));
        }
        if self.cache.memory_dir.is_empty() {
            // SAFETY: getuid has no preconditions.
            let uid = unsafe { libc::getuid() };
            self.cache.memory_dir = format!("/dev/shm/gpuless-cache-{uid}");
        }
        if self.cache.disk_dir.is_empty() {
            let base = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .unwrap_or_else(|| PathBuf::from("/tmp"));
            self.cache.disk_dir = base.join("gpuless/blobs").display().to_string();
        }
        if !self.function_keep_alive_s.is_finite() || self.function_keep_alive_s < 0.0 {
            return Err(err(format!(
                "function_keep_alive_s = {}: a number of seconds, 0 or more (0: off)",
                self.function_keep_alive_s
            )));
        }
        if !self.program_keep_alive_s.is_finite() || self.program_keep_alive_s < 0.0 {
            return Err(err(format!(
                "program_keep_alive_s = {}: a number of seconds, 0 or more (0: off)",
                self.program_keep_alive_s
            )));
        }
        if !(self.warm_memory_fraction > 0.0 && self.warm_memory_fraction <= 1.0) {
            return Err(err(format!(
                "warm_memory_fraction = {}: a fraction of the GPU's memory, more than 0 and at most 1",
                self.warm_memory_fraction
            )));
        }
        if self.max_sessions == 0 {
            return Err(err("max_sessions must be at least 1".into()));
        }
        Ok(self)
    }

    /// Why the metrics endpoint is exposed, where it listens off loopback with no
    /// `metrics_token_file`: anyone who reaches it reads tenant and function names. `None`: no
    /// endpoint, a loopback one, or a token set.
    pub fn metrics_warning(&self) -> Option<&'static str> {
        (!self.metrics.is_empty() && !is_loopback(&self.metrics) && self.metrics_token.is_empty()).then_some(
            "the metrics endpoint is not on loopback and has no token: whoever reaches it reads tenant and function \
             names (set metrics_token_file, or restrict who reaches it)",
        )
    }

    /// How long a function's executor stays warm after its session, or `None` when keeping
    /// functions warm is off (`function_keep_alive_s` or `warm_functions_max` 0).
    pub fn function_keep_alive(&self) -> Option<Duration> {
        (self.function_keep_alive_s > 0.0 && self.warm_functions_max > 0)
            .then(|| Self::secs(self.function_keep_alive_s))
    }

    /// How long a live client's executor stays with the session's uploads resident, or
    /// `None` when warm constants are off (`program_keep_alive_s` or `warm_programs_max` 0).
    pub fn program_keep_alive(&self) -> Option<Duration> {
        (self.program_keep_alive_s > 0.0 && self.warm_programs_max > 0).then(|| Self::secs(self.program_keep_alive_s))
    }

    /// Seconds as a duration.
    pub fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s.max(0.0))
    }
}

/// Whether `addr` (`HOST:PORT`) names a loopback host.
pub fn is_loopback(addr: &str) -> bool {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).trim_matches(['[', ']']);
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_parse_unknown_keys_are_refused_and_open_tcp_needs_a_token() {
        let c: Config = toml::from_str("listen = \"127.0.0.1:9\"\n[pool]\nwhole = 2\n\"sms:16\" = 1\n").unwrap();
        assert_eq!(c.pool.get("sms:16"), Some(&1));
        assert!(toml::from_str::<Config>("lisen = 1").is_err());
        let open = Config { listen: "0.0.0.0:7011".into(), ..Config::default() };
        assert!(open.resolve().unwrap_err().to_string().contains("no token"));
        let ok = Config { listen: "0.0.0.0:7011".into(), token: "t".into(), ..Config::default() };
        assert!(ok.resolve().is_ok());
        assert!(is_loopback("[::1]:5") && is_loopback("localhost:1") && !is_loopback("10.0.0.1:1"));
    }

    #[test]
    fn tenants_come_from_the_file_and_the_file_of_tenants_and_say_who_a_client_is() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("tenants");
        std::fs::write(&f, "# the team\nbob tb\n").unwrap();
        let text = format!("listen = \"0.0.0.0:7011\"\ntenants_file = {:?}\n[tenants]\nalice = \"ta\"\n", f.display());
        let c: Config = toml::from_str(&text).unwrap();
        let c = c.resolve().expect("tenants are tokens: an open listener may serve them");
        assert_eq!(c.tenant_of("ta").as_deref(), Some("alice"));
        assert_eq!(c.tenant_of("tb").as_deref(), Some("bob"));
        assert_eq!(c.tenant_of(""), None);
        // Without tenants: the shared token, tenant "".
        let shared = Config { token: "s".into(), ..Config::default() };
        assert_eq!(shared.tenant_of("s").as_deref(), Some(""));
        assert_eq!(shared.tenant_of("x"), None);
        assert_eq!(Config::default().tenant_of("").as_deref(), Some(""));
        assert_eq!(Config::default().tenant_of("anything"), None, "no token set: none may be presented");
        // A tenant in both places, two tenants with one token, a missing file: refused, named.
        std::fs::write(&f, "alice other\n").unwrap();
        let e = toml::from_str::<Config>(&text).unwrap().resolve().unwrap_err().to_string();
        assert!(e.contains("`alice` is named both"), "{e}");
        std::fs::write(&f, "bob ta\n").unwrap();
        let e = toml::from_str::<Config>(&text).unwrap().resolve().unwrap_err().to_string();
        assert!(e.contains("same token"), "{e}");
        let gone = Config { tenants_file: t.path().join("none").display().to_string(), ..Config::default() };
        assert!(gone.resolve().unwrap_err().to_string().contains("tenants_file"));
    }

    #[test]
    fn function_keep_alive_parses_and_zero_turns_it_off() {
        let d = Config::default();
        assert_eq!((d.function_keep_alive_s, d.warm_functions_max), (300.0, 4));
        assert_eq!(d.function_keep_alive(), Some(Duration::from_secs(300)));
        let c: Config = toml::from_str("function_keep_alive_s = 2.5\nwarm_functions_max = 9\n").unwrap();
        assert_eq!(c.function_keep_alive(), Some(Duration::from_millis(2500)));
        assert_eq!(c.warm_functions_max, 9);
        let off: Config = toml::from_str("function_keep_alive_s = 0\n").unwrap();
        assert_eq!(off.function_keep_alive(), None);
        assert_eq!(d.program_keep_alive(), None, "warm constants are off by default");
        let p: Config = toml::from_str("program_keep_alive_s = 60\nwarm_programs_max = 3\n").unwrap();
        assert_eq!((p.program_keep_alive(), p.warm_programs_max), (Some(Duration::from_secs(60)), 3));
        let p0: Config = toml::from_str("program_keep_alive_s = 60\nwarm_programs_max = 0\n").unwrap();
        assert_eq!(p0.program_keep_alive(), None);
        assert_eq!(d.warm_memory_fraction, 0.5);
        for bad in ["0", "1.5", "nan"] {
            let c: Config = toml::from_str(&format!("warm_memory_fraction = {bad}\n")).unwrap();
            assert!(c.resolve().unwrap_err().to_string().contains("warm_memory_fraction"), "{bad}");
        }
        let pn: Config = toml::from_str("program_keep_alive_s = -2\n").unwrap();
        assert!(pn.resolve().unwrap_err().to_string().contains("program_keep_alive_s"));
        let capped: Config = toml::from_str("warm_functions_max = 0\n").unwrap();
        assert_eq!(capped.function_keep_alive(), None);
        assert!(toml::from_str::<Config>("warm_functions_max = -1\n").is_err());
        let neg: Config = toml::from_str("function_keep_alive_s = -1.0\n").unwrap();
        assert!(neg.resolve().unwrap_err().to_string().contains("function_keep_alive_s"));
    }

    #[test]
    fn the_priority_policy_is_preempt_by_default_and_named_in_the_file() {
        assert_eq!(Config::default().priority_policy, PriorityPolicy::Preempt);
        assert_eq!(Config::default().best_effort_inflight, 4);
        let c: Config = toml::from_str("best_effort_inflight = 0\n").unwrap();
        assert_eq!(c.best_effort_inflight, 0);
        assert!(!Config::default().measure_preemption);
        assert_eq!(Config::default().best_effort_budget_us, 0);
        let c: Config = toml::from_str("best_effort_budget_us = 200\n").unwrap();
        assert_eq!(c.best_effort_budget_us, 200);
        let c: Config = toml::from_str("measure_preemption = true\n").unwrap();
        assert!(c.measure_preemption);
        let c: Config = toml::from_str("priority_policy = \"gate\"\n").unwrap();
        assert_eq!(c.priority_policy, PriorityPolicy::Gate);
        assert!(toml::from_str::<Config>("priority_policy = \"sometimes\"\n").is_err());
        assert_eq!(PriorityPolicy::parse("off"), Some(PriorityPolicy::Off));
    }

    #[test]
    fn cached_execution_is_auto_and_holds_only_where_no_gpu_waits_by_default() {
        use gpuless_traces::protocol::piece::policy::Hold;
        let d = Config::default();
        assert_eq!((d.cached_execution, d.cached_hold), (CachedExecution::Auto, Hold::Busy));
        assert!(d.cached_execution.for_session(true) && !d.cached_execution.for_session(false));
        let c: Config = toml::from_str("cached_execution = true\ncached_hold = \"always\"\n").unwrap();
        assert_eq!((c.cached_execution, c.cached_hold), (CachedExecution::On, Hold::Always));
        let off: Config = toml::from_str("cached_execution = \"off\"\n").unwrap();
        assert!(!off.cached_execution.for_session(true));
        let on: Config = toml::from_str("cached_execution = \"on\"\n").unwrap();
        assert!(on.cached_execution.for_session(false));
        let e = toml::from_str::<Config>("cached_execution = \"sometimes\"\n").unwrap_err().to_string();
        assert!(e.contains("expected \"auto\", \"on\" or \"off\""), "{e}");
        assert!(toml::from_str::<Config>("cached_hold = \"sometimes\"\n").is_err());
    }

    #[test]
    fn the_metrics_token_comes_from_its_file_and_an_open_endpoint_without_one_is_warned_of() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("metrics-token");
        std::fs::write(&f, "  s3cret \nsecond line\n").unwrap();
        let c: Config =
            toml::from_str(&format!("metrics = \"0.0.0.0:7012\"\nmetrics_token_file = {:?}\n", f.display())).unwrap();
        let c = c.resolve().unwrap();
        assert_eq!(c.metrics_token, "s3cret");
        assert_eq!(c.metrics_warning(), None);
        assert!(toml::from_str::<Config>("metrics_token = \"x\"\n").is_err(), "only a file, never inline");
        std::fs::write(&f, "\nlater\n").unwrap();
        let empty = Config { metrics_token_file: f.display().to_string(), ..Config::default() };
        assert!(empty.resolve().unwrap_err().to_string().contains("first line is empty"));
        let gone = Config { metrics_token_file: t.path().join("none").display().to_string(), ..Config::default() };
        assert!(gone.resolve().unwrap_err().to_string().contains("metrics_token_file"));
        let open = Config { metrics: "0.0.0.0:7012".into(), ..Config::default() };
        assert!(open.metrics_warning().is_some_and(|w| w.contains("metrics_token_file")));
        for quiet in ["", "127.0.0.1:7012", "[::1]:7012", "localhost:0"] {
            assert_eq!(Config { metrics: quiet.into(), ..Config::default() }.metrics_warning(), None, "{quiet:?}");
        }
    }

    #[test]
    fn tls_needs_both_a_certificate_and_a_key() {
        let c: Config = toml::from_str("tls_cert = \"/etc/c.pem\"\n").unwrap();
        let e = c.resolve().unwrap_err().to_string();
        assert!(e.contains("`tls_cert` is set but `tls_key` is not"), "{e}");
        let c = Config { tls_key: "/etc/k.pem".into(), ..Config::default() };
        let e = c.resolve().unwrap_err().to_string();
        assert!(e.contains("`tls_key` is set but `tls_cert` is not"), "{e}");
        let both = Config { tls_cert: "c.pem".into(), tls_key: "k.pem".into(), ..Config::default() };
        assert!(both.resolve().is_ok());
        // TLS is no substitute for a token on an open listener.
        let open =
            Config { listen: "0.0.0.0:1".into(), tls_cert: "c".into(), tls_key: "k".into(), ..Config::default() };
        assert!(open.resolve().unwrap_err().to_string().contains("no token"));
    }
}
