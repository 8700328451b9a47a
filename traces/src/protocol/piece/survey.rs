//! What cached-trace execution would make of a recording (`gpuless analyze --pieces`): the
//! records a client of `gpuless serve` would send, cut into pieces and run through the
//! executor's own [`Policy`] as if every capture succeeded — how many pieces and records would
//! run as graphs, how long the pieces are, and what ends them (the calls to look at when a
//! program's pieces stay short).

use std::collections::{HashMap, HashSet};

use gpuless_analyzer::api::SyncClass;
use serde::Serialize;

use super::policy::{Counts, Decision, Policy, MIN_GRAPH_RECORDS};
use super::{Assembler, Cut, MAX_RECORDS};
use crate::model::{CallRecord, Hash128};

/// Upper bounds (inclusive) of the piece-length classes of [`Survey::lengths`].
pub const LENGTH_CLASSES: [usize; 6] = [1, 3, 7, 15, 31, MAX_RECORDS];

/// The survey of one recording.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Survey {
    /// Records a client would send (driver calls it cannot answer itself; a repeated stable
    /// query once).
    pub records_sent: u64,
    /// Of these, records of calls the table marks `graph` (what pieces are made of).
    pub records_capturable: u64,
    /// Pieces, as the rule cuts the records sent.
    pub pieces: u64,
    /// Pieces by length: how many are at most 1, 3, 7, 15, 31 and 32 records long
    /// ([`LENGTH_CLASSES`]; each count excludes the classes before it).
    pub lengths: [u64; 6],
    /// Pieces long enough for a graph (at least [`MIN_GRAPH_RECORDS`] records).
    pub pieces_long_enough: u64,
    /// Distinct keys among those ([`super::key`]: exactly equal pieces), and how many of them
    /// occur once only.
    pub keys: u64,
    /// See `keys`.
    pub keys_once: u64,
    /// Distinct shapes among them ([`super::shape_key`]: one graph each), and how many occur
    /// once only.
    pub shapes: u64,
    /// See `shapes`.
    pub shapes_once: u64,
    /// What ended pieces, most first: the function of the call that ended one (a call that is
    /// not `graph`), "another stream", "32 records" (the limit), "end of the recording".
    pub ended_by: Vec<(String, u64)>,
    /// How the executor's policy would run them (every capture succeeding).
    pub counts: Counts,
    /// Share of the capturable records a graph would run.
    pub graph_share: f64,
}

/// Runs the policy over `records` (in call order: sorted by sequence number).
pub fn survey(records: impl IntoIterator<Item = CallRecord>) -> Survey {
    let mut s = Survey::default();
    let mut policy = Policy::new("", None);
    let mut asm = Assembler::default();
    let mut memo: HashSet<Hash128> = HashSet::new();
    let mut ended: HashMap<String, u64> = HashMap::new();
    let mut keys: [HashMap<Hash128, u32>; 2] = Default::default();
    let (mut cuts, mut pieces) = (Vec::new(), Vec::new());
    for rec in records {
        let Some(f) = rec.function.api() else { continue };
        if !f.sent_by_client() {
            continue;
        }
        if f.may_change_answers() && f.sync != SyncClass::CreatesHandle {
            memo.clear();
        } else if f.stable && f.sync == SyncClass::DeviceQuery {
            // The key leaves out sequence numbers, threads and times: the same query.
            if !memo.insert(super::key(std::slice::from_ref(&rec))) {
                continue; // answered from the client's memory
            }
        }
        for _ in 0..=rec.repeat {
            s.records_sent += 1;
            let capturable = super::stream_of(&rec).is_some();
            s.records_capturable += u64::from(capturable);
            // The rule's cut, for lengths, keys and what ended each piece.
            let held = asm.held();
            asm.push(rec.clone(), &mut pieces);
            for c in pieces.drain(..) {
                if let Cut::Piece(p) = c {
                    let why = if !capturable {
                        f.name.to_string()
                    } else if held + 1 >= MAX_RECORDS && asm.held() == 0 {
                        format!("{MAX_RECORDS} records")
                    } else {
                        "another stream".to_string()
                    };
                    *ended.entry(why).or_default() += 1;
                    s.add_piece(&p, &mut keys);
                }
            }
            // The executor's policy.
            policy.push(rec.clone(), &mut cuts);
            decide(&mut policy, &mut cuts);
        }
    }
    asm.finish(&mut pieces);
    for c in pieces.drain(..) {
        if let Cut::Piece(p) = c {
            *ended.entry("end of the recording".to_string()).or_default() += 1;
            s.add_piece(&p, &mut keys);
        }
    }
    policy.finish(&mut cuts);
    decide(&mut policy, &mut cuts);
    let distinct = |m: &HashMap<Hash128, u32>| (m.len() as u64, m.values().filter(|&&n| n == 1).count() as u64);
    (s.keys, s.keys_once) = distinct(&keys[0]);
    (s.shapes, s.shapes_once) = distinct(&keys[1]);
    let mut ended: Vec<(String, u64)> = ended.into_iter().collect();
    ended.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    s.ended_by = ended;
    s.counts = policy.counts;
    s.graph_share =
        if s.records_capturable == 0 { 0.0 } else { s.counts.records_graph as f64 / s.records_capturable as f64 };
    s
}

impl Survey {
    fn add_piece(&mut self, p: &[CallRecord], keys: &mut [HashMap<Hash128, u32>; 2]) {
        self.pieces += 1;
        if let Some(i) = LENGTH_CLASSES.iter().position(|&n| p.len() <= n) {
            self.lengths[i] += 1;
        }
        if p.len() >= MIN_GRAPH_RECORDS {
            self.pieces_long_enough += 1;
            *keys[0].entry(super::key(p)).or_default() += 1;
            *keys[1].entry(super::shape_key(p)).or_default() += 1;
        }
    }
}

/// Runs the policy's decisions on complete held pieces as if every capture succeeded.
fn decide(policy: &mut Policy, cuts: &mut Vec<Cut>) {
    for c in cuts.drain(..) {
        if let Cut::Piece(recs) = c {
            match policy.decide(recs, true) {
                Decision::Eager(_) => {}
                Decision::Capture(key, recs) => {
                    policy.captured(key, recs);
                }
                Decision::Graph(_, recs) => policy.launched(recs.len()),
            }
        }
    }
}

#[cfg(test)]
mod tests;
