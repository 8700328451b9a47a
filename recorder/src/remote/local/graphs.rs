//! Graphs in the client's local answers: a graph update the server's driver refused, as the
//! program's out-arguments say it; conditional nodes' body graphs; graph memory's calls; the
//! server's answer about a capture in progress.

use std::collections::HashMap;
use std::sync::Mutex;

use gpuless_analyzer::api::ApiFunction;

use crate::remote::graph_mem;
use crate::remote::handles::new_handle;
use crate::remote::step::{put, Step};
use crate::remote::streams;

const INVALID_VALUE: u32 = 1;

/// `cuGraphExecUpdate`'s result after the server's driver refused the update:
/// `CU_GRAPH_EXEC_UPDATE_ERROR` (the driver's reason stays in the server's log).
///
/// # Safety
/// `raw` are the program's arguments to `f` (a `cuGraphExecUpdate` variant).
pub(crate) unsafe fn graph_update_failed(f: &ApiFunction, raw: &[u64]) {
    const UPDATE_ERROR: u64 = 1;
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    // SAFETY: as `state_change` writes them: v2 a `CUgraphExecUpdateResultInfo` (its result
    // first), v1 a node handle and a result enum.
    unsafe {
        if f.args.iter().any(|a| a.name == "resultInfo") {
            if w(2) != 0 {
                std::ptr::write_unaligned(w(2) as *mut u32, UPDATE_ERROR as u32);
            }
        } else {
            put(f, raw, 3, UPDATE_ERROR);
        }
    }
}

/// `cuGraphAddNode` of a conditional node: its body graphs are client handles in an array of
/// the client's, which `phGraph_out` (an output, as the driver fills it: a CUDA-owned array
/// valid for the node's lifetime) is pointed at; the executor maps them to the graphs its driver
/// made (`capture::conditional_bodies` carries them in the record). `Ok`: the bodies are placed,
/// the node is then made as any handle; `Err`: the status. `None` for any other call.
///
/// # Safety
/// `raw` are the program's arguments to `f`.
pub(super) unsafe fn conditional_node(f: &ApiFunction, raw: &[u64]) -> Option<Result<(), u32>> {
    use gpuless_analyzer::api::structs::{conditional_bodies, NODE_COND_BODIES_AT, NODE_PARAMS_SIZE};
    if f.name != "cuGraphAddNode" {
        return None;
    }
    let p = raw.get(f.args.iter().position(|a| a.name == "nodeParams")?).copied().unwrap_or(0);
    if p == 0 {
        return None;
    }
    // SAFETY: the program's CUgraphNodeParams.
    let b = unsafe { std::slice::from_raw_parts(p as *const u8, NODE_PARAMS_SIZE) };
    let (n, _) = conditional_bodies(b)?;
    if n == 0 || n > 64 {
        return Some(Err(INVALID_VALUE));
    }
    // Lives as long as the node may (the driver's array does too): a few words a node.
    let bodies: &'static mut [u64] = Box::leak((0..n).map(|_| new_handle()).collect());
    // SAFETY: the program's (writable) CUgraphNodeParams: `phGraph_out` is where the driver
    // writes its array's address.
    unsafe { std::ptr::write_unaligned((p as usize + NODE_COND_BODIES_AT) as *mut u64, bodies.as_ptr() as u64) };
    Some(Ok(()))
}

/// Graph memory ([`graph_mem`]): the allocator's attributes and allocation and free nodes'
/// parameters (an allocation node is made by `run`). `None` for every other function.
///
/// # Safety
/// `raw` are the program's arguments to `f`.
pub(super) unsafe fn graph_memory(f: &ApiFunction, raw: &[u64]) -> Option<Step> {
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    // SAFETY (all arms): forwarded from the caller.
    unsafe {
        match f.name {
            "cuDeviceGetGraphMemAttribute" => Some(graph_mem::attribute(true, w(1), w(2))),
            "cuDeviceSetGraphMemAttribute" => Some(graph_mem::attribute(false, w(1), w(2))),
            "cuGraphMemAllocNodeGetParams" => Some(graph_mem::node_params(true, w(0), w(1))),
            "cuGraphMemFreeNodeGetParams" => Some(graph_mem::node_params(false, w(0), w(1))),
            _ => None,
        }
    }
}

/// Writes the server's answer to `cuStreamGetCaptureInfo` for the graph and dependencies of a
/// capture in progress (`values`: status, graph, count, the dependencies): the dependency
/// array (and default edges) live here until the next such answer for the stream, as the
/// driver's do until the next call on it.
///
/// # Safety
/// `raw` are the program's arguments to `f`.
pub(crate) unsafe fn write_capture_info(f: &ApiFunction, raw: &[u64], values: &[u64]) {
    /// A stream's dependency array and its default edges.
    type Kept = (Box<[u64]>, Box<[u64]>);
    static ARRAYS: Mutex<Option<HashMap<u64, Kept>>> = Mutex::new(None);
    let at = |name: &str| f.args.iter().position(|a| a.name == name).map_or(0, |i| raw.get(i).copied().unwrap_or(0));
    let (status, graph, n) = (
        values.first().copied().unwrap_or(0),
        values.get(1).copied().unwrap_or(0),
        values.get(2).copied().unwrap_or(0),
    );
    let deps: Box<[u64]> = values.iter().skip(3).take(n as usize).copied().collect();
    let edges: Box<[u64]> = vec![0u64; deps.len()].into_boxed_slice(); // CUgraphEdgeData: 8 bytes
    let stream = raw.first().copied().unwrap_or(0);
    let mut g = ARRAYS.lock().unwrap_or_else(|e| e.into_inner());
    let kept = g.get_or_insert_with(HashMap::new).entry(stream).or_default();
    *kept = (deps, edges);
    // SAFETY (block): the program's out-pointers, each checked non-null.
    unsafe {
        let put32 = |p: u64, v: u64| {
            if p != 0 {
                std::ptr::write_unaligned(p as *mut u32, v as u32)
            }
        };
        let put64 = |p: u64, v: u64| {
            if p != 0 {
                std::ptr::write_unaligned(p as *mut u64, v)
            }
        };
        put32(at("captureStatus_out"), status);
        put64(at("id_out"), streams::with(|c| c.capture_ids.get(&stream).copied().unwrap_or(0)));
        put64(at("graph_out"), graph);
        put64(at("dependencies_out"), if kept.0.is_empty() { 0 } else { kept.0.as_ptr() as u64 });
        put64(at("edgeData_out"), if kept.1.is_empty() { 0 } else { kept.1.as_ptr() as u64 });
        put64(at("numDependencies_out"), kept.0.len() as u64);
    }
}
