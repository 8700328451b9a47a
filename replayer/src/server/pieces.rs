//! Cached-trace execution (issue 20): an executor runs the repeated parts of a session's work
//! as CUDA graphs, and everything else as it arrives.
//!
//! The session's records are cut into pieces (`gpuless_traces::protocol::piece`: runs of
//! launches, stream-ordered copies and sets on one stream, at most 32 records; every other
//! record ends a piece). What happens to a record depends on the piece it starts or extends:
//!
//! - **Run at once** (as without cached execution, so the executor stays ahead of the program),
//!   while the open piece matches the start of no *template* — a piece that repeated, kept to
//!   be captured, or one a graph was captured from. A copy of the piece is kept for its key.
//!   When it ends, its key is counted; at its first repetition it becomes a template.
//! - **Held**, while the open piece matches the start of a template record by record
//!   (`piece::same`: equal but for uploaded bytes, host buffers, sequence numbers, threads and
//!   times). The complete piece is then handed to [`Pieces::run`]: equal to a template that has a
//!   graph, the graph runs it — this repetition's uploads written into the graph's input buffers,
//!   one `cuGraphLaunch` on the piece's stream (`crate::replay::piece_graph`); equal to a
//!   template without one, it is captured and the graph does its work; anything else runs
//!   record by record. A held piece that stops matching every template is let go: its records
//!   run at once, in order.
//!
//! A wrong result is never returned: a graph stands only for records equal to the ones it was
//! captured from, on the same addresses, with this repetition's bytes. Templates are kept per
//! program in the cache's disk directory (`pieces/<hash of the program>`, a call batch each), so
//! the program's next session holds and captures them the first time it sees them. Pieces
//! shorter than [`MIN_GRAPH_RECORDS`], on a stream the program is capturing itself, whose
//! graph's last results were not returned yet, or whose capture failed run record by record.
//! The counts go to the session's statistics and the server's metrics
//! (`gpuless_piece_runs_total{run}`).

use std::collections::HashMap;
use std::path::PathBuf;

use gpuless_traces::protocol::piece::{self, Cut, PieceRef, MAX_RECORDS};
use gpuless_traces::protocol::{segment, SessionStats};
use gpuless_traces::{CallRecord, Hash128};

use crate::replay::piece_graph::PieceGraph;
use crate::replay::stream::Stream;
use crate::replay::ReplayError;

/// Pieces shorter than this run eagerly: a graph launch costs about what a few launches do.
pub const MIN_GRAPH_RECORDS: usize = 4;
/// Most templates (and so graphs) a session keeps; beyond, new pieces run eagerly.
const MAX_TEMPLATES: usize = 4096;
/// Most keys counted; the counts of pieces without a template start over beyond.
const MAX_KEYS: usize = 1 << 16;
/// Most bytes of templates kept for a program.
const MAX_KEPT_BYTES: usize = 64 << 20;

/// What a piece's key has done so far in this session.
#[derive(Default)]
struct Entry {
    seen: u32,
    /// The records to capture (or that were captured) for this key.
    template: Option<Vec<CallRecord>>,
    /// The graph captured from `template`.
    graph: Option<PieceGraph>,
    /// Its capture failed: it runs eagerly from now on.
    refused: bool,
}

/// What became of a piece handed to [`Pieces::run`].
pub enum Ran {
    /// A graph did its work: the number of records, the last record's sequence number, and
    /// the launch's result.
    Graph { records: u64, last_seq: u64, result: Result<(), ReplayError> },
    /// Run these records one by one (nothing of them ran).
    Eager(Vec<CallRecord>),
}

/// A session's cached-trace execution.
pub struct Pieces {
    /// The open piece (copies of its records), its stream, and whether its records are held.
    open: Vec<CallRecord>,
    stream: u64,
    holding: bool,
    /// Templates the held piece still matches the start of.
    candidates: Vec<Hash128>,
    /// Templates by the key of their first record.
    by_first: HashMap<Hash128, Vec<Hash128>>,
    entries: HashMap<Hash128, Entry>,
    templates: usize,
    /// Where the program's templates are kept (none for a session without a program name).
    file: Option<PathBuf>,
    /// The session's counts (copied into its statistics).
    pub graph: u64,
    /// See `graph`.
    pub captured: u64,
    /// See `graph`.
    pub eager: u64,
    /// Records run by graph launches (captures included).
    pub records_graph: u64,
    /// Why the first refused capture was refused (said in the server's log at the session's
    /// end).
    pub refusal: Option<String>,
    /// Keys captured since the last answer (told to the client, which may send those pieces
    /// by reference).
    announced: Vec<Hash128>,
    /// The templates were kept (at `Close`; the session's end does not write them again).
    saved: bool,
}

impl Pieces {
    /// Cached execution for a session of `program` (the client's command line; empty: nothing
    /// is kept across sessions), templates kept under `dir`.
    pub fn new(program: &str, dir: &std::path::Path) -> Pieces {
        let file =
            (!program.is_empty()).then(|| dir.join("pieces").join(format!("{}", Hash128::of(program.as_bytes()))));
        let mut p = Pieces {
            open: Vec::new(),
            stream: 0,
            holding: false,
            candidates: Vec::new(),
            by_first: HashMap::new(),
            entries: HashMap::new(),
            templates: 0,
            file,
            graph: 0,
            captured: 0,
            eager: 0,
            records_graph: 0,
            refusal: None,
            announced: Vec::new(),
            saved: false,
        };
        for t in p.file.as_deref().map(load_templates).unwrap_or_default() {
            p.add_template(piece::key(&t), t);
        }
        p
    }

    /// Takes the next record; returns, in order, what is ready to run: records to run at once
    /// ([`Cut::Single`]) and held pieces that are complete ([`Cut::Piece`], for [`Self::run`]).
    pub fn push(&mut self, rec: CallRecord, out: &mut Vec<Cut>) {
        let Some(s) = piece::stream_of(&rec) else {
            self.close(out);
            out.push(Cut::Single(rec));
            return;
        };
        if !self.open.is_empty() && s != self.stream {
            self.close(out);
        }
        if self.open.is_empty() {
            self.stream = s;
            self.candidates = self.by_first.get(&first_key(&rec)).cloned().unwrap_or_default();
            self.holding = !self.candidates.is_empty();
        } else if self.holding {
            let (i, entries) = (self.open.len(), &self.entries);
            self.candidates.retain(|k| {
                let t = entries.get(k).and_then(|e| e.template.as_ref());
                t.and_then(|t| t.get(i)).is_some_and(|t| piece::same(t, &rec))
            });
            if self.candidates.is_empty() {
                // No template starts this way: what was held runs now, the rest as it comes.
                self.holding = false;
                out.extend(self.open.iter().cloned().map(Cut::Single));
            }
        }
        if !self.holding {
            out.push(Cut::Single(rec.clone()));
        }
        self.open.push(rec);
        if self.open.len() >= MAX_RECORDS {
            self.close(out);
        }
    }

    /// Ends the open piece (before an answer, and at the session's end).
    pub fn finish(&mut self, out: &mut Vec<Cut>) {
        self.close(out);
    }

    fn close(&mut self, out: &mut Vec<Cut>) {
        if self.open.is_empty() {
            return;
        }
        let recs = std::mem::take(&mut self.open);
        self.candidates.clear();
        if std::mem::replace(&mut self.holding, false) {
            out.push(Cut::Piece(recs));
        } else {
            // Its records ran as they came.
            self.eager += 1;
            self.count(recs);
        }
    }

    /// Counts a piece that ran record by record; at its first repetition it becomes a
    /// template.
    fn count(&mut self, recs: Vec<CallRecord>) {
        if recs.len() < MIN_GRAPH_RECORDS {
            return;
        }
        let key = piece::key(&recs);
        if self.entries.len() >= MAX_KEYS && !self.entries.contains_key(&key) {
            self.entries.retain(|_, e| e.template.is_some());
        }
        let e = self.entries.entry(key).or_default();
        e.seen = e.seen.saturating_add(1);
        if e.seen >= 2 && e.template.is_none() && !e.refused && self.templates < MAX_TEMPLATES {
            self.add_template(key, recs);
        }
    }

    fn add_template(&mut self, key: Hash128, recs: Vec<CallRecord>) {
        let Some(first) = recs.first().map(first_key) else { return };
        let e = self.entries.entry(key).or_default();
        if e.template.is_some() {
            return;
        }
        e.template = Some(recs);
        self.templates += 1;
        self.by_first.entry(first).or_default().push(key);
    }

    /// Runs a complete held piece as a graph when it can ([`Ran::Graph`]); otherwise hands its
    /// records back to be run one by one ([`Ran::Eager`]).
    pub fn run(&mut self, stream: &mut Stream, recs: Vec<CallRecord>) -> Ran {
        let key = piece::key(&recs);
        let usable = recs.len() >= MIN_GRAPH_RECORDS && !stream.piece_stream_capturing(&recs);
        let Some(e) = self.entries.get_mut(&key).filter(|e| usable && !e.refused) else {
            return self.eager(recs);
        };
        let equal = |t: &Option<Vec<CallRecord>>| {
            t.as_ref().is_some_and(|t| t.len() == recs.len() && t.iter().zip(&recs).all(|(a, b)| piece::same(a, b)))
        };
        if !equal(&e.template) {
            return self.eager(recs);
        }
        e.seen = e.seen.saturating_add(1);
        let last_seq = recs.last().map_or(0, |r| r.seq);
        if let Some(g) = e.graph.as_mut() {
            if stream.piece_results_pending(g) {
                return self.eager(recs);
            }
            let result = stream.launch_piece(g, &recs);
            return self.graph_ran(recs.len(), last_seq, result, false);
        }
        match stream.capture_piece(&recs) {
            Ok(g) => {
                // The graph's template is this session's own piece from now on (one read back
                // from an earlier session only said what to hold): references rebuild from it.
                let n = recs.len();
                e.graph = Some(g);
                e.template = Some(recs);
                self.announced.push(key);
                self.graph_ran(n, last_seq, Ok(()), true)
            }
            Err(why) => {
                e.refused = true;
                self.refusal.get_or_insert(why);
                if let Some(first) = recs.first().map(first_key) {
                    if let Some(v) = self.by_first.get_mut(&first) {
                        v.retain(|k| *k != key);
                    }
                }
                self.eager(recs)
            }
        }
    }

    /// The records a piece sent by reference stands for (the graph's own piece with the
    /// reference's sequence numbers and uploads), or why there are none.
    pub fn resolve(&self, r: &PieceRef) -> Result<Vec<CallRecord>, String> {
        let Some(template) = self.entries.get(&r.key).filter(|e| e.graph.is_some()).and_then(|e| e.template.as_ref())
        else {
            return Err(format!("piece {} was sent by reference, but this session holds no graph of it", r.key));
        };
        let recs = r.records(template).ok_or_else(|| {
            format!(
                "piece {} was sent by reference with {} records and {} uploads, which do not fit its {} records",
                r.key,
                r.records,
                r.payloads.len(),
                template.len()
            )
        })?;
        Ok(recs)
    }

    /// Keys captured since the last call, for the client's next answer.
    pub fn take_announced(&mut self) -> Vec<Hash128> {
        std::mem::take(&mut self.announced)
    }

    fn eager(&mut self, recs: Vec<CallRecord>) -> Ran {
        self.eager += 1;
        Ran::Eager(recs)
    }

    fn graph_ran(&mut self, n: usize, last_seq: u64, result: Result<(), ReplayError>, captured: bool) -> Ran {
        if captured {
            self.captured += 1;
        } else {
            self.graph += 1;
        }
        self.records_graph += n as u64;
        Ran::Graph { records: n as u64, last_seq, result }
    }

    /// Adds the counts to a session's statistics.
    pub fn count_into(&self, s: &mut SessionStats) {
        s.pieces_graph = self.graph;
        s.pieces_captured = self.captured;
        s.pieces_eager = self.eager;
        s.records_graph = self.records_graph;
    }

    /// Keeps the session's templates (those whose capture did not fail) for the program's next
    /// session; once per session.
    pub fn save(&mut self) {
        if std::mem::replace(&mut self.saved, true) {
            return;
        }
        let Some(file) = &self.file else { return };
        let mut bytes = Vec::new();
        let mut n = 0u32;
        bytes.extend_from_slice(&0u32.to_le_bytes());
        for e in self.entries.values().filter(|e| !e.refused) {
            let Some(t) = &e.template else { continue };
            let batch = segment::encode(t);
            if bytes.len() + batch.len() > MAX_KEPT_BYTES {
                break;
            }
            bytes.extend_from_slice(&(batch.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&batch);
            n += 1;
        }
        if n == 0 {
            return;
        }
        bytes[..4].copy_from_slice(&n.to_le_bytes());
        if let Some(parent) = file.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        // Written whole and renamed: a concurrent session reads the old templates or the new.
        let tmp = file.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &bytes).is_ok() {
            let _ = std::fs::rename(&tmp, file);
        }
    }
}

/// The key templates are found by: the key of their first record alone.
fn first_key(r: &CallRecord) -> Hash128 {
    piece::key(std::slice::from_ref(r))
}

/// The templates kept for a program: a `u32` count, then each as a `u32` length and a call
/// batch. A damaged or missing file gives none; a template that is not a piece is left out.
fn load_templates(file: &std::path::Path) -> Vec<Vec<CallRecord>> {
    let Ok(bytes) = std::fs::read(file) else { return Vec::new() };
    let word = |at: usize| bytes.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
    let Some(n) = word(0) else { return Vec::new() };
    let (mut at, mut out) = (4, Vec::new());
    for i in 0..n.min(MAX_TEMPLATES) {
        let Some(len) = word(at) else { break };
        let Some(batch) = bytes.get(at + 4..at + 4 + len) else { break };
        at += 4 + len;
        match segment::decode(batch, i as u64) {
            Ok(t) if is_piece(&t) => out.push(t),
            _ => break,
        }
    }
    out
}

/// Whether `recs` is one piece as the rule cuts them (a template read back must be).
fn is_piece(recs: &[CallRecord]) -> bool {
    let stream = recs.first().and_then(piece::stream_of);
    (MIN_GRAPH_RECORDS..=MAX_RECORDS).contains(&recs.len())
        && stream.is_some()
        && recs.iter().all(|r| piece::stream_of(r) == stream)
}

#[cfg(test)]
mod tests;
