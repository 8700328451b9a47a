//! `gpuless run --remote ADDR -- CMD ARGS...`: runs an unmodified CUDA program on this machine,
//! with its driver calls executed by a `gpuless serve` at ADDR (client mode, issue 19).
//!
//! The client is the recorder library (`libgpuless_recorder.so`, [`record::recorder_path`]),
//! loaded as the program's `libcuda.so.1`: a private directory holds `libcuda.so.1` (and
//! `libcuda.so`) as links to it and goes first on `LD_LIBRARY_PATH`, so a program linked with
//! `-lcuda` and one that `dlopen`s the driver (cudart) both get it; it is preloaded as well
//! (`LD_PRELOAD`), so `dlsym` lookups of driver symbols reach it too. The same directory holds
//! `libnvidia-ml.so.1` and `libnvidia-ml.so`: the library answers NVML for the session's device
//! (PyTorch and `pynvml` load it by those names). What the library is told,
//! through its environment (the contract between this command and the library):
//!
//! | variable | value |
//! |---|---|
//! | `GPULESS_REMOTE` | the endpoint as given (`unix:PATH`, `HOST:PORT`, `tcp://HOST:PORT`, `tls://HOST:PORT`), or several separated by commas; its presence turns client mode on |
//! | `GPULESS_TLS_CA` | `--tls-ca` as an absolute path, else inherited (may be absent): the PEM file of the CAs a `tls://` server's certificate is checked against |
//! | `GPULESS_TOKEN` | `--token`, else inherited (may be absent) |
//! | `GPULESS_REMOTE_PARTITION` | `--mig` (a MIG profile, `sms:N`, `whole`); `whole` without it |
//! | `GPULESS_REMOTE_PRIORITY` | `best-effort` with `--best-effort`, else absent (latency-critical) |
//! | `GPULESS_REMOTE_STATS` | a file in the private directory: the library writes one JSON object there at exit |
//! | `GPULESS_TRACE` | removed (no recording), except for `gpuless record --remote`: the trace to write while running remotely |
//! | `TRITON_LIBCUDA_PATH` | the private directory, unless set: Triton links its kernel launcher against the `libcuda.so` there |
//!
//! The statistics object has the fields `endpoint`, `session`, `executor_pid`, `device`,
//! `calls`, `sent`, `local`, `round_trips`, `segments`, `bytes_up`, `bytes_down`, `blob_bytes`,
//! `blob_hits`, `blob_misses`, `waits`, `waits_by_call` (the functions that waited for an
//! answer, with counts), `memo_hits` (server answers to stable queries given again from memory),
//! `server_exec_us` (the executor's time executing the
//! session's records, from its answers), `pieces_graph`, `pieces_captured`, `pieces_eager` and
//! `records_graph` (the server's cached-trace execution: pieces of the session's work launched
//! as graphs captured before, captured this time, run record by record; records the graph
//! launches ran — all 0 where the server does not run it), `pieces_by_reference` and
//! `records_by_reference` (pieces this client sent as a key instead of their records), `call_us` (time the program spent in driver calls)
//! and `wait_us` (the part of it waiting for answers after a segment was written), `failed` (why the session failed, or null) and
//! `failure_said` (the library already said so on stderr; this command does not repeat it). A
//! session that could not connect leaves `endpoint`, `calls`, `failed` and `failure_said`. A
//! session across several servers gives the first server's object with the counts summed, the
//! endpoints of the servers that took it in `endpoint`, and each server's object in `servers`. This
//! command prints them to stderr (`--stats` in words, `--json` as one line; stdout is the
//! program's), says when the session failed, and exits with the program's own status.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context};
use serde_json::Value;

use crate::record;

/// What `gpuless run` was asked for besides the command.
#[derive(Debug, Clone, Default)]
pub struct RunArgs {
    /// The server's endpoint (`--remote`).
    pub remote: String,
    /// `--tls-ca`: the CA file for a `tls://` server (else the inherited `GPULESS_TLS_CA`).
    pub tls_ca: Option<PathBuf>,
    /// The partition to ask for (`--mig`): a MIG profile, `sms:N` or `whole`.
    pub partition: Option<String>,
    /// `--gpu`: the server's GPUs to ask for (the program's devices 0.., in order).
    pub gpu: Vec<u32>,
    /// `--gpus`: how many GPUs the program sees.
    pub gpus: Option<u32>,
    /// `--token` (else the inherited `GPULESS_TOKEN`).
    pub token: Option<String>,
    /// Ask for the best-effort priority class.
    pub best_effort: bool,
    /// Print the session's statistics in words at exit.
    pub stats: bool,
    /// Print the session's statistics as one JSON line at exit.
    pub json: bool,
    /// `gpuless record --remote`: also record the program's calls into this trace.
    pub trace: Option<PathBuf>,
    /// With a trace: store device-to-host results in full.
    pub capture_outputs: bool,
}

/// A private directory under the system's temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> anyhow::Result<TempDir> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::path::absolute(std::env::temp_dir())?;
        let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        for attempt in 0..100u32 {
            let path = base.join(format!("gpuless-run-{}-{stamp:x}-{attempt}", std::process::id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(TempDir(path)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e).with_context(|| format!("cannot create {}", path.display())),
            }
        }
        bail!("cannot create a private directory in {}", base.display())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `first` before the current value of the path list `var`, separated by `:`.
fn prepend(var: &str, first: &Path) -> OsString {
    let mut s = first.as_os_str().to_os_string();
    if let Some(rest) = std::env::var_os(var).filter(|v| !v.is_empty()) {
        s.push(":");
        s.push(rest);
    }
    s
}

/// Checks the endpoints' form: one, or several separated by commas (a session across several
/// servers; the library parses them again, the same way).
fn check_endpoints(list: &str) -> anyhow::Result<()> {
    let all: Vec<&str> = list.split(',').map(str::trim).filter(|e| !e.is_empty()).collect();
    if all.is_empty() {
        bail!("--remote {list:?}: no endpoint");
    }
    all.into_iter().try_for_each(check_endpoint)
}

/// Checks one endpoint's form.
fn check_endpoint(addr: &str) -> anyhow::Result<()> {
    let hint = "expected HOST:PORT, tcp://HOST:PORT, tls://HOST:PORT or unix:PATH";
    if let Some(path) = addr.strip_prefix("unix:") {
        if path.is_empty() {
            bail!("--remote {addr}: no socket path ({hint})");
        }
        return Ok(());
    }
    let hostport = addr.strip_prefix("tcp://").or_else(|| addr.strip_prefix("tls://")).unwrap_or(addr);
    match hostport.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(()),
        _ => bail!("--remote {addr}: {hint}"),
    }
}

/// Runs `cmd` as a client of the server at `args.remote`; returns the program's exit status.
pub fn run(args: &RunArgs, cmd: &[String]) -> anyhow::Result<ExitCode> {
    let Some((program, rest)) = cmd.split_first() else {
        bail!("no command given: gpuless run --remote ADDR -- CMD ARGS...")
    };
    check_endpoints(&args.remote)?;
    if args.remote.contains(',') && !args.gpu.is_empty() {
        bail!("--gpu names GPUs of one server; with several servers give --gpus N (N from each)");
    }
    // The library reads the CA file when the program first calls CUDA, maybe elsewhere.
    let tls_ca = match &args.tls_ca {
        Some(f) if args.remote.split(',').any(|e| e.trim().starts_with("tls://")) => Some(std::path::absolute(f)?),
        Some(_) => bail!("--tls-ca applies to TLS servers: give the address as tls://HOST:PORT"),
        None => None,
    };
    let lib = record::recorder_path()?.canonicalize().context("locating the recorder library")?;
    let dir = TempDir::new()?;
    for name in ["libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1", "libnvidia-ml.so"] {
        let link = dir.0.join(name);
        std::os::unix::fs::symlink(&lib, &link)
            .with_context(|| format!("cannot link {} to {}", link.display(), lib.display()))?;
    }
    let stats_path = dir.0.join("stats.json");
    let mut child = Command::new(program);
    child
        .args(rest)
        .env("LD_LIBRARY_PATH", prepend("LD_LIBRARY_PATH", &dir.0))
        .env("LD_PRELOAD", prepend("LD_PRELOAD", &lib))
        .env("GPULESS_REMOTE", &args.remote)
        .env("GPULESS_REMOTE_PARTITION", args.partition.as_deref().unwrap_or("whole"))
        .env("GPULESS_REMOTE_STATS", &stats_path)
        .env_remove("GPULESS_TRACE");
    // Triton links its launcher against the driver it finds (`TRITON_LIBCUDA_PATH`, else
    // `ldconfig`'s, which a machine without a GPU lacks): it finds the client.
    if std::env::var_os("TRITON_LIBCUDA_PATH").is_none() {
        child.env("TRITON_LIBCUDA_PATH", &dir.0);
    }
    if args.gpu.is_empty() {
        child.env_remove("GPULESS_REMOTE_GPU");
    } else {
        let list: Vec<String> = args.gpu.iter().map(u32::to_string).collect();
        child.env("GPULESS_REMOTE_GPU", list.join(","));
    }
    match args.gpus {
        Some(n) => child.env("GPULESS_REMOTE_GPUS", n.to_string()),
        None => child.env_remove("GPULESS_REMOTE_GPUS"),
    };
    if let Some(t) = &args.trace {
        child.env("GPULESS_TRACE", t);
        if args.capture_outputs {
            child.env("GPULESS_CAPTURE_OUTPUTS", "1");
        }
    }
    if let Some(t) = &args.token {
        child.env("GPULESS_TOKEN", t);
    }
    if let Some(ca) = &tls_ca {
        child.env("GPULESS_TLS_CA", ca);
    }
    if args.best_effort {
        child.env("GPULESS_REMOTE_PRIORITY", "best-effort");
    } else {
        child.env_remove("GPULESS_REMOTE_PRIORITY");
    }
    let mut running = child.spawn().with_context(|| format!("cannot start {program}"))?;
    record::forward_signals_to(&running);
    let status = running.wait().with_context(|| format!("waiting for {program}"))?;
    match std::fs::read(&stats_path) {
        Ok(bytes) => match serde_json::from_slice::<Value>(&bytes) {
            Ok(v) if v.is_object() => report(&v, args),
            Ok(_) | Err(_) => eprintln!(
                "gpuless: the client library's statistics for the session at {} are not a JSON object ({} bytes)",
                args.remote,
                bytes.len()
            ),
        },
        Err(_) if args.stats || args.json || !status.success() => eprintln!(
            "gpuless: no statistics from a session at {}: {program} made no CUDA driver call, or ended \
             before the client library wrote them ({status})",
            args.remote
        ),
        Err(_) => {}
    }
    Ok(record::exit_code(status))
}

/// Prints what `args` asks for from the statistics `v`, and the failure, if the session failed.
fn report(v: &Value, args: &RunArgs) {
    if args.json {
        eprintln!("{v}");
    }
    if args.stats {
        for line in summary(v) {
            eprintln!("gpuless: {line}");
        }
    }
    // Said once: the library prints a failure when it happens (`failure_said`).
    let said = v.get("failure_said").and_then(Value::as_bool).unwrap_or(false);
    if let (Some(why), false) = (failure(v), said) {
        let at = v.get("endpoint").and_then(Value::as_str).unwrap_or(&args.remote);
        eprintln!("gpuless: the session at {at} failed: {why}");
    }
}

/// Why the session failed, if `failed` says it did.
fn failure(v: &Value) -> Option<String> {
    match v.get("failed") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => Some(other.to_string()),
    }
}

/// The statistics in words, one line each (without the `gpuless: ` prefix).
fn summary(v: &Value) -> Vec<String> {
    let num = |k: &str| v.get(k).and_then(Value::as_u64);
    let show = |k: &str| num(k).map_or_else(|| "?".to_string(), |n| n.to_string());
    let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("?").to_string();
    let share = match (num("round_trips"), num("calls")) {
        (Some(r), Some(c)) if c > 0 => format!(" ({:.1}% of calls)", r as f64 * 100.0 / c as f64),
        _ => String::new(),
    };
    vec![
        format!("session {} at {}, executor pid {}", show("session"), text("endpoint"), show("executor_pid")),
        format!("device {}", text("device")),
        format!("calls {}: sent {}, answered locally {}", show("calls"), show("sent"), show("local")),
        format!("round trips {}{share}, waits {}, segments {}", show("round_trips"), show("waits"), show("segments")),
        format!(
            "time in calls {} us, of which waiting for answers {} us; server execution {} us",
            show("call_us"),
            show("wait_us"),
            show("server_exec_us")
        ),
        format!("bytes up {}, down {}", show("bytes_up"), show("bytes_down")),
        format!("blob bytes {}, hits {}, misses {}", show("blob_bytes"), show("blob_hits"), show("blob_misses")),
        format!("waits by call: {}; server answers remembered: {}", waits_by_call(v), show("memo_hits")),
        format!(
            "cached pieces on the server: {} graph launches ({} records), {} captured, {} eager; {} sent by reference ({} records)",
            show("pieces_graph"),
            show("records_graph"),
            show("pieces_captured"),
            show("pieces_eager"),
            show("pieces_by_reference"),
            show("records_by_reference")
        ),
        format!("failed: {}", failure(v).unwrap_or_else(|| "no".into())),
    ]
}

/// `waits_by_call` as `name n, name n` (most first), or `?`.
fn waits_by_call(v: &Value) -> String {
    let Some(m) = v.get("waits_by_call").and_then(Value::as_object) else { return "?".into() };
    let mut w: Vec<(&String, u64)> = m.iter().map(|(k, n)| (k, n.as_u64().unwrap_or(0))).collect();
    w.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    if w.is_empty() {
        return "none".into();
    }
    w.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        for ok in ["127.0.0.1:7011", "tcp://gpu-host:7011", "unix:/run/gpuless.sock", "[::1]:7011", "tls://h:1"] {
            assert!(check_endpoint(ok).is_ok(), "{ok}");
        }
        for bad in ["", "gpu-host", ":7011", "h:port", "unix:", "tcp://h:99999"] {
            assert!(check_endpoint(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn summary_in_words() {
        let v = serde_json::json!({
            "endpoint": "unix:/s", "session": 4, "executor_pid": 99, "device": "Fake GPU",
            "calls": 40, "sent": 25, "local": 15, "round_trips": 9, "segments": 9, "bytes_up": 1000,
            "bytes_down": 3000, "blob_bytes": 1024, "blob_hits": 0, "blob_misses": 1, "waits": 8,
            "server_exec_us": 1234, "failed": null,
            "waits_by_call": {"cuStreamSynchronize": 2, "cuMemcpyDtoH": 6}, "memo_hits": 3,
            "pieces_graph": 5, "records_graph": 160, "pieces_captured": 1, "pieces_eager": 2,
            "pieces_by_reference": 4, "records_by_reference": 128
        });
        let s = summary(&v);
        assert_eq!(s[0], "session 4 at unix:/s, executor pid 99");
        assert_eq!(s[2], "calls 40: sent 25, answered locally 15");
        assert_eq!(s[3], "round trips 9 (22.5% of calls), waits 8, segments 9");
        assert_eq!(s[4], "time in calls ? us, of which waiting for answers ? us; server execution 1234 us");
        assert_eq!(s[7], "waits by call: cuMemcpyDtoH 6, cuStreamSynchronize 2; server answers remembered: 3");
        assert_eq!(
            s[8],
            "cached pieces on the server: 5 graph launches (160 records), 1 captured, 2 eager; 4 sent by reference (128 records)"
        );
        assert_eq!(s[9], "failed: no");
        let f = serde_json::json!({"calls": 0, "failed": "connection refused"});
        assert_eq!(failure(&f).as_deref(), Some("connection refused"));
        assert_eq!(summary(&f)[3], "round trips ?, waits ?, segments ?");
    }
}
