//! Cached-trace execution (issue 20): an executor runs the repeated parts of a session's work
//! as CUDA graphs, and everything else as it arrives.
//!
//! The session's records are cut into pieces (`gpuless_traces::protocol::piece`: runs of
//! launches, stream-ordered copies and sets on one stream, at most 32 records; every other
//! record ends a piece). What runs at once, what is held, and when a held piece is captured or
//! relaunched is the piece [`Policy`] (`piece::policy`, shared with `gpuless analyze --pieces`);
//! this module does the GPU part it decides on: a capture on the executor's stream, or the
//! graph's launch with this repetition's uploads written into its input buffers
//! (`crate::replay::piece_graph`).
//!
//! A wrong result is never returned: a graph stands only for records equal to the ones it was
//! captured from, on the same addresses, with this repetition's bytes. Templates are kept per
//! program in the cache's disk directory (`pieces/<hash of the program>`), so the program's
//! next session holds and captures them the first time it sees them. Pieces shorter than
//! `MIN_GRAPH_RECORDS`, on a stream the program is capturing itself, whose graph's last results
//! were not returned yet, or whose capture failed run record by record. The counts go to the
//! session's statistics and the server's metrics (`gpuless_piece_runs_total{run}`).

use std::collections::HashMap;

use gpuless_traces::protocol::piece::policy::{Decision, Hold, Policy};
use gpuless_traces::protocol::piece::{Cut, PieceRef};
use gpuless_traces::protocol::SessionStats;
use gpuless_traces::{CallRecord, Hash128};

use crate::replay::piece_graph::PieceGraph;
use crate::replay::stream::Stream;
use crate::replay::ReplayError;

/// What became of a piece handed to [`Pieces::run`].
pub enum Ran {
    /// A graph did its work: the number of records, the last record's sequence number, and
    /// the launch's result.
    Graph { records: u64, last_seq: u64, result: Result<(), ReplayError> },
    /// Run these records one by one (nothing of them ran).
    Eager(Vec<CallRecord>),
}

/// A session's cached-trace execution: the policy and the graphs it captured.
pub struct Pieces {
    policy: Policy,
    hold: Hold,
    graphs: HashMap<Hash128, PieceGraph>,
    /// Why the first refused capture was refused (said in the server's log at the session's
    /// end).
    pub refusal: Option<String>,
    /// Keys captured since the last answer (told to the client, which may send those pieces
    /// by reference).
    announced: Vec<Hash128>,
    /// The key the program's templates are kept under (`policy::templates_file`).
    key: Hash128,
}

impl Pieces {
    /// Cached execution for a session of `program` (the client's command line; empty: nothing
    /// is kept across sessions), templates kept under `dir`, pieces held as `hold` says.
    pub fn new(program: &str, dir: &std::path::Path, hold: Hold) -> Pieces {
        Pieces {
            policy: Policy::new(program, Some(dir)),
            hold,
            graphs: HashMap::new(),
            refusal: None,
            announced: Vec::new(),
            key: Hash128::of(program.as_bytes()),
        }
    }

    /// Takes the next record; returns, in order, what is ready to run: records to run at once
    /// ([`Cut::Single`]) and held pieces that are complete ([`Cut::Piece`], for [`Self::run`]).
    /// With [`Hold::Busy`] a piece is held only where holding keeps no idle GPU waiting: while
    /// its stream has work on the GPU, or when `in_hand` (every record that can complete it
    /// has arrived: nothing of the segment runs before all of it is cut).
    pub fn push(&mut self, stream: &mut Stream, rec: CallRecord, in_hand: bool, out: &mut Vec<Cut>) {
        match self.hold {
            Hold::Always => self.policy.push(rec, out),
            Hold::Busy => self.policy.push_gated(rec, out, |r| in_hand || stream.piece_stream_busy(r)),
        }
    }

    /// Ends the open piece (before an answer, and at the session's end).
    pub fn finish(&mut self, out: &mut Vec<Cut>) {
        self.policy.finish(out);
    }

    /// Runs a complete held piece as a graph when it can ([`Ran::Graph`]); otherwise hands its
    /// records back to be run one by one ([`Ran::Eager`]).
    pub fn run(&mut self, stream: &mut Stream, recs: Vec<CallRecord>) -> Ran {
        let usable = !stream.piece_stream_capturing(&recs);
        let last_seq = recs.last().map_or(0, |r| r.seq);
        match self.policy.decide(recs, usable) {
            Decision::Eager(recs) => Ran::Eager(recs),
            Decision::Graph(key, recs) => {
                let Some(g) = self.graphs.get_mut(&key).filter(|g| !stream.piece_results_pending(g)) else {
                    self.policy.ran_eagerly();
                    return Ran::Eager(recs);
                };
                // This repetition's addresses and parameters into the nodes where they differ
                // from the last launch's; a node that cannot take them: the piece runs eagerly
                // (nothing of it ran).
                if let Err(why) = stream.update_piece(g, &recs) {
                    self.refusal.get_or_insert(why);
                    self.policy.ran_eagerly();
                    return Ran::Eager(recs);
                }
                let result = stream.launch_piece(g, &recs);
                self.policy.launched(recs.len());
                Ran::Graph { records: recs.len() as u64, last_seq, result }
            }
            Decision::Capture(key, recs) => match stream.capture_piece(&recs) {
                Ok(g) => {
                    let n = recs.len() as u64;
                    self.graphs.insert(key, g);
                    let exact = self.policy.captured(key, recs);
                    self.announced.push(exact);
                    Ran::Graph { records: n, last_seq, result: Ok(()) }
                }
                Err(why) => {
                    self.refusal.get_or_insert(why);
                    self.policy.refused(key);
                    Ran::Eager(recs)
                }
            },
        }
    }

    /// The records a piece sent by reference stands for (the graph's own piece with the
    /// reference's sequence numbers and uploads), or why there are none.
    pub fn resolve(&self, r: &PieceRef) -> Result<Vec<CallRecord>, String> {
        let Some((_, template)) = self.policy.captured_template(&r.key).filter(|(k, _)| self.graphs.contains_key(k))
        else {
            return Err(format!("piece {} was sent by reference, but this session holds no graph of it", r.key));
        };
        r.records(template).ok_or_else(|| {
            format!(
                "piece {} was sent by reference with {} records and {} uploads, which do not fit its {} records",
                r.key,
                r.records,
                r.payloads.len(),
                template.len()
            )
        })
    }

    /// Keys captured since the last call, for the client's next answer.
    pub fn take_announced(&mut self) -> Vec<Hash128> {
        std::mem::take(&mut self.announced)
    }

    /// Adds the counts to a session's statistics.
    pub fn count_into(&self, s: &mut SessionStats) {
        let c = self.policy.counts;
        s.pieces_graph = c.graph;
        s.pieces_captured = c.captured;
        s.pieces_eager = c.eager;
        s.records_graph = c.records_graph;
    }

    /// The templates to keep for the program's next session, by the key the server keeps them
    /// under ([`super::control::Control::Templates`]); once per session.
    pub fn kept(&mut self) -> Option<(Hash128, Vec<u8>)> {
        self.policy.kept().map(|(_, bytes)| (self.key, bytes))
    }
}
