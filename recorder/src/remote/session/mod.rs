//! The client's session with `gpuless serve`: the connection, the segment being built, blobs
//! not yet sent, the answers a synchronization waits for, and the counts reported at exit.
//!
//! Records are numbered under the session's lock, so the segment holds them in call order
//! across the program's threads. A call that needs a result sends the segment with
//! `WANT_ANSWER` and waits; everything else is queued and travels with the next segment (a
//! segment also goes out, without waiting, when it reaches [`batch`] records, or when the
//! flusher finds it waiting).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use gpuless_analyzer::api::structs::MEMORYTYPE_HOST;
use gpuless_analyzer::api::{ApiFunction, ArgKind, SyncClass};
use gpuless_traces::protocol::{self, Answer, DeviceDescription, MoreDevices, Welcome};
use gpuless_traces::{BlobKind, BlobRef, CallRecord, Function, Hash128, Value};

use super::copies::Target;
use super::link::{self, Link, Outgoing};
use super::local::{self, Step};
use crate::hooks::HOOKS;
use crate::slots::Slot;
use crate::{arena, capture, state};

mod answers;
mod connect;
mod outgoing;
pub(crate) mod route;
mod staged;
mod stats;

pub(crate) use answers::{ask, tell, wait};
use answers::{print_device_output, settle, write_query};
pub(super) use connect::init;
pub(crate) use outgoing::{mirror_host, targets};

/// A segment goes out (without waiting) when it holds this many records.
const SEGMENT_RECORDS: usize = 4096;
/// Environment: records after which a segment goes out without waiting (default 4096).
const ENV_BATCH: &str = "GPULESS_REMOTE_BATCH";

/// How many records a segment gathers before it goes out without waiting.
fn batch() -> usize {
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
/// `CUDA_ERROR_INVALID_IMAGE`.
const INVALID_IMAGE: u32 = 200;
/// `CUDA_ERROR_UNKNOWN`: what every call returns once the connection is lost.
pub(crate) const LOST: u32 = 999;

/// Environment: the server's token.
const ENV_TOKEN: &str = "GPULESS_TOKEN";
/// Environment: the partition asked for (`whole`, `sms:N`, a MIG profile).
const ENV_PARTITION: &str = "GPULESS_REMOTE_PARTITION";
/// The server's GPU to ask for (its index), or GPUs (`1,0`: a session of two devices, device 0
/// on GPU 1); unset: wherever the server places the session.
const ENV_GPU: &str = "GPULESS_REMOTE_GPU";
/// How many GPUs the session asks for (its devices 0..N; default 1, or as many as named).
const ENV_GPUS: &str = "GPULESS_REMOTE_GPUS";
/// Environment: `best-effort` for that priority class.
const ENV_PRIORITY: &str = "GPULESS_REMOTE_PRIORITY";
/// Environment: where the counts are written at exit (one JSON object).
const ENV_STATS: &str = "GPULESS_REMOTE_STATS";
/// Environment: seconds to wait for the server at connection and for any reply (default 600).
const ENV_TIMEOUT: &str = "GPULESS_REMOTE_TIMEOUT_S";

/// Every call the program made in client mode, and those answered without the server.
static CALLS: AtomicU64 = AtomicU64::new(0);
static LOCAL: AtomicU64 = AtomicU64::new(0);
/// Nanoseconds spent in client-mode calls (the part spent waiting: [`link::WAIT_NS`]).
static CALL_NS: AtomicU64 = AtomicU64::new(0);

struct Session {
    endpoint: String,
    conn: Option<Link>,
    welcome: Welcome,
    /// Records not sent yet, in call order.
    pending: Vec<CallRecord>,
    /// Blobs captured since the last segment went out, not yet sent.
    new_blobs: Vec<(Hash128, Vec<u8>)>,
    /// Blobs the server holds for this session (sent, or found by a query).
    held: HashSet<Hash128>,
    /// Whether records went out since the last context-wide synchronization: work the GPU may
    /// still be doing (an answer means the records were submitted, not that they completed).
    outstanding: bool,
    /// Streams a synchronization (or a query that found them done) completed since records
    /// last went out: a stream's synchronization is answered here only for these.
    complete: HashSet<u64>,
    /// Records went out since the last answer (the exit's last round trip reports their errors).
    unanswered: bool,
    /// Why the session ended early; every later call fails with `LOST`.
    failed: Option<String>,
    /// Closed at exit: later calls (destructors after `atexit`) are answered locally.
    closed: bool,
    sent: u64,
    waits: u64,
    /// Waits by the function that waited (what to answer locally next).
    waited_for: HashMap<&'static str, u64>,
    /// Microseconds the executor spent executing this session's segments (from the answers).
    server_exec_us: u64,
    /// Records sent since the last answer.
    sent_since: u64,
    /// Pieces to send by reference, each before the pending record at its index.
    refs: Vec<super::pieces::Placed>,
    /// Which pieces the executor holds as graphs; the piece being built.
    pieces: super::pieces::ClientPieces,
    /// The `gpulessHostPull` record of the wait in progress (managed memory, `shared.rs`).
    pull: Option<u64>,
    /// Waits that pulled.
    pulls: u64,
    /// Its index among the servers' sessions ([`route`]).
    member: usize,
    /// The device the last record was sent for (a session of several devices), within this
    /// server's session.
    device: u32,
}

/// The sessions the client holds: one per server, in the order the endpoints were given (one
/// for the usual single server). Calls go to one of them ([`route`]).
type Members = Vec<Session>;
/// The sessions, locked.
type Guard = MutexGuard<'static, Option<Result<Members, u32>>>;

/// The session's state for the hot path, read without the lock: 0 before `cuInit`, 1
/// running, 2 lost (every call fails with `LOST`), or a `CUresult` ≥ 100 `cuInit` failed with.
static READY: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
/// Set in a child forked without `exec`: the session and its connection are the parent's, so
/// the child's calls fail (`CUDA_ERROR_NOT_INITIALIZED`, said once) and its exit leaves the
/// session alone. Natively, CUDA in such a child is undefined; here it must never touch the
/// parent's work.
static FORKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// The forked child has said so.
static FORK_SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn in_child() {
    FORKED.store(true, Ordering::Relaxed);
    crate::signals::reset_in_child();
}

/// `None` before `cuInit`; `Some(Err(code))` when it failed.
static SESSION: Mutex<Option<Result<Members, u32>>> = Mutex::new(None);
/// The device description, readable without the session's lock.
static DEVICE: OnceLock<DeviceDescription> = OnceLock::new();
/// The session's further devices (a session of several GPUs).
static MORE: OnceLock<MoreDevices> = OnceLock::new();
/// The endpoint and why `cuInit` could not connect (for the statistics at exit).
static UNREACHED: OnceLock<(String, String)> = OnceLock::new();
/// Wakes the flusher when a segment gets its first record.
static FLUSH: Condvar = Condvar::new();

/// Environment: microseconds a new segment waits before the flusher sends it without an
/// answer (default 100; 0: segments go out only at waits and when full).
const ENV_FLUSH_US: &str = "GPULESS_REMOTE_FLUSH_US";

/// The session's device, once connected.
pub(crate) fn device() -> Option<&'static DeviceDescription> {
    DEVICE.get()
}

/// The session's further devices, once connected ([`super::devices`]).
pub(crate) fn more() -> Option<&'static MoreDevices> {
    MORE.get()
}

/// Whether the session runs on a MIG instance (its device's UUID is the instance's).
pub(crate) fn on_mig() -> bool {
    let m = route::current().member;
    matches!(&*lock(), Some(Ok(v)) if v.get(m).is_some_and(|s| s.welcome.partition.kind == "mig"))
}

fn lock() -> Guard {
    SESSION.lock().unwrap_or_else(|e| e.into_inner())
}

fn timeout() -> Duration {
    let s = std::env::var(ENV_TIMEOUT).ok().and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(600);
    Duration::from_secs(s.max(1))
}

/// Every server's connection, while the session runs.
pub(crate) fn links() -> Vec<Link> {
    match &*lock() {
        Some(Ok(v)) => v.iter().filter(|s| s.failed.is_none() && !s.closed).filter_map(|s| s.conn.clone()).collect(),
        _ => Vec::new(),
    }
}

/// Whether the session is over (closed, failed or never started).
pub(crate) fn ended() -> bool {
    !matches!(&*lock(), Some(Ok(v)) if v.iter().all(|s| s.failed.is_none() && !s.closed))
}

/// A connection broke outside a call (`why`): every later call fails.
pub(crate) fn lost(why: &str) {
    if let Some(Ok(v)) = lock().as_mut() {
        for sess in v.iter_mut() {
            sess.fail(why);
        }
    }
}

/// Sends what is queued now, to every server, without waiting for an answer.
pub(crate) fn send_pending() {
    let mut g = lock();
    for m in 0..route::members() {
        g = send_queued(g, m);
    }
}

/// Sends what member `m` holds queued (the session's lock `g` is let go while the segment is
/// written) and takes the lock again.
fn send_queued(mut g: Guard, m: usize) -> Guard {
    let Some(Ok(sess)) = g.as_mut().map(|r| r.as_mut().map(|v| v.get_mut(m))) else { return g };
    let Some(sess) = sess else { return g };
    if sess.failed.is_some() || sess.closed || sess.sendable() == 0 {
        return g;
    }
    let Some(link) = sess.conn.clone() else { return g };
    let out = sess.take(false);
    // The connection is taken before the session is let go: segments leave in order.
    let mut conn = link::lock(&link);
    drop(g);
    let r = link::transmit(&mut conn, &out, false);
    drop(conn);
    let mut g = lock();
    if let (Err(e), Some(Ok(v))) = (r, g.as_mut()) {
        if let Some(sess) = v.get_mut(m) {
            sess.fail(&e);
        }
    }
    g
}

/// Sends a segment without waiting once it has gathered records for `after`: the server starts
/// on the program's work while the program goes on issuing more (pipelining the CPU work of
/// the program with the GPU work of the server).
fn flusher(after: Duration) {
    // SAFETY: a prctl on this thread only: its sleeps end within 1 µs of their time (the
    // default slack is 50 µs, as long as the wait itself).
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    let mut g = lock();
    loop {
        let idle = |s: &mut Option<Result<Members, u32>>| match s {
            Some(Ok(v)) => v.iter().all(|sess| sess.sendable() == 0 && sess.failed.is_none() && !sess.closed),
            _ => false,
        };
        g = FLUSH.wait_while(g, idle).unwrap_or_else(|e| e.into_inner());
        drop(g);
        std::thread::sleep(after);
        g = lock();
        let Some(Ok(v)) = g.as_mut() else { return };
        if v.iter().any(|sess| sess.failed.is_some() || sess.closed) {
            return;
        }
        for m in 0..v.len() {
            g = send_queued(g, m);
        }
    }
}

/// One hooked call ([`super::call`]).
///
/// # Safety
/// `raw` are the program's arguments, in the API table's order.
pub(crate) unsafe fn call(slot: usize, s: &Slot, raw: &[u64]) -> u32 {
    // The recorder's clock (the TSC where the kernel keeps time with it): two readings per call.
    let t0 = crate::clock::now_ns();
    // SAFETY: forwarded from the caller.
    let st = unsafe { call_timed(slot, s, raw) };
    CALL_NS.fetch_add(crate::clock::now_ns().saturating_sub(t0), Ordering::Relaxed);
    st
}

/// [`call`] itself.
///
/// # Safety
/// As [`call`].
unsafe fn call_timed(slot: usize, s: &Slot, raw: &[u64]) -> u32 {
    let f = s.func;
    if FORKED.load(Ordering::Relaxed) {
        if !FORK_SAID.swap(true, Ordering::Relaxed) {
            eprintln!(
                "gpuless: process {} was forked from a client-mode process without exec; its CUDA calls \
                 (first: {}) fail with CUDA_ERROR_NOT_INITIALIZED (the session is its parent's). Run it \
                 through exec (e.g. multiprocessing's 'spawn' start method) to give it a session of its own",
                std::process::id(),
                f.name
            );
        }
        return NOT_INITIALIZED;
    }
    CALLS.fetch_add(1, Ordering::Relaxed);
    if super::hostfn::in_host_function() && !f.name.starts_with("cuGetError") {
        return super::hostfn::refused_in_host_function(f);
    }
    // cuInit connects; so does cuDriverGetVersion, which the driver answers before cuInit
    // (cudart asks it first, and takes a failure for a driver too old for it).
    if s.init || f.name == "cuDriverGetVersion" {
        let st = init();
        if st != 0 {
            return st;
        }
    } else if f.sync == SyncClass::Local && f.name.starts_with("cuGetError") {
        // Error strings need no session.
    } else {
        match READY.load(Ordering::Acquire) {
            0 => return NOT_INITIALIZED,
            1 => {}
            2 => return LOST,
            code => return code,
        }
    }
    if let gpuless_analyzer::api::Disposition::Refused(r) = f.disposition {
        return local::bad_device(f, raw).unwrap_or_else(|| local::refused(f, r.why()));
    }
    // Which server runs it (a session across several servers, `route.rs`).
    let (to, all) = match route::decide(f, raw) {
        route::Decision::One(r) => (r, false),
        route::Decision::All(r) => (r, true),
        // SAFETY: forwarded from the caller.
        route::Decision::Apart => return unsafe { staged::apart(f, raw) },
    };
    let _entered = route::enter(to, all);
    let mut send = f.sent_by_client();
    // `gpuless record --remote`: every call is recorded too, as a local recording would.
    let tracing = state::enabled();
    // Inputs are read before the local part runs (it may write `inout` arguments).
    // SAFETY (all captures): the program's arguments; outputs only after success.
    let mut args = if send || tracing { unsafe { capture::inputs(f, raw) } } else { Vec::new() };
    let kept = if tracing { args.clone() } else { Vec::new() };
    if send && f.args.iter().zip(&args).any(|(a, v)| a.kind == ArgKind::Image && !matches!(v, Value::Blob(_))) {
        // No code image the driver could read (fatbin, cubin, PTX) at the address given.
        return INVALID_IMAGE;
    }
    // A copy from pinned memory behind a host function that has not run: its source is read
    // when the stream reaches it (the function may write it first), sent as an address.
    let late =
        (send && f.name == "cuMemcpyHtoDAsync" && super::hostfn::reads_late(raw[3], raw[1])).then(|| (raw[1], raw[2]));
    if let (Some((src, _)), Some(a)) = (late, args.get_mut(1)) {
        *a = Value::HostPtr(src);
    }
    if send {
        super::copies::normalize(f, &mut args);
        // Device ordinals as the route's server numbers its devices.
        route::localize(f, &mut args);
    }
    // A graph's memcpy node: host memory it reads is read at every launch (a late read); the
    // bytes it writes to host memory come back after every launch, as a captured copy's do.
    let node = if send { super::copies::memcpy_node(f, &args) } else { None };
    // SAFETY: the program's dependency array of a cuGraphAddMemcpyNode.
    let node_src = node.filter(|c| {
        c.src.memory_type == MEMORYTYPE_HOST
            && c.packed_len().is_some()
            && unsafe { super::hostfn::after_host_node(raw[2], raw[3]) }
    });
    if let (Some(c), Some((i, _))) = (node_src, f.args.iter().enumerate().find(|(_, a)| a.name == "copyParams")) {
        if let Some(Value::List(l)) = args.get_mut(i) {
            l.truncate(1);
            l.push(Value::HostPtr(c.src.host));
        }
    }
    if send {
        // Pinned memory a kernel is given is shared with the server from now on (`host.rs`).
        if s.runs_kernels && !super::host::mirror_reached(&args) {
            let why = "a kernel argument points into pinned host memory that could not be mirrored to the server";
            return local::refused(f, why);
        }
    }
    // Mirrored pinned memory (`host.rs`): its allocation and its free go to the server too.
    let mirrored_free = matches!(f.name, "cuMemFreeHost" | "cuMemHostUnregister")
        && super::host::is_mirrored(raw.first().copied().unwrap_or(0));
    // SAFETY: forwarded from the caller.
    let mut step = unsafe { local::run(s, raw) };
    if matches!(step, Step::Done(0))
        && (mirrored_free
            // SAFETY: the program's out-pointer, written by the successful allocation.
            || (f.name == "cuMemHostAlloc" && super::host::is_mirrored(unsafe { *(raw[0] as *const u64) })))
    {
        send = true;
        if args.is_empty() {
            // SAFETY: the program's arguments.
            args = unsafe { capture::inputs(f, raw) };
        }
    }
    // A call that creates a handle changes no answer about the handles there were: the memo
    // (server answers, keyed by their handles) outlives it, unlike the recorder's.
    if f.may_change_answers() && f.sync != SyncClass::CreatesHandle {
        super::memo::forget();
    } else if matches!(step, Step::Wait) && f.stable && f.sync == SyncClass::DeviceQuery {
        if let Some(st) = super::memo::answer(f, raw).map(|(status, values)| {
            // SAFETY: the program's arguments to `f`.
            unsafe { write_query(f, raw, status, &values) }
        }) {
            step = Step::Done(st);
            send = false; // answered from memory: nothing for the server
        }
    }
    // Outputs already captured for the server's record, reused for the trace's.
    let mut traced: Option<Vec<Value>> = None;
    let (st, seq) = match step {
        Step::Done(st) if !send || st != 0 => {
            // Answered here; or refused here, as the driver would have refused it: nothing for
            // the server to run.
            LOCAL.fetch_add(u64::from(!send), Ordering::Relaxed);
            (st, None)
        }
        Step::Done(st) => {
            let results = unsafe { capture::outputs(f, raw, st) };
            if tracing {
                traced = Some(results.clone());
            }
            // An async copy into host memory (`cuMemcpyAsync` of a unified host destination
            // too): its bytes are written when they come back.
            let async_d2h = matches!(f.sync, SyncClass::DeviceToHostAsync | SyncClass::CopyAnyDirectionAsync);
            let node_dst = node.filter(|c| c.dst.memory_type == MEMORYTYPE_HOST).map(|c| (Target::Rows(c), true));
            let target = if let Some(t) = node_dst {
                Some(t)
            } else if async_d2h {
                let to = match capture::async_host_rows(f, raw) {
                    Some((_, c)) => Some(Target::Rows(c)),
                    None => super::copies::host_buffer(f, raw).map(|(h, n)| Target::Buffer(h, n)),
                };
                to.map(|t| (t, local::captured(f, raw)))
            } else {
                None
            };
            let (st, seq) = push(slot, f, args, results, target);
            if let (Some(seq), 0, true) = (seq, st, super::hostfn::registers(f)) {
                // SAFETY: the program's arguments to the call, which succeeded.
                unsafe { super::hostfn::registered(f, raw, seq) };
            }
            if let (Some(seq), 0, Some((src, len))) = (seq, st, late) {
                super::hostfn::late_read(seq, src, len, raw[3]);
            }
            if let (Some(seq), 0, Some(c)) = (seq, st, node_src) {
                super::hostfn::late_rows(seq, c);
            }
            match seq {
                // The driver checks the call when it is made (a code image's PTX, code for
                // another GPU, a limit) or synchronizes there: it waits for the server's status.
                Some(seq) if st == 0 && f.checked => {
                    let st = settle(seq, f, raw);
                    if st != 0 && f.name == "cuGraphExecUpdate" {
                        // SAFETY: the program's out-pointers for the update's result.
                        unsafe { local::graph_update_failed(f, raw) };
                    }
                    (st, Some(seq))
                }
                _ => (st, seq),
            }
        }
        Step::Wait => {
            if args.is_empty() && !f.args.is_empty() {
                // A query answered locally when it can be, sent when it cannot.
                // SAFETY: the program's arguments, unchanged so far.
                args = unsafe { capture::inputs(f, raw) };
                route::localize(f, &mut args);
            }
            // SAFETY: forwarded from the caller.
            let (st, seq) = unsafe { wait(slot, f, raw, args) };
            if let (Some(op), 0) = (s.arena, st) {
                // Pending asynchronous frees are released at synchronizations.
                // SAFETY: forwarded from the caller.
                unsafe { arena::after(op, raw, s.per_thread, st) };
            }
            (st, seq)
        }
    };
    if st == 0 {
        // SAFETY: the program's out-pointers, written by the call that succeeded.
        unsafe { route::created(f, raw) };
    }
    if tracing {
        let results = traced.unwrap_or_else(|| unsafe { capture::outputs(f, raw, st) });
        let mut rec = record(slot, f, seq.unwrap_or_else(state::next_seq), kept, results);
        rec.status = st as i32;
        // An async copy to the host waits, as in a local recording, for the synchronization
        // that covers it: its bytes have come back by then (`apply`), and are hashed.
        if st == 0 && capture::deferred_call(f, raw, &rec.args) {
            crate::pending::defer(f, raw, rec);
        } else {
            crate::batches::emit(rec);
        }
        if st == 0 && s.completes {
            crate::pending::after(f, raw);
        }
        if s.waits || f.sync == SyncClass::DeviceToHost {
            crate::lane::with(crate::batches::flush_thread);
        }
    }
    st
}

fn record(slot: usize, f: &ApiFunction, seq: u64, args: Vec<Value>, results: Vec<Value>) -> CallRecord {
    CallRecord {
        seq,
        thread: crate::lane::tid(),
        timestamp_ns: state::now_ns(),
        duration_ns: 0,
        level: f.level,
        parent: None,
        function: Function::Known(f.id),
        variant: HOOKS[slot].variant,
        status: 0,
        args,
        results,
        repeat: 0,
    }
}

/// The running session with the server the calling thread's call goes to ([`route::current`]),
/// or the status a call gets without one: `NOT_INITIALIZED` before `cuInit`, `LOST` after a
/// failure, success (nothing to do) once closed at exit.
fn open_session(g: &mut Guard) -> Result<&mut Session, u32> {
    member(g, route::current().member)
}

/// Member `m`'s running session, or the status a call gets without one (as [`open_session`]).
fn member(g: &mut Guard, m: usize) -> Result<&mut Session, u32> {
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

/// Queues a successful call's record (a full segment goes out without waiting); the status
/// and the record's sequence number.
fn push(
    slot: usize,
    f: &ApiFunction,
    args: Vec<Value>,
    results: Vec<Value>,
    d2h: Option<(Target, bool)>,
) -> (u32, Option<u64>) {
    let mut g = lock();
    let seq = state::next_seq();
    let mut rec = Some(record(slot, f, seq, args, results));
    let members = route::targets();
    let last = members.end - 1;
    for m in members {
        let sess = match member(&mut g, m) {
            Ok(sess) => sess,
            Err(st) => return (st, None),
        };
        sess.before_record();
        let was = sess.sendable();
        // Code loaded as a library goes to every server: a copy of the record each.
        let r = if m == last { rec.take() } else { rec.clone() };
        sess.pending.extend(r);
        sess.pieces.pushed(&mut sess.pending, &mut sess.refs);
        if was == 0 && sess.sendable() > 0 {
            FLUSH.notify_one();
        }
        if sess.pending.len() >= batch() {
            if let Err(e) = sess.send(false) {
                sess.fail(&e);
                return (LOST, Some(seq));
            }
        }
    }
    if let Some((target, captured)) = d2h {
        targets().add(seq, target, captured);
    }
    (0, Some(seq))
}

impl Session {
    /// Records and references that may leave now (a piece that may still go by reference
    /// waits).
    fn sendable(&self) -> usize {
        self.pieces.sendable(self.pending.len()) + self.refs.len()
    }

    /// Takes what is queued to be sent (the blobs counted as held from now on); `all`: the
    /// open piece too (the session waits for an answer, or closes).
    fn take(&mut self, all: bool) -> Outgoing {
        if all {
            self.pieces.finish(&mut self.pending, &mut self.refs);
        }
        let n = if all { self.pending.len() } else { self.pieces.sendable(self.pending.len()) };
        let rest = self.pending.split_off(n);
        let records = std::mem::replace(&mut self.pending, rest);
        self.pieces.sent(n);
        let (refs, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.refs).into_iter().partition(|(at, _)| *at <= n);
        self.refs = kept.into_iter().map(|(at, r)| (at - n, r)).collect();
        let blobs = std::mem::take(&mut self.new_blobs);
        self.held.extend(blobs.iter().map(|(h, _)| *h));
        let by_ref: u64 = refs.iter().map(|(_, r)| u64::from(r.records)).sum();
        self.sent += records.len() as u64 + by_ref;
        self.sent_since += records.len() as u64 + by_ref;
        if !records.is_empty() || !refs.is_empty() {
            // Work leaves: the GPU may be doing it from now on, on any of its streams.
            self.outstanding = true;
            self.unanswered = true;
            self.complete.clear();
        }
        Outgoing { records, blobs, refs }
    }

    /// Sends what is queued: blobs first, then the segment. With `want`, waits for the answer.
    fn send(&mut self, want: bool) -> Result<Option<Answer>, String> {
        let link = self.conn.clone().ok_or("not connected")?;
        let out = self.take(want);
        let a = link::transmit(&mut link::lock(&link), &out, want)?;
        if let Some(a) = &a {
            self.unanswered = false;
            print_device_output(&a.printed);
            self.server_exec_us += a.exec_us;
            self.pieces.announced(&a.pieces);
        }
        Ok(a)
    }

    fn fail(&mut self, why: &str) {
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

/// A captured blob, kept until the segment that refers to it goes out.
pub(crate) fn blob(kind: BlobKind, data: &[u8]) -> Value {
    if kind == BlobKind::CodeImage {
        super::modules::saw_image(data);
    }
    let hash = Hash128::of(data);
    let r = BlobRef { hash, len: data.len() as u64 };
    let mut g = lock();
    for m in route::targets() {
        if let Ok(sess) = member(&mut g, m) {
            if !sess.held.contains(&hash) && !sess.new_blobs.iter().any(|(h, _)| *h == hash) {
                sess.new_blobs.push((hash, data.to_vec()));
            }
        }
    }
    Value::Blob(r)
}

/// At exit: the last answer (errors the program never synchronized for are said), the
/// session closed, the counts written.
extern "C" fn at_exit() {
    finish();
}

/// [`at_exit`]'s work, once (a signal that ends the program does it first: `signals.rs`).
pub(super) fn finish() {
    if FORKED.load(Ordering::Relaxed) {
        return;
    }
    let mut g = lock();
    if matches!(g.as_ref(), Some(Ok(v)) if v.iter().all(|s| s.closed)) {
        return;
    }
    let Some(Ok(v)) = g.as_mut() else {
        if let (Some((endpoint, why)), Some(path)) = (UNREACHED.get(), std::env::var_os(ENV_STATS)) {
            let j = serde_json::json!({
                "endpoint": endpoint,
                "calls": CALLS.load(Ordering::Relaxed),
                "failed": format!("cannot connect: {why}"),
                "failure_said": true,
            });
            let _ = std::fs::write(path, format!("{j}\n"));
        }
        return;
    };
    let mut closed = Vec::with_capacity(v.len());
    for sess in v.iter_mut() {
        closed.push(sess.close());
    }
    FLUSH.notify_all();
    stats::write(v, &closed);
    super::waits::write();
    super::tables::print_counts();
}

impl Session {
    /// The last answer (errors the program never synchronized for are said), then the session
    /// closed; the server's totals for it (its `Closed`).
    fn close(&mut self) -> Option<protocol::SessionStats> {
        if self.closed {
            return None;
        }
        if self.failed.is_none() && (self.unanswered || !self.pending.is_empty() || !self.refs.is_empty()) {
            self.waits += 1;
            match self.send(true) {
                Ok(Some(a)) => {
                    for e in a.errors.iter().take(3) {
                        eprintln!(
                            "gpuless: call #{} {} failed on the server: {} ({})",
                            e.seq, e.function, e.message, e.code
                        );
                    }
                }
                Ok(None) => {}
                Err(e) => self.fail(&e),
            }
        }
        let mut closed = None;
        if let Some(conn) = self.conn.as_ref() {
            match link::lock(conn).close() {
                Ok(stats) => closed = Some(stats),
                Err(e) => eprintln!("gpuless: closing the session at {}: {e}", self.endpoint),
            }
        }
        self.closed = true;
        closed
    }
}
