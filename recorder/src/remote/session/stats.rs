//! The counts a client writes at exit (`GPULESS_REMOTE_STATS`, read by `gpuless run`): one
//! JSON object. A session across several servers writes the first server's object with the
//! counts summed over all of them, the endpoints joined, and each server's own object under
//! `servers`.

use std::sync::atomic::Ordering;

use gpuless_traces::protocol;

use super::base::{Session, CALLS, CALL_NS, ENV_STATS, LOCAL};
use crate::remote::{link, memo, shared};

/// Counts summed over the servers of a session across several.
const SUMMED: [&str; 17] = [
    "sent",
    "round_trips",
    "segments",
    "bytes_up",
    "bytes_down",
    "blob_bytes",
    "blob_hits",
    "blob_misses",
    "waits",
    "pulls",
    "server_exec_us",
    "pieces_graph",
    "pieces_captured",
    "pieces_eager",
    "records_graph",
    "pieces_by_reference",
    "records_by_reference",
];

/// Writes the counts of `members` (`closed`: each one's `Closed`, when it answered).
pub(super) fn write(members: &[Session], closed: &[Option<protocol::SessionStats>]) {
    let Some(path) = std::env::var_os(ENV_STATS) else { return };
    let all: Vec<serde_json::Value> =
        members.iter().enumerate().map(|(i, s)| one(s, closed.get(i).and_then(Option::as_ref))).collect();
    let mut j = all.first().cloned().unwrap_or_default();
    if all.len() > 1 {
        if let Some(o) = j.as_object_mut() {
            for k in SUMMED {
                let sum: u64 = all.iter().filter_map(|v| v.get(k).and_then(serde_json::Value::as_u64)).sum();
                o.insert(k.into(), sum.into());
            }
            let endpoints: Vec<&str> = members.iter().map(|s| s.endpoint.as_str()).collect();
            o.insert("endpoint".into(), endpoints.join(",").into());
            if let Some(f) = members.iter().find_map(|s| s.failed.clone()) {
                o.insert("failed".into(), f.into());
                o.insert("failure_said".into(), true.into());
            }
            o.insert("servers".into(), all.into());
        }
    }
    let _ = std::fs::write(path, format!("{j}\n"));
}

/// One server's session's counts; `closed`: the server's totals for it (its `Closed`).
fn one(sess: &Session, closed: Option<&protocol::SessionStats>) -> serde_json::Value {
    let t = sess.conn.as_ref().map(|c| link::lock(c).traffic).unwrap_or_default();
    let rings = sess.conn.as_ref().is_some_and(|c| link::lock(c).uses_rings());
    let c = closed.cloned().unwrap_or_default();
    serde_json::json!({
        "endpoint": sess.endpoint,
        "session": sess.welcome.session,
        "executor_pid": sess.welcome.executor_pid,
        "device": sess.welcome.device.name,
        "gpu": sess.welcome.gpu,
        "calls": CALLS.load(Ordering::Relaxed),
        "sent": sess.sent,
        "local": LOCAL.load(Ordering::Relaxed),
        "round_trips": t.round_trips,
        // Frames went through shared-memory rings (a Unix socket to a server that takes them).
        "rings": rings,
        "segments": t.segments,
        "bytes_up": t.bytes_up,
        "bytes_down": t.bytes_down,
        "blob_bytes": t.blob_bytes,
        "blob_hits": t.blob_hits,
        "blob_misses": t.blob_misses,
        "waits": sess.waits,
        "waits_by_call": sess.waited_for,
        "memo_hits": memo::hits(),
        // Managed, mapped and mirrored pinned memory (`shared.rs`): allocations shared, their
        // bytes, dirty pages sent up, waits that pulled.
        "shared_allocations": shared::counts().0,
        "shared_bytes": shared::counts().1,
        "shared_pages_up": shared::counts().2,
        "pulls": sess.pulls,
        "server_exec_us": sess.server_exec_us,
        // Cached-trace execution on the server (zero where it is off).
        "pieces_graph": c.pieces_graph,
        "pieces_captured": c.pieces_captured,
        "pieces_eager": c.pieces_eager,
        "records_graph": c.records_graph,
        // Pieces this client sent by reference (a key instead of their records).
        "pieces_by_reference": sess.pieces.refs,
        "records_by_reference": sess.pieces.records_saved,
        "call_us": CALL_NS.load(Ordering::Relaxed) / 1000,
        "wait_us": link::WAIT_NS.load(Ordering::Relaxed) / 1000,
        "failed": sess.failed,
        // The library said the failure on stderr when it happened (`fail`).
        "failure_said": sess.failed.is_some(),
    })
}
