//! Host functions in client mode (`cuLaunchHostFunc`, `cuStreamAddCallback`, graph host nodes
//! added directly or captured from a stream): the program's function runs here, in stream order
//! on the server.
//!
//! The record that registers one goes to the server like any other; its sequence number is the
//! function's id. Where it is reached in its stream (or graph), the executor sends a host call
//! ([`HostCall`]) and holds that stream until the client says the function returned
//! (docs/PROTOCOL.md). The client runs the functions of a host call on a thread of its own, as
//! the driver runs them on one of its threads, after writing the device-to-host results that
//! came with the call (copies before the function in its stream).
//!
//! Host calls arrive on the session's connection: a thread that waits for an answer runs those
//! that come first; while nobody waits, a poller thread ([`poller`]) watches the socket. A
//! host function that calls CUDA gets `CUDA_ERROR_NOT_PERMITTED`, as the driver answers.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{LazyLock, Mutex};

use gpuless_analyzer::api::ApiFunction;
use gpuless_traces::protocol::HostCall;

/// `CUDA_ERROR_NOT_PERMITTED`.
pub(crate) const NOT_PERMITTED: u32 = 800;
/// `CU_GRAPH_NODE_TYPE_HOST`.
const NODE_TYPE_HOST: u32 = 3;
/// Where `CUgraphNodeParams`' union starts.
const NODE_MEMBER_AT: u64 = 16;

/// How the program's function is called.
#[derive(Clone, Copy)]
enum Form {
    /// `void (*)(void *userData)`: `cuLaunchHostFunc`, host nodes.
    HostFn,
    /// `void (*)(CUstream, CUresult, void *userData)`: `cuStreamAddCallback` on this stream.
    Callback { stream: u64 },
    /// A late read: `len` bytes of pinned memory at `src`, read when the stream reaches the
    /// host-to-device copy that reads them ([`late_read`]).
    LateRead { src: u64, len: u64 },
    /// A late read of a graph memcpy node's host rows, at every launch.
    LateRows(gpuless_analyzer::api::structs::Copy),
}

#[derive(Clone, Copy)]
struct Registration {
    func: u64,
    user_data: u64,
    form: Form,
    /// Registered on this stream outside a capture: it runs once.
    stream: Option<u64>,
    /// Part of a graph (captured): called at every launch.
    captured: bool,
}

/// Per stream, host functions registered outside a capture that have not run yet: a copy
/// from pinned memory queued behind one reads its source when the stream reaches it.
static WAITING: LazyLock<Mutex<HashMap<u64, usize>>> = LazyLock::new(Default::default);
/// Streams whose capture in progress has a host function: a copy from pinned memory captured
/// after it reads its source at every launch.
static CAPTURED: LazyLock<Mutex<std::collections::HashSet<u64>>> = LazyLock::new(Default::default);
/// Per capturing stream, the host function captured last (its id): late reads captured after
/// it are read when it returned, at every launch.
static LAST_CAPTURED: LazyLock<Mutex<HashMap<u64, u64>>> = LazyLock::new(Default::default);
/// A late read: (copy seq, source, length).
type LateRead = (u64, u64, u64);
/// Late reads attached to a host function (its id → its late reads).
static ATTACHED: LazyLock<Mutex<HashMap<u64, Vec<LateRead>>>> = LazyLock::new(Default::default);
/// Graph host nodes (the program's node handles): a memcpy node that depends on one reads its
/// host source at every launch.
static HOST_NODES: LazyLock<Mutex<std::collections::HashSet<u64>>> = LazyLock::new(Default::default);

/// Every host function registered, by id (a graph's host node is called at every launch, so
/// registrations stay).
static REGISTERED: LazyLock<Mutex<HashMap<u64, Registration>>> = LazyLock::new(Default::default);
/// The poller and the connection's handler are set up (at the first registration).
static STARTED: AtomicBool = AtomicBool::new(false);
/// The thread that runs the program's functions.
static RUNNER: LazyLock<Mutex<Option<mpsc::Sender<Job>>>> = LazyLock::new(Default::default);

/// Host functions to run, in order (with the late reads attached to each), and where the bytes
/// of the late reads go back.
type Job = (Vec<(u64, Registration, Vec<(u64, u64, u64)>)>, mpsc::SyncSender<Vec<(u64, Vec<u8>)>>);

thread_local! {
    static IN_HOST_FUNCTION: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is running one of the program's host functions (its CUDA calls are
/// not permitted).
pub(crate) fn in_host_function() -> bool {
    IN_HOST_FUNCTION.with(Cell::get)
}

/// A host function called CUDA: the driver's answer, said once.
pub(crate) fn refused_in_host_function(f: &ApiFunction) -> u32 {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        eprintln!(
            "gpuless: {} was called from a host function (cuLaunchHostFunc, cuStreamAddCallback, a host \
             node): CUDA_ERROR_NOT_PERMITTED, as the driver answers (host functions must not call CUDA)",
            f.name
        );
    }
    NOT_PERMITTED
}

/// Whether `f` registers a host function (its record's sequence number is the function's id).
pub(crate) fn registers(f: &ApiFunction) -> bool {
    matches!(f.name, "cuLaunchHostFunc" | "cuStreamAddCallback" | "cuGraphAddHostNode" | "cuGraphAddNode")
}

/// Notes the host function that call `f` (record `seq`, sent to the server) registered.
///
/// # Safety
/// `raw` are the program's arguments to `f`, which succeeded.
pub(crate) unsafe fn registered(f: &ApiFunction, raw: &[u64], seq: u64) {
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    // SAFETY (reads): the program's parameter structs, valid for the call.
    let once = (!super::local::is_capturing(w(0))).then_some(w(0));
    let r = unsafe {
        match f.name {
            "cuLaunchHostFunc" => {
                Registration { func: w(1), user_data: w(2), form: Form::HostFn, stream: once, captured: once.is_none() }
            }
            "cuStreamAddCallback" => Registration {
                func: w(1),
                user_data: w(2),
                form: Form::Callback { stream: w(0) },
                stream: once,
                captured: once.is_none(),
            },
            "cuGraphAddHostNode" if w(4) != 0 => {
                let p = w(4) as *const u64;
                let (func, user_data) = (p.read_unaligned(), p.add(1).read_unaligned());
                Registration { func, user_data, form: Form::HostFn, stream: None, captured: true }
            }
            "cuGraphAddNode" => {
                // (phGraphNode, hGraph, dependencies, [dependencyData,] numDependencies, nodeParams)
                let p = raw.last().copied().unwrap_or(0);
                if p == 0 || (p as *const u32).read_unaligned() != NODE_TYPE_HOST {
                    return;
                }
                let m = (p + NODE_MEMBER_AT) as *const u64;
                let (func, user_data) = (m.read_unaligned(), m.add(1).read_unaligned());
                Registration { func, user_data, form: Form::HostFn, stream: None, captured: true }
            }
            _ => return,
        }
    };
    match (r.stream, f.name) {
        (Some(s), _) => *WAITING.lock().unwrap_or_else(|e| e.into_inner()).entry(s).or_insert(0) += 1,
        (None, "cuLaunchHostFunc" | "cuStreamAddCallback") => {
            CAPTURED.lock().unwrap_or_else(|e| e.into_inner()).insert(w(0));
            LAST_CAPTURED.lock().unwrap_or_else(|e| e.into_inner()).insert(w(0), seq);
        }
        // SAFETY: the node handle the call wrote.
        (None, _) if w(0) != 0 => {
            HOST_NODES.lock().unwrap_or_else(|e| e.into_inner()).insert(unsafe { *(w(0) as *const u64) });
        }
        _ => {}
    }
    REGISTERED.lock().unwrap_or_else(|e| e.into_inner()).insert(seq, r);
    if !STARTED.swap(true, Ordering::AcqRel) {
        start();
    }
    // The server reaches it only once its record is there.
    super::session::send_pending();
}

/// Whether a host-to-device copy on `stream` from `src` reads its source late: pinned memory
/// (which the device reads when the copy runs) behind a host function of that stream that has
/// not run yet (which may write it).
/// Captured after a host function, it reads it at every launch of the graph.
pub(crate) fn reads_late(stream: u64, src: u64) -> bool {
    if !STARTED.load(Ordering::Acquire) {
        return false;
    }
    let behind = if super::local::is_capturing(stream) {
        CAPTURED.lock().unwrap_or_else(|e| e.into_inner()).contains(&stream)
    } else {
        WAITING.lock().unwrap_or_else(|e| e.into_inner()).get(&stream).is_some_and(|&n| n > 0)
    };
    behind && super::host::is_pinned(src)
}

/// A stream begins a capture: host functions captured before belong to other graphs.
pub(crate) fn began_capture(stream: u64) {
    CAPTURED.lock().unwrap_or_else(|e| e.into_inner()).remove(&stream);
    LAST_CAPTURED.lock().unwrap_or_else(|e| e.into_inner()).remove(&stream);
}

/// Whether a graph node with these dependencies (the program's array of `n` handles) comes
/// after a host node: a memcpy node's host source is then read at every launch.
///
/// # Safety
/// `deps` is null or points at `n` node handles.
pub(crate) unsafe fn after_host_node(deps: u64, n: u64) -> bool {
    if deps == 0 || n == 0 || !STARTED.load(Ordering::Acquire) {
        return false;
    }
    // SAFETY: the caller's contract.
    let d = unsafe { std::slice::from_raw_parts(deps as *const u64, n.min(1 << 16) as usize) };
    let g = HOST_NODES.lock().unwrap_or_else(|e| e.into_inner());
    d.iter().any(|h| g.contains(h))
}

/// Notes the late reads of memcpy node `seq` (sent with its source as an address, not bytes):
/// the device reads host memory at every launch of the graph.
pub(crate) fn late_rows(seq: u64, c: gpuless_analyzer::api::structs::Copy) {
    let r = Registration { func: 0, user_data: 0, form: Form::LateRows(c), stream: None, captured: true };
    REGISTERED.lock().unwrap_or_else(|e| e.into_inner()).insert(seq, r);
    if !STARTED.swap(true, Ordering::AcqRel) {
        start();
    }
}

/// Notes the late read of copy `seq` on `stream` (sent with its source as an address, not
/// bytes): captured after a host function, it is read when that function returned (the
/// executor attaches it there too); otherwise it is a host call of its own.
pub(crate) fn late_read(seq: u64, src: u64, len: u64, stream: u64) {
    let captured = super::local::is_capturing(stream);
    if captured {
        if let Some(&f) = LAST_CAPTURED.lock().unwrap_or_else(|e| e.into_inner()).get(&stream) {
            ATTACHED.lock().unwrap_or_else(|e| e.into_inner()).entry(f).or_default().push((seq, src, len));
            return;
        }
    }
    let r = Registration { func: 0, user_data: 0, form: Form::LateRead { src, len }, stream: None, captured };
    REGISTERED.lock().unwrap_or_else(|e| e.into_inner()).insert(seq, r);
}

/// Sets up each server's connection's handler and starts its poller.
fn start() {
    for link in super::session::links() {
        super::link::lock(&link).set_host_calls(Box::new(run));
        let _ = std::thread::Builder::new().name("gpuless-hostcalls".into()).spawn(move || poller(link));
    }
}

/// Runs a host call: its results are written where they go, then its functions run, in order,
/// on the runner thread; returns when they returned, with the bytes of its late reads.
fn run(c: &HostCall) -> Vec<(u64, Vec<u8>)> {
    {
        let mut t = super::session::targets();
        for (seq, bytes) in &c.outputs {
            // SAFETY: the program's buffers of copies before these functions in their stream.
            unsafe { t.deliver(*seq, bytes) };
        }
    }
    let regs: Vec<(u64, Registration, Vec<LateRead>)> = {
        let attached = ATTACHED.lock().unwrap_or_else(|e| e.into_inner());
        let mut g = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
        let mut w = WAITING.lock().unwrap_or_else(|e| e.into_inner());
        c.ids
            .iter()
            .filter_map(|id| {
                let r = g.get(id).copied()?;
                if let Some(s) = r.stream {
                    // Called once: its stream no longer waits for it.
                    g.remove(id);
                    if let Some(n) = w.get_mut(&s) {
                        *n = n.saturating_sub(1);
                    }
                }
                if matches!(r.form, Form::LateRead { .. }) && !r.captured {
                    g.remove(id);
                }
                Some((*id, r, attached.get(id).cloned().unwrap_or_default()))
            })
            .collect()
    };
    if regs.len() != c.ids.len() {
        eprintln!("gpuless: the server called host functions this client never registered ({:?})", c.ids);
    }
    let (done_tx, done_rx) = mpsc::sync_channel(1);
    if runner().send((regs, done_tx)).is_ok() {
        return done_rx.recv().unwrap_or_default();
    }
    Vec::new()
}

/// The runner thread's queue (started at first use).
fn runner() -> mpsc::Sender<Job> {
    let mut g = RUNNER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(tx) = g.as_ref() {
        return tx.clone();
    }
    let (tx, rx) = mpsc::channel::<Job>();
    let _ = std::thread::Builder::new().name("gpuless-hostfn".into()).spawn(move || {
        IN_HOST_FUNCTION.with(|c| c.set(true));
        for (regs, done) in rx {
            let mut read = Vec::new();
            for (id, r, attached) in regs {
                // SAFETY: the program's function pointers with the arguments it registered, and
                // its pinned memory (alive while a copy from it is queued).
                unsafe {
                    match r.form {
                        Form::LateRead { src, len } => {
                            read.push((id, std::slice::from_raw_parts(src as *const u8, len as usize).to_vec()));
                        }
                        Form::LateRows(c) => read.push((id, super::copies::gather_rows(&c))),
                        Form::HostFn => {
                            let f: extern "C" fn(u64) = std::mem::transmute(r.func as usize);
                            f(r.user_data);
                        }
                        Form::Callback { stream } => {
                            let f: extern "C" fn(u64, u32, u64) = std::mem::transmute(r.func as usize);
                            f(stream, 0, r.user_data);
                        }
                    }
                    // Sources the function may have written, read now that it returned.
                    for (seq, src, len) in attached {
                        read.push((seq, std::slice::from_raw_parts(src as *const u8, len as usize).to_vec()));
                    }
                }
            }
            let _ = done.send(read);
        }
    });
    *g = Some(tx.clone());
    tx
}

/// Watches the connection while nobody waits for an answer: a host call that arrives then runs
/// at once (the program may be waiting for what its function does, without a CUDA call).
///
/// Over TLS the socket polled is the TCP one: a wake-up may bring only part of a record or one
/// without data, and a waiting thread's read may leave decrypted bytes in the session that the
/// socket no longer shows; [`Connection::pump_host_calls`] looks at both without waiting.
///
/// [`Connection::pump_host_calls`]: gpuless_traces::protocol::Connection::pump_host_calls
fn poller(link: super::link::Link) {
    let (fd, rings) = {
        let c = super::link::lock(&link);
        (c.poll_fd(), c.uses_rings())
    };
    loop {
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd; a timeout bounds the wait (bytes already read by a waiting
        // thread, or held decrypted by a TLS session, are looked at below). Frames through
        // shared-memory rings wake no poll: the socket beside them is looked at every 100 µs.
        let n = if rings {
            std::thread::sleep(std::time::Duration::from_micros(100));
            unsafe { libc::poll(&mut p, 1, 0) }
        } else {
            unsafe { libc::poll(&mut p, 1, 20) }
        };
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
        if p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            return;
        }
        if super::session::ended() {
            return;
        }
        let mut conn = super::link::lock(&link);
        if let Err(e) = conn.pump_host_calls() {
            drop(conn);
            super::session::lost(&e.to_string());
            return;
        }
    }
}
