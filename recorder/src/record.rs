//! The one function every hook calls: capture inputs, call the driver, capture outputs,
//! queue the record. Internal failures never reach the program: it gets the driver's answer.

use std::ffi::c_void;

use gpuless_analyzer::api::SyncClass;
use gpuless_traces::{CallRecord, Function};

use crate::hooks::{HOOKS, NOT_FOUND};
use crate::lane::{self, Lane};
use crate::{arena, capture, diag, fold, functions, hostview, pending, raw, slots, state};

/// `CUDA_ERROR_UNKNOWN`: what a call answers when client mode fails inside it.
const UNKNOWN: u32 = cudarc::driver::sys::CUresult::CUDA_ERROR_UNKNOWN as u32;

/// The last time this thread read the clock (0 before it did).
pub(crate) fn last_ns() -> u64 {
    lane::with(|l| l.last_ns.get())
}

/// The caller's OS thread id (cached per thread).
pub(crate) fn tid() -> u64 {
    lane::with(Lane::tid)
}

/// Marks the call `seq` as the one this thread is inside, so that driver calls made from it
/// name it as their parent; returns the previous mark, for [`leave`].
pub(crate) fn enter(seq: u64) -> Option<u64> {
    lane::with(|l| l.current.replace(Some(seq)))
}

/// Restores the mark [`enter`] replaced.
pub(crate) fn leave(previous: Option<u64>) {
    lane::with(|l| l.current.set(previous));
}

/// Records one call of the hook in `slot`, whose raw arguments are `raw`; `real` performs
/// the call itself, given the real function's address.
///
/// # Safety
/// `raw` must be the arguments the program passed, in the API table's order; `real` must call
/// the address it is given as the slot's C function.
#[inline(always)]
pub unsafe fn call(slot: usize, raw: &[u64], mut real: impl FnMut(*mut c_void) -> u32) -> u32 {
    // One copy of the recording code for every hook: the hot calls share their instructions.
    // SAFETY: forwarded from the caller.
    unsafe { call_dyn(slot, raw, &mut real) }
}

/// The driver call of one hooked call: the hook's closure and the real function's address.
pub(crate) struct Real<'a> {
    f: &'a mut dyn FnMut(*mut c_void) -> u32,
    p: *mut c_void,
}

impl<'a> Real<'a> {
    /// A driver call through `f` at `p`.
    pub(crate) fn new(f: &'a mut dyn FnMut(*mut c_void) -> u32, p: *mut c_void) -> Self {
        Real { f, p }
    }

    /// Calls the driver.
    #[inline(always)]
    pub(crate) fn call(&mut self) -> u32 {
        (self.f)(self.p)
    }

    /// The real function's address.
    pub(crate) fn address(&self) -> *mut c_void {
        self.p
    }
}

/// [`call`], not generic over the driver call.
///
/// # Safety
/// As [`call`].
#[inline(never)]
unsafe fn call_dyn(slot: usize, raw: &[u64], real: &mut dyn FnMut(*mut c_void) -> u32) -> u32 {
    let Some(s) = slots::get(slot) else { return NOT_FOUND };
    if crate::remote::active() {
        // Client mode: no driver here; the session is the backend. A fault of ours becomes
        // this call's error, never an abort of the program (a panic cannot cross the C ABI).
        // SAFETY: forwarded from the caller.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { crate::remote::call(slot, s, raw) }));
        return r.unwrap_or_else(|_| {
            eprintln!(
                "gpuless: client mode failed inside {} (an internal error, printed above); the call returns \
                 CUDA_ERROR_UNKNOWN",
                s.func.name
            );
            UNKNOWN
        });
    }
    let Some(p) = s.real(slot) else { return NOT_FOUND };
    let mut real = Real::new(real, p);
    lane::with(|lane| {
        if s.timed {
            // SAFETY: forwarded from the caller.
            return diag::timed(slot, &mut real, |real| unsafe { hooked(slot, s, raw, real, lane) });
        }
        // SAFETY: forwarded from the caller.
        unsafe { hooked(slot, s, raw, &mut real, lane) }
    })
}

/// [`call`] itself.
///
/// # Safety
/// As [`call`].
unsafe fn hooked(slot: usize, s: &slots::Slot, raw: &[u64], real: &mut Real, lane: &Lane) -> u32 {
    // SAFETY: the program's arguments.
    if s.export_table && unsafe { crate::export_tables::denied(raw) } {
        return 801; // CUDA_ERROR_NOT_SUPPORTED
    }
    let mirrored = hostview::active() && state::enabled();
    if mirrored && s.submits {
        hostview::before_submit(lane);
    }
    if let Some(i) = s.func_in {
        if state::enabled() {
            functions::taken(raw.get(usize::from(i)).copied().unwrap_or(0), lane);
        }
    }
    let status = if !state::enabled() {
        state::unrecorded(s.func.name);
        // Arena memory stays the arena's after recording stops (late frees at exit).
        // SAFETY: forwarded from the caller.
        unsafe { with_arena(s, raw, real) }
    } else {
        match s.path {
            // SAFETY (all arms): forwarded from the caller.
            slots::Path::Pass => unsafe { with_arena(s, raw, real) },
            slots::Path::Fold(ref plan) => unsafe { query(slot, s, plan, raw, real, lane) },
            // A graph launch whose copies read host memory late has its reads recorded too.
            slots::Path::Raw(ref plan) if plan.fits(raw) && !crate::late_graph::launches_late(s.func, raw) => unsafe {
                raw_call(slot, s, plan, raw, real, lane)
            },
            _ => unsafe { full(slot, s, raw, real, lane) },
        }
    };
    if status == 0 && matches!(s.func.name, "cuLaunchHostFunc" | "cuStreamAddCallback") {
        // Uploads from pinned memory queued after it read their source late (`late.rs`), and
        // captured after it, at every launch of the graph (`late_graph.rs`).
        crate::late::host_function(raw.first().copied().unwrap_or(0));
        crate::late_graph::host_function(raw.first().copied().unwrap_or(0));
    }
    if status == 0 && s.func.name == "cuGraphExecDestroy" {
        crate::late_graph::exec_destroyed(raw.first().copied().unwrap_or(0));
    }
    if s.invalidates {
        fold::invalidate();
    }
    if s.export_table && crate::export_log::enabled() {
        // SAFETY: the program's arguments: the out-pointer (written on success) and the UUID.
        unsafe { crate::export_tables::log_get(raw, status) };
    }
    if status == 0 {
        if let Some(&out) = s.func_out.and_then(|i| raw.get(usize::from(i))) {
            if out != 0 {
                // SAFETY: the driver wrote the handle there (the call succeeded).
                functions::given(unsafe { *(out as *const u64) });
            }
        }
        if let Some(op) = s.hostview {
            // SAFETY: the program's arguments; the call succeeded.
            unsafe { hostview::track(op, raw) };
        }
        if s.export_table && crate::export_tables::enabled() {
            // SAFETY: the program's arguments; the driver wrote the table's address.
            unsafe { crate::export_tables::after_get(raw) };
        }
        if mirrored && s.runs_kernels {
            hostview::device_turn();
        }
        if mirrored && (s.waits || s.func.sync == SyncClass::DeviceToHost) {
            hostview::after_sync(lane);
        }
    }
    status
}

/// A call recorded in full on the calling thread.
///
/// # Safety
/// As [`call`].
#[inline(never)]
unsafe fn full(slot: usize, s: &slots::Slot, raw: &[u64], real: &mut Real, lane: &Lane) -> u32 {
    let f = s.func;
    let seq = state::next_seq();
    let t0 = state::now_ns();
    // SAFETY: forwarded from the caller.
    let args = std::panic::catch_unwind(|| unsafe { capture::inputs(f, raw) });
    let parent = lane.current.replace(Some(seq));
    // SAFETY: forwarded from the caller.
    let late = unsafe { crate::late::before_copy(f, raw) };
    // SAFETY: forwarded from the caller.
    let status = unsafe { with_arena(s, raw, real) };
    lane.current.set(parent);
    let t1 = lane.stamp();
    if s.init && status == 0 {
        state::open(true);
    }
    let mut late_launch = None;
    if status == 0 {
        // SAFETY: forwarded from the caller; the call succeeded.
        unsafe { crate::late_graph::after(f, raw, seq) };
        if f.name == "cuGraphLaunch" {
            // SAFETY: as above.
            late_launch = unsafe { crate::late_graph::after_launch(raw) };
        }
    }

    let Ok(args) = args else {
        state::fail(&format!("capturing the arguments of {} failed", f.name));
        return status;
    };
    // SAFETY: as above; outputs are read only after a successful call.
    let results = match std::panic::catch_unwind(|| unsafe { capture::outputs(f, raw, status) }) {
        Ok(r) => r,
        Err(_) => {
            state::fail(&format!("capturing the results of {} failed", f.name));
            return status;
        }
    };
    let rec = CallRecord {
        seq,
        thread: lane.tid(),
        timestamp_ns: t0,
        duration_ns: t1.saturating_sub(t0),
        level: f.level,
        parent,
        function: Function::Known(f.id),
        variant: HOOKS[slot].variant,
        status: status as i32,
        args,
        results,
        repeat: 0,
    };
    if let Some(l) = late_launch {
        pending::defer_late_launch(f, raw, rec, l);
    } else if let (0, Some(l)) = (status, late) {
        pending::defer_late(f, raw, rec, l);
    } else if status == 0 && capture::deferred_call(f, raw, &rec.args) {
        pending::defer(f, raw, rec);
    } else {
        state::emit(rec);
    }
    if status == 0 && s.completes {
        pending::after(f, raw);
    }
    if s.waits || f.sync == SyncClass::DeviceToHost {
        // The program waits here anyway: hand this thread's records to the writer.
        state::flush_thread(lane);
    }
    status
}

/// A call whose arguments are plain words (and a launch's parameters): kept raw, its record
/// built by the writer (`raw.rs`).
///
/// # Safety
/// As [`call`].
unsafe fn raw_call(slot: usize, s: &slots::Slot, plan: &raw::Plan, raw: &[u64], real: &mut Real, lane: &Lane) -> u32 {
    let seq = state::next_seq();
    let t0 = state::now_ns();
    let parent = lane.current.replace(Some(seq));
    let status = real.call();
    lane.current.set(parent);
    let t1 = lane.stamp();
    let mut words = [0u64; raw::MAX_WORDS];
    let n = raw.len().min(raw::MAX_WORDS);
    words[..n].copy_from_slice(&raw[..n]);
    let mut failed = false;
    // The parameters are read after the driver returned (they are the program's, unchanged,
    // until the call returns to it), straight into this thread's batch.
    state::emit_raw(|bytes| {
        let start = bytes.len();
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: forwarded from the caller; the call has not returned to the program.
            unsafe { (plan.params(raw, bytes, lane), plan.config(raw, bytes)) }
        }));
        let (params, config_at) = read.unwrap_or_else(|_| {
            bytes.truncate(start);
            failed = true;
            (None, raw::NO_CONFIG)
        });
        raw::RawCall {
            seq,
            timestamp_ns: t0,
            parent: parent.unwrap_or(raw::NO_PARENT),
            duration_ns: u32::try_from(t1.saturating_sub(t0)).unwrap_or(u32::MAX),
            status: status as i32,
            slot: slot as u16,
            config_at,
            words,
            params,
        }
    });
    if failed {
        state::fail(&format!("capturing the arguments of {} failed", s.func.name));
    }
    if status == 0 && s.completes {
        pending::after(s.func, raw);
    }
    if s.waits {
        state::flush_thread(lane);
    }
    status
}

/// The driver call, or the arena's answer for calls about arena memory.
///
/// # Safety
/// As [`call`].
unsafe fn with_arena(s: &slots::Slot, raw: &[u64], real: &mut Real) -> u32 {
    let Some(op) = s.arena else { return real.call() };
    // SAFETY: forwarded from the caller.
    unsafe {
        if let Some(status) = arena::before(op, raw, s.per_thread) {
            return status;
        }
        let status = real.call();
        arena::after(op, raw, s.per_thread, status);
        status
    }
}

/// A query whose arguments and answers are plain values: folded into the previous record of the
/// same question when the answer repeats (`fold.rs`).
///
/// # Safety
/// As [`call`].
unsafe fn query(slot: usize, s: &slots::Slot, plan: &fold::Plan, raw: &[u64], real: &mut Real, lane: &Lane) -> u32 {
    let f = s.func;
    // Queries call no other hooked function: no need to mark this call as the current parent.
    // Nor are they timed: a repeat is stamped with the time this thread last took (reading
    // the clock would be a third of a folded query's cost), a first answer when it returns.
    let now = lane.last_ns.get();
    // A stable query's repeat in the epoch its answer was confirmed in: answered from memory.
    let epoch = if s.stable {
        let epoch = fold::epoch();
        // SAFETY: `raw` are the program's arguments (the caller's contract).
        if unsafe { fold::answer(plan, slot, raw, epoch, now, lane) } {
            return 0;
        }
        epoch
    } else {
        0
    };
    let status = real.call();
    // SAFETY: forwarded; the driver has written the outputs when the status is 0.
    let (key, answer) = unsafe { fold::observe(plan, slot, raw, status) };
    if status == 0 && s.completes {
        pending::after(f, raw);
    }
    let confirmed = if status == 0 { epoch } else { 0 };
    if fold::repeat(&key, &answer, now, confirmed, lane) || state::fold(&key, &answer, now, confirmed, lane) {
        return status;
    }
    // SAFETY: forwarded from the caller.
    unsafe { first_answer(slot, f, raw, status, (key, answer), confirmed, lane) };
    status
}

/// The record of a query that was not folded (a new question or a new answer); kept out of
/// line so that the folded path stays a few cache lines of code.
///
/// # Safety
/// As [`call`]; the call has returned `status`.
#[cold]
#[inline(never)]
unsafe fn first_answer(
    slot: usize,
    f: &'static gpuless_analyzer::api::ApiFunction,
    raw: &[u64],
    status: u32,
    (key, answer): (fold::Key, fold::Answer),
    confirmed: u64,
    lane: &Lane,
) {
    let t0 = lane.stamp();
    // SAFETY: as above; inputs are plain values, read the same after the call.
    let captured = std::panic::catch_unwind(|| unsafe { (capture::inputs(f, raw), capture::outputs(f, raw, status)) });
    let Ok((args, results)) = captured else {
        state::fail(&format!("capturing {} failed", f.name));
        return;
    };
    let rec = CallRecord {
        seq: state::next_seq(),
        thread: lane.tid(),
        timestamp_ns: t0,
        duration_ns: 0,
        level: f.level,
        parent: lane.current.get(),
        function: Function::Known(f.id),
        variant: HOOKS[slot].variant,
        status: status as i32,
        args,
        results,
        repeat: 0,
    };
    state::emit_query(rec, key, answer, confirmed, lane);
}
