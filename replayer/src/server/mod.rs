//! `gpuless serve`: a server that owns the machine's GPUs and executes work for remote
//! clients (docs/PROTOCOL.md, docs/ARCHITECTURE.md "Data flow: gpuless serve").
//!
//! - [`config`]: the TOML configuration.
//! - [`manager`]: admission to partitions, the executor processes (warm pool, one per
//!   session), the cache index.
//! - [`confine`]: executors confined for untrusted tenants (user, namespaces, file-system
//!   view, seccomp).
//! - [`control`]: the server ↔ executor channel, which also hands the client's connection
//!   to the executor, so a session's data never passes through the server.
//! - [`executor`]: the executor process's loop on the replayer's streaming engine.
//! - [`cache`]: content-addressed blobs in a memory and a disk tier.
//! - [`functions`]: deployed functions (a registry beside the cache) and an executor's
//!   `Deploy` and `Invoke`.
//! - [`gate`]: a GPU's priority gate: best-effort sessions' segments wait for
//!   latency-critical ones.
//! - [`gpus`]: the GPUs the server owns (each with its executors, pool, partitions and gate)
//!   and what placement asks of them.
//! - [`metrics`]: Prometheus metrics and their endpoint, which also answers health and
//!   readiness probes (`/healthz`, `/readyz`).
//! - [`tls`]: TLS on the TCP listener; TLS sessions are proxied to their executor.
//!
//! The one entry is [`serve`].

pub mod cache;
pub mod config;
pub mod confine;
pub mod control;
pub mod executor;
pub mod functions;
pub mod gate;
pub mod gpus;
mod http;
pub mod manager;
pub mod metrics;
pub mod pieces;
pub mod tenants;
mod timeline;
pub mod tls;
pub mod warm;

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use gpuless_traces::protocol::message::{code, kind};
use gpuless_traces::protocol::{Message, FRAME_HEADER_LEN, PROTOCOL_VERSION};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};

pub use config::Config;
use control::Control;
use manager::Manager;
use metrics::kind as label;

/// Errors that stop the server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A listener could not be opened.
    #[error("cannot listen on {what}: {err}")]
    Listen {
        /// The address or path.
        what: String,
        /// Why.
        err: std::io::Error,
    },
    /// Anything else at start-up.
    #[error("{0}")]
    Start(String),
}

/// Runs the server until SIGTERM or SIGINT, then drains: new sessions are refused, running
/// ones may finish within the drain timeout, then their executors are ended. `exe` is the
/// executor binary (`gpuless`, run as `gpuless __executor`). `ready` is called with the bound
/// addresses (TCP, metrics) once the server accepts clients.
pub fn serve(cfg: Config, exe: PathBuf, ready: impl FnOnce(Option<String>, Option<String>)) -> Result<(), ServeError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| ServeError::Start(format!("tokio runtime: {e}")))?;
    rt.block_on(run(cfg, exe, ready))
}

async fn run(cfg: Config, exe: PathBuf, ready: impl FnOnce(Option<String>, Option<String>)) -> Result<(), ServeError> {
    // What the server writes to the cache its executors (another user) read.
    // SAFETY: umask has no preconditions.
    unsafe { libc::umask(0o022) };
    // Certificate and key first: a server that cannot speak TLS as asked does not start.
    let tls = match (cfg.tls_cert.is_empty(), cfg.tls_key.is_empty()) {
        (false, false) => Some(
            tls::acceptor(cfg.tls_cert.as_ref(), cfg.tls_key.as_ref())
                .map_err(|e| ServeError::Start(format!("TLS: {e}")))?,
        ),
        _ => None,
    };
    if cfg.program_keep_alive_s > 0.0 && cfg.tenants.is_empty() {
        tracing::warn!(
            "warm constants are on and every client is one tenant: a session of a program can read what the last \
             session of that program left on the GPU (give each tenant its own token: tenants_file)"
        );
    }
    let gpus = gpus::discover(&cfg.gpus).map_err(ServeError::Start)?;
    for g in &gpus {
        tracing::info!(gpu = g.index, visible = ?g.visible, nvml = ?g.nvml, profiles = g.profiles.len() / 2, "GPU");
    }
    let mut plan = {
        let dirs = [std::path::Path::new(&cfg.cache.memory_dir), std::path::Path::new(&cfg.cache.disk_dir)];
        confine::Plan::new(&cfg.confine, &exe, &dirs).map_err(|e| ServeError::Start(format!("confinement: {e}")))?
    };
    if let Some(warning) =
        plan.probe(&exe, cfg.confine.namespaces).map_err(|e| ServeError::Start(format!("confinement: {e}")))?
    {
        tracing::warn!("{warning}");
    }
    tracing::info!("{}", plan.describe());
    let mgr = Manager::with_confinement(cfg.clone(), exe, gpus, plan)
        .map_err(|e| ServeError::Start(format!("cache: {e}")))?;
    let mut tcp_addr = None;
    let mut tasks = Vec::new();
    if !cfg.listen.is_empty() {
        let l =
            TcpListener::bind(&cfg.listen).await.map_err(|err| ServeError::Listen { what: cfg.listen.clone(), err })?;
        tcp_addr = l.local_addr().ok().map(|a| a.to_string());
        if tls.is_none() && !config::is_loopback(&cfg.listen) {
            tracing::warn!(listen = cfg.listen, "the TCP listener is not on loopback and has no TLS: tokens and session data travel in the clear (set tls_cert and tls_key)");
        }
        let m = mgr.clone();
        let tls = tls.clone();
        tasks.push(tokio::spawn(async move {
            while let Ok((s, peer)) = l.accept().await {
                let _ = s.set_nodelay(true);
                let m = m.clone();
                match &tls {
                    Some(a) => {
                        let a = a.clone();
                        tokio::spawn(async move { tls::session(m, a, s, peer.to_string()).await })
                    }
                    None => tokio::spawn(async move { session_from_now(m, s, peer.to_string()).await }),
                };
            }
        }));
    }
    if !cfg.socket.is_empty() {
        let _ = std::fs::remove_file(&cfg.socket);
        let l = UnixListener::bind(&cfg.socket).map_err(|err| ServeError::Listen { what: cfg.socket.clone(), err })?;
        let m = mgr.clone();
        tasks.push(tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                let m = m.clone();
                tokio::spawn(async move { session_from_now(m, s, "unix".into()).await });
            }
        }));
    }
    let mut metrics_addr = None;
    // The metrics endpoint outlives the other listeners: it answers `/readyz` (503) and scrapes
    // while the server drains.
    let mut metrics_task = None;
    if !cfg.metrics.is_empty() {
        let l = TcpListener::bind(&cfg.metrics)
            .await
            .map_err(|err| ServeError::Listen { what: cfg.metrics.clone(), err })?;
        metrics_addr = l.local_addr().ok().map(|a| a.to_string());
        let m = mgr.clone();
        metrics_task = Some(tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                let m = m.clone();
                tokio::spawn(async move { http::serve_http(m, s).await });
            }
        }));
    }
    {
        let m = mgr.clone();
        tokio::task::spawn_blocking(move || m.fill_pool());
    }
    tracing::info!(tcp = ?tcp_addr, tls = tls.is_some(), socket = cfg.socket, metrics = ?metrics_addr, "serving");
    ready(tcp_addr, metrics_addr);
    wait_for_signal().await;
    tracing::info!(sessions = mgr.sessions(), "draining");
    mgr.drain();
    for t in &tasks {
        t.abort();
    }
    let deadline = Instant::now() + mgr.drain_timeout();
    while mgr.sessions() > 0 && Instant::now() < deadline {
        let _ = tokio::time::timeout_at(deadline.into(), mgr.changed()).await;
    }
    if let Some(t) = metrics_task {
        t.abort();
    }
    mgr.kill_all();
    if !cfg.socket.is_empty() {
        let _ = std::fs::remove_file(&cfg.socket);
    }
    // Let the reader threads reap their executors.
    let reap = Instant::now() + std::time::Duration::from_secs(5);
    while !mgr.executor_pids().is_empty() && Instant::now() < reap {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    tracing::info!("stopped");
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(mut t), Ok(mut i)) => {
            tokio::select! { _ = t.recv() => {}, _ = i.recv() => {} }
        }
        _ => std::future::pending::<()>().await,
    }
}

/// Constant-time comparison of a presented token with the configured one.
pub fn token_matches(given: &str, want: &str) -> bool {
    let (a, b) = (given.as_bytes(), want.as_bytes());
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for (i, w) in b.iter().enumerate() {
        diff |= a.get(i).copied().unwrap_or(0) ^ w;
    }
    diff == 0
}

/// Reads one frame from an async stream (the Hello), bounded by `max` bytes.
async fn read_hello<S: AsyncRead + Unpin>(s: &mut S, max: usize) -> Result<(u16, u16, Vec<u8>), String> {
    let mut h = [0u8; FRAME_HEADER_LEN];
    s.read_exact(&mut h).await.map_err(|e| format!("reading the Hello: {e}"))?;
    let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
    if len > max {
        return Err(format!("a first frame of {len} bytes: a Hello is at most {max}"));
    }
    let mut p = vec![0u8; len];
    s.read_exact(&mut p).await.map_err(|e| format!("reading the Hello: {e}"))?;
    Ok((u16::from_le_bytes([h[4], h[5]]), u16::from_le_bytes([h[6], h[7]]), p))
}

async fn refuse<S: AsyncWrite + Unpin>(m: &Manager, s: &mut S, code: u16, message: String, outcome: &str) {
    tracing::info!(code, message, "session refused");
    m.metrics.sessions_total.get_or_create(&label(outcome)).inc();
    let msg = Message::Refused { code, message };
    let p = msg.encode();
    let mut buf = Vec::with_capacity(p.len() + FRAME_HEADER_LEN);
    let _ = gpuless_traces::protocol::write_frame(&mut buf, msg.kind(), 0, &p);
    let _ = s.write_all(&buf).await;
    let _ = s.shutdown().await;
}

/// A stream the server can hand to an executor.
trait Handoff: AsyncRead + AsyncWrite + Unpin + Send {
    /// The descriptor, switched to blocking mode for the executor.
    fn into_blocking_fd(self) -> std::io::Result<std::os::fd::OwnedFd>;
    /// Whether the client speaks TLS (the server then proxies the session).
    fn is_tls(&self) -> bool {
        false
    }
}

impl Handoff for tokio::net::TcpStream {
    fn into_blocking_fd(self) -> std::io::Result<std::os::fd::OwnedFd> {
        let s = self.into_std()?;
        s.set_nonblocking(false)?;
        Ok(s.into())
    }
}

impl Handoff for tokio::net::UnixStream {
    fn into_blocking_fd(self) -> std::io::Result<std::os::fd::OwnedFd> {
        let s = self.into_std()?;
        s.set_nonblocking(false)?;
        Ok(s.into())
    }
}

/// [`session`] for a client that just connected.
async fn session_from_now<S: Handoff>(m: Arc<Manager>, s: S, peer: String) {
    let deadline = tokio::time::Instant::now() + Config::secs(m.cfg.handshake_timeout_s);
    session(m, s, peer, deadline).await
}

/// One client: Hello (complete by `deadline`), authentication, admission, then the connection
/// goes to an executor.
async fn session<S: Handoff>(m: Arc<Manager>, mut s: S, peer: String, deadline: tokio::time::Instant) {
    let hello = match tokio::time::timeout_at(deadline, read_hello(&mut s, 64 << 10)).await {
        Ok(Ok(h)) => h,
        Ok(Err(e)) => return refuse(&m, &mut s, code::BAD_MESSAGE, e, "refused-bad-message").await,
        Err(_) => {
            let e = format!("no Hello within {} s", m.cfg.handshake_timeout_s);
            return refuse(&m, &mut s, code::BAD_MESSAGE, e, "refused-timeout").await;
        }
    };
    let (k, flags, payload) = hello;
    let h = match Message::decode(k, flags, &payload) {
        Ok(Message::Hello(h)) if k == kind::HELLO => h,
        Ok(other) => {
            let e = format!("the first message must be Hello, not {}", other.name());
            return refuse(&m, &mut s, code::BAD_MESSAGE, e, "refused-bad-message").await;
        }
        Err(e) => return refuse(&m, &mut s, code::BAD_MESSAGE, e.to_string(), "refused-bad-message").await,
    };
    if h.protocol != PROTOCOL_VERSION {
        let e = format!(
            "protocol version {} (from {}); this server ({}) speaks version {PROTOCOL_VERSION}: use matching gpuless versions",
            h.protocol,
            h.tool,
            env!("CARGO_PKG_VERSION")
        );
        return refuse(&m, &mut s, code::VERSION, e, "refused-version").await;
    }
    let Some(tenant) = m.cfg.tenant_of(&h.token) else {
        let e = "wrong or missing token: pass the server's token (--token or GPULESS_TOKEN)".to_string();
        return refuse(&m, &mut s, code::AUTH, e, "refused-auth").await;
    };
    let warm_key = m.warm_key(&h, &tenant);
    let function = warm::announced(&h.program).map(|f| warm::key(&tenant, f));
    let req = manager::Request {
        partition: &h.partition,
        gpu: h.gpu,
        devices: h.devices,
        more_gpus: &h.more_gpus,
        priority: h.priority,
        function: function.as_deref(),
        program: warm_key.as_deref(),
        tenant: (!m.cfg.tenants.is_empty()).then_some(tenant.as_str()),
    };
    let grant = match m.admit(&req).await {
        Ok(g) => g,
        Err((c, e)) => {
            let outcome = match c {
                code::BUSY => "refused-busy",
                code::DRAINING => "refused-draining",
                code::EXECUTOR => "refused-executor",
                _ => "refused-no-partition",
            };
            return refuse(&m, &mut s, c, e, outcome).await;
        }
    };
    let tls = s.is_tls();
    m.metrics.tenant_sessions.get_or_create(&metrics::TenantName { tenant: tenant.clone() }).inc();
    tracing::info!(session = grant.session, exec = grant.exec, gpu = grant.gpu, more = ?grant.more, peer, tls, tenant,
        program = h.program, partition = %h.partition, priority = h.priority.name(), "session starts");
    if tls {
        m.metrics.tls_sessions.inc();
    }
    let start = Control::Start(control::SessionStart {
        session: grant.session,
        idle_ms: (m.cfg.idle_timeout_s * 1e3) as u64,
        keep_alive_ms: m.keep_alive_ms(&h),
        cached: m.cfg.cached_execution.for_session(h.whole_segments).then_some(m.cfg.cached_hold),
        hello: payload,
        tenant,
        scoped: !m.cfg.tenants.is_empty(),
        priority: m.cfg.priority_policy,
        be_inflight: m.cfg.best_effort_inflight,
        be_budget_us: m.cfg.best_effort_budget_us,
    });
    let fd = match s.into_blocking_fd() {
        Ok(fd) => fd,
        Err(e) => {
            tracing::error!(error = %e, "could not detach the client's connection");
            m.abandon(grant.session, grant.exec);
            return;
        }
    };
    if let Err(e) = grant.channel.send(&start, Some(fd.as_raw_fd())) {
        tracing::error!(error = %e, "could not hand the session to its executor");
        m.abandon(grant.session, grant.exec);
    }
    // Our copy of the connection closes here; the executor holds it now.
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(token_matches("abc", "abc") && token_matches("", ""));
        assert!(!token_matches("abd", "abc") && !token_matches("ab", "abc") && !token_matches("abcd", "abc"));
        assert!(!token_matches("x", ""));
    }
}
