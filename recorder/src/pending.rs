//! Async device-to-host copies (`cuMemcpyDtoHAsync`): their bytes reach the host only when
//! the stream has synchronized. Their records wait here and are written, with the result's
//! hash, once a synchronization guarantees the copy is complete. A trace therefore holds these
//! records in completion order; readers order records by `seq`.

use std::collections::BTreeMap;
use std::sync::Mutex;

use gpuless_analyzer::api::{ApiFunction, ArgKind, HandleKind, SyncClass};
use gpuless_traces::{BlobKind, BlobRef, CallRecord, Hash128, Value};

use crate::state;

struct Pending {
    record: CallRecord,
    stream: u64,
    /// (index into `record.results`, host address, length) of each host buffer to hash.
    buffers: Vec<(usize, u64, usize)>,
}

struct Table {
    pending: Vec<Pending>,
    /// Stream each event was last recorded on.
    event_stream: BTreeMap<u64, u64>,
}

static TABLE: Mutex<Table> = Mutex::new(Table { pending: Vec::new(), event_stream: BTreeMap::new() });

/// The value of `f`'s first argument that is a handle of `kind`.
fn handle(f: &ApiFunction, raw: &[u64], kind: HandleKind) -> Option<u64> {
    f.args.iter().position(|a| a.kind == ArgKind::Handle(kind)).and_then(|i| raw.get(i).copied())
}

/// Whether `f`'s first argument is a handle of `kind` (the stream or event it acts on).
fn acts_on(f: &ApiFunction, kind: HandleKind) -> bool {
    f.args.first().is_some_and(|a| a.kind == ArgKind::Handle(kind))
}

/// Whether `f` records an event on a stream (`cuEventRecord`, `cuEventRecordWithFlags`): it
/// enqueues work, acts on an event and names a stream.
fn records_event(f: &ApiFunction) -> bool {
    f.sync == SyncClass::Async
        && acts_on(f, HandleKind::Event)
        && f.args.iter().any(|a| a.kind == ArgKind::Handle(HandleKind::Stream))
}

/// Holds the record of a successful async device-to-host copy until its data is on the host.
pub fn defer(f: &ApiFunction, raw: &[u64], record: CallRecord) {
    let stream = handle(f, raw, HandleKind::Stream).unwrap_or(0);
    let buffers = f
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
    if let Ok(mut t) = TABLE.lock() {
        t.pending.push(Pending { record, stream, buffers });
    }
}

/// Whether [`after`] has anything to do for calls of `f`: synchronizations, stream and event
/// queries, event records.
pub fn completes(f: &ApiFunction) -> bool {
    match f.sync {
        SyncClass::CtxSync => true,
        SyncClass::StreamSync | SyncClass::StateQuery if acts_on(f, HandleKind::Stream) => true,
        SyncClass::EventSync | SyncClass::StateQuery if acts_on(f, HandleKind::Event) => true,
        _ => records_event(f),
    }
}

/// Called after every successful call for which [`completes`] holds: a synchronization
/// completes the copies it covers.
pub fn after(f: &ApiFunction, raw: &[u64]) {
    let complete: Box<dyn Fn(&Pending) -> bool> = match f.sync {
        SyncClass::CtxSync => Box::new(|_| true),
        SyncClass::StreamSync | SyncClass::StateQuery if acts_on(f, HandleKind::Stream) => {
            let s = handle(f, raw, HandleKind::Stream).unwrap_or(0);
            // The legacy default stream (0, 1) synchronizes with every blocking stream.
            Box::new(move |p| s <= 1 || p.stream == s)
        }
        SyncClass::EventSync | SyncClass::StateQuery if acts_on(f, HandleKind::Event) => {
            let e = handle(f, raw, HandleKind::Event).unwrap_or(0);
            let s = TABLE.lock().ok().and_then(|t| t.event_stream.get(&e).copied());
            match s {
                Some(s) => Box::new(move |p| p.stream == s),
                None => return,
            }
        }
        _ => {
            if records_event(f) {
                if let (Some(e), Ok(mut t)) = (handle(f, raw, HandleKind::Event), TABLE.lock()) {
                    t.event_stream.insert(e, handle(f, raw, HandleKind::Stream).unwrap_or(0));
                }
            }
            return;
        }
    };
    let done: Vec<Pending> = match TABLE.lock() {
        Ok(mut t) if !t.pending.is_empty() => {
            let (done, keep) = std::mem::take(&mut t.pending).into_iter().partition(|p| complete(p));
            t.pending = keep;
            done
        }
        _ => return,
    };
    for p in done {
        emit(p, true);
    }
}

fn emit(mut p: Pending, complete: bool) {
    if complete {
        for &(k, ptr, n) in &p.buffers {
            if ptr == 0 {
                continue;
            }
            // SAFETY: the program handed this buffer to the copy and the synchronization that
            // just returned guarantees the copy has written it; it is read, not kept.
            let bytes = unsafe { std::slice::from_raw_parts(ptr as *const u8, n) };
            let v = if state::capture_outputs() {
                state::blob(BlobKind::DeviceToHost, bytes)
            } else {
                Value::Digest(BlobRef { hash: Hash128::of(bytes), len: n as u64 })
            };
            if let Some(slot) = p.record.results.get_mut(k) {
                *slot = v;
            }
        }
    }
    state::emit(p.record);
}

/// Writes the records still waiting (no synchronization came): their results stay unknown.
pub fn flush_unsynchronized() {
    let rest = TABLE.lock().map(|mut t| std::mem::take(&mut t.pending)).unwrap_or_default();
    for p in rest {
        emit(p, false);
    }
}
