//! A best-effort session's kernels on the GPU, bounded (issue 36, policy `preempt`).
//!
//! Work already on the GPU is not preempted: a latency-critical kernel queues behind whatever
//! best-effort kernels were submitted before it. So a best-effort executor keeps at most
//! `best_effort_inflight` of its kernels submitted and not finished: after each kernel it
//! records an event on the kernel's stream, and before the next, while that many events are
//! outstanding, it waits for the oldest. Latency-critical work arriving then finds at most that
//! many best-effort kernels ahead of it (the gate stops the next one, `gate.rs`).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use cudarc::driver::sys;

/// The window of a best-effort session's kernels in flight.
pub(super) struct InFlight {
    budget: usize,
    /// Events recorded after the kernels submitted, oldest first.
    events: VecDeque<sys::CUevent>,
    /// Events done with, for reuse.
    spare: Vec<sys::CUevent>,
}

impl InFlight {
    /// A window of `budget` kernels (0: no bound, nothing is recorded).
    pub fn new(budget: u32) -> Self {
        InFlight { budget: budget as usize, events: VecDeque::new(), spare: Vec::new() }
    }

    /// Before a kernel is submitted: while the window is full, waits for its oldest kernel.
    /// How long it waited.
    pub fn make_room(&mut self) -> Duration {
        let t = Instant::now();
        while self.budget > 0 && self.events.len() >= self.budget {
            let Some(e) = self.events.pop_front() else { break };
            // SAFETY: an event this window created and recorded; a failure (the context is
            // gone) only ends the wait.
            unsafe { sys::cuEventSynchronize(e) };
            self.spare.push(e);
        }
        t.elapsed()
    }

    /// After a kernel was submitted on `stream`: its completion joins the window. Not on a
    /// stream that captures (the kernel is a graph's node, not on the GPU; an event recorded
    /// there would be a node of the program's graph).
    pub fn submitted(&mut self, stream: sys::CUstream) {
        if self.budget == 0 {
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
                // SAFETY: a valid out-pointer; 2 = CU_EVENT_DISABLE_TIMING.
                if unsafe { sys::cuEventCreate(&mut e, 2) } != sys::CUresult::CUDA_SUCCESS {
                    return;
                }
                e
            }
        };
        // SAFETY: our event, a live stream of the session.
        if unsafe { sys::cuEventRecord(e, stream) } == sys::CUresult::CUDA_SUCCESS {
            self.events.push_back(e);
        } else {
            self.spare.push(e);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        for e in self.events.drain(..).chain(self.spare.drain(..)) {
            // SAFETY: events this window created, destroyed once.
            unsafe { sys::cuEventDestroy_v2(e) };
        }
    }
}
