//! Graph-structure queries answered for a client of `gpuless serve` (`gpu` in the API table):
//! the nodes of a graph, its roots and edges, a node's neighbours and type. The client cannot
//! know them (a captured graph's nodes exist only on the server), so it waits for these
//! answers. Nodes are named in the client's terms: the handle the client created a node under
//! where it did, else a name the executor gives the node now (the same one every time it is
//! asked, in a range no client or driver handle takes), which later records may use.
//!
//! The answer's values, in the order of the function's out arguments: each node array's
//! entries (as many as the program asked for; nulls as 0), edge data left out (the client
//! writes zeros: the default edge), then the count (or the handle, or the type).
//!
//! A kernel node's parameters (`cuGraphKernelNodeGetParams`) are the driver's answer with the
//! function and kernel named in the client's terms and the argument values read through the
//! driver's `kernelParams` (`gpuless_analyzer::api::node_answer`). The server is asked every
//! time, whoever made the node: only the driver knows a captured or cloned node's launch, and
//! what the program set may have been refused by the driver after the client returned.

use std::collections::HashMap;

use cudarc::driver::sys;
use gpuless_analyzer::api::node_answer::{KernelNodeAnswer, MAX_PARAM_BYTES};
use gpuless_analyzer::api::structs::KernelNode;
use gpuless_traces::Value;

use super::args::Call;
use super::State;

/// Names the executor gives nodes the client has no handle for: above every canonical user
/// address, so never a driver's handle or a client number.
const SERVER_NAMES: u64 = 0x7ffe_0000_0000_0000;
/// The same for functions (a kernel node's function the client never looked up).
const SERVER_FUNCTION_NAMES: u64 = 0x7ffd_0000_0000_0000;

/// A name from `base` on that `taken` does not hold.
fn fresh<V>(taken: &HashMap<u64, V>, base: u64) -> u64 {
    let start = base + 0x10 * (taken.len() as u64 + 1);
    (start..).step_by(0x10).find(|k| !taken.contains_key(k)).unwrap_or(start)
}

/// The lowest client handle under which `map` holds `live`.
fn client_name<V: PartialEq + Copy>(map: &HashMap<u64, V>, live: V) -> Option<u64> {
    map.iter().filter(|(_, &l)| l == live).map(|(&k, _)| k).min()
}

/// The client's names of live nodes: the lowest handle each is known under, and new server
/// names for the others (built once per answer: a graph may have thousands of nodes).
struct Names {
    known: HashMap<sys::CUgraphNode, u64>,
}

impl Names {
    fn of(st: &State) -> Names {
        let mut known: HashMap<sys::CUgraphNode, u64> = HashMap::new();
        for (&k, &l) in &st.objects.nodes {
            let e = known.entry(l).or_insert(k);
            *e = (*e).min(k);
        }
        Names { known }
    }

    /// The client's name for `live` (0 for null), naming it now if it has none.
    fn name(&mut self, st: &mut State, live: sys::CUgraphNode) -> u64 {
        if live.is_null() {
            return 0;
        }
        if let Some(&k) = self.known.get(&live) {
            return k;
        }
        let k = fresh(&st.objects.nodes, SERVER_NAMES);
        st.objects.nodes.insert(k, live);
        self.known.insert(live, k);
        k
    }
}

/// Names the executor gives graphs the client has no handle for (a capture's graph asked for
/// while it is captured).
const SERVER_GRAPH_NAMES: u64 = 0x7ffc_0000_0000_0000;

/// The client's name for live graph `g`: the lowest handle it is known under, else a new one.
fn graph_name(st: &mut State, g: sys::CUgraph) -> u64 {
    if let Some(k) = client_name(&st.objects.graphs, g) {
        return k;
    }
    let k = fresh(&st.objects.graphs, SERVER_GRAPH_NAMES);
    st.objects.graphs.insert(k, g);
    k
}

/// What the program asked for: its count (input of the `inout` count) and whether it passed
/// an array (`out` argument recorded as a host pointer).
fn asked(c: &Call<'_>, array: &str, count: &str) -> (usize, bool) {
    let n = c.word(count).unwrap_or(0) as usize;
    (n.min(1 << 20), matches!(c.arg(array), Some(Value::HostPtr(_))))
}

/// The answer to one graph query, or `None` when `c` is not one.
///
/// # Safety
/// Driver calls with handles translated from the client's.
pub(super) unsafe fn answer(st: &mut State, c: &Call<'_>) -> Option<(i32, Vec<u64>)> {
    const BAD: i32 = sys::CUresult::CUDA_ERROR_INVALID_HANDLE as i32;
    let null = std::ptr::null_mut::<sys::CUgraphNode_st>;
    let no_edges = std::ptr::null_mut::<sys::CUgraphEdgeData>;
    let mut names = Names::of(st);
    let mut name_all =
        |st: &mut State, live: &[sys::CUgraphNode]| live.iter().map(|&l| names.name(st, l)).collect::<Vec<u64>>();
    // SAFETY (whole match): the driver's queries with live handles and buffers sized here.
    let r = unsafe {
        match c.f.name {
            "cuGraphGetNodes" | "cuGraphGetRootNodes" => {
                let (arr, cnt) =
                    if c.f.name == "cuGraphGetNodes" { ("nodes", "numNodes") } else { ("rootNodes", "numRootNodes") };
                let Ok(g) = st.graph(c, "hGraph") else { return Some((BAD, Vec::new())) };
                let (want, with_array) = asked(c, arr, cnt);
                let mut live = vec![null(); if with_array { want } else { 0 }];
                let mut n = live.len();
                let p = if with_array { live.as_mut_ptr() } else { std::ptr::null_mut() };
                let r = if c.f.name == "cuGraphGetNodes" {
                    sys::cuGraphGetNodes(g, p, &mut n)
                } else {
                    sys::cuGraphGetRootNodes(g, p, &mut n)
                };
                let mut v = name_all(st, &live);
                v.push(n as u64);
                (r, v)
            }
            "cuGraphGetEdges" => {
                let Ok(g) = st.graph(c, "hGraph") else { return Some((BAD, Vec::new())) };
                let (want, with_from) = asked(c, "from", "numEdges");
                let with_to = matches!(c.arg("to"), Some(Value::HostPtr(_)));
                let k = if with_from || with_to { want } else { 0 };
                let (mut f, mut t, mut n) = (vec![null(); k], vec![null(); k], k);
                let (pf, pt) = if k == 0 {
                    (std::ptr::null_mut(), std::ptr::null_mut())
                } else {
                    (f.as_mut_ptr(), t.as_mut_ptr())
                };
                let r = sys::cuGraphGetEdges_v2(g, pf, pt, no_edges(), &mut n);
                let mut v = Vec::new();
                if with_from {
                    v.extend(name_all(st, &f));
                }
                if with_to {
                    v.extend(name_all(st, &t));
                }
                v.push(n as u64);
                (r, v)
            }
            "cuGraphNodeGetDependencies" | "cuGraphNodeGetDependentNodes" => {
                let (arr, cnt) = if c.f.name == "cuGraphNodeGetDependencies" {
                    ("dependencies", "numDependencies")
                } else {
                    ("dependentNodes", "numDependentNodes")
                };
                let Ok(node) = c.word("hNode").and_then(|h| st.node(c, h)) else { return Some((BAD, Vec::new())) };
                let (want, with_array) = asked(c, arr, cnt);
                let mut live = vec![null(); if with_array { want } else { 0 }];
                let mut n = live.len();
                let p = if with_array { live.as_mut_ptr() } else { std::ptr::null_mut() };
                let r = if c.f.name == "cuGraphNodeGetDependencies" {
                    sys::cuGraphNodeGetDependencies_v2(node, p, no_edges(), &mut n)
                } else {
                    sys::cuGraphNodeGetDependentNodes_v2(node, p, no_edges(), &mut n)
                };
                let mut v = name_all(st, &live);
                v.push(n as u64);
                (r, v)
            }
            "cuGraphNodeFindInClone" => {
                let Ok(orig) = c.word("hOriginalNode").and_then(|h| st.node(c, h)) else {
                    return Some((BAD, Vec::new()));
                };
                let Ok(g) = st.graph(c, "hClonedGraph") else { return Some((BAD, Vec::new())) };
                let mut found = null();
                let r = sys::cuGraphNodeFindInClone(&mut found, orig, g);
                (r, name_all(st, &[found]))
            }
            "cuGraphKernelNodeGetParams" => {
                let Ok(node) = c.word("hNode").and_then(|h| st.node(c, h)) else { return Some((BAD, Vec::new())) };
                kernel_node(st, node)
            }
            // A capture in progress, as a client asks it for the graph and its dependencies:
            // the capture's status, the graph (named in the client's terms), the count and the
            // dependencies (edge data left out: the client writes default edges).
            "cuStreamGetCaptureInfo" => {
                let Ok(s) = c.word("hStream").and_then(|h| st.stream(h)) else { return Some((BAD, Vec::new())) };
                let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
                let (mut id, mut g, mut n) = (0u64, std::ptr::null_mut(), 0usize);
                let (mut deps, mut edges) = (std::ptr::null(), std::ptr::null());
                let r = sys::cuStreamGetCaptureInfo_v3(s, &mut status, &mut id, &mut g, &mut deps, &mut edges, &mut n);
                let live: Vec<sys::CUgraphNode> =
                    if deps.is_null() { Vec::new() } else { std::slice::from_raw_parts(deps, n).to_vec() };
                let graph = if g.is_null() { 0 } else { graph_name(st, g) };
                let mut v = vec![status as u32 as u64, graph, live.len() as u64];
                v.extend(name_all(st, &live));
                (r, v)
            }
            "cuGraphNodeGetType" => {
                let Ok(node) = c.word("hNode").and_then(|h| st.node(c, h)) else { return Some((BAD, Vec::new())) };
                let mut t = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
                let r = sys::cuGraphNodeGetType(node, &mut t);
                // An empty node standing for a graph memory node is one to the program.
                if let Some(&(m, _, _)) = st.memory_nodes.get(&(node as usize)) {
                    t = m;
                }
                (r, vec![t as u32 as u64])
            }
            // A memory node the client has no books of (a capture made it): its parameters as
            // the driver answers them, from the recorded allocation (`CUDA_MEM_ALLOC_NODE_PARAMS`
            // as 15 words: pinned memory on device 0, no access descriptors, size, address).
            "cuGraphMemAllocNodeGetParams" | "cuGraphMemFreeNodeGetParams" => {
                let Ok(node) = c.word("hNode").and_then(|h| st.node(c, h)) else { return Some((BAD, Vec::new())) };
                const INVALID_VALUE: i32 = sys::CUresult::CUDA_ERROR_INVALID_VALUE as i32;
                let alloc = c.f.name == "cuGraphMemAllocNodeGetParams";
                return Some(match st.memory_nodes.get(&(node as usize)) {
                    Some(&(sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_ALLOC, dptr, size)) if alloc => {
                        let mut w = vec![0u64; 15];
                        // CUmemPoolProps: type PINNED (1), handleTypes 0, location {DEVICE (1), 0}.
                        w[0] = 1;
                        w[1] = 1;
                        (w[13], w[14]) = (size, dptr);
                        (0, w)
                    }
                    Some(&(sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_FREE, dptr, _)) if !alloc => (0, vec![dptr]),
                    _ => (INVALID_VALUE, Vec::new()),
                });
            }
            _ => return None,
        }
    };
    Some((r.0 as i32, r.1))
}

/// `cuGraphKernelNodeGetParams` of live node `node`: the status and the answer's words.
///
/// # Safety
/// A live node handle.
unsafe fn kernel_node(st: &mut State, node: sys::CUgraphNode) -> (sys::CUresult, Vec<u64>) {
    // SAFETY: the driver fills a v2 struct (every field the v1 call has, and more).
    let mut p: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
    let r = unsafe { sys::cuGraphKernelNodeGetParams_v2(node, &mut p) };
    if r != sys::CUresult::CUDA_SUCCESS {
        return (r, Vec::new());
    }
    // SAFETY: the function or kernel the driver just named.
    let layout = unsafe { param_layout(p.func, p.kern) };
    let len = layout.iter().map(|&(o, s)| o as usize + s as usize).max().unwrap_or(0);
    let mut params = vec![0u8; len];
    if !p.kernelParams.is_null() {
        for (i, &(off, size)) in layout.iter().enumerate() {
            // SAFETY: the driver's `kernelParams` holds one pointer per argument of the
            // function, each to a value of the argument's size (its own copy, alive while the
            // node is unchanged).
            unsafe {
                let v = *p.kernelParams.add(i);
                if !v.is_null() {
                    let to = params.as_mut_ptr().add(off as usize);
                    std::ptr::copy_nonoverlapping(v.cast::<u8>(), to, size as usize);
                }
            }
        }
    }
    let kern = if p.kern.is_null() { None } else { client_name(&st.kernels, p.kern) }.unwrap_or(0);
    let func = if p.func.is_null() {
        0
    } else if let Some(f) = client_name(&st.functions, p.func) {
        f
    } else if let Some(k) = client_name(&st.kernels, p.func.cast()) {
        k // the kernel itself, passed as a function
    } else {
        // The function the driver made of a kernel (a launch of a `CUkernel`, captured): the
        // client never looked it up. Named now, the same name every time it is asked, and
        // usable in the program's later calls (the client binds it to `kern`).
        let name = fresh(&st.functions, SERVER_FUNCTION_NAMES);
        st.functions.insert(name, p.func);
        if let Some(n) = st.names.get(&kern).cloned() {
            st.names.insert(name, n);
        }
        name
    };
    let node = KernelNode {
        func,
        kern,
        grid: [p.gridDimX, p.gridDimY, p.gridDimZ],
        block: [p.blockDimX, p.blockDimY, p.blockDimZ],
        shared_mem: p.sharedMemBytes,
        ..KernelNode::default()
    };
    (r, KernelNodeAnswer { node, layout, params }.to_words())
}

/// (offset, size) of each argument of a live function (else of the kernel): the driver's own
/// layout, asked until it says there are no more (at most [`MAX_PARAM_BYTES`] arguments).
///
/// # Safety
/// Live handles, or null.
unsafe fn param_layout(func: sys::CUfunction, kern: sys::CUkernel) -> Vec<(u32, u32)> {
    let mut layout = Vec::new();
    let mut total = 0usize;
    while layout.len() < MAX_PARAM_BYTES {
        let (mut off, mut size) = (0usize, 0usize);
        let i = layout.len();
        // SAFETY: the driver's queries with valid out-pointers.
        let r = unsafe {
            if !func.is_null() {
                sys::cuFuncGetParamInfo(func, i, &mut off, &mut size)
            } else if !kern.is_null() {
                sys::cuKernelGetParamInfo(kern, i, &mut off, &mut size)
            } else {
                break;
            }
        };
        total = total.max(off.saturating_add(size));
        if r != sys::CUresult::CUDA_SUCCESS || total > MAX_PARAM_BYTES {
            break;
        }
        layout.push((off as u32, size as u32));
    }
    layout
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_fresh_and_handles_found_by_their_lowest_name() {
        let mut m: HashMap<u64, u32> = HashMap::new();
        let a = fresh(&m, SERVER_FUNCTION_NAMES);
        m.insert(a, 7);
        let b = fresh(&m, SERVER_FUNCTION_NAMES);
        assert!(a != b && a > 0x0000_8000_0000_0000 && b % 0x10 == 0, "{a:#x} {b:#x}");
        m.insert(0x5000_0020, 7);
        m.insert(0x5000_0030, 8);
        assert_eq!(client_name(&m, 7), Some(0x5000_0020));
        assert_eq!(client_name(&m, 9), None);
    }
}
