//! A local replay that stops making progress: one call has not returned long after the
//! recording's took. A trace carries what the host wrote at the calls, not what it wrote while
//! a kernel ran; a kernel that polls host memory until the host sets a flag
//! (UnifiedMemoryPerf's latch) waits for a write the replay cannot make, and the replay would
//! wait for that kernel for ever. The watch ends the replay naming the call instead (exit
//! status 4), with what it waited for and the likely cause (docs/FIDELITY.md).
//!
//! Only `gpuless replay` watches: a server's executor runs what a program asks, as long as the
//! program's own kernels run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpuless_traces::CallRecord;

/// Exit status of a replay ended by the watch.
pub const EXIT_STALLED: i32 = 4;
/// Environment: seconds a call may take beyond the recording's before the replay ends
/// (default [`DEFAULT_S`]).
const ENV: &str = "GPULESS_REPLAY_STALL_S";
const DEFAULT_S: u64 = 30;
/// No call is running.
const IDLE: u64 = u64::MAX;

struct Shared {
    /// Milliseconds since `t0` when the running call began ([`IDLE`]: none).
    began_ms: AtomicU64,
    /// Its sequence number and the recording's duration of it, in milliseconds.
    seq: AtomicU64,
    recorded_ms: AtomicU64,
    name: Mutex<String>,
    stop: AtomicBool,
    t0: Instant,
}

/// The watch over one replay (stopped when dropped).
pub(crate) struct Watch {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// How long a call may run: the limit, or ten times the recording's duration if longer.
fn allowed(limit: Duration, recorded_ms: u64) -> Duration {
    limit.max(Duration::from_millis(recorded_ms.saturating_mul(10)))
}

impl Watch {
    /// Starts watching with the limit from `GPULESS_REPLAY_STALL_S` (0: no watch).
    pub fn start() -> Option<Watch> {
        let s = std::env::var(ENV).ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(DEFAULT_S);
        (s > 0).then(|| Watch::with_limit(Duration::from_secs(s)))
    }

    fn with_limit(limit: Duration) -> Watch {
        let shared = Arc::new(Shared {
            began_ms: AtomicU64::new(IDLE),
            seq: AtomicU64::new(0),
            recorded_ms: AtomicU64::new(0),
            name: Mutex::new(String::new()),
            stop: AtomicBool::new(false),
            t0: Instant::now(),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("gpuless-stall".into())
            .spawn(move || {
                while !s.stop.load(Ordering::Relaxed) {
                    std::thread::park_timeout(Duration::from_millis(250));
                    let began = s.began_ms.load(Ordering::Acquire);
                    if began == IDLE {
                        continue;
                    }
                    let now = s.t0.elapsed().as_millis() as u64;
                    let recorded = s.recorded_ms.load(Ordering::Relaxed);
                    let ran = Duration::from_millis(now.saturating_sub(began));
                    if ran > allowed(limit, recorded) && s.began_ms.load(Ordering::Acquire) == began {
                        let name = s.name.lock().map(|n| n.clone()).unwrap_or_default();
                        eprintln!(
                            "gpuless: replay stalled: call #{} {name} has not returned after {:.0} s (the recording's took {recorded} ms). A kernel before it may be waiting for memory the host wrote while it ran (a flag it polls), which a trace cannot carry (docs/FIDELITY.md); ending the replay ({ENV} sets the limit, 0 turns the watch off)",
                            s.seq.load(Ordering::Relaxed),
                            ran.as_secs_f64()
                        );
                        std::process::exit(EXIT_STALLED);
                    }
                }
            })
            .ok();
        Watch { shared, thread }
    }

    /// `rec` is about to run.
    pub fn enter(&self, rec: &CallRecord) {
        let s = &self.shared;
        s.seq.store(rec.seq, Ordering::Relaxed);
        s.recorded_ms.store(rec.duration_ns / 1_000_000, Ordering::Relaxed);
        if let Ok(mut n) = s.name.lock() {
            n.clear();
            n.push_str(rec.function.name());
        }
        s.began_ms.store(s.t0.elapsed().as_millis() as u64, Ordering::Release);
    }

    /// The call returned.
    pub fn leave(&self) {
        self.shared.began_ms.store(IDLE, Ordering::Release);
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_may_take_ten_times_the_recordings_or_the_limit() {
        assert_eq!(allowed(Duration::from_secs(30), 5), Duration::from_secs(30));
        assert_eq!(allowed(Duration::from_secs(30), 12_000), Duration::from_secs(120));
    }
}
