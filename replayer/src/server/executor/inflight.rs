//! A best-effort session's kernels on the GPU, bounded (issue 36, policy `preempt`).
//!
//! Work already on the GPU is not preempted: a latency-critical kernel queues behind whatever
//! best-effort kernels were submitted before it (on NVIDIA, contexts of different processes
//! time-slice, and the GPU does not switch away from one that still has work queued before its
//! time slice ends: docs/SCHEDULING.md). So a best-effort executor bounds what it has submitted
//! and not finished, two ways:
//!
//! - **a window** of at most `best_effort_inflight` kernels;
//! - **a budget** of predicted GPU time, `best_effort_budget_us`: each kernel's duration is
//!   predicted from the earlier runs of its shape (function, grid, block; an average of the
//!   measured durations, the newest weighing most), a shape never measured counting as half the budget (so a second one
//!   may queue behind it, which is how it gets measured); a kernel is submitted while the
//!   predicted time of those in flight plus its own fits the budget, or nothing is in flight (a
//!   kernel longer than the budget runs alone).
//!
//! After each kernel the executor records an event on its stream; before the next, while a
//! bound would be exceeded, it waits for the oldest. A kernel submitted while the one before it
//! on its stream was still in flight started when that one ended: the time between their
//! events is its duration (the GPU's time slices given to other contexts meanwhile included). Latency-critical
//! work arriving then finds at most that much ahead of it (the gate stops the next kernel,
//! `gate.rs`).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use cudarc::driver::sys;

/// A kernel in flight: the event recorded after it, its stream, its shape and its predicted
/// duration (ns).
struct Submitted {
    event: sys::CUevent,
    stream: sys::CUstream,
    shape: u64,
    predicted_ns: u64,
    /// Submitted behind a kernel of its stream still in flight: its duration can be measured.
    queued: bool,
}

/// The bounds of a best-effort session's kernels in flight.
pub(super) struct InFlight {
    /// Most kernels in flight (0: no bound).
    window: usize,
    /// Most predicted GPU time in flight, nanoseconds (0: no bound).
    budget_ns: u64,
    events: VecDeque<Submitted>,
    /// The event of the kernel finished last, and its stream (the start of the next one's
    /// duration).
    last: Option<(sys::CUevent, sys::CUstream)>,
    /// Events done with, for reuse.
    spare: Vec<sys::CUevent>,
    /// Predicted GPU time of the kernels in flight, nanoseconds.
    in_flight_ns: u64,
    /// Measured durations by shape: (mean, runs), nanoseconds.
    durations: HashMap<u64, (u64, u32)>,
    /// The next kernel's shape and prediction (from [`Self::make_room`] to [`Self::submitted`]).
    next: (u64, u64),
}

impl InFlight {
    /// Bounds of `window` kernels and `budget_us` of predicted GPU time (0: that bound is off;
    /// both 0: nothing is recorded).
    pub fn new(window: u32, budget_us: u32) -> Self {
        InFlight {
            window: window as usize,
            budget_ns: u64::from(budget_us) * 1000,
            events: VecDeque::new(),
            last: None,
            spare: Vec::new(),
            in_flight_ns: 0,
            durations: HashMap::new(),
            next: (0, 0),
        }
    }

    fn bounded(&self) -> bool {
        self.window > 0 || self.budget_ns > 0
    }

    /// The predicted duration of a kernel of `shape`: its mean so far, or half the budget.
    fn predict(&self, shape: u64) -> u64 {
        self.durations.get(&shape).map_or(self.budget_ns / 2, |&(mean, _)| mean)
    }

    /// Before a kernel of `shape` (asked only where a budget needs it) is submitted: while a
    /// bound would be exceeded, waits for the oldest kernel in flight. How long it waited (zero
    /// where it did not).
    pub fn make_room(&mut self, shape: impl FnOnce() -> u64) -> Duration {
        let shape = if self.budget_ns > 0 { shape() } else { 0 };
        let p = self.predict(shape);
        self.next = (shape, p);
        let mut waited = None;
        while let Some(oldest) = self.events.front() {
            if !self.full(p) {
                break;
            }
            waited.get_or_insert_with(Instant::now);
            // SAFETY: an event this window created and recorded; a failure (the context is
            // gone) only ends the wait.
            unsafe { sys::cuEventSynchronize(oldest.event) };
            self.finished();
        }
        waited.map_or(Duration::ZERO, |t| t.elapsed())
    }

    /// Whether a kernel predicted to take `p` ns must wait for the oldest in flight (there is
    /// one): the window is full, or the budget would be exceeded.
    fn full(&self, p: u64) -> bool {
        (self.window > 0 && self.events.len() >= self.window)
            || (self.budget_ns > 0 && self.in_flight_ns + p > self.budget_ns)
    }

    /// A measured duration of a kernel of `shape`: a moving mean of its runs (the newest
    /// weighs a quarter, as a shape's duration can change with its input) predicts the next.
    fn learn(&mut self, shape: u64, ns: u64) {
        let (mean, runs) = self.durations.entry(shape).or_insert((0, 0));
        let n = u64::from((*runs).min(3));
        *mean = (*mean * n + ns) / (n + 1);
        *runs = runs.saturating_add(1);
    }

    /// The oldest kernel in flight has finished: its duration measured where the one before it
    /// finished on the same stream, its event kept as the next one's start.
    fn finished(&mut self) {
        let Some(k) = self.events.pop_front() else { return };
        self.in_flight_ns = self.in_flight_ns.saturating_sub(k.predicted_ns);
        if let Some((prev, stream)) = self.last.take() {
            if k.queued && stream == k.stream && self.budget_ns > 0 {
                let mut ms = 0f32;
                // SAFETY: two of our events, both recorded and complete.
                if unsafe { sys::cuEventElapsedTime_v2(&mut ms, prev, k.event) } == sys::CUresult::CUDA_SUCCESS {
                    self.learn(k.shape, (f64::from(ms) * 1e6) as u64);
                }
            }
            self.spare.push(prev);
        }
        self.last = Some((k.event, k.stream));
    }

    /// After a kernel was submitted on `stream`: its completion joins the window. Not on a
    /// stream that captures (the kernel is a graph's node, not on the GPU; an event recorded
    /// there would be a node of the program's graph).
    pub fn submitted(&mut self, stream: sys::CUstream) {
        if !self.bounded() {
            return;
        }
        let mut cap = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: a live stream; a valid out-pointer.
        let r = unsafe { sys::cuStreamIsCapturing(stream, &mut cap) };
        if r != sys::CUresult::CUDA_SUCCESS || cap != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
            return;
        }
        let e = match self.spare.pop() {
            Some(e) => e,
            None => {
                let mut e = std::ptr::null_mut();
                // Timed events where durations are measured; else CU_EVENT_DISABLE_TIMING (2).
                let flags = if self.budget_ns > 0 { 0 } else { 2 };
                // SAFETY: a valid out-pointer.
                if unsafe { sys::cuEventCreate(&mut e, flags) } != sys::CUresult::CUDA_SUCCESS {
                    return;
                }
                e
            }
        };
        // SAFETY: our event, a live stream of the session.
        if unsafe { sys::cuEventRecord(e, stream) } == sys::CUresult::CUDA_SUCCESS {
            let (shape, predicted_ns) = self.next;
            self.in_flight_ns += predicted_ns;
            let queued = self.events.back().is_some_and(|b| b.stream == stream);
            self.events.push_back(Submitted { event: e, stream, shape, predicted_ns, queued });
        } else {
            self.spare.push(e);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let last = self.last.take().map(|(e, _)| e);
        let all = self.events.drain(..).map(|k| k.event).chain(self.spare.drain(..)).chain(last);
        for e in all.filter(|e| !e.is_null()) {
            // SAFETY: events this window created, destroyed once.
            unsafe { sys::cuEventDestroy_v2(e) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` kernels of `shape` in flight, each predicted `p` ns (events are never touched here).
    fn with_in_flight(f: &mut InFlight, shape: u64, p: u64, n: usize) {
        for _ in 0..n {
            f.events.push_back(Submitted {
                event: std::ptr::null_mut(),
                stream: std::ptr::null_mut(),
                shape,
                predicted_ns: p,
                queued: true,
            });
            f.in_flight_ns += p;
        }
    }

    #[test]
    fn the_budget_admits_short_kernels_together_and_a_long_one_alone() {
        let mut f = InFlight::new(0, 300);
        // Never measured: half the budget, so a second may queue behind it (and be measured).
        assert_eq!(f.predict(1), 150_000);
        f.learn(1, 20_000);
        f.learn(2, 2_000_000);
        assert_eq!((f.predict(1), f.predict(2)), (20_000, 2_000_000));
        // Fifteen 20 µs kernels fit in 300 µs; the sixteenth waits.
        with_in_flight(&mut f, 1, 20_000, 14);
        assert!(!f.full(f.predict(1)));
        with_in_flight(&mut f, 1, 20_000, 1);
        assert!(f.full(f.predict(1)));
        // A 2 ms kernel waits for everything in flight, then runs alone: nothing holds it then.
        let mut g = InFlight::new(0, 300);
        g.learn(2, 2_000_000);
        with_in_flight(&mut g, 1, 20_000, 1);
        assert!(g.full(g.predict(2)));
        g.events.clear();
        g.in_flight_ns = 0;
        assert!(g.events.front().is_none(), "an empty window admits any kernel");
    }

    #[test]
    fn both_bounds_hold_and_zero_is_no_bound() {
        let mut f = InFlight::new(2, 1000);
        f.learn(1, 10_000);
        with_in_flight(&mut f, 1, 10_000, 2);
        assert!(f.full(10_000), "the window of 2 is full though the budget is not");
        let mut f = InFlight::new(0, 0);
        assert!(!f.bounded());
        with_in_flight(&mut f, 1, 10_000, 100);
        assert!(!f.full(10_000));
    }

    #[test]
    fn a_shape_is_predicted_by_the_mean_of_its_last_runs() {
        let mut f = InFlight::new(0, 100);
        for _ in 0..20 {
            f.learn(7, 100_000);
        }
        // Its input grew: the prediction follows within a few runs.
        for _ in 0..8 {
            f.learn(7, 500_000);
        }
        assert!(f.predict(7) > 400_000, "{}", f.predict(7));
    }
}
