//! The client's side of cached-trace execution (issue 20): pieces the executor holds as graphs
//! are sent by reference — a key, the first sequence number and the uploads' blobs — instead of
//! their records, so a repeated inference costs its new input and a few dozen bytes up.
//!
//! The client cuts the records it sends into pieces by the rule the executor uses
//! (`gpuless_traces::protocol::piece`), so both see the same pieces. It keeps a copy of pieces it
//! sent lately by key; an answer names the keys the executor captured since the last one, and
//! those copies become the pieces the server holds. A complete piece with such a key that equals
//! the held copy record by record (`piece::same`) and whose sequence numbers follow each other
//! leaves as a `Piece` message; anything else leaves as records. The piece being built waits in
//! the session until it is complete (the flusher sends what comes before it): the executor holds
//! an open piece's records until it is complete anyway, and a piece the flusher had cut in two
//! would have another key on the client than on the server.

use std::collections::HashMap;

use gpuless_traces::protocol::piece::{self, PieceRef, MAX_RECORDS};
use gpuless_traces::{CallRecord, Hash128};

/// Pieces sent lately, kept until an answer says whether the executor captured them; beyond
/// this many the copies start over (a key that matters comes again).
const RECENT: usize = 512;
/// Most pieces the client keeps as held by the server.
const HELD: usize = 4096;

/// A reference to send before the record at this index of the pending records.
pub(crate) type Placed = (usize, PieceRef);

/// What the client knows of the executor's graphs, and the piece being built.
#[derive(Default)]
pub(crate) struct ClientPieces {
    /// The server runs cached execution (its `Welcome` says so): without it nothing here runs.
    pub on: bool,
    /// Index in the pending records where the open piece starts, and its stream.
    open: Option<(usize, u64)>,
    /// Pieces the executor holds as graphs: the client's copy of each.
    held: HashMap<Hash128, Vec<CallRecord>>,
    /// Pieces sent as records lately, by key.
    recent: HashMap<Hash128, Vec<CallRecord>>,
    /// Pieces sent by reference, and the records they stood for.
    pub refs: u64,
    /// See `refs`.
    pub records_saved: u64,
}

impl ClientPieces {
    /// Pieces for a session whose server runs cached execution (`on`) or does not.
    pub fn new(on: bool) -> ClientPieces {
        ClientPieces { on, ..Default::default() }
    }

    /// After a record was added at the end of `pending`: extends or ends the open piece; a
    /// piece that ended and is held by the server leaves `pending` for a reference in `refs`.
    pub fn pushed(&mut self, pending: &mut Vec<CallRecord>, refs: &mut Vec<Placed>) {
        if !self.on {
            return;
        }
        let Some(last) = pending.len().checked_sub(1) else { return };
        let stream = piece::stream_of(&pending[last]);
        if let Some((start, s)) = self.open {
            if stream != Some(s) {
                // The new record ends the open piece (another stream, or no piece at all).
                let moved = self.close(pending, refs, start, last);
                self.open = stream.map(|s| (last - moved, s));
                return;
            }
            if last + 1 - start >= MAX_RECORDS {
                self.close(pending, refs, start, last + 1);
                self.open = None;
            }
        } else {
            self.open = stream.map(|s| (last, s));
        }
    }

    /// Ends the open piece (the session sends everything and waits, or closes).
    pub fn finish(&mut self, pending: &mut Vec<CallRecord>, refs: &mut Vec<Placed>) {
        if let Some((start, _)) = self.open.take() {
            self.close(pending, refs, start, pending.len());
        }
    }

    /// The piece `pending[a..b]` is complete: by reference if the server holds it, else kept
    /// as sent lately. Returns how many records left `pending` (`b - a` for a reference).
    fn close(&mut self, pending: &mut Vec<CallRecord>, refs: &mut Vec<Placed>, a: usize, b: usize) -> usize {
        let recs = &pending[a..b];
        if recs.is_empty() {
            return 0;
        }
        let key = piece::key(recs);
        let consecutive = recs.windows(2).all(|w| w[1].seq == w[0].seq.wrapping_add(1));
        let hit = consecutive
            && self
                .held
                .get(&key)
                .is_some_and(|t| t.len() == recs.len() && t.iter().zip(recs).all(|(x, y)| piece::same(x, y)));
        if !hit {
            if !self.held.contains_key(&key) && !self.recent.contains_key(&key) {
                if self.recent.len() >= RECENT {
                    self.recent.clear();
                }
                self.recent.insert(key, recs.to_vec());
            }
            return 0;
        }
        let r = PieceRef {
            key,
            first_seq: recs[0].seq,
            records: recs.len() as u32,
            payloads: recs.iter().filter_map(piece::payload).collect(),
        };
        self.refs += 1;
        self.records_saved += recs.len() as u64;
        pending.drain(a..b);
        refs.push((a, r));
        b - a
    }

    /// The executor captured these pieces: the copies sent lately become held ones.
    pub fn announced(&mut self, keys: &[Hash128]) {
        for k in keys {
            if self.held.len() >= HELD {
                break;
            }
            if let Some(recs) = self.recent.remove(k) {
                self.held.insert(*k, recs);
            }
        }
    }

    /// Where the records that may leave now end: before the open piece.
    pub fn sendable(&self, pending: usize) -> usize {
        match self.open {
            Some((start, _)) => start.min(pending),
            None => pending,
        }
    }

    /// The first `n` pending records left (the open piece, if any, moves down by `n`).
    pub fn sent(&mut self, n: usize) {
        if let Some((start, s)) = self.open {
            self.open = Some((start.saturating_sub(n), s));
        }
    }
}

#[cfg(test)]
mod tests;
