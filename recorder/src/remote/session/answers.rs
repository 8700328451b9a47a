//! Waiting for the server: a call that needs its answer ([`wait`]), a checked call's status
//! ([`settle`]), gpuless's own records that ask or tell the executor ([`ask`], [`tell`]), and
//! what an answer brings ([`Session::apply`]: downloads, query values; what the session's
//! kernels printed is written as a segment's answer arrives, `outgoing.rs`).

use gpuless_analyzer::api::{ApiFunction, Direction, SyncClass};
use gpuless_traces::protocol::{Answer, CallError};
use gpuless_traces::Value;

use super::base::{batch, lock, member, open_session, Session, FLUSH, LOCAL, LOST};
use super::outgoing::{record, targets};
use crate::remote::{copies, graph_mem, host, link, local, memo, route, shared, waits};
use crate::state;
use std::sync::atomic::Ordering;

/// Sends everything queued, up to the call `seq` just queued, and waits for the answer: the
/// call's status as the server's driver gave it (or an earlier asynchronous error).
///
/// # Safety
/// `raw` are the program's arguments to `f`.
pub(crate) unsafe fn settle(seq: u64, f: &ApiFunction, raw: &[u64]) -> u32 {
    let mut g = lock();
    // Every server the call went to (code loaded as a library goes to all).
    for m in route::targets() {
        let sess = match member(&mut g, m) {
            Ok(sess) => sess,
            Err(st) => return st,
        };
        sess.waits += 1;
        *sess.waited_for.entry(f.name).or_insert(0) += 1;
        sess.push_pull();
        let st = match sess.send(true) {
            // SAFETY: forwarded from the caller.
            Ok(Some(a)) => unsafe { sess.apply(seq, f, raw, a) },
            Ok(None) => LOST,
            Err(e) => {
                sess.fail(&e);
                LOST
            }
        };
        if st != 0 {
            return st;
        }
    }
    0
}

/// A call that needs the server's result: sends everything queued with it and waits. The
/// sequence number is `None` when nothing was sent (no session, or answered here).
///
/// # Safety
/// `raw` are the program's arguments to `f`.
pub(crate) unsafe fn wait(slot: usize, f: &ApiFunction, raw: &[u64], args: Vec<Value>) -> (u32, Option<u64>) {
    let mut g = lock();
    let sess = match open_session(&mut g) {
        Ok(sess) => sess,
        Err(st) => return (st, None),
    };
    let completion = matches!(f.sync, SyncClass::StreamSync | SyncClass::EventSync | SyncClass::CtxSync)
        || (f.sync == SyncClass::StateQuery && f.args.iter().all(|a| a.dir != Direction::Out));
    // The stream a stream synchronization or query waits for (`None`: an event, the context).
    let stream = (f.sync != SyncClass::CtxSync && crate::pending::acts_on_stream(f))
        .then(|| f.args.iter().position(|a| a.kind == STREAM).and_then(|i| raw.get(i).copied()))
        .flatten();
    // Nothing queued, and no download whose bytes have yet to come back.
    let nothing_new = sess.pending.is_empty() && sess.refs.is_empty() && !targets().awaited();
    if completion && nothing_new && (!sess.outstanding || stream.is_some_and(|s| sess.complete.contains(&s))) {
        // Everything sent has completed (a context-wide synchronization answered since), or
        // this stream's work has (its own synchronization answered since).
        LOCAL.fetch_add(1, Ordering::Relaxed);
        return (0, None);
    }
    sess.before_record();
    let seq = state::next_seq();
    sess.pending.push(record(slot, f, seq, args, Vec::new()));
    sess.pieces.pushed(&mut sess.pending, &mut sess.refs);
    sess.push_pull();
    sess.waits += 1;
    *sess.waited_for.entry(f.name).or_insert(0) += 1;
    let (began, records) = (std::time::Instant::now(), sess.pending.len() as u64);
    let answer = match sess.send(true) {
        Ok(Some(a)) => {
            let since = std::mem::take(&mut sess.sent_since);
            if waits::on() {
                let up = sess.conn.as_ref().map_or(0, |c| link::lock(c).traffic.bytes_up);
                waits::note(f.name, records, since, began, a.exec_us, up);
            }
            a
        }
        Ok(None) => return (LOST, Some(seq)),
        Err(e) => {
            sess.fail(&e);
            return (LOST, Some(seq));
        }
    };
    // SAFETY: forwarded from the caller (the program's buffers and out-pointers).
    let st = unsafe { sess.apply(seq, f, raw, answer) };
    if st == 0 {
        match (f.sync, stream) {
            (SyncClass::CtxSync, _) => sess.outstanding = false,
            (_, Some(s)) if completion => {
                sess.complete.insert(s);
            }
            _ => {}
        }
    }
    (st, Some(seq))
}

/// A stream handle argument.
const STREAM: gpuless_analyzer::api::ArgKind =
    gpuless_analyzer::api::ArgKind::Handle(gpuless_analyzer::api::HandleKind::Stream);

impl Session {
    /// Takes an answer: bytes of asynchronous copies go to their host buffers; the result of
    /// the call `seq` that waited is returned (its bytes, query values or the first error).
    ///
    /// # Safety
    /// `raw` are the waiting call's arguments; the recorded host buffers are the program's.
    unsafe fn apply(&mut self, seq: u64, f: &ApiFunction, raw: &[u64], mut a: Answer) -> u32 {
        // SAFETY: forwarded from the caller.
        let own = unsafe { self.deliver(seq, std::mem::take(&mut a.outputs)) };
        let first_error = |errors: &[CallError]| errors.first().map(|e| e.code as u32);
        match f.sync {
            SyncClass::DeviceToHost | SyncClass::CopyAnyDirection => {
                if let Some(bytes) = own {
                    // SAFETY: the program's destination rows (a 2D/3D copy) or buffer of `len`
                    // bytes.
                    unsafe {
                        if !copies::scatter(f, raw, &bytes) {
                            if let Some((host, len)) = copies::host_buffer(f, raw) {
                                let b = &bytes[..bytes.len().min(len)];
                                // Shared memory: the executor wrote its copy too.
                                if !shared::write_synced(host, b) {
                                    std::ptr::copy_nonoverlapping(b.as_ptr(), host as *mut u8, b.len());
                                }
                            }
                        }
                    }
                }
                first_error(&a.errors).unwrap_or(0)
            }
            _ if f.server_answers() || f.sync == SyncClass::DeviceQuery => {
                match a.queries.iter().find(|q| q.seq == seq) {
                    Some(q) => {
                        if f.stable {
                            memo::keep(f, raw, q.status as u32, &q.values);
                            memo::remember_all_attributes(f, raw, &q.values);
                        }
                        // SAFETY: the program's out-pointers.
                        unsafe { write_query(f, raw, q.status as u32, &q.values) }
                    }
                    None => first_error(&a.errors).unwrap_or(LOST),
                }
            }
            _ => first_error(&a.errors).unwrap_or(0),
        }
    }

    /// Puts an answer's outputs where they go: the bytes of asynchronous copies into their host
    /// buffers, a pull's into managed memory; the output of record `seq` (the call that waited)
    /// is returned.
    ///
    /// # Safety
    /// The recorded host buffers are the program's, read by it only after this wait.
    unsafe fn deliver(&mut self, seq: u64, outputs: Vec<(u64, Vec<u8>)>) -> Option<Vec<u8>> {
        let mut own = None;
        let mut t = targets();
        for (s, bytes) in outputs {
            if s == seq {
                own = Some(bytes);
            } else if Some(s) == self.pull {
                shared::apply_pull(&bytes);
            } else {
                // SAFETY: the program reads them only after the synchronization waiting now.
                unsafe { t.deliver(s, &bytes) };
            }
        }
        own
    }
}

/// `CUDA_ERROR_DEINITIALIZED`: the session was closed at exit.
const DEINITIALIZED: u32 = 4;

/// Sends a record of gpuless's own (`name`, `args`: one the executor answers with an output
/// under its sequence number) after everything queued, and waits for the answer: that output,
/// or the status the waiting call `f` returns (the session is lost or closed; an earlier
/// call's error, or `LOST`, when the answer carries no output for it).
pub(crate) fn ask(f: &ApiFunction, name: &str, args: Vec<Value>) -> Result<Vec<u8>, u32> {
    let mut g = lock();
    let sess = match open_session(&mut g) {
        Ok(sess) => sess,
        Err(0) => return Err(DEINITIALIZED),
        Err(st) => return Err(st),
    };
    sess.before_record();
    let seq = sess.push_other(name, args);
    sess.push_pull();
    sess.waits += 1;
    *sess.waited_for.entry(f.name).or_insert(0) += 1;
    let mut a = match sess.send(true) {
        Ok(Some(a)) => a,
        Ok(None) => return Err(LOST),
        Err(e) => {
            sess.fail(&e);
            return Err(LOST);
        }
    };
    // SAFETY: the program's buffers of earlier asynchronous copies, complete at this answer.
    let own = unsafe { sess.deliver(seq, std::mem::take(&mut a.outputs)) };
    own.ok_or_else(|| a.errors.first().map_or(LOST, |e| e.code as u32))
}

/// Queues a record of gpuless's own (`name`, `args`: one the executor does not answer), to go
/// out with the session's next segment; the status a call gets without a session otherwise
/// (lost, closed, or a full segment that could not be sent).
pub(crate) fn tell(name: &str, args: Vec<Value>) -> Result<(), u32> {
    let mut g = lock();
    let sess = match open_session(&mut g) {
        Ok(sess) => sess,
        Err(0) => return Err(DEINITIALIZED),
        Err(st) => return Err(st),
    };
    let was = sess.sendable();
    sess.switch_device();
    sess.push_other(name, args);
    if was == 0 && sess.sendable() > 0 {
        FLUSH.notify_one();
    }
    if sess.pending.len() >= batch() {
        if let Err(e) = sess.send(false) {
            sess.fail(&e);
            return Err(LOST);
        }
    }
    Ok(())
}

/// Writes a query's answer (from the server or the memo) to the program's out-pointers.
///
/// # Safety
/// `raw` are the program's arguments to `f`.
pub(crate) unsafe fn write_query(f: &ApiFunction, raw: &[u64], status: u32, values: &[u64]) -> u32 {
    if status != 0 {
        return status;
    }
    // SAFETY (all): the program's out-pointers.
    unsafe {
        if f.name.starts_with("cuPointerGetAttribute") {
            host::write_pointer_answer(f, raw, values);
        } else if f.name == "cuMemPoolGetAttribute" {
            // The reuse policies (attributes 0-2) are ints, the rest 64-bit.
            let (attr, out) = (raw.get(1).copied().unwrap_or(0), raw.get(2).copied().unwrap_or(0));
            if let (Some(&v), true) = (values.first(), out != 0) {
                if attr <= 2 {
                    std::ptr::write_unaligned(out as *mut u32, v as u32);
                } else {
                    std::ptr::write_unaligned(out as *mut u64, v);
                }
            }
        } else if matches!(f.name, "cuGraphMemAllocNodeGetParams" | "cuGraphMemFreeNodeGetParams") {
            graph_mem::write_node_answer(f, raw, values);
        } else if f.name == "cuStreamGetCaptureInfo" {
            local::write_capture_info(f, raw, values);
        } else if f.gpu_answers {
            return local::write_answer(f, raw, values);
        } else {
            local::write_outs(f, raw, values);
        }
    }
    0
}
