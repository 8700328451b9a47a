//! Call records → the abstract [`CallEvent`]s of the synchronization analysis.

use gpuless_analyzer::api::{ArgKind, BufLen, Direction, HandleKind};
use gpuless_analyzer::sync::CallEvent;

use crate::model::{CallRecord, Value};

fn scalar(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::U64(x) | Value::Size(x) => Some(*x),
        Value::I64(x) => u64::try_from(*x).ok(),
        _ => None,
    }
}

fn blob_bytes(values: &[Value]) -> u64 {
    let mut n = 0u64;
    for v in values {
        v.visit(&mut |v| {
            if let Value::Blob(b) | Value::Digest(b) = v {
                n = n.saturating_add(b.len);
            }
        });
    }
    n
}

/// Length of a host buffer argument from its size argument.
fn buf_len(r: &CallRecord, len: BufLen) -> u64 {
    match len {
        BufLen::Fixed(n) => u64::from(n),
        BufLen::Arg(i) => scalar(r.args.get(usize::from(i))).unwrap_or(0),
    }
}

/// Bytes a record sends up and brings down.
pub fn transfer_bytes(r: &CallRecord) -> (u64, u64) {
    let mut up = blob_bytes(&r.args);
    let mut down = blob_bytes(&r.results);
    if let Some(f) = r.function.api() {
        // Host buffers that were not stored (or hashed) still count by their size argument.
        for (i, a) in f.args.iter().enumerate() {
            let ArgKind::HostBuf(len) = a.kind else {
                continue;
            };
            if a.dir == Direction::In && up == 0 && !matches!(r.args.get(i), Some(Value::Blob(_))) {
                up = buf_len(r, len);
            }
        }
        for (j, (_, a)) in f.out_args().enumerate() {
            let ArgKind::HostBuf(len) = a.kind else {
                continue;
            };
            if down == 0 && !matches!(r.results.get(j), Some(Value::Blob(_) | Value::Digest(_))) {
                down = buf_len(r, len);
            }
        }
    }
    (up, down)
}

/// The largest host buffer a record names by its size arguments (what a replay of it allocates
/// or copies on the host), whatever its stored digests say: a server checks it against the
/// device before executing a client's record.
pub fn host_buffer_bytes(r: &CallRecord) -> u64 {
    let Some(f) = r.function.api() else { return 0 };
    f.args
        .iter()
        .filter_map(|a| match a.kind {
            ArgKind::HostBuf(len) | ArgKind::AnyBuf(len) => Some(buf_len(r, len)),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// The stream a record is ordered on.
pub fn stream_of(r: &CallRecord) -> Option<u64> {
    let f = r.function.api()?;
    for (i, a) in f.args.iter().enumerate() {
        match (a.kind, r.args.get(i)) {
            (ArgKind::Handle(HandleKind::Stream), Some(Value::Handle(_, v))) => return Some(*v),
            (ArgKind::Struct("CUlaunchConfig"), Some(Value::LaunchConfig(c))) => return Some(c.stream),
            _ => {}
        }
    }
    None
}

/// The abstract event for one record.
pub fn call_event(r: &CallRecord) -> CallEvent {
    let (bytes_up, bytes_down) = transfer_bytes(r);
    let f = r.function.api();
    CallEvent {
        // A query only the GPU answers is, for a client, a state query with values.
        class: f.map(|f| if f.gpu_answers { gpuless_analyzer::api::SyncClass::StateQuery } else { f.sync }),
        bytes_up,
        bytes_down,
        stream: stream_of(r),
        answers: f.is_some_and(|f| f.server_answers() && f.out_args().next().is_some()),
        memo: f.filter(|f| f.stable && f.gpu_answers).map(|f| question(f, r)),
        forgets: f.is_some_and(|f| f.may_change_answers() && f.sync != gpuless_analyzer::api::SyncClass::CreatesHandle),
        local: f.is_some_and(|f| f.level == gpuless_analyzer::api::ApiLevel::Driver && !f.sent_by_client()),
        checked: f.is_some_and(|f| f.sent_by_client() && f.checked),
    }
}

/// A stable query's question: its function and input values, hashed (what the client's memo
/// of server answers is keyed by).
fn question(f: &gpuless_analyzer::api::ApiFunction, r: &CallRecord) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    f.id.0.hash(&mut h);
    for (a, v) in f.args.iter().zip(&r.args) {
        if a.dir == gpuless_analyzer::api::Direction::In {
            format!("{v:?}").hash(&mut h);
        }
    }
    h.finish()
}
