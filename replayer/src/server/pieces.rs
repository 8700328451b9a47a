//! Cached-trace execution (issue 20): an executor runs the repeated parts of a session's work
//! as CUDA graphs.
//!
//! The session's records are cut into pieces as they arrive (`gpuless_traces::protocol::piece`:
//! runs of launches, stream-ordered copies and sets on one stream, at most 32 records; every
//! other record runs at once, in order, after the piece before it). For each complete piece:
//!
//! - a piece seen for the first time runs record by record (eagerly), and its key is counted;
//! - at its first repetition — or at its first appearance when an earlier session of the same
//!   program saw it repeat (the program's keys are kept in the cache's disk directory,
//!   `pieces/<hash of the program>`) — it is captured into a graph
//!   (`crate::replay::piece_graph`) and the graph does the work;
//! - later, a piece with the same key is compared record by record with the one the graph was
//!   captured from (`piece::same`: equal but for uploaded bytes, host buffers, sequence
//!   numbers, threads and times); equal, its uploads are written into the graph's input buffers
//!   and the graph is launched on the piece's stream; any difference, or results of the graph's
//!   last launch not yet returned, runs it eagerly. A wrong result is never returned: the graph
//!   is the same work on the same addresses with the new bytes.
//!
//! Pieces shorter than [`MIN_GRAPH_RECORDS`], pieces on a stream the program is capturing
//! itself, and pieces whose capture failed run eagerly. The counts go to the session's
//! statistics and the server's metrics (`gpuless_piece_runs_total{run}`).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use gpuless_traces::protocol::piece::{self, Assembler, Cut, PieceRef};
use gpuless_traces::protocol::SessionStats;
use gpuless_traces::{CallRecord, Hash128};

use crate::replay::piece_graph::PieceGraph;
use crate::replay::stream::Stream;
use crate::replay::ReplayError;

/// Pieces shorter than this run eagerly: a graph launch costs about what a few launches do.
pub const MIN_GRAPH_RECORDS: usize = 4;
/// Most graphs a session keeps; beyond, new pieces run eagerly.
const MAX_GRAPHS: usize = 4096;
/// Most keys counted (and kept for a program); the counts start over beyond.
const MAX_KEYS: usize = 1 << 16;

/// What a piece's key has done so far in this session.
#[derive(Default)]
struct Entry {
    seen: u32,
    /// The graph, and the records it was captured from.
    graph: Option<(PieceGraph, Vec<CallRecord>)>,
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
    asm: Assembler,
    entries: HashMap<Hash128, Entry>,
    graphs: usize,
    /// Keys that repeated in an earlier session of the same program.
    hot: HashSet<Hash128>,
    /// Where the program's keys are kept (none for a session without a program name).
    file: Option<PathBuf>,
    /// The session's counts (copied into its statistics).
    pub graph: u64,
    /// See `graph`.
    pub captured: u64,
    /// See `graph`.
    pub eager: u64,
    /// Records run by graph launches (captures included).
    pub records_graph: u64,
    /// Why the first refused capture was refused.
    pub refusal: Option<String>,
    /// Keys captured since the last answer (told to the client, which may send those pieces
    /// by reference).
    announced: Vec<Hash128>,
    /// Pieces the client sent by reference.
    pub by_reference: u64,
    /// The keys were kept (at `Close`; the session's end does not write them again).
    saved: bool,
}

impl Pieces {
    /// Cached execution for a session of `program` (the client's command line; empty: no
    /// keys are kept across sessions), keys kept under `dir`.
    pub fn new(program: &str, dir: &std::path::Path) -> Pieces {
        let file =
            (!program.is_empty()).then(|| dir.join("pieces").join(format!("{}", Hash128::of(program.as_bytes()))));
        let hot = file.as_deref().map(load_keys).unwrap_or_default();
        Pieces {
            asm: Assembler::default(),
            entries: HashMap::new(),
            graphs: 0,
            hot,
            file,
            graph: 0,
            captured: 0,
            eager: 0,
            records_graph: 0,
            refusal: None,
            announced: Vec::new(),
            by_reference: 0,
            saved: false,
        }
    }

    /// Takes the next record; returns, in order, what is ready to run.
    pub fn push(&mut self, rec: CallRecord, out: &mut Vec<Cut>) {
        self.asm.push(rec, out);
    }

    /// Ends the open piece (before an answer, and at the session's end).
    pub fn finish(&mut self, out: &mut Vec<Cut>) {
        self.asm.finish(out);
    }

    /// Runs a complete piece as a graph when it can ([`Ran::Graph`]); otherwise hands its
    /// records back to be run one by one ([`Ran::Eager`]).
    pub fn run(&mut self, stream: &mut Stream, recs: Vec<CallRecord>) -> Ran {
        if recs.len() < MIN_GRAPH_RECORDS || stream.piece_stream_capturing(&recs) {
            return self.eager(recs);
        }
        let key = piece::key(&recs);
        if self.entries.len() >= MAX_KEYS && !self.entries.contains_key(&key) {
            self.entries.retain(|_, e| e.graph.is_some());
        }
        let hot = self.hot.contains(&key);
        let room = self.graphs < MAX_GRAPHS;
        let e = self.entries.entry(key).or_default();
        e.seen = e.seen.saturating_add(1);
        if e.refused {
            return self.eager(recs);
        }
        if let Some((g, template)) = e.graph.as_mut() {
            let equal = template.len() == recs.len() && template.iter().zip(&recs).all(|(a, b)| piece::same(a, b));
            if !equal || stream.piece_results_pending(g) {
                return self.eager(recs);
            }
            let result = stream.launch_piece(g, &recs);
            return self.graph_ran(recs.len(), recs.last().map_or(0, |r| r.seq), result, false);
        }
        if (e.seen < 2 && !hot) || !room {
            return self.eager(recs);
        }
        match stream.capture_piece(&recs) {
            Ok(g) => {
                let last_seq = recs.last().map_or(0, |r| r.seq);
                let n = recs.len();
                e.graph = Some((g, recs));
                self.graphs += 1;
                self.announced.push(key);
                self.graph_ran(n, last_seq, Ok(()), true)
            }
            Err(why) => {
                e.refused = true;
                tracing::debug!(why, "a piece stays eager");
                self.refusal.get_or_insert(why);
                self.eager(recs)
            }
        }
    }

    /// The records a piece sent by reference stands for (the graph's own piece with the
    /// reference's sequence numbers and uploads), or why there are none.
    pub fn resolve(&mut self, r: &PieceRef) -> Result<Vec<CallRecord>, String> {
        let Some((_, template)) = self.entries.get(&r.key).and_then(|e| e.graph.as_ref()) else {
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
        self.by_reference += 1;
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

    /// Keeps the keys that repeated (with the earlier sessions' ones) for the program's next
    /// session.
    pub fn save(&mut self) {
        if std::mem::replace(&mut self.saved, true) {
            return;
        }
        let Some(file) = &self.file else { return };
        let mut keys: Vec<Hash128> =
            self.entries.iter().filter(|(_, e)| e.seen >= 2 && !e.refused).map(|(k, _)| *k).collect();
        if keys.is_empty() {
            return;
        }
        let fresh: HashSet<Hash128> = keys.iter().copied().collect();
        keys.extend(self.hot.iter().filter(|k| !fresh.contains(k)).take(MAX_KEYS.saturating_sub(fresh.len())));
        keys.truncate(MAX_KEYS);
        let mut bytes = Vec::with_capacity(keys.len() * 16);
        for k in &keys {
            bytes.extend_from_slice(&k.0.to_le_bytes());
        }
        if let Some(parent) = file.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        // Written whole and renamed: a concurrent session reads the old keys or the new ones.
        let tmp = file.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &bytes).is_ok() {
            let _ = std::fs::rename(&tmp, file);
        }
    }
}

/// The keys kept for a program: 16 bytes each; a damaged or missing file is none.
fn load_keys(file: &std::path::Path) -> HashSet<Hash128> {
    let Ok(bytes) = std::fs::read(file) else { return HashSet::new() };
    if bytes.len() % 16 != 0 {
        return HashSet::new();
    }
    bytes
        .chunks_exact(16)
        .take(MAX_KEYS)
        .map(|c| {
            let mut a = [0u8; 16];
            a.copy_from_slice(c);
            Hash128(u128::from_le_bytes(a))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_kept_for_a_program_survive_a_round_trip_and_damage_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = Pieces::new("python run.py", dir.path());
        assert!(p.hot.is_empty());
        p.save();
        assert!(!dir.path().join("pieces").exists(), "nothing repeated: nothing kept");
        p.saved = false;
        p.entries.insert(Hash128(7), Entry { seen: 3, ..Default::default() });
        p.entries.insert(Hash128(8), Entry { seen: 1, ..Default::default() });
        p.entries.insert(Hash128(9), Entry { seen: 5, refused: true, ..Default::default() });
        p.save();
        let q = Pieces::new("python run.py", dir.path());
        assert_eq!(q.hot, HashSet::from([Hash128(7)]), "only keys that repeated and could be captured");
        assert!(Pieces::new("python other.py", dir.path()).hot.is_empty(), "keys are the program's own");
        let file = q.file.clone().unwrap();
        std::fs::write(&file, [1u8; 17]).unwrap();
        assert!(Pieces::new("python run.py", dir.path()).hot.is_empty());
        assert!(Pieces::new("", dir.path()).file.is_none());
    }
}
