//! Warm constants over a recording (`gpuless analyze --resident`): what a server with
//! `--program-keep-alive` would keep after a session of the recorded program and skip in the
//! next session of it, by the rules of [`super`]. The recording cannot say what kernels wrote,
//! so the kept bytes are an upper bound (the executor reads every upload back before it keeps
//! it); the skipped ones follow from the calls alone.

use std::collections::BTreeMap;

use gpuless_analyzer::api::ApiFunction;
use serde::Serialize;

use super::{plain_upload, Ranges, Resident, MIN_RESIDENT};
use crate::{CallRecord, Value};

/// What warm constants would do for a recorded program.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Survey {
    /// Host-to-device copies of blobs: (copies, bytes).
    pub uploads: (u64, u64),
    /// Of those, the ones of at least [`MIN_RESIDENT`] bytes.
    pub large_uploads: (u64, u64),
    /// Uploads a session would leave resident at its end, at most: (ranges, bytes).
    pub kept: (u64, u64),
    /// Uploads the next session of the program would not copy: (copies, bytes).
    pub skipped: (u64, u64),
    /// The first call that may write device memory, after which nothing is skipped: (sequence
    /// number, function), if there is one.
    pub first_write: Option<(u64, String)>,
}

fn word(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::U64(x) | Value::DevPtr(x) | Value::Size(x) => Some(*x),
        _ => None,
    }
}

/// Live allocations of a recording as it goes: base → size.
#[derive(Default)]
struct Allocations(BTreeMap<u64, u64>);

impl Allocations {
    /// Follows `rec` (allocations and frees); returns the base of an allocation it made.
    fn follow(&mut self, f: &ApiFunction, rec: &CallRecord) -> Option<u64> {
        let out = |name: &str| f.out_args().position(|(_, a)| a.name == name).and_then(|i| rec.results.get(i));
        let arg = |name: &str| f.args.iter().position(|a| a.name == name).and_then(|i| rec.args.get(i));
        match f.name {
            "cuMemAlloc" | "cuMemAllocAsync" | "cuMemAllocFromPoolAsync" => {
                let (base, size) = (word(out("dptr"))?, word(arg("bytesize"))?);
                self.0.insert(base, size);
                Some(base)
            }
            "cuMemAllocPitch" => {
                let (base, size) = (word(out("dptr"))?, word(out("pPitch"))? * word(arg("Height"))?);
                self.0.insert(base, size);
                Some(base)
            }
            "cuMemFree" | "cuMemFreeAsync" => {
                self.0.remove(&word(arg("dptr"))?);
                None
            }
            _ => None,
        }
    }

    /// The base of the allocation containing `p`.
    fn base(&self, p: u64) -> Option<u64> {
        self.0.range(..=p).next_back().filter(|(b, s)| p < **b + (**s).max(1)).map(|(b, _)| *b)
    }
}

/// Surveys `records` (driver records of one recording, in call order): a first session notes
/// its uploads; a second session of the same records finds the ranges still inside live
/// allocations at the first one's end (every allocation at the same address: the client's arena
/// gives the same program the same addresses).
pub fn survey(records: &[CallRecord]) -> Survey {
    let mut s = Survey::default();
    let mut first = Resident::start(Ranges::new());
    let mut allocs = Allocations::default();
    for rec in records.iter().filter(|r| r.status == 0) {
        let Some(f) = rec.function.api() else { continue };
        allocs.follow(f, rec);
        if let Some((_, b)) = plain_upload(f, rec) {
            s.uploads.0 += 1;
            s.uploads.1 += b.len;
            if b.len >= MIN_RESIDENT {
                s.large_uploads.0 += 1;
                s.large_uploads.1 += b.len;
            }
        }
        if s.first_write.is_none() && plain_upload(f, rec).is_none() && super::may_write_device(f) {
            s.first_write = Some((rec.seq, f.name.to_string()));
        }
        first.before(f, rec, false, |p| allocs.base(p));
    }
    let kept: Ranges = first
        .uploads()
        .filter(|&(at, len, _)| allocs.base(at).is_some_and(|b| at + len <= b + allocs.0[&b]))
        .map(|(at, len, h)| (at, (len, h)))
        .collect();
    s.kept = (kept.len() as u64, kept.values().map(|(l, _)| l).sum());
    // The allocations the executor would hold: those around a kept range.
    let held: std::collections::HashSet<u64> = kept.keys().filter_map(|&at| allocs.base(at)).collect();
    let mut next = Resident::start(kept);
    let mut allocs = Allocations::default();
    for rec in records.iter().filter(|r| r.status == 0) {
        let Some(f) = rec.function.api() else { continue };
        if let Some(base) = allocs.follow(f, rec) {
            if held.contains(&base) {
                next.adopted(base);
            }
        }
        next.before(f, rec, false, |p| allocs.base(p));
    }
    s.skipped = next.skipped;
    s
}
