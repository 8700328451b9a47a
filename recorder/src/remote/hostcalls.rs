//! Host calls in client mode: the server calls the program's host functions (`cuLaunchHostFunc`,
//! `cuStreamAddCallback`, graph host nodes; their books: `hostfn.rs`), and they run here, in
//! stream order on the server.
//!
//! Where a host function is reached in its stream (or graph), the executor sends a host call
//! ([`HostCall`]) and holds that stream until the client says the function returned
//! (docs/PROTOCOL.md). The client runs the functions of a host call on a thread of its own, as
//! the driver runs them on one of its threads, after writing the device-to-host results that
//! came with the call (copies before the function in its stream).
//!
//! Host calls arrive on the session's connection: a thread that waits for an answer runs those
//! that come first; while nobody waits, a poller thread ([`poller`]) watches the socket. Above
//! the session: the first registration sets the connection's handler up and starts the poller.

use std::sync::mpsc;
use std::sync::{LazyLock, Mutex};

use gpuless_analyzer::api::ApiFunction;
use gpuless_traces::protocol::HostCall;

use super::hostfn::{self, Form, LateRead, Registration};
use super::{copies, link, session};

/// The thread that runs the program's functions.
static RUNNER: LazyLock<Mutex<Option<mpsc::Sender<Job>>>> = LazyLock::new(Default::default);

/// Host functions to run, in order (with the late reads attached to each), and where the bytes
/// of the late reads go back.
type Job = (Vec<(u64, Registration, Vec<LateRead>)>, mpsc::SyncSender<Vec<(u64, Vec<u8>)>>);

/// Notes the host function that call `f` (record `seq`, sent to the server) registered
/// ([`hostfn::registered`]); the first sets up the host calls, and the record goes out now (the
/// server reaches the function only once its record is there).
///
/// # Safety
/// `raw` are the program's arguments to `f`, which succeeded.
pub(crate) unsafe fn registered(f: &ApiFunction, raw: &[u64], seq: u64) {
    // SAFETY: forwarded from the caller.
    if !unsafe { hostfn::registered(f, raw, seq) } {
        return;
    }
    if hostfn::first_start() {
        start();
    }
    // The server reaches it only once its record is there.
    session::send_pending();
}

/// Notes the late reads of memcpy node `seq` ([`hostfn::late_rows`]); the first sets up the
/// host calls.
pub(crate) fn late_rows(seq: u64, c: gpuless_analyzer::api::structs::Copy) {
    hostfn::late_rows(seq, c);
    if hostfn::first_start() {
        start();
    }
}

/// Sets up each server's connection's handler and starts its poller.
fn start() {
    for link in session::links() {
        link::lock(&link).set_host_calls(Box::new(run));
        let _ = std::thread::Builder::new().name("gpuless-hostcalls".into()).spawn(move || poller(link));
    }
}

/// Runs a host call: its results are written where they go, then its functions run, in order,
/// on the runner thread; returns when they returned, with the bytes of its late reads.
fn run(c: &HostCall) -> Vec<(u64, Vec<u8>)> {
    {
        let mut t = session::targets();
        for (seq, bytes) in &c.outputs {
            // SAFETY: the program's buffers of copies before these functions in their stream.
            unsafe { t.deliver(*seq, bytes) };
        }
    }
    let regs = hostfn::due(&c.ids);
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
        hostfn::runs_host_functions();
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
                        Form::LateRows(c) => read.push((id, copies::gather_rows(&c))),
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
fn poller(link: link::Link) {
    let (fd, rings) = {
        let c = link::lock(&link);
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
        if session::ended() {
            return;
        }
        let mut conn = link::lock(&link);
        if let Err(e) = conn.pump_host_calls() {
            drop(conn);
            session::lost(&e.to_string());
            return;
        }
    }
}
