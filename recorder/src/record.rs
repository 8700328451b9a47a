//! The driver-recording backend: one hooked call recorded on the way to the driver — inputs
//! captured, the driver called, outputs captured, the record queued for the trace writer
//! (`batches.rs`). The path is the slot's (`slots.rs`): folded query, raw call or full record.
//! Internal failures never reach the program: it gets the driver's answer.

use gpuless_analyzer::api::SyncClass;
use gpuless_traces::{CallRecord, Function};

use crate::call::Real;
use crate::hooks::HOOKS;
use crate::lane::Lane;
use crate::{arena, batches, capture, fold, functions, hostview, mirror, pending, raw, sink, slots, state};

/// One hooked call, recorded: the driver-recording backend's part of the call's trip
/// (`dispatch.rs` chose it; `slots::Slot` says which recording path it takes).
///
/// # Safety
/// `raw` must be the arguments the program passed, in the API table's order; `real` calls the
/// slot's real function with them.
#[inline]
pub(crate) unsafe fn hooked(slot: usize, s: &slots::Slot, raw: &[u64], real: &mut Real, lane: &Lane) -> u32 {
    // SAFETY: the program's arguments.
    if s.export_table && unsafe { crate::export_tables::denied(raw) } {
        return 801; // CUDA_ERROR_NOT_SUPPORTED
    }
    let mirrored = hostview::active() && state::enabled();
    if mirrored && s.submits {
        mirror::before_submit(lane);
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
            mirror::after_sync(lane);
        }
    }
    status
}

/// A call recorded in full on the calling thread.
///
/// # Safety
/// As [`hooked`].
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
    unsafe { crate::late_download::before_copy(f, raw) };
    // SAFETY: forwarded from the caller.
    let status = unsafe { with_arena(s, raw, real) };
    lane.current.set(parent);
    let t1 = lane.stamp();
    if s.init && status == 0 {
        sink::open(Some(&sink::device_facts));
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
        batches::emit(rec);
    }
    if status == 0 && s.completes {
        pending::after(f, raw);
    }
    if s.waits || f.sync == SyncClass::DeviceToHost {
        // The program waits here anyway: hand this thread's records to the writer.
        batches::flush_thread(lane);
    }
    status
}

/// A call whose arguments are plain words (and a launch's parameters): kept raw, its record
/// built by the writer (`raw.rs`).
///
/// # Safety
/// As [`hooked`].
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
    batches::emit_raw(|bytes| {
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
        batches::flush_thread(lane);
    }
    status
}

/// The driver call, or the arena's answer for calls about arena memory (and the recorder's
/// for arena memory shared with other processes, `ipc.rs`).
///
/// # Safety
/// As [`hooked`].
unsafe fn with_arena(s: &slots::Slot, raw: &[u64], real: &mut Real) -> u32 {
    if s.shares {
        // SAFETY: forwarded from the caller.
        if let Some(status) = unsafe { crate::ipc::call(s.func, raw) } {
            return status;
        }
        let status = real.call();
        if status == 0 {
            // SAFETY: forwarded; the call succeeded.
            unsafe { crate::ipc::after(s.func, raw) };
        }
        return status;
    }
    let Some(op) = s.arena else { return real.call() };
    if matches!(op, arena::Op::Free | arena::Op::FreeAsync) {
        // A pointer imported from another process's pool (`ipc.rs`).
        if let Some(status) = crate::ipc::freed(raw.first().copied().unwrap_or(0)) {
            return status;
        }
    }
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
/// As [`hooked`].
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
    if fold::repeat(&key, &answer, now, confirmed, lane) || batches::fold(&key, &answer, now, confirmed, lane) {
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
    batches::emit_query(rec, key, answer, confirmed, lane);
}
