//! What goes out: the program's calls as records ([`push`]), and besides them managed memory
//! the host wrote and the pull that ends a wait (`remote/shared.rs`), gpuless's own records,
//! blobs; a segment sent ([`Session::send`], waiting for its answer or not) and the flusher that
//! sends one without waiting; and where the bytes of asynchronous device-to-host copies go when
//! they come back ([`Targets`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use gpuless_analyzer::api::ApiFunction;
use gpuless_traces::protocol::Answer;
use gpuless_traces::{BlobKind, BlobRef, CallRecord, Function, Hash128, Value};

use super::base::{batch, lock, member, open_session, Guard, Members, Session, FLUSH, LOST};
use crate::hooks::HOOKS;
use crate::remote::copies::Target;
use crate::remote::link::{self, Outgoing};
use crate::remote::{route, shared};
use crate::state;

/// Where the bytes of asynchronous device-to-host copies go when they come back: in an answer,
/// or with a host call (which a waiting thread, holding the session, or the host-call poller,
/// holding only the connection, receives). A leaf lock: nothing else is taken under it.
#[derive(Default)]
pub(crate) struct Targets {
    /// Copies whose bytes have not arrived: seq → where they go.
    d2h: HashMap<u64, Target>,
    /// Copies captured into graphs: their bytes come back after every launch of the graph, so
    /// their targets stay.
    graph_d2h: HashSet<u64>,
}

static TARGETS: std::sync::LazyLock<Mutex<Targets>> = std::sync::LazyLock::new(Default::default);

/// The targets, locked.
pub(crate) fn targets() -> MutexGuard<'static, Targets> {
    TARGETS.lock().unwrap_or_else(|e| e.into_inner())
}

impl Targets {
    pub(super) fn add(&mut self, seq: u64, target: Target, captured: bool) {
        self.d2h.insert(seq, target);
        if captured {
            self.graph_d2h.insert(seq);
        }
    }

    /// Whether bytes of a copy outside graphs have yet to come back.
    pub(super) fn awaited(&self) -> bool {
        self.d2h.keys().any(|seq| !self.graph_d2h.contains(seq))
    }

    /// Writes the bytes of copy `seq` where they go (nothing for a copy not awaited).
    ///
    /// # Safety
    /// The program's buffer or rows of an asynchronous copy, which it reads only after the
    /// synchronization (or in the host function) that delivers them.
    pub(crate) unsafe fn deliver(&mut self, seq: u64, bytes: &[u8]) {
        let target = if self.graph_d2h.contains(&seq) { self.d2h.get(&seq).copied() } else { self.d2h.remove(&seq) };
        // SAFETY (both): the caller's contract.
        match target {
            // Shared memory: the executor wrote its copy too (`replay/exec.rs`, `mirror_output`).
            Some(Target::Buffer(host, len)) if shared::write_synced(host, &bytes[..bytes.len().min(len)]) => {}
            Some(Target::Buffer(host, len)) => unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), host as *mut u8, bytes.len().min(len))
            },
            Some(Target::Rows(c)) => unsafe { crate::remote::copies::scatter_rows(&c, bytes) },
            None => {}
        }
    }
}

/// Pinned memory the device uses from now on (`host.rs`): the executor backs it with device
/// memory at its address before the next record (whose dirty pages follow). `false` without a
/// session.
pub(crate) fn mirror_host(addr: u64, len: u64) -> bool {
    let mut g = lock();
    match open_session(&mut g) {
        Ok(sess) => {
            sess.push_other(gpuless_traces::hostview::HOST_MIRROR, vec![Value::DevPtr(addr), Value::Size(len)]);
            true
        }
        Err(_) => false,
    }
}

impl Session {
    /// What goes before the next record of the program: the device it runs on, where that
    /// changed (a session of several devices, [`gpuless_traces::devices::SET_DEVICE`]), and
    /// the managed memory the host wrote.
    pub(super) fn before_record(&mut self) {
        self.switch_device();
        self.push_dirty();
    }

    /// The calling thread's current device, where it is not the one the last record ran on.
    pub(super) fn switch_device(&mut self) {
        if self.welcome.more.devices.is_empty() {
            return;
        }
        let d = route::current().device;
        if d != self.device {
            self.device = d;
            self.push_other(gpuless_traces::devices::SET_DEVICE, vec![Value::Size(u64::from(d))]);
        }
    }

    /// Managed memory the host wrote goes before the next record (`shared.rs`).
    fn push_dirty(&mut self) {
        if !shared::dirty() {
            return;
        }
        // Each server's own: the allocation's address says its device (`route.rs`).
        let me = self.member;
        let mine = |start: u64| route::device_of_address(start).map_or(0, |d| route::split(d).member) == me;
        for (addr, bytes) in shared::take_dirty(mine) {
            let data = self.keep_blob(BlobKind::HostToDevice, &bytes);
            self.push_other(gpuless_traces::hostview::HOST_MEMORY, vec![Value::DevPtr(addr), data]);
        }
    }

    /// A wait ends with the pull of what the device changed in managed memory (`shared.rs`).
    pub(super) fn push_pull(&mut self) {
        self.pull = shared::active().then(|| self.push_other(gpuless_traces::hostview::HOST_PULL, Vec::new()));
        self.pulls += u64::from(self.pull.is_some());
    }

    /// Queues a record of gpuless's own (not a driver call); its sequence number.
    pub(super) fn push_other(&mut self, name: &str, args: Vec<Value>) -> u64 {
        let seq = state::next_seq();
        let mut rec = CallRecord::new(seq, gpuless_analyzer::api::ApiLevel::Other, Function::Other(name.to_string()));
        rec.thread = crate::lane::tid();
        rec.args = args;
        self.pending.push(rec);
        self.pieces.pushed(&mut self.pending, &mut self.refs);
        seq
    }

    /// A blob of `data`, kept until the segment that refers to it goes out.
    fn keep_blob(&mut self, kind: BlobKind, data: &[u8]) -> Value {
        let hash = Hash128::of(data);
        if !self.held.contains(&hash) && !self.new_blobs.iter().any(|(h, _)| *h == hash) {
            self.new_blobs.push((hash, data.to_vec()));
        }
        let _ = kind;
        Value::Blob(BlobRef { hash, len: data.len() as u64 })
    }
}

/// A record of the program's call `f` through hook `slot`, numbered `seq`.
pub(crate) fn record(slot: usize, f: &ApiFunction, seq: u64, args: Vec<Value>, results: Vec<Value>) -> CallRecord {
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

/// Queues a successful call's record (a full segment goes out without waiting); the status
/// and the record's sequence number.
pub(crate) fn push(
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
    /// Takes what is queued to be sent (the blobs counted as held from now on); `all`: the
    /// open piece too (the session waits for an answer, or closes).
    pub(super) fn take(&mut self, all: bool) -> Outgoing {
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
    pub(super) fn send(&mut self, want: bool) -> Result<Option<Answer>, String> {
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
}

unsafe extern "C" {
    /// The program's C stdout (glibc's `stdout`).
    static mut stdout: *mut libc::FILE;
}

/// Writes what the session's kernels printed to the program's stdout, through its C stream as
/// the driver does, so that it lands in order with what the program printed itself.
fn print_device_output(bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    // SAFETY: glibc's stdout stream, written and flushed as the driver writes device printf.
    unsafe {
        let out = stdout;
        if !out.is_null() {
            libc::fwrite(bytes.as_ptr().cast(), 1, bytes.len(), out);
            libc::fflush(out);
        }
    }
}

/// Sends what member `m` holds queued (the session's lock `g` is let go while the segment is
/// written) and takes the lock again.
pub(super) fn send_queued(mut g: Guard, m: usize) -> Guard {
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
pub(super) fn flusher(after: Duration) {
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
