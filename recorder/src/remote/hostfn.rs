//! Host functions in client mode (`cuLaunchHostFunc`, `cuStreamAddCallback`, graph host nodes
//! added directly or captured from a stream): the books — what each registered, the streams and
//! graph nodes a copy from pinned memory must wait behind, the late reads — that the runner
//! (`hostcalls.rs`, which runs the program's functions when the server calls them) takes from.
//!
//! The record that registers one goes to the server like any other; its sequence number is the
//! function's id ([`registered`]). A copy from pinned memory queued behind a host function that
//! has not run reads its source late ([`reads_late`], [`late_read`], [`late_rows`]): when the
//! function returned, or at every launch of its graph. A host function that calls CUDA gets
//! `CUDA_ERROR_NOT_PERMITTED`, as the driver answers ([`in_host_function`]).

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex};

use gpuless_analyzer::api::ApiFunction;

use super::{host, streams};

/// `CUDA_ERROR_NOT_PERMITTED`.
pub(crate) const NOT_PERMITTED: u32 = 800;
/// `CU_GRAPH_NODE_TYPE_HOST`.
const NODE_TYPE_HOST: u32 = 3;
/// Where `CUgraphNodeParams`' union starts.
const NODE_MEMBER_AT: u64 = 16;

/// How the program's function is called.
#[derive(Clone, Copy)]
pub(crate) enum Form {
    /// `void (*)(void *userData)`: `cuLaunchHostFunc`, host nodes.
    HostFn,
    /// `void (*)(CUstream, CUresult, void *userData)`: `cuStreamAddCallback` on this stream.
    Callback { stream: u64 },
    /// A late read: `len` bytes of pinned memory at `src`, read when the stream reaches the
    /// host-to-device copy that reads them ([`late_read`]).
    LateRead { src: u64, len: u64 },
    /// A late read of a graph memcpy node's host rows, at every launch.
    LateRows(gpuless_analyzer::api::structs::Copy),
}

/// What one call registered: the program's function and its data, or a late read.
#[derive(Clone, Copy)]
pub(crate) struct Registration {
    pub(crate) func: u64,
    pub(crate) user_data: u64,
    pub(crate) form: Form,
    /// Registered on this stream outside a capture: it runs once.
    stream: Option<u64>,
    /// Part of a graph (captured): called at every launch.
    captured: bool,
}

/// Per stream, host functions registered outside a capture that have not run yet: a copy
/// from pinned memory queued behind one reads its source when the stream reaches it.
static WAITING: LazyLock<Mutex<HashMap<u64, usize>>> = LazyLock::new(Default::default);
/// Streams whose capture in progress has a host function: a copy from pinned memory captured
/// after it reads its source at every launch.
static CAPTURED: LazyLock<Mutex<std::collections::HashSet<u64>>> = LazyLock::new(Default::default);
/// Per capturing stream, the host function captured last (its id): late reads captured after
/// it are read when it returned, at every launch.
static LAST_CAPTURED: LazyLock<Mutex<HashMap<u64, u64>>> = LazyLock::new(Default::default);
/// A late read: (copy seq, source, length).
pub(crate) type LateRead = (u64, u64, u64);
/// Late reads attached to a host function (its id → its late reads).
static ATTACHED: LazyLock<Mutex<HashMap<u64, Vec<LateRead>>>> = LazyLock::new(Default::default);
/// Graph host nodes (the program's node handles): a memcpy node that depends on one reads its
/// host source at every launch.
static HOST_NODES: LazyLock<Mutex<std::collections::HashSet<u64>>> = LazyLock::new(Default::default);

/// Every host function registered, by id (a graph's host node is called at every launch, so
/// registrations stay).
static REGISTERED: LazyLock<Mutex<HashMap<u64, Registration>>> = LazyLock::new(Default::default);
/// The poller and the connection's handler are set up (at the first registration).
static STARTED: AtomicBool = AtomicBool::new(false);

thread_local! {
    static IN_HOST_FUNCTION: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is running one of the program's host functions (its CUDA calls are
/// not permitted).
pub(crate) fn in_host_function() -> bool {
    IN_HOST_FUNCTION.with(Cell::get)
}

/// The calling thread runs the program's host functions from now on (the runner's).
pub(crate) fn runs_host_functions() {
    IN_HOST_FUNCTION.with(|c| c.set(true));
}

/// Whether this is the first registration: the caller sets up the host calls' handler and
/// poller (`hostcalls.rs`).
pub(crate) fn first_start() -> bool {
    !STARTED.swap(true, Ordering::AcqRel)
}

/// A host function called CUDA: the driver's answer, said once.
pub(crate) fn refused_in_host_function(f: &ApiFunction) -> u32 {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        eprintln!(
            "gpuless: {} was called from a host function (cuLaunchHostFunc, cuStreamAddCallback, a host \
             node): CUDA_ERROR_NOT_PERMITTED, as the driver answers (host functions must not call CUDA)",
            f.name
        );
    }
    NOT_PERMITTED
}

/// Whether `f` registers a host function (its record's sequence number is the function's id).
pub(crate) fn registers(f: &ApiFunction) -> bool {
    matches!(f.name, "cuLaunchHostFunc" | "cuStreamAddCallback" | "cuGraphAddHostNode" | "cuGraphAddNode")
}

/// Notes the host function that call `f` (record `seq`, sent to the server) registered; whether
/// it registered one.
///
/// # Safety
/// `raw` are the program's arguments to `f`, which succeeded.
pub(crate) unsafe fn registered(f: &ApiFunction, raw: &[u64], seq: u64) -> bool {
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    // SAFETY (reads): the program's parameter structs, valid for the call.
    let once = (!streams::is_capturing(w(0))).then_some(w(0));
    let r = unsafe {
        match f.name {
            "cuLaunchHostFunc" => {
                Registration { func: w(1), user_data: w(2), form: Form::HostFn, stream: once, captured: once.is_none() }
            }
            "cuStreamAddCallback" => Registration {
                func: w(1),
                user_data: w(2),
                form: Form::Callback { stream: w(0) },
                stream: once,
                captured: once.is_none(),
            },
            "cuGraphAddHostNode" if w(4) != 0 => {
                let p = w(4) as *const u64;
                let (func, user_data) = (p.read_unaligned(), p.add(1).read_unaligned());
                Registration { func, user_data, form: Form::HostFn, stream: None, captured: true }
            }
            "cuGraphAddNode" => {
                // (phGraphNode, hGraph, dependencies, [dependencyData,] numDependencies, nodeParams)
                let p = raw.last().copied().unwrap_or(0);
                if p == 0 || (p as *const u32).read_unaligned() != NODE_TYPE_HOST {
                    return false;
                }
                let m = (p + NODE_MEMBER_AT) as *const u64;
                let (func, user_data) = (m.read_unaligned(), m.add(1).read_unaligned());
                Registration { func, user_data, form: Form::HostFn, stream: None, captured: true }
            }
            _ => return false,
        }
    };
    match (r.stream, f.name) {
        (Some(s), _) => *WAITING.lock().unwrap_or_else(|e| e.into_inner()).entry(s).or_insert(0) += 1,
        (None, "cuLaunchHostFunc" | "cuStreamAddCallback") => {
            CAPTURED.lock().unwrap_or_else(|e| e.into_inner()).insert(w(0));
            LAST_CAPTURED.lock().unwrap_or_else(|e| e.into_inner()).insert(w(0), seq);
        }
        // SAFETY: the node handle the call wrote.
        (None, _) if w(0) != 0 => {
            HOST_NODES.lock().unwrap_or_else(|e| e.into_inner()).insert(unsafe { *(w(0) as *const u64) });
        }
        _ => {}
    }
    REGISTERED.lock().unwrap_or_else(|e| e.into_inner()).insert(seq, r);
    true
}

/// Whether a host-to-device copy on `stream` from `src` reads its source late: pinned memory
/// (which the device reads when the copy runs) behind a host function of that stream that has
/// not run yet (which may write it).
/// Captured after a host function, it reads it at every launch of the graph.
pub(crate) fn reads_late(stream: u64, src: u64) -> bool {
    if !STARTED.load(Ordering::Acquire) {
        return false;
    }
    let behind = if streams::is_capturing(stream) {
        CAPTURED.lock().unwrap_or_else(|e| e.into_inner()).contains(&stream)
    } else {
        WAITING.lock().unwrap_or_else(|e| e.into_inner()).get(&stream).is_some_and(|&n| n > 0)
    };
    behind && host::is_pinned(src)
}

/// A stream begins a capture: host functions captured before belong to other graphs.
pub(crate) fn began_capture(stream: u64) {
    CAPTURED.lock().unwrap_or_else(|e| e.into_inner()).remove(&stream);
    LAST_CAPTURED.lock().unwrap_or_else(|e| e.into_inner()).remove(&stream);
}

/// Whether a graph node with these dependencies (the program's array of `n` handles) comes
/// after a host node: a memcpy node's host source is then read at every launch.
///
/// # Safety
/// `deps` is null or points at `n` node handles.
pub(crate) unsafe fn after_host_node(deps: u64, n: u64) -> bool {
    if deps == 0 || n == 0 || !STARTED.load(Ordering::Acquire) {
        return false;
    }
    // SAFETY: the caller's contract.
    let d = unsafe { std::slice::from_raw_parts(deps as *const u64, n.min(1 << 16) as usize) };
    let g = HOST_NODES.lock().unwrap_or_else(|e| e.into_inner());
    d.iter().any(|h| g.contains(h))
}

/// Notes the late reads of memcpy node `seq` (sent with its source as an address, not bytes):
/// the device reads host memory at every launch of the graph.
pub(crate) fn late_rows(seq: u64, c: gpuless_analyzer::api::structs::Copy) {
    let r = Registration { func: 0, user_data: 0, form: Form::LateRows(c), stream: None, captured: true };
    REGISTERED.lock().unwrap_or_else(|e| e.into_inner()).insert(seq, r);
}

/// Notes the late read of copy `seq` on `stream` (sent with its source as an address, not
/// bytes): captured after a host function, it is read when that function returned (the
/// executor attaches it there too); otherwise it is a host call of its own.
pub(crate) fn late_read(seq: u64, src: u64, len: u64, stream: u64) {
    let captured = streams::is_capturing(stream);
    if captured {
        if let Some(&f) = LAST_CAPTURED.lock().unwrap_or_else(|e| e.into_inner()).get(&stream) {
            ATTACHED.lock().unwrap_or_else(|e| e.into_inner()).entry(f).or_default().push((seq, src, len));
            return;
        }
    }
    let r = Registration { func: 0, user_data: 0, form: Form::LateRead { src, len }, stream: None, captured };
    REGISTERED.lock().unwrap_or_else(|e| e.into_inner()).insert(seq, r);
}

/// The registrations of host call `ids`, in order, each with the late reads attached to it; a
/// function registered outside a capture is called once: its stream no longer waits for it.
/// (Ids this client never registered are left out.)
pub(crate) fn due(ids: &[u64]) -> Vec<(u64, Registration, Vec<LateRead>)> {
    let attached = ATTACHED.lock().unwrap_or_else(|e| e.into_inner());
    let mut g = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
    let mut w = WAITING.lock().unwrap_or_else(|e| e.into_inner());
    ids.iter()
        .filter_map(|id| {
            let r = g.get(id).copied()?;
            if let Some(s) = r.stream {
                // Called once: its stream no longer waits for it.
                g.remove(id);
                if let Some(n) = w.get_mut(&s) {
                    *n = n.saturating_sub(1);
                }
            }
            if matches!(r.form, Form::LateRead { .. }) && !r.captured {
                g.remove(id);
            }
            Some((*id, r, attached.get(id).cloned().unwrap_or_default()))
        })
        .collect()
}
