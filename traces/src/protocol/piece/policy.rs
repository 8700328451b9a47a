//! What cached-trace execution does with each record and each piece, without a GPU: the
//! executor (`gpuless_replayer::server::pieces`) runs a [`Policy`] and does the graph work it
//! decides on; `gpuless analyze --pieces` runs the same policy over a recording
//! ([`super::survey`]) to show what a server would run as graphs.
//!
//! - **Run at once** while the open piece matches the start of no *template* (a piece that
//!   repeated, kept to be captured, or one a graph was captured from). A copy of the piece is
//!   kept for its key. When it ends, its key is counted; at its first repetition it becomes a
//!   template.
//! - **Held** while the open piece has the shape of the start of a template record by record
//!   ([`super::same_shape`]: equal but for device addresses and kernel parameter bytes). The
//!   complete piece is then [`Policy::decide`]d: of the shape of a template with a graph, the
//!   graph runs it (its nodes given this repetition's addresses and parameters where they
//!   differ); of the shape of one without, it is captured; anything else runs record by
//!   record. A held piece that stops matching every template is let go: its records run at
//!   once, in order.
//!
//! Templates are kept per program ([`Policy::save`], a `u32` count then each as a `u32` length
//! and a call batch), so the program's next session holds them at first sight.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::{Cut, MAX_RECORDS};
use crate::model::{CallRecord, Hash128};
use crate::protocol::segment;

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
    /// A graph was captured from `template`: the key of exactly those records ([`super::key`];
    /// the one the client is told and sends references by).
    captured: Option<Hash128>,
    /// Its capture failed: it runs eagerly from now on.
    refused: bool,
}

/// When an executor holds a piece that has a template's shape (`cached_hold` in the server's
/// configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hold {
    /// Only where the piece's wait for its last record costs the GPU nothing: while the
    /// piece's stream still has earlier work on the GPU, or when its records have all arrived
    /// (the executor's `in_hand`). An idle GPU is never kept waiting, so a program bound by
    /// its own CPU runs as without cached execution.
    #[default]
    Busy,
    /// Always: most graphs, but the GPU may wait for a piece's last record.
    Always,
}

impl Hold {
    /// The name in the configuration and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Hold::Busy => "busy",
            Hold::Always => "always",
        }
    }

    /// The mode named `s` (`busy`, `always`).
    pub fn parse(s: &str) -> Option<Hold> {
        match s {
            "busy" => Some(Hold::Busy),
            "always" => Some(Hold::Always),
            _ => None,
        }
    }
}

/// What to do with a complete held piece ([`Policy::decide`]).
#[derive(Debug)]
pub enum Decision {
    /// Run its records one by one (counted as an eager piece).
    Eager(Vec<CallRecord>),
    /// Capture it as a graph; then [`Policy::captured`] or [`Policy::refused`].
    Capture(Hash128, Vec<CallRecord>),
    /// The graph captured for this key stands for it.
    Graph(Hash128, Vec<CallRecord>),
}

/// How a session's pieces ran.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    /// Pieces a graph launch ran.
    pub graph: u64,
    /// Pieces captured as a graph (the capture's launch ran them).
    pub captured: u64,
    /// Pieces run record by record.
    pub eager: u64,
    /// Records run by graph launches (captures included).
    pub records_graph: u64,
}

/// A session's cached-execution bookkeeping: the open piece, counted keys, templates.
pub struct Policy {
    /// The open piece (copies of its records), its stream, and whether its records are held.
    open: Vec<CallRecord>,
    stream: u64,
    holding: bool,
    /// Templates the held piece still matches the start of.
    candidates: Vec<Hash128>,
    /// Templates by the key of their first record.
    by_first: HashMap<Hash128, Vec<Hash128>>,
    /// Keys' entries, by shape key ([`super::shape_key`]).
    entries: HashMap<Hash128, Entry>,
    /// The exact keys of captured templates, and their shape keys.
    exact: HashMap<Hash128, Hash128>,
    templates: usize,
    /// Where the program's templates are kept (none for a session without a program name).
    file: Option<PathBuf>,
    /// How the pieces ran so far.
    pub counts: Counts,
    /// The templates were kept (once per session).
    saved: bool,
}

impl Policy {
    /// The policy of a session of `program` (the client's command line; empty: nothing is kept
    /// across sessions), templates kept under `dir` (`None`: nowhere).
    pub fn new(program: &str, dir: Option<&Path>) -> Policy {
        let file = dir.filter(|_| !program.is_empty()).map(|d| templates_file(d, Hash128::of(program.as_bytes())));
        let mut p = Policy {
            open: Vec::new(),
            stream: 0,
            holding: false,
            candidates: Vec::new(),
            by_first: HashMap::new(),
            entries: HashMap::new(),
            exact: HashMap::new(),
            templates: 0,
            file,
            counts: Counts::default(),
            saved: false,
        };
        for t in p.file.as_deref().map(load_templates).unwrap_or_default() {
            p.add_template(super::shape_key(&t), t);
        }
        p
    }

    /// Templates held.
    pub fn templates(&self) -> usize {
        self.templates
    }

    /// Records in the open piece.
    pub fn open_len(&self) -> usize {
        self.open.len()
    }

    /// The stream of the open piece (meaningful while [`Self::open_len`] is not 0).
    pub fn open_stream(&self) -> u64 {
        self.stream
    }

    /// Takes the next record; returns, in order, what is ready to run: records to run at once
    /// ([`Cut::Single`]) and held pieces that are complete ([`Cut::Piece`], for
    /// [`Self::decide`]).
    pub fn push(&mut self, rec: CallRecord, out: &mut Vec<Cut>) {
        self.push_gated(rec, out, |_| true);
    }

    /// [`Self::push`], holding a piece that starts with `rec` (and has a template's shape) only
    /// when `may_hold(rec)` says so: an executor that holds only while the GPU is busy with
    /// earlier work never keeps an idle GPU waiting for the rest of a piece ([`Hold::Busy`]).
    pub fn push_gated(&mut self, rec: CallRecord, out: &mut Vec<Cut>, may_hold: impl FnOnce(&CallRecord) -> bool) {
        let Some(s) = super::stream_of(&rec) else {
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
            self.holding = !self.candidates.is_empty() && may_hold(&rec);
            if !self.holding {
                self.candidates.clear();
            }
        } else if self.holding {
            let (i, entries) = (self.open.len(), &self.entries);
            self.candidates.retain(|k| {
                let t = entries.get(k).and_then(|e| e.template.as_ref());
                t.and_then(|t| t.get(i)).is_some_and(|t| super::same_shape(t, &rec))
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
            self.counts.eager += 1;
            self.count(recs);
        }
    }

    /// Counts a piece that ran record by record; at its first repetition it becomes a
    /// template.
    fn count(&mut self, recs: Vec<CallRecord>) {
        if recs.len() < MIN_GRAPH_RECORDS {
            return;
        }
        let key = super::shape_key(&recs);
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

    /// What to do with a complete held piece. `usable`: the executor can capture on its
    /// stream (false: it runs eagerly).
    pub fn decide(&mut self, recs: Vec<CallRecord>, usable: bool) -> Decision {
        let key = super::shape_key(&recs);
        let usable = usable && recs.len() >= MIN_GRAPH_RECORDS;
        let Some(e) = self.entries.get_mut(&key).filter(|e| usable && !e.refused) else {
            return self.eager(recs);
        };
        let equal = |t: &Option<Vec<CallRecord>>| {
            t.as_ref()
                .is_some_and(|t| t.len() == recs.len() && t.iter().zip(&recs).all(|(a, b)| super::same_shape(a, b)))
        };
        if !equal(&e.template) {
            return self.eager(recs);
        }
        e.seen = e.seen.saturating_add(1);
        if e.captured.is_some() {
            Decision::Graph(key, recs)
        } else {
            Decision::Capture(key, recs)
        }
    }

    /// A piece [`Self::decide`] gave a graph to ran eagerly after all (the graph's last
    /// results were not returned yet): counts it.
    pub fn ran_eagerly(&mut self) {
        self.counts.eager += 1;
    }

    fn eager(&mut self, recs: Vec<CallRecord>) -> Decision {
        self.counts.eager += 1;
        Decision::Eager(recs)
    }

    /// The graph for (shape) `key` was captured from `recs`, which ran with it: the graph's
    /// template is this session's own piece from now on (one read back from an earlier session
    /// only said what to hold; references rebuild from this one). Returns the exact key of
    /// `recs`, the one to tell the client.
    pub fn captured(&mut self, key: Hash128, recs: Vec<CallRecord>) -> Hash128 {
        let n = recs.len() as u64;
        let exact = super::key(&recs);
        if let Some(e) = self.entries.get_mut(&key) {
            e.captured = Some(exact);
            e.template = Some(recs);
            self.exact.insert(exact, key);
        }
        self.counts.captured += 1;
        self.counts.records_graph += n;
        exact
    }

    /// The graph for `key` ran a piece of `records` records.
    pub fn launched(&mut self, records: usize) {
        self.counts.graph += 1;
        self.counts.records_graph += records as u64;
    }

    /// The capture for `key` failed: its pieces run eagerly from now on (this one too: it is
    /// counted as eager).
    pub fn refused(&mut self, key: Hash128) {
        if let Some(e) = self.entries.get_mut(&key) {
            e.refused = true;
            if let Some(first) = e.template.as_ref().and_then(|t| t.first()).map(first_key) {
                if let Some(v) = self.by_first.get_mut(&first) {
                    v.retain(|k| *k != key);
                }
            }
        }
        self.counts.eager += 1;
    }

    /// The records a graph was captured from, by their exact key (the one
    /// [`Self::captured`] returned), with the graph's shape key.
    pub fn captured_template(&self, exact: &Hash128) -> Option<(Hash128, &[CallRecord])> {
        let shape = self.exact.get(exact)?;
        let e = self.entries.get(shape).filter(|e| e.captured == Some(*exact))?;
        Some((*shape, e.template.as_deref()?))
    }

    /// Keeps the session's templates (those whose capture did not fail) for the program's next
    /// session; once per session. Written whole and renamed: a concurrent session reads the old
    /// templates or the new.
    pub fn save(&mut self) {
        let Some((file, bytes)) = self.kept() else { return };
        if let Some(parent) = file.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let tmp = file.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &bytes).is_ok() {
            let _ = std::fs::rename(&tmp, file);
        }
    }

    /// What [`Self::save`] would write, and where, for a process that cannot write there
    /// itself (a confined executor: the server writes it); once per session, `None` when there
    /// is nothing to keep.
    pub fn kept(&mut self) -> Option<(PathBuf, Vec<u8>)> {
        if std::mem::replace(&mut self.saved, true) {
            return None;
        }
        let file = self.file.clone()?;
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
            return None;
        }
        bytes[..4].copy_from_slice(&n.to_le_bytes());
        Some((file, bytes))
    }

    /// Where the templates are kept, if anywhere.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }
}

/// Where the templates of the program whose command line hashes to `key` are kept under the
/// cache directory `dir`.
pub fn templates_file(dir: &Path, key: Hash128) -> PathBuf {
    dir.join("pieces").join(key.to_string())
}

/// The key templates are found by: the shape key of their first record alone.
fn first_key(r: &CallRecord) -> Hash128 {
    super::shape_key(std::slice::from_ref(r))
}

/// The templates kept for a program: a `u32` count, then each as a `u32` length and a call
/// batch. A damaged or missing file gives none; a template that is not a piece is left out.
fn load_templates(file: &Path) -> Vec<Vec<CallRecord>> {
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
    let stream = recs.first().and_then(super::stream_of);
    (MIN_GRAPH_RECORDS..=MAX_RECORDS).contains(&recs.len())
        && stream.is_some()
        && recs.iter().all(|r| super::stream_of(r) == stream)
}

#[cfg(test)]
mod tests;
