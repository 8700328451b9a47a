//! One call's way through the client (a hooked call in client mode, [`super::call`]), top to
//! bottom: the session's state (not initialized, lost, a forked child's), the route to a server
//! (`route.rs`; a call across servers: `staged.rs`), the arguments captured for the server's
//! record, the client's part (`local/`: answered here, or what only the server or the session
//! can do, [`Step`]), then the record queued ([`session::push`]) or the wait for the server's
//! answer ([`session::wait`]), and the trace's record when `gpuless record --remote` asks for
//! one. What a call asks of the session that the layers below it cannot do themselves — a JIT
//! link (`jit.rs`), a memory import (`vmm.rs`), host functions registered (`hostcalls.rs`) — is
//! done here, above the session; and [`install`] lends the layers below what they need of it.

use std::sync::atomic::{AtomicBool, Ordering};

use gpuless_analyzer::api::structs::MEMORYTYPE_HOST;
use gpuless_analyzer::api::{ApiFunction, ArgKind, SyncClass};
use gpuless_traces::Value;

use super::copies::Target;
use super::step::{refused, Step};
use super::{
    copies, driver, handles, host, hostcalls, hostfn, ipc, jit, local, memo, route, session, staged, streams, vmm,
};
use crate::slots::Slot;
use crate::{arena, capture, state};

/// `CUDA_ERROR_INVALID_IMAGE`.
const INVALID_IMAGE: u32 = 200;

/// The forked child has said so.
static FORK_SAID: AtomicBool = AtomicBool::new(false);

/// Lends the layers below the backends what they need of the client ([`crate::mode::Client`]):
/// [`driver`]'s entry points as "the driver", and the session's store of captured blobs; and
/// the layers below the session in client mode the session's mirror of pinned memory
/// ([`host::lend_mirror`]). Once per process; called by every way into client mode that can
/// come first (a hooked call, NVML, the runtime's registrations), so that nothing below asks
/// before it is done.
pub(crate) fn install() {
    if crate::mode::active() && crate::mode::client().is_none() {
        host::lend_mirror(session::mirror_host);
        crate::mode::lend(crate::mode::Client { symbol: driver::symbol, blob: session::blob });
    }
}

/// Where a call stands once the client's part and what it asked of the session are done.
enum Next {
    /// Answered, with this status (the server runs it too where the table says it must).
    Done(u32),
    /// Only the server can answer: sent with everything queued, and waited for.
    Wait,
}

/// One hooked call ([`super::call`]), timed.
///
/// # Safety
/// `raw` are the program's arguments, in the API table's order.
pub(crate) unsafe fn call(slot: usize, s: &Slot, raw: &[u64]) -> u32 {
    super::altstack::guard_thread();
    // The recorder's clock (the TSC where the kernel keeps time with it): two readings per call.
    let t0 = crate::clock::now_ns();
    // SAFETY: forwarded from the caller.
    let st = unsafe { call_timed(slot, s, raw) };
    session::CALL_NS.fetch_add(crate::clock::now_ns().saturating_sub(t0), Ordering::Relaxed);
    st
}

/// [`call`] itself.
///
/// # Safety
/// As [`call`].
unsafe fn call_timed(slot: usize, s: &Slot, raw: &[u64]) -> u32 {
    let f = s.func;
    if session::forked() {
        if !FORK_SAID.swap(true, Ordering::Relaxed) {
            eprintln!(
                "gpuless: process {} was forked from a client-mode process without exec; its CUDA calls \
                 (first: {}) fail with CUDA_ERROR_NOT_INITIALIZED (the session is its parent's). Run it \
                 through exec (e.g. multiprocessing's 'spawn' start method) to give it a session of its own",
                std::process::id(),
                f.name
            );
        }
        return session::NOT_INITIALIZED;
    }
    session::CALLS.fetch_add(1, Ordering::Relaxed);
    if hostfn::in_host_function() && !f.name.starts_with("cuGetError") {
        return hostfn::refused_in_host_function(f);
    }
    // cuInit connects; so does cuDriverGetVersion, which the driver answers before cuInit
    // (cudart asks it first, and takes a failure for a driver too old for it).
    if s.init || f.name == "cuDriverGetVersion" {
        let st = session::init();
        if st != 0 {
            return st;
        }
    } else if f.sync == SyncClass::Local && f.name.starts_with("cuGetError") {
        // Error strings need no session.
    } else {
        match session::ready() {
            0 => return session::NOT_INITIALIZED,
            1 => {}
            2 => return session::LOST,
            code => return code,
        }
    }
    if let gpuless_analyzer::api::Disposition::Refused(r) = f.disposition {
        return local::bad_device(f, raw).unwrap_or_else(|| refused(f, r.why()));
    }
    // Which server runs it (a session across several servers, `route.rs`).
    let (to, all) = match route::decide(f, raw) {
        route::Decision::One(r) => (r, false),
        route::Decision::All(r) => (r, true),
        // SAFETY: forwarded from the caller.
        route::Decision::Apart => return unsafe { staged::apart(f, raw, call) },
    };
    let _entered = route::enter(to, all);
    let mut send = f.sent_by_client();
    // `gpuless record --remote`: every call is recorded too, as a local recording would.
    let tracing = state::enabled();
    // Inputs are read before the local part runs (it may write `inout` arguments).
    // SAFETY (all captures): the program's arguments; outputs only after success.
    let mut args = if send || tracing { unsafe { capture::inputs(f, raw) } } else { Vec::new() };
    let kept = if tracing { args.clone() } else { Vec::new() };
    if send && f.args.iter().zip(&args).any(|(a, v)| a.kind == ArgKind::Image && !matches!(v, Value::Blob(_))) {
        // No code image the driver could read (fatbin, cubin, PTX) at the address given.
        return INVALID_IMAGE;
    }
    // A copy from pinned memory behind a host function that has not run: its source is read
    // when the stream reaches it (the function may write it first), sent as an address.
    let late = (send && f.name == "cuMemcpyHtoDAsync" && hostfn::reads_late(raw[3], raw[1])).then(|| (raw[1], raw[2]));
    if let (Some((src, _)), Some(a)) = (late, args.get_mut(1)) {
        *a = Value::HostPtr(src);
    }
    if send {
        copies::normalize(f, &mut args);
        // Device ordinals as the route's server numbers its devices.
        route::localize(f, &mut args);
    }
    // A graph's memcpy node: host memory it reads is read at every launch (a late read); the
    // bytes it writes to host memory come back after every launch, as a captured copy's do.
    let node = if send { copies::memcpy_node(f, &args) } else { None };
    // SAFETY: the program's dependency array of a cuGraphAddMemcpyNode.
    let node_src = node.filter(|c| {
        c.src.memory_type == MEMORYTYPE_HOST
            && c.packed_len().is_some()
            && unsafe { hostfn::after_host_node(raw[2], raw[3]) }
    });
    if let (Some(c), Some((i, _))) = (node_src, f.args.iter().enumerate().find(|(_, a)| a.name == "copyParams")) {
        if let Some(Value::List(l)) = args.get_mut(i) {
            l.truncate(1);
            l.push(Value::HostPtr(c.src.host));
        }
    }
    if send {
        // Pinned memory a kernel is given is shared with the server from now on (`host.rs`).
        if s.runs_kernels && !host::mirror_reached(&args) {
            let why = "a kernel argument points into pinned host memory that could not be mirrored to the server";
            return refused(f, why);
        }
    }
    // Mirrored pinned memory (`host.rs`): its allocation and its free go to the server too.
    let mirrored_free = matches!(f.name, "cuMemFreeHost" | "cuMemHostUnregister")
        && host::is_mirrored(raw.first().copied().unwrap_or(0));
    // SAFETY (all arms): forwarded from the caller.
    // A pool imported or memory opened here (`ipc.rs`): the server knows neither.
    let shared_here = ipc::before(f, raw);
    if shared_here.is_some() {
        send = false;
    }
    let mut next = match shared_here.map(Step::Done).unwrap_or_else(|| unsafe { local::run(s, raw) }) {
        Step::Done(st) => Next::Done(st),
        Step::Wait => Next::Wait,
        // What only the session can do, the client's part names: done here.
        Step::Link => Next::Done(unsafe { jit::call(f, raw) }),
        Step::Import => Next::Done(unsafe { import(f, raw) }),
        Step::Share => Next::Done(unsafe { ipc::call(f, raw) }),
    };
    if matches!(next, Next::Done(0))
        && (mirrored_free
            // SAFETY: the program's out-pointer, written by the successful allocation.
            || (f.name == "cuMemHostAlloc" && host::is_mirrored(unsafe { *(raw[0] as *const u64) })))
    {
        send = true;
        if args.is_empty() {
            // SAFETY: the program's arguments.
            args = unsafe { capture::inputs(f, raw) };
        }
    }
    // A call that creates a handle changes no answer about the handles there were: the memo
    // (server answers, keyed by their handles) outlives it, unlike the recorder's.
    if f.may_change_answers() && f.sync != SyncClass::CreatesHandle {
        memo::forget();
    } else if matches!(next, Next::Wait) && f.stable && f.sync == SyncClass::DeviceQuery {
        if let Some(st) = memo::answer(f, raw).map(|(status, values)| {
            // SAFETY: the program's arguments to `f`.
            unsafe { session::write_query(f, raw, status, &values) }
        }) {
            next = Next::Done(st);
            send = false; // answered from memory: nothing for the server
        }
    }
    // Outputs already captured for the server's record, reused for the trace's.
    let mut traced: Option<Vec<Value>> = None;
    let (st, seq) = match next {
        Next::Done(st) if !send || st != 0 => {
            // Answered here; or refused here, as the driver would have refused it: nothing for
            // the server to run.
            session::LOCAL.fetch_add(u64::from(!send), Ordering::Relaxed);
            (st, None)
        }
        Next::Done(st) => {
            let results = unsafe { capture::outputs(f, raw, st) };
            if tracing {
                traced = Some(results.clone());
            }
            // An async copy into host memory (`cuMemcpyAsync` of a unified host destination
            // too): its bytes are written when they come back.
            let async_d2h = matches!(f.sync, SyncClass::DeviceToHostAsync | SyncClass::CopyAnyDirectionAsync);
            let node_dst = node.filter(|c| c.dst.memory_type == MEMORYTYPE_HOST).map(|c| (Target::Rows(c), true));
            let target = if let Some(t) = node_dst {
                Some(t)
            } else if async_d2h {
                let to = match capture::async_host_rows(f, raw) {
                    Some((_, c)) => Some(Target::Rows(c)),
                    None => copies::host_buffer(f, raw).map(|(h, n)| Target::Buffer(h, n)),
                };
                to.map(|t| (t, streams::captured(f, raw)))
            } else {
                None
            };
            let (st, seq) = session::push(slot, f, args, results, target);
            if let (Some(seq), 0, true) = (seq, st, hostfn::registers(f)) {
                // SAFETY: the program's arguments to the call, which succeeded.
                unsafe { hostcalls::registered(f, raw, seq) };
            }
            if let (Some(seq), 0, Some((src, len))) = (seq, st, late) {
                hostfn::late_read(seq, src, len, raw[3]);
            }
            if let (Some(seq), 0, Some(c)) = (seq, st, node_src) {
                hostcalls::late_rows(seq, c);
            }
            match seq {
                // The driver checks the call when it is made (a code image's PTX, code for
                // another GPU, a limit) or synchronizes there: it waits for the server's status.
                Some(seq) if st == 0 && f.checked => {
                    let st = session::settle(seq, f, raw);
                    if st != 0 && f.name == "cuGraphExecUpdate" {
                        // SAFETY: the program's out-pointers for the update's result.
                        unsafe { local::graph_update_failed(f, raw) };
                    }
                    (st, Some(seq))
                }
                _ => (st, seq),
            }
        }
        Next::Wait => {
            if args.is_empty() && !f.args.is_empty() {
                // A query answered locally when it can be, sent when it cannot.
                // SAFETY: the program's arguments, unchanged so far.
                args = unsafe { capture::inputs(f, raw) };
                route::localize(f, &mut args);
            }
            // SAFETY: forwarded from the caller.
            let (st, seq) = unsafe { session::wait(slot, f, raw, args) };
            if let (Some(op), 0) = (s.arena, st) {
                // Pending asynchronous frees are released at synchronizations.
                // SAFETY: forwarded from the caller.
                unsafe { arena::after(op, raw, s.per_thread, st) };
            }
            (st, seq)
        }
    };
    // What the program's other processes see of this call (`ipc.rs`).
    let st = ipc::after(f, raw, st);
    if st == 0 {
        // SAFETY: the program's out-pointers, written by the call that succeeded.
        unsafe { route::created(f, raw) };
    }
    if tracing {
        let results = traced.unwrap_or_else(|| unsafe { capture::outputs(f, raw, st) });
        let mut rec = session::record(slot, f, seq.unwrap_or_else(state::next_seq), kept, results);
        rec.status = st as i32;
        // An async copy to the host waits, as in a local recording, for the synchronization
        // that covers it: its bytes have come back by then (`apply`), and are hashed.
        if st == 0 && capture::deferred_call(f, raw, &rec.args) {
            crate::pending::defer(f, raw, rec);
        } else {
            crate::batches::emit(rec);
        }
        if st == 0 && s.completes {
            crate::pending::after(f, raw);
        }
        if s.waits || f.sync == SyncClass::DeviceToHost {
            crate::lane::with(crate::batches::flush_thread);
        }
    }
    st
}

/// `cuMemImportFromShareableHandle(handle*, osHandle, type)` ([`Step::Import`]): a descriptor
/// this process exported ([`vmm::import_source`]) becomes a new handle of the same memory, told
/// to the executor of the server that holds it.
///
/// # Safety
/// `raw` are the program's arguments to `f`.
unsafe fn import(f: &ApiFunction, raw: &[u64]) -> u32 {
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    let out = w(0);
    let import = match vmm::import_source(f, out, w(1), w(2)) {
        Ok(import) => import,
        Err(st) => return st,
    };
    let h = handles::new_handle();
    let args = vec![Value::U64(h), Value::U64(import.source)];
    // The same memory, on the server that holds it (a session across several servers).
    let home = route::home(import.source);
    let _entered = home.map(|d| route::enter(route::split(d), false));
    if let Err(st) = session::tell(gpuless_traces::devices::MEM_IMPORT, args) {
        return st;
    }
    if let Some(d) = home {
        route::set_home(h, d);
    }
    // SAFETY: the program's out-pointer (checked non-null).
    unsafe { vmm::imported(h, import, out) };
    0
}
