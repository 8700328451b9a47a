//! The session itself, at the bottom of `session/`: the [`Session`] of each server (its
//! connection, the records and blobs not sent yet, what it knows of the GPU's progress, its
//! counts), the lock that holds them all, the flags read without it ([`READY`], [`FORKED`]) and
//! the counts of every call. What the modules above do with it: `outgoing.rs` (what goes out),
//! `answers.rs` (waiting for the server), `connect.rs` (`cuInit` and the exit), `stats.rs` (the
//! counts written at exit).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use gpuless_traces::protocol::Welcome;
use gpuless_traces::{CallRecord, Hash128};

use crate::remote::link::Link;
use crate::remote::pieces::{ClientPieces, Placed};
use crate::remote::route;

/// A segment goes out (without waiting) when it holds this many records.
const SEGMENT_RECORDS: usize = 4096;
/// Environment: records after which a segment goes out without waiting (default 4096).
const ENV_BATCH: &str = "GPULESS_REMOTE_BATCH";

/// How many records a segment gathers before it goes out without waiting.
pub(super) fn batch() -> usize {
    static B: OnceLock<usize> = OnceLock::new();
    *B.get_or_init(|| {
        std::env::var(ENV_BATCH)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&b| b > 0)
            .unwrap_or(SEGMENT_RECORDS)
    })
}

/// `CUDA_ERROR_NOT_INITIALIZED`.
pub(crate) const NOT_INITIALIZED: u32 = 3;
/// `CUDA_ERROR_NO_DEVICE`: the server could not be reached at `cuInit`.
pub(crate) const NO_DEVICE: u32 = 100;
/// `CUDA_ERROR_UNKNOWN`: what every call returns once the connection is lost.
pub(crate) const LOST: u32 = 999;

/// Environment: where the counts are written at exit (one JSON object).
pub(super) const ENV_STATS: &str = "GPULESS_REMOTE_STATS";
/// Environment: seconds to wait for the server at connection and for any reply (default 600).
const ENV_TIMEOUT: &str = "GPULESS_REMOTE_TIMEOUT_S";

/// Every call the program made in client mode, and those answered without the server.
pub(crate) static CALLS: AtomicU64 = AtomicU64::new(0);
pub(crate) static LOCAL: AtomicU64 = AtomicU64::new(0);
/// Nanoseconds spent in client-mode calls (the part spent waiting: `link::WAIT_NS`).
pub(crate) static CALL_NS: AtomicU64 = AtomicU64::new(0);

/// One server's session.
pub(super) struct Session {
    pub(super) endpoint: String,
    pub(super) conn: Option<Link>,
    pub(super) welcome: Welcome,
    /// Records not sent yet, in call order.
    pub(super) pending: Vec<CallRecord>,
    /// Blobs captured since the last segment went out, not yet sent.
    pub(super) new_blobs: Vec<(Hash128, Vec<u8>)>,
    /// Blobs the server holds for this session (sent, or found by a query).
    pub(super) held: HashSet<Hash128>,
    /// Whether records went out since the last context-wide synchronization: work the GPU may
    /// still be doing (an answer means the records were submitted, not that they completed).
    pub(super) outstanding: bool,
    /// Streams a synchronization (or a query that found them done) completed since records
    /// last went out: a stream's synchronization is answered here only for these.
    pub(super) complete: HashSet<u64>,
    /// Records went out since the last answer (the exit's last round trip reports their errors).
    pub(super) unanswered: bool,
    /// Why the session ended early; every later call fails with `LOST`.
    pub(super) failed: Option<String>,
    /// Closed at exit: later calls (destructors after `atexit`) are answered locally.
    pub(super) closed: bool,
    pub(super) sent: u64,
    pub(super) waits: u64,
    /// Waits by the function that waited (what to answer locally next).
    pub(super) waited_for: HashMap<&'static str, u64>,
    /// Microseconds the executor spent executing this session's segments (from the answers).
    pub(super) server_exec_us: u64,
    /// Records sent since the last answer.
    pub(super) sent_since: u64,
    /// Pieces to send by reference, each before the pending record at its index.
    pub(super) refs: Vec<Placed>,
    /// Which pieces the executor holds as graphs; the piece being built.
    pub(super) pieces: ClientPieces,
    /// The `gpulessHostPull` record of the wait in progress (managed memory, `shared.rs`).
    pub(super) pull: Option<u64>,
    /// Waits that pulled.
    pub(super) pulls: u64,
    /// Its index among the servers' sessions (`route.rs`).
    pub(super) member: usize,
    /// The device the last record was sent for (a session of several devices), within this
    /// server's session.
    pub(super) device: u32,
}

/// The sessions the client holds: one per server, in the order the endpoints were given (one
/// for the usual single server). Calls go to one of them (`route.rs`).
pub(super) type Members = Vec<Session>;
/// The sessions, locked.
pub(super) type Guard = MutexGuard<'static, Option<Result<Members, u32>>>;

/// The session's state for the hot path, read without the lock: 0 before `cuInit`, 1
/// running, 2 lost (every call fails with `LOST`), or a `CUresult` ≥ 100 `cuInit` failed with.
pub(super) static READY: AtomicU32 = AtomicU32::new(0);
/// Set in a child forked without `exec`: the session and its connection are the parent's, so
/// the child's calls fail (`CUDA_ERROR_NOT_INITIALIZED`, said once) and its exit leaves the
/// session alone. Natively, CUDA in such a child is undefined; here it must never touch the
/// parent's work.
static FORKED: AtomicBool = AtomicBool::new(false);

/// The session's state as [`READY`] holds it (read without the lock).
pub(crate) fn ready() -> u32 {
    READY.load(Ordering::Acquire)
}

/// Whether this process is a child forked without `exec` ([`FORKED`]).
pub(crate) fn forked() -> bool {
    FORKED.load(Ordering::Relaxed)
}

/// `pthread_atfork`'s child handler (registered at `cuInit`).
pub(super) extern "C" fn in_child() {
    FORKED.store(true, Ordering::Relaxed);
    crate::signals::reset_in_child();
}

/// `None` before `cuInit`; `Some(Err(code))` when it failed.
static SESSION: Mutex<Option<Result<Members, u32>>> = Mutex::new(None);
/// The endpoint and why `cuInit` could not connect (for the statistics at exit).
pub(super) static UNREACHED: OnceLock<(String, String)> = OnceLock::new();
/// Wakes the flusher when a segment gets its first record.
pub(super) static FLUSH: Condvar = Condvar::new();

/// The sessions, locked.
pub(super) fn lock() -> Guard {
    SESSION.lock().unwrap_or_else(|e| e.into_inner())
}

/// How long to wait for the server at connection and for any reply.
pub(super) fn timeout() -> Duration {
    let s = std::env::var(ENV_TIMEOUT).ok().and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(600);
    Duration::from_secs(s.max(1))
}

/// The running session with the server the calling thread's call goes to ([`route::current`]),
/// or the status a call gets without one: `NOT_INITIALIZED` before `cuInit`, `LOST` after a
/// failure, success (nothing to do) once closed at exit.
pub(super) fn open_session(g: &mut Guard) -> Result<&mut Session, u32> {
    member(g, route::current().member)
}

/// Member `m`'s running session, or the status a call gets without one (as [`open_session`]).
pub(super) fn member(g: &mut Guard, m: usize) -> Result<&mut Session, u32> {
    match g.as_mut() {
        Some(Ok(v)) => match v.get_mut(m) {
            Some(sess) if sess.closed => Err(0),
            Some(sess) if sess.failed.is_some() => Err(LOST),
            Some(sess) => Ok(sess),
            None => Err(LOST),
        },
        _ => Err(NOT_INITIALIZED),
    }
}

impl Session {
    /// Records and references that may leave now (a piece that may still go by reference
    /// waits).
    pub(super) fn sendable(&self) -> usize {
        self.pieces.sendable(self.pending.len()) + self.refs.len()
    }

    /// The session ended (`why`): every later call fails with `LOST`.
    pub(super) fn fail(&mut self, why: &str) {
        if self.failed.is_none() {
            eprintln!(
                "gpuless: the session with the GPU server at {} ended: {why}; every later CUDA call fails",
                self.endpoint
            );
            self.failed = Some(why.to_string());
        }
        READY.store(2, Ordering::Release);
        self.conn = None;
    }
}
