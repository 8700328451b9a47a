//! Folding repeated queries. PyTorch asks the driver the same questions about a thousand times
//! per ResNet-50 inference (`cuDevicePrimaryCtxGetState`, `cuKernelGetAttribute`, ...); building
//! and writing a record for each costs more than the rest of the recording. A query whose
//! arguments are plain values and whose answers are plain values is remembered per thread: the
//! same question with the same answer (and status) only increments a counter, and the first
//! record is written again with `repeat = n` when the thread hands its records to the writer
//! (trace format 1.1). Nothing is lost: every call is counted, with its arguments and answer.
//! A repeat is found through a per-thread memo ([`repeat`]) and counted without a lock; the
//! thread's batch lock guards the map of every question, which a hand-over drains.
//! Queries are not timed (`duration_ns` 0); a folded record's timestamp is the last time its
//! thread read the clock before the last repeat (at most one recorded call earlier).
//!
//! Queries the API table marks `stable` go further: while no call that may change answers
//! ([`ApiFunction::may_change_answers`], counted in `hot::Hot::epoch`) has run since the driver last
//! gave an answer, a repeat of the question is answered from the memo without calling the
//! driver ([`answer`]), and counted like any other repeat.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use gpuless_analyzer::api::{self, ApiFunction, ArgKind, CScalar, Direction, SyncClass};
use gpuless_traces::CallRecord;

use crate::capture::{read_scalar, write_scalar};
use crate::lane::{Lane, MEMO};
pub use crate::memo::{Answer, Key};
use crate::memo::{Entry, MAX};

/// The current epoch.
#[inline(always)]
pub fn epoch() -> u64 {
    crate::hot::HOT.epoch.load(Ordering::Relaxed)
}

/// A call that may change answers has returned: every remembered stable answer must be asked
/// of the driver again. (Relaxed: a thread that synchronized with this one after the call sees
/// the new epoch by coherence; a racing thread may see either, as it would see either answer.)
#[inline(always)]
pub fn invalidate() {
    crate::hot::HOT.epoch.fetch_add(1, Ordering::Relaxed);
}

/// How to read a foldable function's arguments from its raw words.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    ins: [u8; MAX],
    n_in: u8,
    /// Out arguments: index and the C type of the value behind the pointer (read and written
    /// at its width).
    outs: [(u8, CScalar); MAX],
    n_out: u8,
}

fn make_plan(f: &ApiFunction) -> Option<Plan> {
    // cuKernelGetFunction creates nothing: it looks up the same function for the same kernel.
    let lookup = f.name == "cuKernelGetFunction";
    if !(lookup || matches!(f.sync, SyncClass::DeviceQuery | SyncClass::StateQuery)) || crate::arena::op(f.id).is_some()
    {
        return None;
    }
    let mut p = Plan { ins: [0; MAX], n_in: 0, outs: [(0, CScalar::Ptr); MAX], n_out: 0 };
    for (i, a) in f.args.iter().enumerate() {
        match a.dir {
            Direction::In => {
                let plain = matches!(
                    a.kind,
                    ArgKind::Scalar
                        | ArgKind::Flags
                        | ArgKind::Enum
                        | ArgKind::Count
                        | ArgKind::Size
                        | ArgKind::Handle(_)
                ) && !a.c_type.contains('*');
                if !plain || usize::from(p.n_in) == MAX {
                    return None;
                }
                p.ins[usize::from(p.n_in)] = i as u8;
                p.n_in += 1;
            }
            Direction::Out => {
                // One value behind the pointer, of a type the table gives (a buffer or a
                // struct is not one).
                let ty = match a.kind {
                    ArgKind::HostBuf(_) | ArgKind::Struct(_) | ArgKind::Structs { .. } => return None,
                    _ => a.pointee_type()?,
                };
                if usize::from(p.n_out) == MAX {
                    return None;
                }
                p.outs[usize::from(p.n_out)] = (i as u8, ty);
                p.n_out += 1;
            }
            Direction::InOut => return None,
        }
    }
    Some(p)
}

/// The folding plan of API function `id`, if its calls can be folded.
pub fn plan(id: api::ApiId) -> Option<&'static Plan> {
    static PLANS: OnceLock<Vec<Option<Plan>>> = OnceLock::new();
    PLANS.get_or_init(|| api::functions().iter().map(make_plan).collect()).get(usize::from(id.0))?.as_ref()
}

/// The question a call asks.
#[inline]
fn question(plan: &Plan, slot: usize, raw: &[u64]) -> Key {
    let mut key = Key { slot: slot as u32, ins: [0; MAX] };
    for (k, &i) in plan.ins[..usize::from(plan.n_in)].iter().enumerate() {
        key.ins[k] = raw.get(usize::from(i)).copied().unwrap_or(0);
    }
    key
}

/// Reads the question and the driver's answer of a call that just returned.
///
/// # Safety
/// `raw` are the call's arguments; out pointers were written by the driver when `status` is 0.
#[inline]
pub unsafe fn observe(plan: &Plan, slot: usize, raw: &[u64], status: u32) -> (Key, Answer) {
    let key = question(plan, slot, raw);
    let mut ans = Answer { status, outs: [0; MAX] };
    if status == 0 {
        for (k, &(i, ty)) in plan.outs[..usize::from(plan.n_out)].iter().enumerate() {
            let p = raw.get(usize::from(i)).copied().unwrap_or(0);
            if p != 0 {
                // SAFETY: the driver wrote a value of this type there (the caller's contract).
                ans.outs[k] = unsafe { read_scalar(ty, p) };
            }
        }
    }
    (key, ans)
}

impl Entry {
    /// Notes that the driver gave this answer in epoch `confirmed` (when not 0); `true`.
    #[inline]
    fn confirm(&self, confirmed: u64) -> bool {
        if confirmed != 0 {
            self.confirmed.store(confirmed, Ordering::Relaxed);
        }
        true
    }

    /// Counts one more repeat (owning thread only); `false` when the counter is full. The
    /// first repeat since the last hand-over lists the entry in `lane`, so that the hand-over
    /// visits the questions asked since, not every question ever asked ([`Folds::drain`]).
    fn count(self: &Arc<Self>, now_ns: u64, lane: &Lane) -> bool {
        let n = self.repeats.load(Ordering::Relaxed);
        if n == u32::MAX {
            return false;
        }
        if n == 0 {
            match lane.counted.try_borrow_mut() {
                Ok(mut c) => c.push(self.clone()),
                Err(_) => lane.scan.set(true),
            }
        }
        self.repeats.store(n + 1, Ordering::Relaxed);
        self.last_ns.store(now_ns, Ordering::Relaxed);
        true
    }
}

/// The record standing for a question's repeats, built on the writer thread from the first
/// record of the question (cloning it here cost more than the queries it counts).
pub struct Repeats {
    template: Arc<CallRecord>,
    repeat: u32,
    seq: u64,
    timestamp_ns: u64,
}

impl Repeats {
    /// The record: the template's call, standing for `1 + repeat` calls.
    pub fn into_record(self) -> CallRecord {
        let mut r = Arc::unwrap_or_clone(self.template);
        r.repeat = self.repeat;
        r.seq = self.seq;
        r.timestamp_ns = self.timestamp_ns;
        r.duration_ns = 0;
        r
    }
}

#[inline]
fn memo_index(key: &Key) -> usize {
    let mut h = u64::from(key.slot).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for w in key.ins {
        h = (h ^ w).wrapping_mul(0xff51_afd7_ed55_8ccd);
    }
    (h >> 53) as usize % MEMO
}

/// Makes `entry` the recent one of its question in this thread's lane.
fn memo(entry: &Arc<Entry>, lane: &Lane) {
    if let Ok(mut r) = lane.recent.try_borrow_mut() {
        if let Some(slot) = r.get_mut(memo_index(&entry.key)) {
            if !slot.as_ref().is_some_and(|e| Arc::ptr_eq(e, entry)) {
                *slot = Some(entry.clone());
            }
        }
    }
}

/// Counts the call if it repeats a recent answer of this thread's, without a lock; `true` when
/// it was folded. Otherwise [`Folds::fold`] decides, under the batch lock. `confirmed`: the
/// epoch in which the driver gave this answer to a stable query (0 for other queries).
#[inline]
pub fn repeat(key: &Key, answer: &Answer, now_ns: u64, confirmed: u64, lane: &Lane) -> bool {
    let Ok(r) = lane.recent.try_borrow() else { return false };
    match r.get(memo_index(key)) {
        Some(Some(e)) if e.key == *key && e.answer == *answer => e.confirm(confirmed) && e.count(now_ns, lane),
        _ => false,
    }
}

/// Answers a stable query from this thread's memo without calling the driver, when the driver
/// gave the remembered answer in `epoch` (the current one) and every out pointer is set; the
/// call is counted as a repeat. `false`: ask the driver.
///
/// # Safety
/// `raw` are the call's arguments: its out pointers, when not null, are writable for their
/// width.
#[inline]
pub unsafe fn answer(plan: &Plan, slot: usize, raw: &[u64], epoch: u64, now_ns: u64, lane: &Lane) -> bool {
    let key = question(plan, slot, raw);
    let outs = &plan.outs[..usize::from(plan.n_out)];
    let Ok(r) = lane.recent.try_borrow() else { return false };
    let Some(Some(e)) = r.get(memo_index(&key)) else { return false };
    if e.key != key || e.confirmed.load(Ordering::Relaxed) != epoch || e.answer.status != 0 {
        return false;
    }
    if outs.iter().any(|&(i, _)| raw.get(usize::from(i)).is_none_or(|&p| p == 0)) || !e.count(now_ns, lane) {
        return false;
    }
    for (k, &(i, ty)) in outs.iter().enumerate() {
        let p = raw.get(usize::from(i)).copied().unwrap_or(0);
        // SAFETY: a non-null out pointer to a value of this type (the caller's contract); the
        // driver wrote as many bytes there for the same question.
        unsafe { write_scalar(ty, p, e.answer.outs[k]) };
    }
    true
}

/// A multiply-rotate hasher for [`Key`]s (a few machine words, hashed on every query).
#[derive(Default)]
pub(crate) struct WordHasher(u64);

impl std::hash::Hasher for WordHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }
    fn write_u64(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(23) ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_u32(&mut self, w: u32) {
        self.write_u64(u64::from(w));
    }
    fn write_usize(&mut self, w: usize) {
        self.write_u64(w as u64);
    }
}

/// One thread's remembered questions (kept in its batch, under the batch lock).
#[derive(Default)]
pub struct Folds {
    map: HashMap<Key, Arc<Entry>, std::hash::BuildHasherDefault<WordHasher>>,
}

impl Folds {
    /// Counts the call if it repeats the remembered answer; `true` when it was folded.
    /// `confirmed` as in [`repeat`].
    pub fn fold(&mut self, key: &Key, answer: &Answer, now_ns: u64, confirmed: u64, lane: &Lane) -> bool {
        match self.map.get(key) {
            Some(e) if e.answer == *answer && e.confirm(confirmed) && e.count(now_ns, lane) => {
                memo(e, lane);
                true
            }
            _ => false,
        }
    }

    /// Remembers a recorded call's question and answer; returns the record standing for the
    /// repeats of the answer it replaces, if any. `confirmed` as in [`repeat`].
    pub fn remember(
        &mut self,
        key: Key,
        answer: Answer,
        rec: &CallRecord,
        confirmed: u64,
        lane: &Lane,
    ) -> Option<Repeats> {
        let e = Arc::new(Entry {
            key,
            answer,
            template: Arc::new(rec.clone()),
            repeats: AtomicU32::new(0),
            last_ns: AtomicU64::new(rec.timestamp_ns),
            confirmed: AtomicU64::new(confirmed),
        });
        memo(&e, lane);
        self.map.insert(key, e).and_then(|old| take(&old))
    }

    /// Appends to `out` (empty, with the capacity of an earlier hand-over) the records
    /// standing for every repeat counted since the last call; counters restart. Their sequence
    /// numbers are one block, taken at once, in the order of their times.
    /// `lane`: the owning thread's own lane, whose list of counted questions is complete unless
    /// it says otherwise; without it (another thread, or a thread being torn down) every
    /// remembered question is visited.
    pub fn drain(&mut self, lane: Option<&Lane>, out: &mut Vec<Repeats>) {
        let listed = lane.filter(|l| !l.scan.replace(false)).and_then(|l| l.counted.try_borrow_mut().ok());
        match listed {
            Some(mut list) => {
                out.extend(list.iter().filter_map(|e| counted(e)));
                list.clear();
            }
            None => {
                if let Some(mut list) = lane.and_then(|l| l.counted.try_borrow_mut().ok()) {
                    list.clear();
                }
                out.extend(self.map.values().filter_map(|e| counted(e)));
            }
        }
        out.sort_by_key(|r| r.timestamp_ns);
        let first = crate::state::next_seqs(out.len() as u64);
        for (r, seq) in out.iter_mut().zip(first..) {
            r.seq = seq;
        }
    }
}

/// The repeats counted for one question, if any, without a sequence number yet; its counter
/// restarts.
fn counted(e: &Entry) -> Option<Repeats> {
    // The record stands for the `repeats` calls since: itself and `repeat` more.
    let n = e.repeats.swap(0, Ordering::Relaxed);
    (n > 0).then(|| Repeats {
        template: e.template.clone(),
        repeat: n - 1,
        seq: 0,
        timestamp_ns: e.last_ns.load(Ordering::Relaxed),
    })
}

/// [`counted`], numbered.
fn take(e: &Entry) -> Option<Repeats> {
    counted(e).map(|r| Repeats { seq: crate::state::next_seq(), ..r })
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuless_traces::Function;

    /// A hand-over takes the repeats counted since the previous one, whether counted under
    /// the batch lock or from the memo, from the owning thread's list or, for another thread,
    /// by visiting every question; nothing is counted twice.
    #[test]
    fn a_hand_over_takes_the_repeats_since_the_last_one() {
        let lane = Lane::new();
        let mut folds = Folds::default();
        let (key, other) = (Key { slot: 1, ins: [7, 0, 0, 0] }, Key { slot: 1, ins: [8, 0, 0, 0] });
        let answer = Answer { status: 0, outs: [3, 0, 0, 0] };
        let rec = CallRecord::new(0, api::ApiLevel::Driver, Function::Other("cuQuery".into()));
        assert!(folds.remember(key, answer, &rec, 0, &lane).is_none());
        assert!(folds.remember(other, answer, &rec, 0, &lane).is_none());
        let drain = |folds: &mut Folds, lane: Option<&Lane>| {
            let mut out = Vec::new();
            folds.drain(lane, &mut out);
            out.iter().map(|r| r.repeat + 1).collect::<Vec<_>>()
        };
        for _ in 0..5 {
            assert!(folds.fold(&key, &answer, 10, 0, &lane));
        }
        assert_eq!(drain(&mut folds, Some(&lane)), [5]);
        assert!(drain(&mut folds, Some(&lane)).is_empty());
        for _ in 0..3 {
            assert!(repeat(&key, &answer, 11, 0, &lane));
        }
        assert!(folds.fold(&other, &answer, 12, 0, &lane));
        assert_eq!(drain(&mut folds, Some(&lane)), [3, 1]);
        assert!(folds.fold(&key, &answer, 13, 0, &lane));
        assert_eq!(drain(&mut folds, None), [1], "another thread visits every question");
        assert!(drain(&mut folds, Some(&lane)).is_empty(), "already taken");
        // Counted where this lane's list did not see it (as when a list could not be borrowed).
        assert!(folds.fold(&other, &answer, 14, 0, &Lane::new()));
        lane.scan.set(true);
        assert_eq!(drain(&mut folds, Some(&lane)), [1], "a list said incomplete is not trusted");
    }

    /// Every query the table marks `stable` has plain outputs the memo can hand back.
    #[test]
    fn every_stable_query_can_be_answered_from_the_memo() {
        let stable: Vec<_> = api::functions().iter().filter(|f| f.stable).collect();
        assert!(stable.len() >= 8);
        for f in stable {
            let p = plan(f.id).unwrap_or_else(|| panic!("{} is stable but cannot be folded", f.name));
            assert!(p.n_out > 0, "{}", f.name);
        }
    }
}
