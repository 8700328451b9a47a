//! Records back in call order for an analysis that depends on it. A trace holds an async
//! device-to-host copy's record where the synchronization that completed it was recorded
//! (`recorder/src/pending.rs`): after that synchronization's own record. Sequence numbers are
//! the calls' order; this hands items on in that order, holding back only those that arrive
//! ahead of a missing number (up to [`HOLD_MAX`]; beyond it the lowest goes on, so a trace
//! with gaps in its numbering costs bounded memory and is ordered as well as that allows).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Most items held back waiting for a lower sequence number.
pub const HOLD_MAX: usize = 1 << 16;

/// A reorder buffer of `T` by sequence number.
#[derive(Debug)]
pub struct Reorder<T> {
    /// The next number to hand on (the recorder numbers calls from 0).
    next: u64,
    held: BinaryHeap<Reverse<Held<T>>>,
}

#[derive(Debug)]
struct Held<T>(u64, T);

impl<T> PartialEq for Held<T> {
    fn eq(&self, o: &Self) -> bool {
        self.0 == o.0
    }
}
impl<T> Eq for Held<T> {}
impl<T> PartialOrd for Held<T> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<T> Ord for Held<T> {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.cmp(&o.0)
    }
}

impl<T> Default for Reorder<T> {
    fn default() -> Self {
        Reorder { next: 0, held: BinaryHeap::new() }
    }
}

impl<T> Reorder<T> {
    /// Takes item `t` of sequence number `seq`; calls `out` with every item that is now next
    /// in order. A number below the next expected (one that arrived after it was given up on)
    /// goes on at once.
    pub fn push(&mut self, seq: u64, t: T, out: &mut impl FnMut(T)) {
        if seq < self.next {
            out(t);
            return;
        }
        self.held.push(Reverse(Held(seq, t)));
        self.release(out);
        while self.held.len() > HOLD_MAX {
            if let Some(Reverse(Held(s, t))) = self.held.pop() {
                self.next = s.saturating_add(1);
                out(t);
                self.release(out);
            }
        }
    }

    fn release(&mut self, out: &mut impl FnMut(T)) {
        while self.held.peek().is_some_and(|Reverse(Held(s, _))| *s <= self.next) {
            if let Some(Reverse(Held(s, t))) = self.held.pop() {
                self.next = self.next.max(s.saturating_add(1));
                out(t);
            }
        }
    }

    /// Everything still held, in order.
    pub fn finish(mut self, out: &mut impl FnMut(T)) {
        while let Some(Reverse(Held(_, t))) = self.held.pop() {
            out(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(seqs: &[u64]) -> Vec<u64> {
        let mut r = Reorder::default();
        let mut got = Vec::new();
        for &s in seqs {
            r.push(s, s, &mut |t| got.push(t));
        }
        r.finish(&mut |t| got.push(t));
        got
    }

    #[test]
    fn a_deferred_record_goes_back_before_the_synchronization_that_completed_it() {
        // 3 is an async copy, recorded after 4, the synchronization that completed it.
        assert_eq!(run(&[0, 1, 2, 4, 3, 5]), [0, 1, 2, 3, 4, 5]);
        // The first call deferred; two copies completed by one synchronization.
        assert_eq!(run(&[1, 0, 3, 4, 2, 5]), [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn gaps_and_late_numbers_lose_nothing() {
        // 3 never comes: the rest waits for the end, in order.
        assert_eq!(run(&[1, 2, 4, 5]), [1, 2, 4, 5]);
        // Numbers that start above 0 wait for the end (or for HOLD_MAX more), in order.
        assert_eq!(run(&[7, 9, 8, 6]), [6, 7, 8, 9]);
    }

    #[test]
    fn what_is_held_is_bounded() {
        let mut r = Reorder::default();
        let mut got = 0usize;
        r.push(0, (), &mut |_| got += 1);
        assert_eq!(got, 1, "the next in order goes on at once");
        // Only even numbers come: HOLD_MAX + 10 of them after 0, each behind a gap; all but
        // HOLD_MAX go on.
        for k in 1..=(HOLD_MAX as u64 + 10) {
            r.push(2 * k, (), &mut |_| got += 1);
        }
        assert_eq!(got, 1 + 10);
        assert!(r.held.len() <= HOLD_MAX);
        r.finish(&mut |_| got += 1);
        assert_eq!(got, HOLD_MAX + 11);
    }
}
