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

use cudarc::driver::sys;
use gpuless_traces::Value;

use super::args::Call;
use super::State;

/// Names the executor gives nodes the client has no handle for: above every canonical user
/// address, so never a driver's handle or a client number.
const SERVER_NAMES: u64 = 0x7ffe_0000_0000_0000;

/// The client's names of live nodes: the lowest handle each is known under, and new server
/// names for the others (built once per answer: a graph may have thousands of nodes).
struct Names {
    known: std::collections::HashMap<sys::CUgraphNode, u64>,
}

impl Names {
    fn of(st: &State) -> Names {
        let mut known: std::collections::HashMap<sys::CUgraphNode, u64> = std::collections::HashMap::new();
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
        let start = SERVER_NAMES + 0x10 * (st.objects.nodes.len() as u64 + 1);
        let k = (start..).step_by(0x10).find(|k| !st.objects.nodes.contains_key(k)).unwrap_or(start);
        st.objects.nodes.insert(k, live);
        self.known.insert(live, k);
        k
    }
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
            "cuGraphNodeGetType" => {
                let Ok(node) = c.word("hNode").and_then(|h| st.node(c, h)) else { return Some((BAD, Vec::new())) };
                let mut t = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
                let r = sys::cuGraphNodeGetType(node, &mut t);
                (r, vec![t as u32 as u64])
            }
            _ => return None,
        }
    };
    Some((r.0 as i32, r.1))
}
