//! Graph copies that read host memory late (issue 35), the graph form of `late.rs`. A graph's
//! host-to-device copy from host memory reads its source when the launch reaches the node;
//! a host node before it (or a host function captured before a captured copy) may write that
//! memory at every launch. Recording, such copies are noted per graph:
//! - a memcpy node with a host source that depends on a host node (`cuGraphAddMemcpyNode`,
//!   `cuGraphAddNode` of a memcpy; the host node made by `cuGraphAddHostNode` or `cuGraphAddNode`);
//! - a `cuMemcpyHtoDAsync` captured after a host function captured on the same stream (the
//!   graph is known at `cuStreamEndCapture`).
//!
//! An executable graph instantiated from such a graph has them too. At its launch, a host
//! function of the recorder's queued after the launch on the same stream reads every such
//! source (what the copies read: the host nodes before them have run, and nothing of the
//! graph runs after the function); the launch's record waits (`pending.rs`) until a
//! synchronization guarantees the reads were taken, and then carries them as its result: a list
//! of `[seq of the copy's record, bytes]`. Replay writes those bytes where the node's copy reads
//! them before the launch (`replay/exec_graph.rs`).

use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys;
use gpuless_analyzer::api::structs::{Copy, Dims, NodeType, MEMORYTYPE_HOST, NODE_MEMCPY_COPY_AT, NODE_PARAMS_SIZE};
use gpuless_analyzer::api::ApiFunction;
use gpuless_traces::{BlobKind, CallRecord, Value};

/// A late copy: its record's seq and what it reads.
#[derive(Clone, Copy)]
struct LateCopy {
    seq: u64,
    copy: Copy,
}

#[derive(Default)]
struct Books {
    /// Host nodes the program made.
    host_nodes: HashSet<u64>,
    /// Late copies of each graph.
    graphs: HashMap<u64, Vec<LateCopy>>,
    /// Late copies of each executable graph.
    execs: HashMap<u64, Vec<LateCopy>>,
    /// Capturing streams with a host function captured, and the late copies captured after it.
    capturing: HashMap<u64, Vec<LateCopy>>,
}

static BOOKS: Mutex<Option<Books>> = Mutex::new(None);

fn books<R>(f: impl FnOnce(&mut Books) -> R) -> R {
    let mut g = BOOKS.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(Books::default))
}

fn capturing(stream: u64) -> bool {
    let Some(r) = crate::real::get() else { return false };
    let mut cap = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the program's stream; a valid out-pointer.
    let st = unsafe { (r.stream_is_capturing)(stream as sys::CUstream, &mut cap) };
    st == sys::CUresult::CUDA_SUCCESS && cap == sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE
}

/// A successful `cuLaunchHostFunc` / `cuStreamAddCallback` on `stream`: captured, copies from
/// host memory captured after it on that stream read late.
pub fn host_function(stream: u64) {
    if capturing(stream) {
        books(|b| {
            b.capturing.entry(stream).or_default();
        });
    }
}

/// The word of argument `name` of `f`.
fn arg(f: &ApiFunction, raw: &[u64], name: &str) -> u64 {
    f.args.iter().position(|a| a.name == name).and_then(|i| raw.get(i).copied()).unwrap_or(0)
}

/// Whether the program's dependency array (`n` handles at `deps`) holds a host node.
///
/// # Safety
/// `deps` is null or points at `n` node handles.
unsafe fn after_host_node(b: &Books, deps: u64, n: u64) -> bool {
    if deps == 0 || n == 0 || b.host_nodes.is_empty() {
        return false;
    }
    // SAFETY: the caller's contract.
    let d = unsafe { std::slice::from_raw_parts(deps as *const u64, n.min(1 << 16) as usize) };
    d.iter().any(|h| b.host_nodes.contains(h))
}

/// A contiguous host source of a copy struct's bytes (3D), or `None`.
///
/// # Safety
/// `p` points at a `CUDA_MEMCPY3D`.
unsafe fn host_source(p: u64) -> Option<Copy> {
    // SAFETY: the caller's contract.
    let b = unsafe { std::slice::from_raw_parts(p as *const u8, Dims::Three.size()) };
    let c = Copy::parse(Dims::Three, b)?;
    (c.src.memory_type == MEMORYTYPE_HOST && c.src.host != 0 && c.packed_len().is_some()).then_some(c)
}

/// After a successful call recorded as `seq`: the books of host nodes, late copies, graphs
/// and executable graphs. Recording only (a client reads late copies itself: `remote/hostfn.rs`).
///
/// # Safety
/// `raw` are the program's arguments to `f`.
pub unsafe fn after(f: &ApiFunction, raw: &[u64], seq: u64) {
    if crate::mode::active() {
        return;
    }
    // SAFETY: the out-pointer of a handle the call wrote (checked non-null).
    let out = |name: &str| match arg(f, raw, name) {
        0 => 0,
        p => unsafe { std::ptr::read_unaligned(p as *const u64) },
    };
    match f.name {
        "cuGraphAddHostNode" => books(|b| {
            b.host_nodes.insert(out("phGraphNode"));
        }),
        "cuGraphAddNode" | "cuGraphAddMemcpyNode" => {
            let (deps, n) = (arg(f, raw, "dependencies"), arg(f, raw, "numDependencies"));
            let copy = if f.name == "cuGraphAddNode" {
                let p = arg(f, raw, "nodeParams");
                if p == 0 {
                    return;
                }
                // SAFETY: the program's CUgraphNodeParams.
                let b = unsafe { std::slice::from_raw_parts(p as *const u8, NODE_PARAMS_SIZE) };
                match NodeType::of_params(b) {
                    NodeType::Host => {
                        books(|b| b.host_nodes.insert(out("phGraphNode")));
                        return;
                    }
                    // SAFETY: the memcpy member's CUDA_MEMCPY3D.
                    NodeType::Memcpy => unsafe { host_source(p + NODE_MEMCPY_COPY_AT as u64) },
                    _ => None,
                }
            } else {
                // SAFETY: the program's CUDA_MEMCPY3D (checked non-null).
                match arg(f, raw, "copyParams") {
                    0 => None,
                    p => unsafe { host_source(p) },
                }
            };
            let Some(copy) = copy else { return };
            let graph = arg(f, raw, "hGraph");
            books(|b| {
                // SAFETY: the program's dependency array.
                if unsafe { after_host_node(b, deps, n) } {
                    b.graphs.entry(graph).or_default().push(LateCopy { seq, copy });
                }
            });
        }
        "cuMemcpyHtoDAsync" => {
            let stream = arg(f, raw, "hStream");
            let (src, len) = (arg(f, raw, "srcHost"), arg(f, raw, "ByteCount"));
            books(|b| {
                if let Some(v) = b.capturing.get_mut(&stream) {
                    if src != 0 && len != 0 {
                        v.push(LateCopy { seq, copy: flat(src, len) });
                    }
                }
            });
        }
        "cuStreamEndCapture" => {
            let stream = arg(f, raw, "hStream");
            let graph = out("phGraph");
            books(|b| {
                if let Some(v) = b.capturing.remove(&stream).filter(|v| !v.is_empty()) {
                    b.graphs.entry(graph).or_default().extend(v);
                }
            });
        }
        "cuGraphInstantiate" | "cuGraphInstantiateWithFlags" | "cuGraphInstantiateWithParams" => {
            let (exec, graph) = (out("phGraphExec"), arg(f, raw, "hGraph"));
            books(|b| match b.graphs.get(&graph).cloned() {
                Some(v) => {
                    b.execs.insert(exec, v);
                }
                None => {
                    b.execs.remove(&exec);
                }
            });
        }
        _ => {}
    }
}

/// A successful `cuGraphExecDestroy` (recorded on any path): its late copies go.
pub fn exec_destroyed(exec: u64) {
    let mut g = BOOKS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(b) = g.as_mut() {
        b.execs.remove(&exec);
    }
}

/// A one-row copy of `len` bytes from host address `src`.
fn flat(src: u64, len: u64) -> Copy {
    let side = gpuless_analyzer::api::structs::Side {
        memory_type: MEMORYTYPE_HOST,
        host: src,
        device: 0,
        array: 0,
        x: 0,
        y: 0,
        z: 0,
        pitch: len,
        height: 1,
    };
    Copy { dims: Dims::Three, src: side, dst: side, width: len, height: 1, depth: 1 }
}

/// Whether a launch of `f` with `raw` has late copies (its record then goes the full way).
pub fn launches_late(f: &ApiFunction, raw: &[u64]) -> bool {
    f.name == "cuGraphLaunch"
        && !crate::mode::active()
        && BOOKS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|b| b.execs.contains_key(&raw.first().copied().unwrap_or(0)))
}

/// The reads one launch takes (the recorder's host function fills them).
struct Reads {
    copies: Vec<LateCopy>,
    bytes: Vec<Vec<u8>>,
}

unsafe extern "C" fn read_all(ud: *mut c_void) {
    // SAFETY: the `Reads` `after_launch` leaked for this host function, alive until the
    // launch's record is written after a synchronization (never freed if none comes).
    let r = unsafe { &mut *(ud as *mut Reads) };
    for (c, out) in r.copies.iter().zip(r.bytes.iter_mut()) {
        let w = c.copy.width as usize;
        for (k, row) in c.copy.rows(&c.copy.src).enumerate() {
            // SAFETY: the program's host source, `w` bytes a row, which its copy read too.
            unsafe { std::ptr::copy_nonoverlapping(row as *const u8, out.as_mut_ptr().add(k * w), w) };
        }
    }
}

/// A launch whose late copies are read after it (`Reads`, leaked until the record is written).
pub struct LateLaunch(usize);

/// After a successful `cuGraphLaunch` with late copies: queues the reads behind it on its
/// stream. `None` when there is nothing to read or the function cannot be queued.
///
/// # Safety
/// `raw` are the program's arguments to `cuGraphLaunch`.
pub unsafe fn after_launch(raw: &[u64]) -> Option<LateLaunch> {
    type LaunchHostFunc =
        unsafe extern "C" fn(sys::CUstream, Option<unsafe extern "C" fn(*mut c_void)>, *mut c_void) -> u32;
    static LAUNCH: OnceLock<Option<LaunchHostFunc>> = OnceLock::new();
    let (exec, stream) = (raw.first().copied()?, raw.get(1).copied().unwrap_or(0));
    let copies = books(|b| b.execs.get(&exec).cloned())?;
    let launch = (*LAUNCH.get_or_init(|| {
        let p = crate::driver::libcuda_symbol("cuLaunchHostFunc\0");
        // SAFETY: libcuda's export of this name has this C signature.
        (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, LaunchHostFunc>(p) })
    }))?;
    let bytes = copies.iter().map(|c| vec![0u8; c.copy.packed_len().unwrap_or(0) as usize]).collect();
    let reads = Box::into_raw(Box::new(Reads { copies, bytes }));
    // SAFETY: the program's stream; our function and its data, alive as said at `read_all`.
    if unsafe { launch(stream as sys::CUstream, Some(read_all), reads.cast()) } != 0 {
        // SAFETY: not queued: ours to free.
        drop(unsafe { Box::from_raw(reads) });
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            eprintln!(
                "gpuless: a graph launch's uploads behind host nodes could not be read (cuLaunchHostFunc failed): \
                 the recording keeps the bytes they had when the graph was built, and a replay may differ"
            )
        });
        return None;
    }
    Some(LateLaunch(reads as usize))
}

/// The launch's record, once a synchronization covered it (`complete`): its result is the
/// reads, `[seq, bytes]` a copy. Without one, the record has no reads (and they are never
/// freed: the function may still run).
pub fn finish(l: LateLaunch, record: &mut CallRecord, complete: bool) {
    if !complete {
        return;
    }
    // SAFETY: the `Reads` of `after_launch`; its host function ran before the synchronization.
    let r = unsafe { Box::from_raw(l.0 as *mut Reads) };
    let list = r
        .copies
        .iter()
        .zip(&r.bytes)
        .map(|(c, b)| Value::List(vec![Value::U64(c.seq), crate::sink::blob(BlobKind::HostToDevice, b)]))
        .collect();
    record.results.push(Value::List(list));
}
