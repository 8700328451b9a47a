//! How long a latency-critical segment waits for the GPU, from GPU timestamps (issue 36,
//! `serve --measure-preemption`; docs/SCHEDULING.md "Preemption latency").
//!
//! The preemption latency is the time from a latency-critical segment's arrival at its
//! executor to the moment its first kernel starts on the GPU. The executor notes the arrival
//! on the host's clock (`CLOCK_REALTIME`) and, right before the segment's first kernel, launches
//! a one-thread kernel on the same stream (`gpu/stamp.ptx`) that writes the GPU's global
//! nanosecond timer (`%globaltimer`) into pinned host memory: it starts when the kernel after
//! it would have. Only a stream with no earlier work of its own is stamped (otherwise the wait
//! would include the session's own work, not other sessions').
//!
//! The two clocks are related by calibration rounds ([`calibrate`], [`Stamps::recalibrate`]): a
//! stamp launched and polled while the GPU has room lies between the host's times before the
//! launch and after its slot was seen, so the offset is known to within half that width. The
//! GPU timer drifts against the host's clock (1 to 11 µs per second on H100s), so a relation
//! ages ([`super::super::gate::clock_error`]): an executor measures one when it starts and one
//! round after each answer of a latency-critical session (at most every 50 ms, polled at most
//! 100 µs), and the most certain relation any executor of the GPU has is kept in the GPU's gate
//! page ([`Gate::clock`]). Each latency comes with the uncertainty of the relation it used.

use std::time::{Duration, Instant};

use cudarc::driver::sys;

use super::super::gate::Gate;

const PTX: &str = concat!(include_str!("gpu/stamp.ptx"), "\0");

/// Slots of one context's stamp buffer (a ring; calibration uses the last [`ROUNDS`]).
const SLOTS: usize = 512;
/// Calibration rounds an executor tries when it starts (and slots they use).
const ROUNDS: usize = 16;
/// How long a calibration round at the start polls for its stamp before it is given up (the
/// GPU is busy).
const POLL: Duration = Duration::from_micros(300);
/// The same for the round after an answer (the session's next segment may be waiting).
const POLL_AFTER: Duration = Duration::from_micros(100);
/// At most one round after answers this often.
const ROUND_EVERY: Duration = Duration::from_millis(50);
/// Stamps not yet seen that are kept (older ones are dropped).
const PENDING: usize = 256;

/// The host's `CLOCK_REALTIME`, nanoseconds.
pub(super) fn realtime_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The stamp kernel loaded in one context, and its slots.
struct Loaded {
    ctx: usize,
    func: sys::CUfunction,
    /// The slots, pinned host memory mapped for the device.
    host: *mut u64,
    dev: sys::CUdeviceptr,
    next: usize,
    /// A stream of the stamps' own, for calibration rounds.
    own_stream: sys::CUstream,
    /// The next calibration slot (the last [`ROUNDS`] of the ring).
    next_round: usize,
}

impl Loaded {
    /// The kernel and its slots in the current context.
    fn load() -> Result<Loaded, String> {
        let ok = |what: &str, r: sys::CUresult| {
            if r == sys::CUresult::CUDA_SUCCESS {
                Ok(())
            } else {
                Err(format!("{what} failed with {r:?}"))
            }
        };
        let mut ctx = std::ptr::null_mut();
        let mut module = std::ptr::null_mut();
        let mut func = std::ptr::null_mut();
        let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
        let mut dev = 0;
        let mut own_stream = std::ptr::null_mut();
        // SAFETY: out-pointers valid; a NUL-terminated PTX image. The module and the slots live
        // as long as the executor (a few hundred bytes per context).
        unsafe {
            ok("cuCtxGetCurrent", sys::cuCtxGetCurrent(&mut ctx))?;
            ok("loading the stamp kernel (PTX)", sys::cuModuleLoadData(&mut module, PTX.as_ptr().cast()))?;
            ok("cuModuleGetFunction", sys::cuModuleGetFunction(&mut func, module, c"gpuless_stamp".as_ptr()))?;
            // CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP
            ok("cuMemHostAlloc", sys::cuMemHostAlloc(&mut host, SLOTS * 8, 1 | 2))?;
            ok("cuMemHostGetDevicePointer", sys::cuMemHostGetDevicePointer_v2(&mut dev, host, 0))?;
            std::ptr::write_bytes(host.cast::<u64>(), 0, SLOTS);
            // CU_STREAM_NON_BLOCKING
            ok("cuStreamCreate", sys::cuStreamCreate(&mut own_stream, 1))?;
        }
        Ok(Loaded { ctx: ctx as usize, func, host: host.cast(), dev, next: 0, own_stream, next_round: 0 })
    }

    /// One calibration round: a stamp on the own stream, polled at most `poll`. The clock
    /// relation (offset, width) where it came back in time.
    fn round(&mut self, poll: Duration) -> Option<(i64, u64)> {
        let i = SLOTS - ROUNDS + self.next_round;
        self.next_round = (self.next_round + 1) % ROUNDS;
        let t0 = realtime_ns();
        if !self.launch(i, self.own_stream) {
            return None;
        }
        let polled = Instant::now();
        let g = loop {
            let g = self.read(i);
            if g != 0 || polled.elapsed() >= poll {
                break g;
            }
            std::hint::spin_loop();
        };
        let t1 = realtime_ns();
        // A round given up still writes its slot later: a later round of that slot may see its
        // stamp, which also lies between that round's launch and sight.
        (g != 0).then(|| (g as i64 - (t0 / 2 + t1 / 2) as i64, t1.saturating_sub(t0)))
    }

    /// Slot `i`'s stamp, 0 while not written.
    fn read(&self, i: usize) -> u64 {
        // SAFETY: `i` < SLOTS; the device writes the slot, so it is read volatile.
        unsafe { std::ptr::read_volatile(self.host.add(i)) }
    }

    /// Clears slot `i` and launches the stamp into it on `stream`.
    fn launch(&self, i: usize, stream: sys::CUstream) -> bool {
        // SAFETY: `i` < SLOTS, not in use by a kernel (the ring is larger than the stamps kept).
        unsafe { std::ptr::write_volatile(self.host.add(i), 0) };
        let mut slot = self.dev + (i * 8) as u64;
        let mut params = [(&mut slot as *mut u64).cast::<std::ffi::c_void>()];
        // SAFETY: our kernel of this context, one u64 parameter; `stream` a live stream of it.
        let r = unsafe {
            sys::cuLaunchKernel(self.func, 1, 1, 1, 1, 1, 1, 0, stream, params.as_mut_ptr(), std::ptr::null_mut())
        };
        r == sys::CUresult::CUDA_SUCCESS
    }
}

/// What an executor measured of its GPU's clock at start: the stamp kernel loaded in its
/// context, and the clock relation where a round came back in time.
pub(super) struct Calibrated {
    loaded: Option<Loaded>,
    own: Option<(i64, u64, Instant)>,
}

// SAFETY: the handles and the pinned slots are valid from any thread of the process.
unsafe impl Send for Loaded {}

/// Relates the GPU's timer to the host's clock in the current context: the narrowest of
/// [`ROUNDS`] rounds polled at most [`POLL`] each, offered to the GPU's gate page. The clock
/// relation is (offset, width) in nanoseconds: GPU timer = host clock + offset, within ± width / 2.
pub(super) fn calibrate(gate: Option<&Gate>) -> Result<Calibrated, String> {
    let mut l = Loaded::load()?;
    let best = (0..ROUNDS).filter_map(|_| l.round(POLL)).min_by_key(|&(_, w)| w);
    if let (Some(g), Some((offset, width))) = (gate, best) {
        g.offer_clock(offset, width);
    }
    Ok(Calibrated { loaded: Some(l), own: best.map(|(o, w)| (o, w, Instant::now())) })
}

/// A stamp launched and not yet read.
struct Pending {
    loaded: usize,
    slot: usize,
    arrived_ns: u64,
}

/// A latency-critical session's stamps.
pub(super) struct Stamps {
    loaded: Vec<Loaded>,
    /// Contexts the kernel could not be loaded in.
    failed: Vec<usize>,
    pending: std::collections::VecDeque<Pending>,
    /// This executor's latest calibration (offset, width, when), where it has one.
    own: Option<(i64, u64, Instant)>,
    /// The GPU's (offset, uncertainty, when read), as its gate page had it last (a session
    /// without a policy has no gate: the one read when it started, aging).
    shared: Option<(i64, u64, Instant)>,
    /// When the last round after an answer ran.
    last_round: Option<Instant>,
    said: bool,
}

impl Stamps {
    /// Stamps for a session: the executor's calibration (its loaded kernel goes to the first
    /// session), and the GPU's from the gate page.
    pub fn new(c: &mut Calibrated, gate: Option<&Gate>) -> Self {
        Stamps {
            loaded: c.loaded.take().into_iter().collect(),
            failed: Vec::new(),
            pending: Default::default(),
            own: c.own,
            shared: gate.and_then(Gate::clock).map(|(o, e)| (o, e, Instant::now())),
            last_round: None,
            said: false,
        }
    }

    /// Before the first kernel of a segment that arrived at `arrived_ns`, on `stream`: a stamp
    /// ahead of it, where the stream has no work of the session's own left.
    pub fn before_kernel(&mut self, stream: sys::CUstream, arrived_ns: u64) {
        let mut cap = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: a live stream of the session; a valid out-pointer.
        let r = unsafe { sys::cuStreamIsCapturing(stream, &mut cap) };
        if r != sys::CUresult::CUDA_SUCCESS || cap != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
            return;
        }
        // SAFETY: as above.
        match unsafe { sys::cuStreamQuery(stream) } {
            sys::CUresult::CUDA_SUCCESS => {}
            // The session's own work still runs there: not a wait for other sessions.
            _ => return,
        }
        let mut ctx = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        if unsafe { sys::cuCtxGetCurrent(&mut ctx) } != sys::CUresult::CUDA_SUCCESS || ctx.is_null() {
            return;
        }
        let ctx = ctx as usize;
        let k = match self.loaded.iter().position(|l| l.ctx == ctx) {
            Some(k) => k,
            None if self.failed.contains(&ctx) => return,
            None => {
                match Loaded::load() {
                    Ok(l) => self.loaded.push(l),
                    Err(e) => {
                        self.failed.push(ctx);
                        if !std::mem::replace(&mut self.said, true) {
                            eprintln!("gpuless executor: no preemption stamps in this session: {e}");
                        }
                    }
                }
                // The first segment of a context paid for the kernel's loading: not a sample.
                return;
            }
        };
        let l = &mut self.loaded[k];
        let slot = l.next;
        l.next = (l.next + 1) % (SLOTS - ROUNDS);
        if l.launch(slot, stream) {
            if self.pending.len() >= PENDING {
                self.pending.pop_front();
            }
            self.pending.push_back(Pending { loaded: k, slot, arrived_ns });
        }
    }

    /// After an answer: one calibration round in the session's context (at most every
    /// [`ROUND_EVERY`]), kept where it is narrower than this executor's aged one, and offered to
    /// the gate page.
    pub fn recalibrate(&mut self, gate: Option<&Gate>) {
        if self.last_round.is_some_and(|t| t.elapsed() < ROUND_EVERY) {
            return;
        }
        self.last_round = Some(Instant::now());
        let Some(l) = self.loaded.first_mut() else { return };
        let Some((offset, width)) = l.round(POLL_AFTER) else { return };
        if self.own.is_none_or(|(_, w, at)| width / 2 < aged(w, at)) {
            self.own = Some((offset, width, Instant::now()));
        }
        if let Some(g) = gate {
            g.offer_clock(offset, width);
        }
    }

    /// The latencies of the stamps written since the last call, nanoseconds, and the
    /// uncertainty (±, nanoseconds) of the clock relation they were computed with; nothing
    /// without one.
    pub fn take(&mut self, gate: Option<&Gate>) -> (Vec<u64>, u64) {
        if let Some((o, e)) = gate.and_then(Gate::clock) {
            self.shared = Some((o, e, Instant::now()));
        }
        let own = self.own.map(|(o, w, at)| (o, aged(w, at)));
        let shared = self.shared.map(|(o, e, at)| (o, e + aged(0, at)));
        let clock = match (shared, own) {
            (Some(s), Some(o)) => Some(if s.1 <= o.1 { s } else { o }),
            (s, o) => s.or(o),
        };
        let Some((offset, error)) = clock else { return (Vec::new(), 0) };
        let mut out = Vec::new();
        let loaded = &self.loaded;
        self.pending.retain(|p| {
            let g = loaded[p.loaded].read(p.slot);
            if g == 0 {
                return true;
            }
            let start = g as i64 - offset;
            out.push(start.saturating_sub(p.arrived_ns as i64).max(0) as u64);
            false
        });
        (out, error)
    }
}

/// The uncertainty now of a relation measured in a round `width` wide at `at`.
fn aged(width: u64, at: Instant) -> u64 {
    super::super::gate::clock_error(width, at.elapsed().as_nanos() as u64)
}
