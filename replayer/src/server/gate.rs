//! The priority gate of one GPU: how a latency-critical session goes ahead of best-effort ones.
//!
//! Each session runs in its own executor process, so the GPU time-slices between their
//! contexts and stream priorities (which act only inside one context) cannot order them. The
//! gate orders them where work enters the GPU: a page of shared memory (a memfd the server
//! creates and every executor inherits at [`GATE_FD`]) counts the latency-critical sessions
//! that have a segment in flight and the time of their last activity. A best-effort executor
//! holds its next segment while latency-critical work is in flight or was active within a
//! short grace (the client's round trip between two segments), for at most a bound, so it
//! always progresses. Work already on the GPU is not preempted: that is the next step, built
//! on this queue.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Where an executor finds the gate (inherited from the server, after the control channel).
pub const GATE_FD: RawFd = 4;

/// After latency-critical activity, best-effort work waits this long for the next segment.
pub const GRACE: Duration = Duration::from_micros(2000);
/// The longest a best-effort segment is held.
pub const MAX_HOLD: Duration = Duration::from_millis(20);
/// Latency-critical work counted in flight but inactive this long (its executor died inside a
/// segment, or one segment runs this long) no longer holds anyone.
const STALE: Duration = Duration::from_secs(1);

/// The shared page: a counter and a timestamp.
#[repr(C)]
struct Page {
    /// Latency-critical sessions with a segment in flight.
    in_flight: AtomicU32,
    _pad: u32,
    /// CLOCK_MONOTONIC nanoseconds of the last latency-critical activity.
    last_ns: AtomicU64,
}

/// A mapping of the gate.
pub struct Gate {
    map: memmap2::MmapMut,
    /// Whether this process counts in `in_flight` now.
    entered: bool,
}

fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Gate {
    /// A new gate (the server's); the descriptor goes to every executor.
    pub fn create() -> std::io::Result<(Gate, OwnedFd)> {
        // SAFETY: a NUL-terminated name; flags valid.
        let raw = unsafe { libc::memfd_create(c"gpuless-gate".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a descriptor memfd_create just returned, owned by nobody else.
        let first = unsafe { OwnedFd::from_raw_fd(raw) };
        // A number above the ones executors receive descriptors at (3, 4), so placing those in a
        // child cannot overwrite it.
        // SAFETY: fcntl duplicating a descriptor we own.
        let high = unsafe { libc::fcntl(first.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) };
        if high < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the duplicate is ours alone.
        let fd = unsafe { OwnedFd::from_raw_fd(high) };
        let file = std::fs::File::from(fd.try_clone()?);
        file.set_len(4096)?;
        Ok((Gate::map(&file)?, fd))
    }

    /// The gate an executor inherited at [`GATE_FD`], if it did.
    pub fn inherited() -> Option<Gate> {
        // SAFETY: fcntl only asks whether the descriptor is open.
        if unsafe { libc::fcntl(GATE_FD, libc::F_GETFD) } < 0 {
            return None;
        }
        // SAFETY: the server placed the gate's memfd at GATE_FD for this process.
        let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(GATE_FD) });
        if file.metadata().ok()?.len() < std::mem::size_of::<Page>() as u64 {
            return None;
        }
        Gate::map(&file).ok()
    }

    fn map(file: &std::fs::File) -> std::io::Result<Gate> {
        // SAFETY: a shared mapping of a memfd only gpuless processes hold; every access goes
        // through atomics.
        let map = unsafe { memmap2::MmapMut::map_mut(file)? };
        Ok(Gate { map, entered: false })
    }

    fn page(&self) -> &Page {
        // SAFETY: the mapping holds at least one page, aligned, and Page is plain atomics.
        unsafe { &*self.map.as_ptr().cast::<Page>() }
    }

    /// A latency-critical segment arrives: counted until [`Self::leave`].
    pub fn enter(&mut self) {
        let p = self.page();
        p.last_ns.store(now_ns(), Ordering::Release);
        if !self.entered {
            p.in_flight.fetch_add(1, Ordering::AcqRel);
            self.entered = true;
        }
    }

    /// The latency-critical session answered (its work so far is done) or ended.
    pub fn leave(&mut self) {
        if self.entered {
            let p = self.page();
            p.last_ns.store(now_ns(), Ordering::Release);
            p.in_flight.fetch_sub(1, Ordering::AcqRel);
            self.entered = false;
        }
    }

    /// Latency-critical sessions with work in flight now.
    pub fn in_flight(&self) -> u32 {
        self.page().in_flight.load(Ordering::Acquire)
    }

    /// Best-effort work waits while latency-critical work is in flight or was active within
    /// `grace`, for at most `max`. Returns how long it waited.
    pub fn hold(&self, grace: Duration, max: Duration) -> Duration {
        let t0 = Instant::now();
        let p = self.page();
        loop {
            let idle_ns = now_ns().saturating_sub(p.last_ns.load(Ordering::Acquire));
            let busy = (p.in_flight.load(Ordering::Acquire) > 0 && idle_ns < STALE.as_nanos() as u64)
                || idle_ns < grace.as_nanos() as u64;
            if !busy || t0.elapsed() >= max {
                return t0.elapsed();
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn best_effort_work_waits_for_latency_critical_work_then_goes() {
        let (mut lc, fd) = Gate::create().unwrap();
        let be = Gate::map(&std::fs::File::from(fd)).unwrap();
        // Idle: best-effort work goes at once.
        assert!(be.hold(Duration::ZERO, Duration::from_secs(5)) < Duration::from_secs(1));
        lc.enter();
        assert_eq!(be.in_flight(), 1);
        let left = Arc::new(AtomicBool::new(false));
        let l2 = left.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            l2.store(true, Ordering::SeqCst);
            lc.leave();
            lc
        });
        // Held until the latency-critical session left (the bound is far away).
        be.hold(Duration::ZERO, Duration::from_secs(30));
        assert!(left.load(Ordering::SeqCst), "best-effort work went while latency-critical work was in flight");
        let mut lc = t.join().unwrap();
        assert_eq!(be.in_flight(), 0);
        // Never longer than the bound, whatever the other side does.
        lc.enter();
        let waited = be.hold(Duration::ZERO, Duration::from_millis(10));
        assert!(waited >= Duration::from_millis(10));
        drop(lc);
        assert_eq!(be.in_flight(), 0, "a gate dropped while entered leaves");
    }
}
