//! The client's session with `gpuless serve`: the connection, the segment being built, blobs
//! not yet sent, the answers a synchronization waits for, and the counts reported at exit.
//!
//! Records are numbered under the session's lock, so the segment holds them in call order
//! across the program's threads. A call that needs a result sends the segment with
//! `WANT_ANSWER` and waits ([`wait`], [`settle`], [`ask`]); everything else is queued ([`push`],
//! [`tell`]) and travels with the next segment (a segment also goes out, without waiting, when
//! it reaches its batch of records, or when the flusher finds it waiting).
//!
//! Its modules, top to bottom (none uses one above it, nor this one): [`answers`] (waiting
//! for the server) and [`connect`] (`cuInit`, the exit); [`outgoing`] (what goes out) and
//! [`stats`] (the counts at exit); [`base`] (the [`base::Session`] itself, its lock and flags).
//! The session uses the client's answers below it (`local.rs`, `copies.rs`, `host.rs`...), never
//! the call's trip above it (`trip.rs`).

use gpuless_traces::{BlobKind, BlobRef, Hash128, Value};

use super::link::Link;
use super::{modules, route};

mod answers;
mod base;
mod connect;
mod outgoing;
mod stats;

pub(crate) use answers::{ask, settle, tell, wait, write_query};
pub(crate) use base::{forked, ready, CALLS, CALL_NS, LOCAL, LOST, NOT_INITIALIZED};
pub(crate) use connect::{finish, init};
pub(crate) use outgoing::{mirror_host, push, record, targets};

use base::{lock, member};

/// Whether the session runs on a MIG instance (its device's UUID is the instance's).
pub(crate) fn on_mig() -> bool {
    let m = route::current().member;
    matches!(&*lock(), Some(Ok(v)) if v.get(m).is_some_and(|s| s.welcome.partition.kind == "mig"))
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
        g = outgoing::send_queued(g, m);
    }
}

/// A captured blob, kept until the segment that refers to it goes out.
pub(crate) fn blob(kind: BlobKind, data: &[u8]) -> Value {
    if kind == BlobKind::CodeImage {
        modules::saw_image(data);
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
