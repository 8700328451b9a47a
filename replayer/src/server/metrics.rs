//! The Prometheus metrics of `gpuless serve` and their HTTP endpoint: `GET /metrics`, and the
//! probes of an orchestrator (docs/DEPLOY.md): `GET /healthz` (the process serves) and
//! `GET /readyz` (it accepts sessions, [`Readiness`]). With `metrics_token_file` set, `/metrics`
//! answers only a request that carries the token (`Authorization: Bearer TOKEN`); the probes
//! stay open.

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
    /// The GPU it runs on (the server's number of it).
    pub gpu: String,
}

/// Labels of one of the server's GPUs.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GpuLabel {
    /// The GPU's number (NVML's index where NVML knows it).
    pub gpu: String,
}

/// Labels of a tenant's sessions.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantName {
    /// The tenant's name (`""`: the shared token's clients).
    pub tenant: String,
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

/// Declares [`Metrics`]: each metric's field (its doc comment, type and initial value) and the
/// name and help text it is registered and exported under (`gpuless_` + name), in one place.
macro_rules! metrics {
    ($($(#[doc = $doc:literal])+ $field:ident: $ty:ty = $init:expr => $name:literal, $help:literal;)+) => {
        /// Every metric the server exports.
        pub struct Metrics {
            registry: Registry,
            $($(#[doc = $doc])+ pub $field: $ty,)+
        }

        impl Metrics {
            /// All metrics, registered.
            pub fn new() -> Metrics {
                let mut registry = Registry::with_prefix("gpuless");
                $(
                    let $field: $ty = $init;
                    registry.register($name, $help, $field.clone());
                )+
                Metrics { registry, $($field,)+ }
            }
        }
    };
}

/// The buckets of a histogram of seconds: 1 µs to about 8 s.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(1e-6, 2.0, 24))
}

/// Buckets of 1, 2 and 5 per decade from 1 µs to 5 s: a latency target such as 100 µs is a
/// bucket's bound.
fn fine_seconds() -> Histogram {
    let decades = (0..7).map(|d| 1e-6 * 10f64.powi(d));
    Histogram::new(decades.flat_map(|b| [b, 2.0 * b, 5.0 * b]))
}

metrics! {
    /// Live sessions by priority class.
    sessions: Family<Kind, Gauge> = Family::default() => "sessions", "Live sessions by priority class";
    /// Sessions started, by tenant ([`super::tenants`]).
    tenant_sessions: Family<TenantName, Counter> = Family::default() => "tenant_sessions", "Sessions started by tenant";
    /// Sessions ended, by outcome (`closed`, `error`, `refused-auth`, ...).
    sessions_total: Family<Kind, Counter> = Family::default()
        => "sessions_ended", "Sessions ended or refused, by outcome";
    /// SMs held by soft partitions.
    sms_in_use: Gauge = Gauge::default() => "partition_sms_in_use", "SMs held by soft partitions";
    /// Live sessions on each GPU.
    gpu_sessions: Family<GpuLabel, Gauge> = Family::default() => "gpu_sessions", "Live sessions by GPU";
    /// 1 where the GPU's executors are clients of an operator's MPS server (what the last
    /// executor started there said).
    gpu_mps: Family<GpuLabel, Gauge> = Family::default() => "gpu_mps", "Whether MPS serves the GPU's executors";
    /// SMs held by soft partitions on each GPU.
    gpu_sms_in_use: Family<GpuLabel, Gauge> = Family::default()
        => "gpu_partition_sms_in_use", "SMs held by soft partitions, by GPU";
    /// Sessions waiting for a partition.
    queue: Gauge = Gauge::default() => "queue_waiting", "Sessions waiting for a partition";
    /// Executor processes by state (`warm`, `busy`, `starting`).
    executors: Family<Kind, Gauge> = Family::default() => "executors", "Executor processes by state";
    /// Executor processes that died without ending their session.
    executor_crashes: Counter = Counter::default() => "executor_crashes", "Executors that died inside a session";
    /// Bytes in the cache, by tier.
    cache_bytes: Family<Kind, Gauge> = Family::default() => "cache_bytes", "Bytes in the blob cache by tier";
    /// Cache lookups by result (`hit`, `miss`).
    cache_lookups: Family<Kind, Counter> = Family::default() => "cache_lookups", "Blob cache lookups by result";
    /// Blob bytes clients uploaded.
    upload_bytes: Counter = Counter::default() => "upload_bytes", "Blob bytes uploaded by clients";
    /// Peak device memory of each live session's executor (NVML, where available), and of
    /// ended sessions as reported by their executor.
    session_memory: Family<SessionLabels, Gauge> = Family::default()
        => "session_gpu_memory_bytes", "Device memory per session";
    /// Executor time per segment, seconds.
    segment_seconds: Histogram = seconds() => "segment_seconds", "Executor time per segment";
    /// From a synchronizing segment's arrival to its answer leaving, seconds.
    answer_seconds: Histogram = seconds() => "answer_seconds", "Synchronizing segment arrival to answer";
    /// The same by the session's priority class (`latency-critical`, `best-effort`): each
    /// class's latency while they share the GPU.
    answer_seconds_by_class: Family<Kind, Histogram, fn() -> Histogram> = Family::new_with_constructor(seconds)
        => "answer_seconds_by_class", "Synchronizing segment arrival to answer, by priority class";
    /// How long best-effort segments were held for latency-critical work ([`super::gate`]),
    /// seconds (only segments that were held).
    best_effort_hold_seconds: Histogram = seconds()
        => "best_effort_hold_seconds", "Best-effort segments held for latency-critical work";
    /// How long a best-effort session waited for its oldest kernel in flight before submitting
    /// another (`best_effort_inflight`), seconds (waits of 50 µs or more).
    best_effort_window_seconds: Histogram = seconds()
        => "best_effort_window_seconds", "Best-effort kernels held until one in flight finished";
    /// From a latency-critical segment's arrival at its executor to its first kernel's start on
    /// the GPU (GPU timestamps; `serve --measure-preemption`, docs/SCHEDULING.md), seconds.
    preemption_seconds: Histogram = fine_seconds()
        => "preemption_seconds", "Latency-critical segment arrival to its first kernel's start on the GPU";
    /// The uncertainty (±) of the clock relation those were measured with, seconds.
    preemption_clock_seconds: Histogram = fine_seconds()
        => "preemption_clock_uncertainty_seconds", "Uncertainty of the GPU-to-host clock relation of preemption stamps";
    /// Sessions started over TLS (the server proxies them).
    tls_sessions: Counter = Counter::default() => "tls_sessions", "Sessions started over TLS";
    /// TLS handshakes that failed (`failed`) or did not finish in time (`timeout`).
    tls_handshake_failures: Family<Kind, Counter> = Family::default()
        => "tls_handshake_failures", "Failed TLS handshakes by kind";
    /// Function invocations by function and mode.
    function_invocations: Family<FunctionLabels, Counter> = Family::default()
        => "function_invocations", "Function invocations by function and mode (graph, eager)";
    /// Executors kept warm with a function set up, per function.
    warm_functions: Family<FunctionName, Gauge> = Family::default()
        => "warm_functions", "Executors kept warm with a function set up, by function";
    /// Sessions of a function, by whether a warm executor served them.
    function_sessions: Family<FunctionStart, Counter> = Family::default()
        => "function_sessions", "Function sessions by function and start (warm: the function kept set up; cold)";
    /// Pieces of sessions' records (cached-trace execution), by how they ran.
    piece_runs: Family<PieceRun, Counter> = Family::default()
        => "piece_runs", "Pieces of sessions' launches, copies and sets by how they ran (graph, capture, eager)";
    /// Records in those pieces, by how they ran.
    piece_records: Family<PieceRun, Counter> = Family::default()
        => "piece_records", "Records in pieces by how they ran";
    /// Executors kept with a program's uploads resident (warm constants).
    warm_programs: Gauge = Gauge::default()
        => "warm_programs", "Executors kept with a program's uploads resident on the GPU (warm constants)";
    /// Bytes of uploads those executors keep resident.
    warm_resident_bytes: Gauge = Gauge::default()
        => "warm_resident_bytes", "Bytes of uploads kept resident for the next session of their program";
    /// Sessions of programs kept warm, by start (`warm`: an executor with the program's
    /// uploads resident served it; `cold`).
    program_sessions: Family<Kind, Counter> = Family::default()
        => "program_sessions", "Sessions of programs kept warm by start (warm: their uploads resident; cold)";
    /// Upload bytes sessions did not copy because they were resident.
    resident_skipped_bytes: Counter = Counter::default() => "resident_skipped_bytes",
        "Upload bytes not copied because the last session of the program left them resident";
    /// Requests for `GET /metrics` refused for want of the right bearer token
    /// (`metrics_token_file`).
    metrics_unauthorized: Counter = Counter::default()
        => "metrics_unauthorized", "Scrapes of /metrics refused: no or a wrong bearer token";
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
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

/// Whether the server accepts sessions, as `GET /readyz` tells an orchestrator
/// ([`Manager::readiness`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// The listeners are bound and an executor has initialized the GPU (or no warm pool is
    /// configured, so none starts before a session): sessions are accepted.
    Ready,
    /// No executor has initialized the GPU yet: the warm pool's first is starting, or could
    /// not start (each `/readyz` while so tops the pool up again).
    Starting,
    /// SIGTERM arrived: new sessions are refused while running ones finish.
    Draining,
}

/// An answer of the HTTP endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Status code and reason (`200 OK`).
    pub status: &'static str,
    /// The body's media type.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
    /// Whether the answer asks for a bearer token (`401`, `WWW-Authenticate: Bearer`).
    pub challenge: bool,
}

/// The target of a request whose first line is `request_line` (a query string cut off), or `""`
/// where it is not a `GET`.
fn target(request_line: &str) -> &str {
    let mut words = request_line.split_whitespace();
    match (words.next(), words.next()) {
        (Some("GET"), Some(t)) => t.split('?').next().unwrap_or(t),
        _ => "",
    }
}

/// The credentials of the first `Authorization: Bearer CREDENTIALS` header of an HTTP request
/// head (`request`: its request line, then its header lines, up to the blank line), or `None`.
/// The header's name and the scheme are matched whatever their case, spaces and tabs around
/// them and the credentials are skipped; a header of another scheme, an empty one or lines that
/// are no header give `None`.
pub fn bearer_token(request: &str) -> Option<&str> {
    let value = request
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_once(':'))
        .find_map(|(name, value)| name.trim().eq_ignore_ascii_case("authorization").then_some(value))?;
    let (scheme, credentials) = value.trim().split_once([' ', '\t'])?;
    let credentials = credentials.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !credentials.is_empty()).then_some(credentials)
}

/// The answer to the request `request` (its request line, then its headers): `GET /metrics` (the
/// text exposition, which `metrics` renders; with a `token`, only where the request carries it
/// as `Authorization: Bearer TOKEN`, else 401 asking for it), `GET /healthz` (200 `ok`: the
/// process serves), `GET /readyz` (200 `ready`, else 503 and why, from `readiness`); 404 for
/// anything else. A query string is ignored.
pub fn answer(
    request: &str,
    token: Option<&str>,
    readiness: impl FnOnce() -> Readiness,
    metrics: impl FnOnce() -> String,
) -> Answer {
    const TEXT: &str = "text/plain; charset=utf-8";
    let text = |status, body: &str| Answer { status, content_type: TEXT, body: body.to_string(), challenge: false };
    match target(request.lines().next().unwrap_or("")) {
        "/metrics" => match token {
            Some(want) if !bearer_token(request).is_some_and(|given| super::token_matches(given, want)) => Answer {
                challenge: true,
                ..text("401 Unauthorized", "a bearer token is required: Authorization: Bearer TOKEN\n")
            },
            _ => Answer {
                status: "200 OK",
                content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8",
                body: metrics(),
                challenge: false,
            },
        },
        "/healthz" => text("200 OK", "ok\n"),
        "/readyz" => match readiness() {
            Readiness::Ready => text("200 OK", "ready\n"),
            Readiness::Starting => {
                text("503 Service Unavailable", "starting: no executor has initialized the GPU yet\n")
            }
            Readiness::Draining => text("503 Service Unavailable", "draining: new sessions are refused\n"),
        },
        _ => text("404 Not Found", "GET /metrics, /healthz or /readyz\n"),
    }
}

/// Whether the request read so far (`head`) is complete enough to answer: its request line has
/// arrived, and where `/metrics` asks for a token (`needs_headers`) and the request line names
/// it, its headers too (up to the blank line).
pub(super) fn head_complete(head: &[u8], needs_headers: bool) -> bool {
    let Some(eol) = head.iter().position(|&b| b == b'\n') else { return false };
    if !needs_headers || target(&String::from_utf8_lossy(&head[..eol])) != "/metrics" {
        return true;
    }
    head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(line: &str, r: Readiness) -> (&'static str, String) {
        let a = answer(line, None, || r, || "gpuless_x 1\n".into());
        assert!(!a.challenge);
        (a.status, a.body)
    }

    /// (status, whether it asks for a token, body) of `request` where `/metrics` needs `s3cret`.
    fn get_with_token(request: &str) -> (&'static str, bool, String) {
        let a = answer(request, Some("s3cret"), || Readiness::Ready, || "gpuless_x 1\n".into());
        (a.status, a.challenge, a.body)
    }

    #[test]
    fn the_bearer_token_is_read_whatever_the_case_and_spaces_and_garbage_gives_none() {
        let head = |h: &str| format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{h}\r\nAccept: */*\r\n\r\n");
        for h in [
            "Authorization: Bearer s3cret",
            "authorization: bearer s3cret",
            "AUTHORIZATION:BEARER  s3cret  ",
            "Authorization :\tBearer\ts3cret\t",
            "  Authorization:   Bearer    s3cret",
        ] {
            assert_eq!(bearer_token(&head(h)), Some("s3cret"), "{h:?}");
        }
        for h in [
            "Authorization: Basic czNjcmV0",
            "Authorization: Bearer",
            "Authorization: Bearer   ",
            "Authorization: Bearers3cret",
            "Authorization:",
            "Authorization",
            "X-Authorization: Bearer s3cret",
            "Bearer s3cret",
            "",
        ] {
            assert_eq!(bearer_token(&head(h)), None, "{h:?}");
        }
        // The first header wins; the request line and the body are no headers.
        let two = "GET / HTTP/1.1\nAuthorization: Bearer a\nAuthorization: Bearer b\n\n";
        assert_eq!(bearer_token(two), Some("a"));
        assert_eq!(bearer_token("Authorization: Bearer s3cret\r\n\r\n"), None);
        assert_eq!(bearer_token("GET / HTTP/1.1\r\n\r\nAuthorization: Bearer s3cret\r\n"), None);
        // Garbage never panics.
        for g in [
            "",
            "\n",
            ":",
            "\n:\n",
            "\r\n\r\n",
            "GET\nAuthorization: Bearer \u{fffd}\u{0}é\n",
            "\n\u{fffd}:\u{fffd} \u{fffd}",
        ] {
            let _ = bearer_token(g);
            let _ = get_with_token(g);
        }
        assert_eq!(bearer_token("x\nAuthorization: Bearer é\u{fffd}\n"), Some("é\u{fffd}"));
    }

    #[test]
    fn with_a_token_metrics_needs_it_and_the_probes_stay_open() {
        let with = |auth: &str| get_with_token(&format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{auth}\r\n\r\n"));
        assert_eq!(with("Authorization: Bearer s3cret"), ("200 OK", false, "gpuless_x 1\n".into()));
        assert_eq!(with("authorization: BEARER s3cret").0, "200 OK");
        for refused in
            ["", "Authorization: Bearer s3cre", "Authorization: Bearer s3cretx", "Authorization: Basic s3cret"]
        {
            let (status, challenge, body) = with(refused);
            assert_eq!((status, challenge), ("401 Unauthorized", true), "{refused:?}");
            assert!(!body.contains("gpuless_x") && body.ends_with('\n') && body.lines().count() == 1, "{body}");
        }
        // Refused without rendering the metrics.
        let a = answer("GET /metrics HTTP/1.1\r\n\r\n", Some("t"), || Readiness::Ready, || panic!("rendered"));
        assert_eq!(a.status, "401 Unauthorized");
        assert_eq!(get_with_token("GET /healthz HTTP/1.1\r\n\r\n").0, "200 OK");
        assert_eq!(get_with_token("GET /readyz HTTP/1.1\r\n\r\n").0, "200 OK");
        assert_eq!(get_with_token("GET /nothing HTTP/1.1\r\n\r\n").0, "404 Not Found");
        assert_eq!(get_with_token("POST /metrics HTTP/1.1\r\n\r\n").0, "404 Not Found");
    }

    #[test]
    fn the_head_is_complete_at_the_request_line_unless_a_token_needs_the_headers() {
        assert!(!head_complete(b"GET /metrics HT", false));
        assert!(head_complete(b"GET /metrics HTTP/1.1\r\n", false));
        assert!(!head_complete(b"GET /metrics HTTP/1.1\r\nAuthorization: Bearer t\r\n", true));
        assert!(head_complete(b"GET /metrics HTTP/1.1\r\nAuthorization: Bearer t\r\n\r\n", true));
        assert!(head_complete(b"GET /metrics HTTP/1.1\nAuthorization: Bearer t\n\n", true));
        assert!(head_complete(b"GET /healthz HTTP/1.1\r\n", true), "the probes need no headers");
        assert!(head_complete(b"\xff\xfe\n", true));
    }

    #[test]
    fn the_endpoint_answers_metrics_health_and_readiness() {
        let ready = Readiness::Ready;
        assert_eq!(get("GET /metrics HTTP/1.1", ready), ("200 OK", "gpuless_x 1\n".into()));
        assert_eq!(get("GET /metrics?x=1 HTTP/1.1", ready).0, "200 OK");
        assert_eq!(get("GET /healthz HTTP/1.1", Readiness::Draining), ("200 OK", "ok\n".into()));
        assert_eq!(get("GET /readyz HTTP/1.1", ready), ("200 OK", "ready\n".into()));
        let (s, b) = get("GET /readyz HTTP/1.1", Readiness::Draining);
        assert!(s.starts_with("503") && b.starts_with("draining"), "{s} {b}");
        let (s, b) = get("GET /readyz HTTP/1.1", Readiness::Starting);
        assert!(s.starts_with("503") && b.starts_with("starting"), "{s} {b}");
        for other in ["GET /metricsx HTTP/1.1", "POST /metrics HTTP/1.1", "GET / HTTP/1.1", "", "GET"] {
            assert_eq!(get(other, ready).0, "404 Not Found", "{other:?}");
        }
    }
}
