//! The priority gate of one GPU: how a latency-critical session goes ahead of best-effort ones.
//!
//! Each session runs in its own executor process, so the GPU time-slices between their
//! contexts and stream priorities (which act only inside one context) cannot order them. The
//! gate orders them where work enters the GPU: a page of shared memory (a memfd the server
//! creates and every executor inherits at [`GATE_FD`]). A latency-critical executor takes one of
//! [`SLOTS`] slots for its session — an exclusive record lock on the slot's byte (`fcntl`,
//! `F_WRLCK`), which the kernel drops when the process ends however it ends — and marks its
//! segment in flight in the slot's word in the page (its pid; an atomic store, no system call per
//! round trip). A marked slot whose lock nobody holds is one a killed executor left behind: it
//! holds nobody, and the first best-effort executor to see it clears it. The page also keeps the
//! time of the last latency-critical activity. A best-effort executor holds its next segment while such a lock is held or
//! latency-critical work was active within a short grace (the client's round trip between two
//! segments), for at most a bound, so it always progresses; inside a segment it stops before
//! each kernel (a launch, a graph launch: [`submits_kernels`]) while the lock is held, so
//! latency-critical work arriving mid-segment waits only for what was submitted before it.
//! Work already on the GPU is not preempted; under `preempt` a best-effort session also keeps
//! at most `best_effort_inflight` kernels submitted and unfinished (`executor/inflight.rs`), so
//! that is all latency-critical work can find ahead of it. docs/SCHEDULING.md.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Where an executor finds the gate (inherited from the server, after the control channel).
pub const GATE_FD: RawFd = 4;

/// After latency-critical activity, best-effort work waits this long for the next segment.
pub const GRACE: Duration = Duration::from_micros(2000);
/// The longest a best-effort segment is held.
pub const MAX_HOLD: Duration = Duration::from_millis(20);
/// Latency-critical work in flight but inactive this long (one segment runs this long) no
/// longer holds anyone.
const STALE: Duration = Duration::from_secs(1);
/// The first of the slots' bytes (slot `i` locks byte `LOCK_AT + i`).
const LOCK_AT: i64 = 2048;
/// Latency-critical executors that can be in flight on one GPU at once (more run ungated).
pub const SLOTS: usize = 64;

/// The shared page: a timestamp (the locks are the kernel's, on [`LOCK_AT`]), and the GPU's
/// clock relation for preemption stamps (`executor/stamps.rs`).
#[repr(C)]
struct Page {
    /// Even while the clock relation below is whole; odd while an executor writes it.
    clock_seq: AtomicU32,
    _pad: u32,
    /// CLOCK_MONOTONIC nanoseconds of the last latency-critical activity.
    last_ns: AtomicU64,
    /// GPU timer minus `CLOCK_REALTIME`, nanoseconds.
    clock_offset: AtomicI64,
    /// The width of the round it was measured in, nanoseconds (0: none yet).
    clock_width: AtomicU64,
    /// CLOCK_MONOTONIC nanoseconds when it was measured.
    clock_at: AtomicU64,
    /// Per slot: the pid of the latency-critical executor whose segment is in flight, or 0.
    in_flight: [AtomicU32; SLOTS],
}

/// How fast a clock relation ages: the GPU timer drifts against `CLOCK_REALTIME` (1 to 11 µs per
/// second measured on three H100s, `testdata/cuda/bench/preempt_probe.cu`); 20 µs/s is assumed.
pub const CLOCK_DRIFT_NS_PER_S: u64 = 20_000;

/// The uncertainty (±, nanoseconds) of a clock relation measured in a round `width_ns` wide,
/// `age_ns` ago.
pub fn clock_error(width_ns: u64, age_ns: u64) -> u64 {
    width_ns / 2
        + age_ns / 1_000_000_000 * CLOCK_DRIFT_NS_PER_S
        + age_ns % 1_000_000_000 * CLOCK_DRIFT_NS_PER_S / 1_000_000_000
}

/// A mapping of the gate.
pub struct Gate {
    map: memmap2::MmapMut,
    /// The gate's file (the locks are taken on it).
    file: std::fs::File,
    /// The slot this process holds (its session's first segment until its end).
    slot: Option<usize>,
    /// Whether this process marks a segment in flight now.
    entered: bool,
}

/// A record lock of `kind` (`F_RDLCK`, `F_WRLCK`, `F_UNLCK`) on the lock byte.
fn lock_of(slot: usize, kind: i32) -> libc::flock {
    // SAFETY: a plain C struct for which all-zero is valid.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = kind as libc::c_short;
    l.l_whence = libc::SEEK_SET as libc::c_short;
    l.l_start = LOCK_AT + slot as i64;
    l.l_len = 1;
    l
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
        Ok((Gate::map(file)?, fd))
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
        Gate::map(file).ok()
    }

    fn map(file: std::fs::File) -> std::io::Result<Gate> {
        // SAFETY: a shared mapping of a memfd only gpuless processes hold; every access goes
        // through atomics.
        let map = unsafe { memmap2::MmapMut::map_mut(&file)? };
        Ok(Gate { map, file, slot: None, entered: false })
    }

    /// Sets this process's lock on slot `slot`'s byte (`F_WRLCK`: the slot is ours; `F_UNLCK`).
    fn set_lock(&self, slot: usize, kind: i32) -> bool {
        let l = lock_of(slot, kind);
        // SAFETY: fcntl with a valid flock on our descriptor.
        unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_SETLK, &l) == 0 }
    }

    /// Whether another process holds slot `slot`'s lock.
    fn held_by_other(&self, slot: usize) -> bool {
        let mut l = lock_of(slot, libc::F_WRLCK);
        // SAFETY: fcntl with a valid flock on our descriptor; it only reports.
        let r = unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_GETLK, &mut l) };
        r == 0 && l.l_type != libc::F_UNLCK as libc::c_short
    }

    fn page(&self) -> &Page {
        // SAFETY: the mapping holds at least one page, aligned, and Page is plain atomics.
        unsafe { &*self.map.as_ptr().cast::<Page>() }
    }

    /// A latency-critical segment arrives: in flight until [`Self::leave`] (or this process
    /// ends).
    pub fn enter(&mut self) {
        self.page().last_ns.store(now_ns(), Ordering::Release);
        if self.slot.is_none() {
            // The lock before the mark: a marked slot with no lock held is a dead executor's.
            self.slot = (0..SLOTS).find(|&i| self.set_lock(i, libc::F_WRLCK));
        }
        if let (false, Some(i)) = (self.entered, self.slot) {
            self.page().in_flight[i].store(std::process::id(), Ordering::Release);
            self.entered = true;
        }
    }

    /// The latency-critical session answered (its work so far is done) or ended.
    pub fn leave(&mut self) {
        if let (true, Some(i)) = (self.entered, self.slot) {
            let p = self.page();
            p.last_ns.store(now_ns(), Ordering::Release);
            p.in_flight[i].store(0, Ordering::Release);
            self.entered = false;
        }
    }

    /// The latency-critical session ended: its slot goes too.
    pub fn end_session(&mut self) {
        self.leave();
        if let Some(i) = self.slot.take() {
            self.set_lock(i, libc::F_UNLCK);
        }
    }

    /// Whether another process has latency-critical work in flight now (one that ended
    /// holds nothing: the kernel dropped its lock).
    pub fn in_flight(&self) -> bool {
        let p = self.page();
        let mut any = false;
        for (i, w) in p.in_flight.iter().enumerate() {
            let pid = w.load(Ordering::Acquire);
            if pid == 0 {
                continue;
            }
            if self.held_by_other(i) {
                any = true;
                break;
            }
            // Marked by an executor that is gone (no lock is held): cleared, unless a new owner
            // of the slot marked it meanwhile.
            let _ = w.compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
        any
    }

    /// Best-effort work waits while latency-critical work is in flight or was active within
    /// `grace`, for at most `max`. Returns how long it waited (zero where it did not).
    pub fn hold(&self, grace: Duration, max: Duration) -> Duration {
        let t0 = Instant::now();
        let p = self.page();
        let mut held = false;
        loop {
            let idle_ns = now_ns().saturating_sub(p.last_ns.load(Ordering::Acquire));
            let busy = (idle_ns < STALE.as_nanos() as u64 && self.in_flight()) || idle_ns < grace.as_nanos() as u64;
            if !busy || t0.elapsed() >= max {
                return if held { t0.elapsed() } else { Duration::ZERO };
            }
            held = true;
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

impl Gate {
    /// The GPU's clock relation for preemption stamps, where an executor measured one: (GPU
    /// timer − `CLOCK_REALTIME`, its uncertainty now: [`clock_error`]), nanoseconds.
    pub fn clock(&self) -> Option<(i64, u64)> {
        let p = self.page();
        let s1 = p.clock_seq.load(Ordering::Acquire);
        let offset = p.clock_offset.load(Ordering::Acquire);
        let width = p.clock_width.load(Ordering::Acquire);
        let at = p.clock_at.load(Ordering::Acquire);
        let s2 = p.clock_seq.load(Ordering::Acquire);
        (s1 == s2 && s1 % 2 == 0 && width > 0).then(|| (offset, clock_error(width, now_ns().saturating_sub(at))))
    }

    /// An executor's measurement of the clock relation, in a round `width` wide: kept where it
    /// is more certain than the one kept, as that one has aged. Whether it was kept.
    pub fn offer_clock(&self, offset: i64, width: u64) -> bool {
        let p = self.page();
        let s = p.clock_seq.load(Ordering::Acquire);
        if s % 2 == 1 {
            return false;
        }
        let better = self.clock().is_none_or(|(_, err)| clock_error(width, 0) < err);
        if !better || p.clock_seq.compare_exchange(s, s + 1, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return false;
        }
        p.clock_offset.store(offset, Ordering::Release);
        p.clock_width.store(width.max(1), Ordering::Release);
        p.clock_at.store(now_ns(), Ordering::Release);
        p.clock_seq.store(s + 2, Ordering::Release);
        true
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.end_session();
    }
}

/// Whether a record submits kernels (a launch, a graph launch): where a best-effort segment
/// may stop for latency-critical work.
pub(crate) fn submits_kernels(rec: &gpuless_traces::CallRecord) -> bool {
    use gpuless_analyzer::api::{ArgKind, HandleKind};
    static BY_ID: std::sync::OnceLock<Vec<bool>> = std::sync::OnceLock::new();
    let by_id = BY_ID.get_or_init(|| {
        gpuless_analyzer::api::functions()
            .iter()
            .map(|f| {
                f.args.iter().any(|a| a.kind == ArgKind::KernelParams)
                    || (f.args.iter().any(|a| a.kind == ArgKind::Handle(HandleKind::GraphExec))
                        && f.args.iter().any(|a| a.kind == ArgKind::Handle(HandleKind::Stream)))
            })
            .collect()
    });
    rec.function.api().is_some_and(|f| by_id.get(usize::from(f.id.0)).copied().unwrap_or(false))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gate of another process's (locks do not conflict within one process): a child that
    /// maps the gate, enters, reports and then does what `then` says.
    fn child_entering(fd: &OwnedFd, then: fn(&mut Gate)) -> libc::pid_t {
        let (r, w) = {
            let mut p = [0; 2];
            // SAFETY: a valid array for the two descriptors.
            assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
            (p[0], p[1])
        };
        let file = std::fs::File::from(fd.try_clone().unwrap());
        // SAFETY: the child only maps, locks, writes a byte and sleeps or exits (no allocation
        // that could wait on a lock another thread held at the fork).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let mut g = Gate::map(file).unwrap_or_else(|_| unsafe { libc::_exit(3) });
            g.enter();
            // SAFETY: our pipe's write end.
            unsafe { libc::write(w, [1u8].as_ptr().cast(), 1) };
            then(&mut g);
            // SAFETY: ending the child without running the test harness's destructors.
            unsafe { libc::_exit(0) };
        }
        let mut b = [0u8; 1];
        // SAFETY: our pipe's read end; waits for the child to have entered.
        assert_eq!(unsafe { libc::read(r, b.as_mut_ptr().cast(), 1) }, 1);
        // SAFETY: closing our pipe's ends.
        unsafe {
            libc::close(r);
            libc::close(w);
        }
        pid
    }

    #[test]
    fn best_effort_work_waits_for_latency_critical_work_then_goes() {
        let (server, fd) = Gate::create().unwrap();
        let be = Gate::map(std::fs::File::from(fd.try_clone().unwrap())).unwrap();
        // Idle: best-effort work goes at once.
        assert!(be.hold(Duration::ZERO, Duration::from_secs(5)) < Duration::from_secs(1));
        // Latency-critical work in flight for 50 ms, then it leaves (and its process ends).
        let lc = child_entering(&fd, |g| {
            std::thread::sleep(Duration::from_millis(50));
            g.leave();
            std::thread::sleep(Duration::from_millis(200));
        });
        assert!(be.in_flight() && server.in_flight());
        let t0 = Instant::now();
        be.hold(Duration::ZERO, Duration::from_secs(30));
        assert!(
            t0.elapsed() >= Duration::from_millis(30),
            "best-effort work went while latency-critical work was in flight"
        );
        assert!(!be.in_flight());
        // SAFETY: our child.
        unsafe { libc::waitpid(lc, std::ptr::null_mut(), 0) };
        // Never longer than the bound, whatever the other side does.
        let lc = child_entering(&fd, |_| std::thread::sleep(Duration::from_secs(30)));
        let waited = be.hold(Duration::ZERO, Duration::from_millis(10));
        assert!(waited >= Duration::from_millis(10));
        // SAFETY: our child.
        unsafe {
            libc::kill(lc, libc::SIGKILL);
            libc::waitpid(lc, std::ptr::null_mut(), 0);
        }
    }

    #[test]
    fn the_clock_relation_keeps_the_narrowest_measurement() {
        let (server, fd) = Gate::create().unwrap();
        let other = Gate::map(std::fs::File::from(fd.try_clone().unwrap())).unwrap();
        assert_eq!(server.clock(), None);
        assert!(other.offer_clock(-1_500, 9_000));
        let (offset, err) = server.clock().unwrap();
        assert_eq!(offset, -1_500);
        assert!((4_500..5_000).contains(&err), "{err}");
        // A wider round (the GPU was busy) does not replace it; a narrower one does.
        assert!(!server.offer_clock(40_000, 300_000));
        assert_eq!(other.clock().unwrap().0, -1_500);
        assert!(server.offer_clock(-1_200, 4_000));
        assert_eq!(other.clock().unwrap().0, -1_200);
        // It ages: 20 µs per second of drift allowed.
        assert_eq!(clock_error(4_000, 3_000_000_000), 2_000 + 60_000);
        assert_eq!(clock_error(4_000, 500_000_000), 2_000 + 10_000);
    }

    #[test]
    fn a_latency_critical_executor_killed_inside_a_segment_holds_nobody() {
        let (_server, fd) = Gate::create().unwrap();
        let be = Gate::map(std::fs::File::from(fd.try_clone().unwrap())).unwrap();
        // Entered and never leaves: killed inside its segment.
        let lc = child_entering(&fd, |_| std::thread::sleep(Duration::from_secs(30)));
        assert!(be.in_flight());
        // SAFETY: our child.
        unsafe {
            libc::kill(lc, libc::SIGKILL);
            libc::waitpid(lc, std::ptr::null_mut(), 0);
        }
        assert!(!be.in_flight(), "the killed executor's work still counts");
        // After the grace since its last activity, best-effort work goes at once (the old
        // counter held it up to the bound for a second after such a death).
        std::thread::sleep(GRACE);
        let waited = be.hold(GRACE, Duration::from_millis(500));
        assert!(waited < Duration::from_millis(5), "held {waited:?} after the latency-critical executor died");
    }

    #[test]
    fn a_latency_critical_session_between_round_trips_holds_nobody_though_it_keeps_its_slot() {
        let (_server, fd) = Gate::create().unwrap();
        let be = Gate::map(std::fs::File::from(fd.try_clone().unwrap())).unwrap();
        let marked = |g: &Gate| g.page().in_flight.iter().filter(|w| w.load(Ordering::Acquire) != 0).count();
        // Entered, then answered (left), and alive: its slot stays for the session.
        let lc = child_entering(&fd, |g| {
            g.leave();
            std::thread::sleep(Duration::from_secs(30));
        });
        assert!(be.held_by_other(0), "the session's slot is gone");
        // (The child reports once it entered; its leave follows.)
        let t0 = Instant::now();
        while marked(&be) != 0 && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!be.in_flight(), "nothing is in flight between round trips");
        // A second latency-critical executor takes another slot; in flight, it holds best-effort work.
        let lc2 = child_entering(&fd, |_| std::thread::sleep(Duration::from_secs(30)));
        assert!(be.held_by_other(1));
        assert!(be.in_flight());
        // SAFETY: our children.
        unsafe {
            libc::kill(lc2, libc::SIGKILL);
            libc::waitpid(lc2, std::ptr::null_mut(), 0);
        }
        // Killed inside its segment: its mark is cleared by the first look, and the first
        // executor's slot is still its own.
        assert!(!be.in_flight());
        assert_eq!(marked(&be), 0);
        assert!(be.held_by_other(0));
        // SAFETY: our child.
        unsafe {
            libc::kill(lc, libc::SIGKILL);
            libc::waitpid(lc, std::ptr::null_mut(), 0);
        }
    }
}
