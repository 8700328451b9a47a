//! Graph memory in client mode: what a graph's allocation nodes (`cuGraphAddMemAllocNode`) and
//! the stream-ordered allocations captured into a graph allocate.
//!
//! The client chooses every such address from the arena, as for any allocation; the executor
//! maps the memory there once and keeps it for every launch of every graph that allocates it
//! (`replay/exec.rs`, `graph_alloc`). So:
//! - a graph allocation's arena range is never given to another allocation; a free of it —
//!   a free node, a captured `cuMemFreeAsync`, or `cuMemFree`/`cuMemFreeAsync` outside any
//!   graph after a launch — succeeds and keeps it for the graph's next launch;
//! - an allocation node that depends on a free node of its own graph gets the freed address
//!   again (as the driver does: "the dependency between the allocation of d_b and the free of
//!   d_a allows d_b to reuse the same VA"); allocations of different graphs never share one;
//! - `cuDeviceGetGraphMemAttribute` answers from these books: memory in use is the sum of the
//!   allocations of the executable graphs launched and not destroyed; memory reserved is what
//!   was in use at most since the last `cuDeviceGraphMemTrim`. The driver's figures follow its
//!   physical-memory reuse between graphs, which the client does not model: the client's are
//!   zero exactly where the driver's are, and not smaller than what its graphs use.

use gpuless_analyzer::api::ApiFunction;

use super::step::Step;
use crate::arena;
use crate::graph_books::books;

const SUCCESS: u32 = 0;
const INVALID_VALUE: u32 = 1;
const OUT_OF_MEMORY: u32 = 2;

/// Offsets in `CUDA_MEM_ALLOC_NODE_PARAMS` (120 bytes): `bytesize` and the `dptr` the driver
/// writes.
const ALLOC_SIZE_AT: u64 = 104;
const ALLOC_DPTR_AT: u64 = 112;
/// `sizeof(CUDA_MEM_ALLOC_NODE_PARAMS)`.
const ALLOC_PARAMS_BYTES: usize = 120;

/// `cuGraphAddMemAllocNode`'s address (a freed one of the same graph the node depends on, else
/// a new arena range), written where the driver writes its own; `Err`: the call's status. The
/// node is then made as any handle (`local.rs`), and [`placed`] once it is.
///
/// # Safety
/// `raw` are the program's arguments to `cuGraphAddMemAllocNode`.
pub(crate) unsafe fn place(raw: &[u64]) -> Result<u64, u32> {
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    let (deps, n, p) = (w(2), w(3), w(4));
    // SAFETY: the program's CUDA_MEM_ALLOC_NODE_PARAMS, checked non-null.
    let size = if p == 0 { 0 } else { unsafe { std::ptr::read_unaligned((p + ALLOC_SIZE_AT) as *const u64) } };
    if size == 0 || (n != 0 && deps == 0) {
        return Err(INVALID_VALUE);
    }
    // SAFETY: the program's array of `n` dependencies (checked non-null when n > 0).
    let deps: &[u64] = if n == 0 { &[] } else { unsafe { std::slice::from_raw_parts(deps as *const u64, n as usize) } };
    let again = books(|b| {
        let hit = deps.iter().copied().find(|d| {
            !b.reused.contains(d) && b.free_nodes.get(d).is_some_and(|a| b.allocs.get(a).is_some_and(|&s| s >= size))
        })?;
        b.reused.insert(hit);
        b.free_nodes.get(&hit).copied()
    });
    let addr = match again {
        Some(a) => a,
        None => {
            let mut addr = 0u64;
            // SAFETY: a valid out-pointer and a size, as for cuMemAlloc.
            match unsafe { arena::before(arena::Op::Alloc, &[&mut addr as *mut u64 as u64, size], false) } {
                Some(SUCCESS) => {}
                Some(st) => return Err(st),
                None => return Err(OUT_OF_MEMORY),
            }
            books(|b| b.allocs.insert(addr, size));
            addr
        }
    };
    // SAFETY: as above; the address goes where the driver writes it.
    unsafe { std::ptr::write_unaligned((p + ALLOC_DPTR_AT) as *mut u64, addr) };
    Ok(addr)
}

/// The allocation node [`place`] placed at `addr` was made: noted for its graph, its
/// parameters kept for `cuGraphMemAllocNodeGetParams`.
///
/// # Safety
/// `raw` are the program's arguments to `cuGraphAddMemAllocNode`, which succeeded.
pub(crate) unsafe fn placed(raw: &[u64], addr: u64) {
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    let (graph, p) = (w(1), w(4));
    // SAFETY: the program's parameters (checked non-null) and the node handle just written.
    let (params, node) = unsafe {
        (
            std::slice::from_raw_parts(p as *const u8, ALLOC_PARAMS_BYTES).to_vec(),
            std::ptr::read_unaligned(w(0) as *const u64),
        )
    };
    books(|b| {
        b.graphs.entry(graph).or_default().push(addr);
        b.alloc_nodes.insert(node, params);
    });
}

/// `cuGraphMemAllocNodeGetParams` (`alloc`) and `cuGraphMemFreeNodeGetParams` of a node the
/// program made: its parameters, the address. A node the client does not know (one a capture
/// made) is asked of the server.
///
/// # Safety
/// `out` is the program's pointer to a `CUDA_MEM_ALLOC_NODE_PARAMS` (`alloc`) or a
/// `CUdeviceptr`.
pub(crate) unsafe fn node_params(alloc: bool, node: u64, out: u64) -> Step {
    if out == 0 {
        return Step::Done(INVALID_VALUE);
    }
    let known = books(|b| {
        if alloc {
            let p = b.alloc_nodes.get(&node)?;
            // SAFETY: the caller's contract.
            unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), out as *mut u8, p.len()) };
        } else {
            let a = *b.free_nodes.get(&node)?;
            // SAFETY: the caller's contract.
            unsafe { std::ptr::write_unaligned(out as *mut u64, a) };
        }
        Some(())
    });
    match known {
        Some(()) => Step::Done(SUCCESS),
        // A node a capture made: only the server has it (`replay/graph_answer.rs`).
        None => Step::Wait,
    }
}

/// Writes the server's answer to a memory node's parameter query (`node_params` of a node a
/// capture made): the `CUDA_MEM_ALLOC_NODE_PARAMS` as 15 words, or the address.
///
/// # Safety
/// `raw` are the program's arguments to `f`.
pub(crate) unsafe fn write_node_answer(f: &ApiFunction, raw: &[u64], values: &[u64]) {
    let out = raw.get(1).copied().unwrap_or(0);
    if out == 0 {
        return;
    }
    let n = if f.name == "cuGraphMemAllocNodeGetParams" { ALLOC_PARAMS_BYTES / 8 } else { 1 };
    for (k, &v) in values.iter().take(n).enumerate() {
        // SAFETY: the caller's out-pointer to `n` words.
        unsafe { std::ptr::write_unaligned((out as *mut u64).add(k), v) };
    }
}

/// `cuDeviceGetGraphMemAttribute` (`get`) and `cuDeviceSetGraphMemAttribute`: attribute `attr`
/// at `value` (a `cuuint64_t`).
///
/// # Safety
/// `value` is the program's pointer to 8 bytes (checked non-null).
pub(crate) unsafe fn attribute(get: bool, attr: u64, value: u64) -> Step {
    if value == 0 {
        return Step::Done(INVALID_VALUE);
    }
    books(|b| {
        b.account();
        let used = b.used();
        if get {
            let v = match attr {
                0 => used,            // CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT
                1 => b.used_high,     // CU_GRAPH_MEM_ATTR_USED_MEM_HIGH
                2 => b.reserved,      // CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT
                3 => b.reserved_high, // CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH
                _ => return Step::Done(INVALID_VALUE),
            };
            // SAFETY: the caller's contract.
            unsafe { std::ptr::write_unaligned(value as *mut u64, v) };
            return Step::Done(SUCCESS);
        }
        // Only the high-water marks may be set, and only to 0 (reset to the current value).
        // SAFETY: the caller's contract.
        let v = unsafe { std::ptr::read_unaligned(value as *const u64) };
        match attr {
            1 if v == 0 => b.used_high = used,
            3 if v == 0 => b.reserved_high = b.reserved,
            _ => return Step::Done(INVALID_VALUE),
        }
        Step::Done(SUCCESS)
    })
}

/// The books after a call that succeeded (on the client's side): free nodes, the graph a
/// capture made, executable graphs made, launched and destroyed, trims.
///
/// # Safety
/// `raw` are the program's arguments to `f`.
pub(crate) unsafe fn after(f: &ApiFunction, raw: &[u64]) {
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    // SAFETY: the program's out-pointer for a handle the call wrote (checked non-null).
    let out = |i: usize| if w(i) == 0 { 0 } else { unsafe { std::ptr::read_unaligned(w(i) as *const u64) } };
    match f.name {
        "cuGraphAddMemFreeNode" => books(|b| {
            let node = out(0);
            b.free_nodes.insert(node, w(4));
        }),
        "cuStreamEndCapture" => books(|b| {
            let taken = std::mem::take(&mut b.captured);
            if !taken.is_empty() {
                b.graphs.entry(out(1)).or_default().extend(taken);
            }
        }),
        "cuGraphInstantiate" | "cuGraphInstantiateWithFlags" | "cuGraphInstantiateWithParams" => books(|b| {
            if let Some(a) = b.graphs.get(&w(1)).cloned() {
                b.execs.insert(out(0), (a, false));
            }
        }),
        "cuGraphLaunch" => books(|b| {
            if let Some(e) = b.execs.get_mut(&w(0)) {
                e.1 = true;
                b.account();
            }
        }),
        "cuGraphExecDestroy" => books(|b| {
            b.account();
            b.execs.remove(&w(0));
        }),
        "cuDeviceGraphMemTrim" => books(|b| b.reserved = b.used()),
        _ => {}
    }
}
