//! The connection to the server, shared by the program's threads and the flusher. What is
//! queued is taken under the session's lock ([`Outgoing`]); it is written — encoded,
//! compressed, sent — under the connection's own lock, taken before the session's lock is let
//! go so that segments leave in the order their records were made. The program's threads keep
//! queuing records while the flusher writes a segment (they used to wait for it).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use gpuless_traces::protocol::client::Connection;
use gpuless_traces::protocol::{Answer, Message};
use gpuless_traces::{CallRecord, Hash128};

/// Blobs up to this size are sent with the segment that uses them; larger ones are asked for
/// first (one query for all of a segment's), and sent only when the server lacks them.
const SMALL_BLOB: usize = 64 << 10;

/// Nanoseconds spent waiting for answers after the segment was written: the server's
/// decoding, execution and answer, and the transport.
pub(crate) static WAIT_NS: AtomicU64 = AtomicU64::new(0);

/// The session's connection.
pub(crate) type Link = Arc<Mutex<Connection>>;

/// Locks the connection (a sender that panicked left it usable: frames are whole or the
/// session fails on the next read).
pub(crate) fn lock(link: &Link) -> MutexGuard<'_, Connection> {
    link.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records and blobs taken from the session to be sent.
#[derive(Default)]
pub(crate) struct Outgoing {
    /// The segment's records, in call order.
    pub records: Vec<CallRecord>,
    /// Blobs captured with them that the server may lack.
    pub blobs: Vec<(Hash128, Vec<u8>)>,
    /// Pieces sent by reference, each before the record at its index.
    pub refs: Vec<super::pieces::Placed>,
}

/// Writes `out` — its large blobs after asking which the server lacks, the small ones, then the
/// records as segments with the pieces sent by reference between them, in call order (the last
/// segment also when empty, if `want`) — and with `want` waits for the answer.
pub(crate) fn transmit(conn: &mut Connection, out: &Outgoing, want: bool) -> Result<Option<Answer>, String> {
    let large: Vec<Hash128> = out.blobs.iter().filter(|(_, b)| b.len() > SMALL_BLOB).map(|(h, _)| *h).collect();
    let have: HashSet<Hash128> = if large.is_empty() {
        HashSet::new()
    } else {
        let flags = conn.query_blobs(&large).map_err(|e| e.to_string())?;
        large.iter().zip(flags).filter(|(_, f)| *f).map(|(h, _)| *h).collect()
    };
    for (h, b) in &out.blobs {
        if !have.contains(h) {
            conn.send_blob(*h, b).map_err(|e| e.to_string())?;
        }
    }
    let mut from = 0;
    for (at, r) in &out.refs {
        let at = (*at).min(out.records.len());
        if at > from {
            conn.send_segment(&out.records[from..at], false).map_err(|e| e.to_string())?;
        }
        from = at;
        conn.send(&Message::Piece(r.clone())).map_err(|e| e.to_string())?;
    }
    if from < out.records.len() || want {
        conn.send_segment(&out.records[from..], want).map_err(|e| e.to_string())?;
    }
    if !want {
        // Out now: the connection buffers frames, and a segment that waits in the buffer for
        // the next one is work the executor could be doing (the flusher's whole point).
        conn.flush().map_err(|e| e.to_string())?;
        return Ok(None);
    }
    let t0 = std::time::Instant::now();
    let a = conn.answer().map_err(|e| e.to_string());
    WAIT_NS.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
    a.map(Some)
}
