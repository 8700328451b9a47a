//! What a thread remembers of a query it folds (`fold.rs`): the question, the answer, and the
//! entry holding both with the first record that gave them and the repeats counted since.
//! Kept apart from the folding itself because each thread's lane holds its recent entries
//! (`lane.rs`).

use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::Arc;

use gpuless_traces::CallRecord;

/// Most arguments a foldable query has in each direction.
pub(crate) const MAX: usize = 4;

/// A question: the hook slot and the input words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// The hook slot.
    pub(crate) slot: u32,
    /// The input words, in the plan's order.
    pub(crate) ins: [u64; MAX],
}

impl std::hash::Hash for Key {
    // Word by word: the derived hash feeds the array to the hasher as bytes.
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        h.write_u64(u64::from(self.slot));
        for w in self.ins {
            h.write_u64(w);
        }
    }
}

/// An answer: status and output words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// The driver's status.
    pub(crate) status: u32,
    /// The output words, in the plan's order.
    pub(crate) outs: [u64; MAX],
}

/// A remembered question, its answer and the first record that gave it, with the repeats
/// counted since the last hand-over. Immutable but for the counters: a changed answer makes a
/// new entry. Aligned to a cache line, so that what a repeat reads and counts (the question,
/// the answer, the counters: about 110 bytes) spans two lines, never three.
#[repr(align(64))]
pub(crate) struct Entry {
    /// The question.
    pub(crate) key: Key,
    /// The answer.
    pub(crate) answer: Answer,
    /// The first record that gave it.
    pub(crate) template: Arc<CallRecord>,
    /// Counted by the owning thread without a lock (a plain load and store); taken with a swap
    /// under the batch lock at a hand-over.
    pub(crate) repeats: AtomicU32,
    /// The time of the last repeat counted.
    pub(crate) last_ns: AtomicU64,
    /// The epoch in which the driver last gave this answer to a stable query (0: not stable,
    /// or never): the memo answers for it only in that epoch.
    pub(crate) confirmed: AtomicU64,
}
