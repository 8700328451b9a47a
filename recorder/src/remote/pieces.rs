//! The client's side of cached-trace execution (issue 20): pieces the executor holds as graphs
//! are sent by reference — a key, the first sequence number and the uploads' blobs — instead of
//! their records, so a repeated inference costs its new input and a few dozen bytes up.
//!
//! The client cuts the records it sends into pieces by the rule the executor uses
//! (`gpuless_traces::protocol::piece`), and keeps a copy of the open piece, so its keys are the
//! executor's however the flusher split the records. It keeps copies of pieces it sent lately by
//! key; an answer names the keys the executor captured since the last one, and those copies
//! become the pieces the server holds. While the open piece matches the start of a held piece
//! record by record, its records wait in the session (the executor would hold them anyway); a
//! complete piece equal to a held one, numbered without gaps, leaves as a `Piece` message.
//! Anything else leaves as records, with the flusher, as without cached execution.

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
    on: bool,
    /// A copy of the open piece, and its stream.
    open: Vec<CallRecord>,
    stream: u64,
    /// Where the open piece starts in the pending records while they wait (held), else `None`.
    held_at: Option<usize>,
    /// Held pieces the open one still matches the start of.
    candidates: Vec<Hash128>,
    /// Pieces the executor holds as graphs: the client's copy of each.
    held: HashMap<Hash128, Vec<CallRecord>>,
    /// Held pieces by the key of their first record.
    by_first: HashMap<Hash128, Vec<Hash128>>,
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

    /// After a record was added at the end of `pending`: extends or ends the open piece; a held
    /// piece that ended and that the server holds leaves `pending` for a reference in `refs`.
    pub fn pushed(&mut self, pending: &mut Vec<CallRecord>, refs: &mut Vec<Placed>) {
        if !self.on {
            return;
        }
        let Some(last) = pending.len().checked_sub(1) else { return };
        let Some(s) = piece::stream_of(&pending[last]) else {
            self.close(pending, refs, last);
            return;
        };
        let mut at = last;
        if !self.open.is_empty() && s != self.stream {
            at -= self.close(pending, refs, last);
        }
        let rec = &pending[at];
        if self.open.is_empty() {
            self.stream = s;
            self.candidates = self.by_first.get(&first_key(rec)).cloned().unwrap_or_default();
            self.held_at = (!self.candidates.is_empty()).then_some(at);
        } else if self.held_at.is_some() {
            let (i, held) = (self.open.len(), &self.held);
            self.candidates.retain(|k| held.get(k).and_then(|t| t.get(i)).is_some_and(|t| piece::same(t, rec)));
            if self.candidates.is_empty() {
                self.held_at = None; // no held piece starts this way: its records may leave
            }
        }
        self.open.push(rec.clone());
        if self.open.len() >= MAX_RECORDS {
            self.close(pending, refs, at + 1);
        }
    }

    /// Ends the open piece (the session sends everything and waits, or closes).
    pub fn finish(&mut self, pending: &mut Vec<CallRecord>, refs: &mut Vec<Placed>) {
        self.close(pending, refs, pending.len());
    }

    /// The open piece is complete, its held records (if held) ending before `end` in
    /// `pending`: by reference if the server holds it, else kept as sent lately. Returns how
    /// many records left `pending` for a reference.
    fn close(&mut self, pending: &mut Vec<CallRecord>, refs: &mut Vec<Placed>, end: usize) -> usize {
        let recs = std::mem::take(&mut self.open);
        let held_at = self.held_at.take();
        self.candidates.clear();
        if recs.is_empty() {
            return 0;
        }
        let key = piece::key(&recs);
        let consecutive = recs.windows(2).all(|w| w[1].seq == w[0].seq.wrapping_add(1));
        let hit = held_at.is_some_and(|a| end - a == recs.len())
            && consecutive
            && self
                .held
                .get(&key)
                .is_some_and(|t| t.len() == recs.len() && t.iter().zip(&recs).all(|(x, y)| piece::same(x, y)));
        match held_at {
            Some(a) if hit => {
                let r = PieceRef {
                    key,
                    first_seq: recs[0].seq,
                    records: recs.len() as u32,
                    payloads: recs.iter().filter_map(piece::payload).collect(),
                };
                self.refs += 1;
                self.records_saved += recs.len() as u64;
                pending.drain(a..end);
                refs.push((a, r));
                recs.len()
            }
            _ => {
                if !self.held.contains_key(&key) && !self.recent.contains_key(&key) {
                    if self.recent.len() >= RECENT {
                        self.recent.clear();
                    }
                    self.recent.insert(key, recs);
                }
                0
            }
        }
    }

    /// The executor captured these pieces: the copies sent lately become held ones.
    pub fn announced(&mut self, keys: &[Hash128]) {
        for k in keys {
            if self.held.len() >= HELD {
                break;
            }
            if let Some(recs) = self.recent.remove(k) {
                if let Some(first) = recs.first().map(first_key) {
                    self.by_first.entry(first).or_default().push(*k);
                    self.held.insert(*k, recs);
                }
            }
        }
    }

    /// Where the records that may leave now end: before the open piece while it is held.
    pub fn sendable(&self, pending: usize) -> usize {
        self.held_at.map_or(pending, |a| a.min(pending))
    }

    /// The first `n` pending records left (a held piece moves down by `n`).
    pub fn sent(&mut self, n: usize) {
        if let Some(a) = self.held_at {
            self.held_at = Some(a.saturating_sub(n));
        }
    }
}

/// The key held pieces are found by: the key of their first record alone.
fn first_key(r: &CallRecord) -> Hash128 {
    piece::key(std::slice::from_ref(r))
}

#[cfg(test)]
mod tests;
