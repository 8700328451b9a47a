//! Async device-to-host copies (`cuMemcpyDtoHAsync`; `cuMemcpyAsync` into host memory,
//! `unified.rs`; 2D/3D copies into host rows, gathered packed): their bytes reach the host only when
//! the stream has synchronized. Their records wait here and are written, with the result's
//! hash, once a synchronization guarantees the copy is complete. A trace therefore holds these
//! records in completion order; readers order records by `seq`.

use std::sync::Mutex;

use gpuless_traces::completion::Completion;

use gpuless_analyzer::api::structs::Copy;
use gpuless_analyzer::api::{ApiFunction, ArgKind, HandleKind, SyncClass};
use gpuless_traces::CallRecord;

struct Pending {
    record: CallRecord,
    /// (index into `record.results`, host address, length) of each host buffer to hash.
    buffers: Vec<(usize, u64, usize)>,
    /// (index into `record.results`, the copy) of a 2D/3D copy's host rows to hash, packed.
    rows: Option<(usize, Copy)>,
    /// A host-to-device copy whose source the stream reads late (`late.rs`).
    late: Option<crate::late::Late>,
    /// A graph launch whose copies read host memory late (`late_graph.rs`).
    late_launch: Option<crate::late_graph::LateLaunch>,
    /// (index into `buffers`, its result) of buffers a later copy overwrites before this one
    /// completes (`late_download.rs` keeps their bytes).
    kept: Vec<(usize, Kept)>,
}

/// The result of a buffer whose bytes were kept before a later copy overwrote them: made once a
/// synchronization covered the copy (the read ran before it).
pub struct Kept(pub Box<dyn FnOnce() -> gpuless_traces::Value + Send>);

/// Copies in flight and what completes them: the rule a replay checks them by
/// ([`gpuless_traces::completion`]).
static TABLE: Mutex<Option<Completion<Pending>>> = Mutex::new(None);

fn with_table<R>(f: impl FnOnce(&mut Completion<Pending>) -> R) -> Option<R> {
    let mut t = TABLE.lock().ok()?;
    Some(f(t.get_or_insert_with(Completion::default)))
}

/// The value of `f`'s first argument that is a handle of `kind`.
fn handle(f: &ApiFunction, raw: &[u64], kind: HandleKind) -> Option<u64> {
    f.args.iter().position(|a| a.kind == ArgKind::Handle(kind)).and_then(|i| raw.get(i).copied())
}

/// Whether `f`'s first argument is a handle of `kind` (the stream or event it acts on).
fn acts_on(f: &ApiFunction, kind: HandleKind) -> bool {
    f.args.first().is_some_and(|a| a.kind == ArgKind::Handle(kind))
}

/// Whether `f` acts on the stream of its first argument (`cuStreamSynchronize`,
/// `cuStreamQuery`).
pub(crate) fn acts_on_stream(f: &ApiFunction) -> bool {
    acts_on(f, HandleKind::Stream)
}

/// Whether `f` records an event on a stream (`cuEventRecord`, `cuEventRecordWithFlags`): it
/// enqueues work, acts on an event and names a stream.
fn records_event(f: &ApiFunction) -> bool {
    f.sync == SyncClass::Async
        && acts_on(f, HandleKind::Event)
        && f.args.iter().any(|a| a.kind == ArgKind::Handle(HandleKind::Stream))
}

/// Whether `f` makes a stream wait for an event (`cuStreamWaitEvent`): it enqueues work, acts
/// on a stream and names an event.
fn waits_for_event(f: &ApiFunction) -> bool {
    f.sync == SyncClass::Async
        && acts_on(f, HandleKind::Stream)
        && f.args.iter().any(|a| a.kind == ArgKind::Handle(HandleKind::Event))
}

/// Holds the record of a successful async device-to-host copy until its data is on the host.
pub fn defer(f: &ApiFunction, raw: &[u64], record: CallRecord) {
    let stream = handle(f, raw, HandleKind::Stream).unwrap_or(0);
    let mut buffers: Vec<(usize, u64, usize)> = f
        .out_args()
        .enumerate()
        .filter_map(|(k, (i, a))| match a.kind {
            ArgKind::HostBuf(len) => {
                let n = match len {
                    gpuless_analyzer::api::BufLen::Arg(j) => raw.get(j as usize).copied().unwrap_or(0),
                    gpuless_analyzer::api::BufLen::Fixed(n) => n as u64,
                };
                Some((k, raw.get(i).copied().unwrap_or(0), n as usize))
            }
            _ => None,
        })
        .collect();
    buffers.extend(crate::unified::async_host_outs(f, raw, &record.args));
    let rows = crate::capture::async_host_rows(f, raw);
    with_table(|t| t.push(stream, Pending { record, buffers, rows, late: None, late_launch: None, kept: Vec::new() }));
}

/// Holds the record of an async host-to-device copy whose source is read when the stream
/// reaches it (`late.rs`) until a synchronization covers it.
pub fn defer_late(f: &ApiFunction, raw: &[u64], record: CallRecord, late: crate::late::Late) {
    let stream = handle(f, raw, HandleKind::Stream).unwrap_or(0);
    with_table(|t| {
        let p =
            Pending { record, buffers: Vec::new(), rows: None, late: Some(late), late_launch: None, kept: Vec::new() };
        t.push(stream, p)
    });
}

/// Holds the record of a graph launch whose copies read host memory late (`late_graph.rs`)
/// until a synchronization covers the reads queued after it.
pub fn defer_late_launch(f: &ApiFunction, raw: &[u64], record: CallRecord, l: crate::late_graph::LateLaunch) {
    let stream = handle(f, raw, HandleKind::Stream).unwrap_or(0);
    let p = Pending { record, buffers: Vec::new(), rows: None, late: None, late_launch: Some(l), kept: Vec::new() };
    with_table(|t| t.push(stream, p));
}

/// Whether a copy is pending on `stream`.
pub fn any_on(stream: u64) -> bool {
    with_table(|t| t.on_stream_mut(stream).next().is_some()).unwrap_or(false)
}

/// The copies pending on `stream` whose host buffers overlap `[lo, lo + n)` and whose bytes are
/// not kept yet: `keep(address, length)` queues the read of one (`late_download.rs`) and gives
/// its result to come.
pub fn overlapping(stream: u64, lo: u64, n: u64, mut keep: impl FnMut(u64, usize) -> Option<Kept>) {
    with_table(|t| {
        for p in t.on_stream_mut(stream) {
            for (b, &(_, ptr, len)) in p.buffers.iter().enumerate() {
                let overlaps = ptr != 0 && ptr < lo.saturating_add(n) && lo < ptr.saturating_add(len as u64);
                if overlaps && !p.kept.iter().any(|k| k.0 == b) {
                    if let Some(k) = keep(ptr, len) {
                        p.kept.push((b, k));
                    }
                }
            }
        }
    });
}

/// Whether [`after`] has anything to do for calls of `f`: synchronizations, stream and event
/// queries, event records, waits for events.
pub fn completes(f: &ApiFunction) -> bool {
    match f.sync {
        SyncClass::CtxSync => true,
        SyncClass::StreamSync | SyncClass::StateQuery if acts_on(f, HandleKind::Stream) => true,
        SyncClass::EventSync | SyncClass::StateQuery if acts_on(f, HandleKind::Event) => true,
        _ => records_event(f) || waits_for_event(f),
    }
}

/// Called after every successful call for which [`completes`] holds: a synchronization
/// completes the copies it covers.
pub fn after(f: &ApiFunction, raw: &[u64]) {
    let stream = || handle(f, raw, HandleKind::Stream).unwrap_or(0);
    let event = || handle(f, raw, HandleKind::Event).unwrap_or(0);
    match f.sync {
        SyncClass::CtxSync => crate::late::synchronized(None),
        SyncClass::StreamSync => crate::late::synchronized(Some(stream())),
        _ => {}
    }
    let done = with_table(|t| match f.sync {
        SyncClass::CtxSync => t.sync_all(),
        SyncClass::StreamSync | SyncClass::StateQuery if acts_on(f, HandleKind::Stream) => t.sync_stream(stream()),
        SyncClass::EventSync | SyncClass::StateQuery if acts_on(f, HandleKind::Event) => t.sync_event(event()),
        _ => {
            if records_event(f) {
                t.record_event(event(), stream());
            } else if waits_for_event(f) {
                t.wait_event(stream(), event());
            }
            Vec::new()
        }
    });
    for p in done.unwrap_or_default() {
        emit(p, true);
    }
}

fn emit(mut p: Pending, complete: bool) {
    if let Some(l) = p.late.take() {
        crate::late::finish(l, &mut p.record, complete);
    }
    if let Some(l) = p.late_launch.take() {
        crate::late_graph::finish(l, &mut p.record, complete);
    }
    if complete {
        for (b, &(k, ptr, n)) in p.buffers.iter().enumerate() {
            if ptr == 0 {
                continue;
            }
            // Overwritten by a later copy before this synchronization: the bytes kept.
            if let Some(i) = p.kept.iter().position(|x| x.0 == b) {
                let (_, kept) = p.kept.swap_remove(i);
                if let Some(slot) = p.record.results.get_mut(k) {
                    *slot = (kept.0)();
                }
                continue;
            }
            // SAFETY: the program handed this buffer to the copy and the synchronization that
            // just returned guarantees the copy has written it; it is read, not kept.
            let v = unsafe { crate::unified::written(ptr, n) };
            if let Some(slot) = p.record.results.get_mut(k) {
                *slot = v;
            }
        }
        if let Some((k, c)) = &p.rows {
            // SAFETY: the program's destination rows of the copy, complete (as above).
            if let Some(bytes) = unsafe { crate::capture::gather(c, &c.dst) } {
                // SAFETY: `bytes` is ours, complete.
                let v = unsafe { crate::unified::written(bytes.as_ptr() as u64, bytes.len()) };
                if let Some(slot) = p.record.results.get_mut(*k) {
                    *slot = v;
                }
            }
        }
    }
    crate::batches::emit(p.record);
}

/// Writes the records still waiting (no synchronization came): their results stay unknown.
pub fn flush_unsynchronized() {
    let rest = with_table(Completion::sync_all).unwrap_or_default();
    for p in rest {
        emit(p, false);
    }
}
