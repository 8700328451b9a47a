//! The Prometheus metrics of `gpuless serve` and their HTTP endpoint (`GET /metrics`).

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// A label set with one label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Kind {
    /// The label's value.
    pub kind: String,
}

/// Labels of a live session.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SessionLabels {
    /// Session id.
    pub session: String,
    /// Priority class.
    pub priority: String,
    /// Partition spec.
    pub partition: String,
}

/// Labels of function invocations.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FunctionLabels {
    /// The function's deployed name.
    pub function: String,
    /// `graph` or `eager`.
    pub mode: String,
}

/// Labels of a function, by name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FunctionName {
    /// The function's deployed name.
    pub function: String,
}

/// Labels of a function session's start.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FunctionStart {
    /// The function's deployed name, as the session announced it.
    pub function: String,
    /// `warm`: an executor kept with the function set up served it; `cold`: one that had to
    /// read and set the function up.
    pub start: String,
}

/// Labels of cached-trace execution: how a piece of a session's records ran.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PieceRun {
    /// `graph` (a captured graph launched again), `capture` (captured this time, the graph
    /// launched once), `eager` (record by record).
    pub run: String,
}

/// Every metric the server exports.
pub struct Metrics {
    registry: Registry,
    /// Live sessions by priority class.
    pub sessions: Family<Kind, Gauge>,
    /// Sessions ended, by outcome (`closed`, `error`, `refused-auth`, ...).
    pub sessions_total: Family<Kind, Counter>,
    /// SMs held by soft partitions.
    pub sms_in_use: Gauge,
    /// Sessions waiting for a partition.
    pub queue: Gauge,
    /// Executor processes by state (`warm`, `busy`, `starting`).
    pub executors: Family<Kind, Gauge>,
    /// Executor processes that died without ending their session.
    pub executor_crashes: Counter,
    /// Bytes in the cache, by tier.
    pub cache_bytes: Family<Kind, Gauge>,
    /// Cache lookups by result (`hit`, `miss`).
    pub cache_lookups: Family<Kind, Counter>,
    /// Blob bytes clients uploaded.
    pub upload_bytes: Counter,
    /// Peak device memory of each live session's executor (NVML, where available), and of
    /// ended sessions as reported by their executor.
    pub session_memory: Family<SessionLabels, Gauge>,
    /// Executor time per segment, seconds.
    pub segment_seconds: Histogram,
    /// From a synchronizing segment's arrival to its answer leaving, seconds.
    pub answer_seconds: Histogram,
    /// How long best-effort segments were held for latency-critical work ([`super::gate`]),
    /// seconds (only segments that were held).
    pub best_effort_hold_seconds: Histogram,
    /// Sessions started over TLS (the server proxies them).
    pub tls_sessions: Counter,
    /// TLS handshakes that failed (`failed`) or did not finish in time (`timeout`).
    pub tls_handshake_failures: Family<Kind, Counter>,
    /// Function invocations by function and mode.
    pub function_invocations: Family<FunctionLabels, Counter>,
    /// Executors kept warm with a function set up, per function.
    pub warm_functions: Family<FunctionName, Gauge>,
    /// Sessions of a function, by whether a warm executor served them.
    pub function_sessions: Family<FunctionStart, Counter>,
    /// Pieces of sessions' records (cached-trace execution), by how they ran.
    pub piece_runs: Family<PieceRun, Counter>,
    /// Records in those pieces, by how they ran.
    pub piece_records: Family<PieceRun, Counter>,
    /// Executors kept with a program's uploads resident (warm constants).
    pub warm_programs: Gauge,
    /// Bytes of uploads those executors keep resident.
    pub warm_resident_bytes: Gauge,
    /// Sessions of programs kept warm, by start (`warm`: an executor with the program's
    /// uploads resident served it; `cold`).
    pub program_sessions: Family<Kind, Counter>,
    /// Upload bytes sessions did not copy because they were resident.
    pub resident_skipped_bytes: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// All metrics, registered.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("gpuless");
        let m = Metrics {
            sessions: Family::default(),
            sessions_total: Family::default(),
            sms_in_use: Gauge::default(),
            queue: Gauge::default(),
            executors: Family::default(),
            executor_crashes: Counter::default(),
            cache_bytes: Family::default(),
            cache_lookups: Family::default(),
            upload_bytes: Counter::default(),
            session_memory: Family::default(),
            segment_seconds: Histogram::new(exponential_buckets(1e-6, 2.0, 24)),
            answer_seconds: Histogram::new(exponential_buckets(1e-6, 2.0, 24)),
            best_effort_hold_seconds: Histogram::new(exponential_buckets(1e-6, 2.0, 24)),
            tls_sessions: Counter::default(),
            tls_handshake_failures: Family::default(),
            function_invocations: Family::default(),
            warm_functions: Family::default(),
            function_sessions: Family::default(),
            piece_runs: Family::default(),
            piece_records: Family::default(),
            warm_programs: Gauge::default(),
            warm_resident_bytes: Gauge::default(),
            program_sessions: Family::default(),
            resident_skipped_bytes: Counter::default(),
            registry: Registry::default(),
        };
        registry.register("sessions", "Live sessions by priority class", m.sessions.clone());
        registry.register("sessions_ended", "Sessions ended or refused, by outcome", m.sessions_total.clone());
        registry.register("partition_sms_in_use", "SMs held by soft partitions", m.sms_in_use.clone());
        registry.register("queue_waiting", "Sessions waiting for a partition", m.queue.clone());
        registry.register("executors", "Executor processes by state", m.executors.clone());
        registry.register("executor_crashes", "Executors that died inside a session", m.executor_crashes.clone());
        registry.register("cache_bytes", "Bytes in the blob cache by tier", m.cache_bytes.clone());
        registry.register("cache_lookups", "Blob cache lookups by result", m.cache_lookups.clone());
        registry.register("upload_bytes", "Blob bytes uploaded by clients", m.upload_bytes.clone());
        registry.register("session_gpu_memory_bytes", "Device memory per session", m.session_memory.clone());
        registry.register("segment_seconds", "Executor time per segment", m.segment_seconds.clone());
        registry.register("answer_seconds", "Synchronizing segment arrival to answer", m.answer_seconds.clone());
        registry.register(
            "best_effort_hold_seconds",
            "Best-effort segments held for latency-critical work",
            m.best_effort_hold_seconds.clone(),
        );
        registry.register("tls_sessions", "Sessions started over TLS", m.tls_sessions.clone());
        registry.register("tls_handshake_failures", "Failed TLS handshakes by kind", m.tls_handshake_failures.clone());
        registry.register(
            "function_invocations",
            "Function invocations by function and mode (graph, eager)",
            m.function_invocations.clone(),
        );
        registry.register(
            "warm_functions",
            "Executors kept warm with a function set up, by function",
            m.warm_functions.clone(),
        );
        registry.register(
            "function_sessions",
            "Function sessions by function and start (warm: the function kept set up; cold)",
            m.function_sessions.clone(),
        );
        registry.register(
            "piece_runs",
            "Pieces of sessions' launches, copies and sets by how they ran (graph, capture, eager)",
            m.piece_runs.clone(),
        );
        registry.register("piece_records", "Records in pieces by how they ran", m.piece_records.clone());
        registry.register(
            "warm_programs",
            "Executors kept with a program's uploads resident on the GPU (warm constants)",
            m.warm_programs.clone(),
        );
        registry.register(
            "warm_resident_bytes",
            "Bytes of uploads kept resident for the next session of their program",
            m.warm_resident_bytes.clone(),
        );
        registry.register(
            "program_sessions",
            "Sessions of programs kept warm by start (warm: their uploads resident; cold)",
            m.program_sessions.clone(),
        );
        registry.register(
            "resident_skipped_bytes",
            "Upload bytes not copied because the last session of the program left them resident",
            m.resident_skipped_bytes.clone(),
        );
        Metrics { registry, ..m }
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = encode(&mut s, &self.registry);
        s
    }
}

/// A piece-run label.
pub fn piece_run(run: &str) -> PieceRun {
    PieceRun { run: run.to_string() }
}

/// One label value.
pub fn kind(k: &str) -> Kind {
    Kind { kind: k.to_string() }
}
