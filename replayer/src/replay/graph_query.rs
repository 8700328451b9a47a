//! Graph queries whose answers are handles (issue 21): a program may build on the node handles
//! `cuGraphGetRootNodes`, `cuGraphGetEdges`, `cuGraphNodeGetDependencies`,
//! `cuGraphNodeGetDependentNodes` and `cuGraphNodeFindInClone` gave it, and on the function a
//! kernel node's parameters name (`cuGraphKernelNodeGetParams`). The replay asks the same of
//! its rebuilt graph and maps every recorded handle to the live one in the same place (the
//! driver lists nodes and edges in creation order, the same in a graph rebuilt call by call).

use cudarc::driver::sys;
use gpuless_traces::Value;

use super::args::Call;
use super::graph_nodes::recorded_nodes;
use super::{check, ReplayError, State};

/// Maps recorded node handles to live ones, position by position (null entries skipped).
fn map_nodes(st: &mut State, recorded: Vec<u64>, live: &[sys::CUgraphNode]) {
    for (r, &l) in recorded.into_iter().zip(live) {
        if r != 0 && !l.is_null() {
            st.objects.nodes.insert(r, l);
        }
    }
}

/// Executes one of the queries of this module; `Ok(false)` when only a count was asked for
/// (nothing to map).
///
/// # Safety
/// Driver calls with live handles translated from recorded ones and buffers sized here.
pub(super) unsafe fn call(st: &mut State, c: &Call<'_>) -> Result<bool, ReplayError> {
    let (seq, name) = (c.rec.seq, c.f.name);
    let null = std::ptr::null_mut::<sys::CUgraphNode_st>;
    let no_edges = std::ptr::null_mut::<sys::CUgraphEdgeData>;
    // SAFETY (whole match): as the function's contract says.
    unsafe {
        match name {
            "cuGraphGetRootNodes" => {
                let recorded = recorded_nodes(c.result("rootNodes"));
                if recorded.is_empty() {
                    return Ok(false);
                }
                let g = st.graph(c, "hGraph")?;
                let (mut live, mut n) = (vec![null(); recorded.len()], recorded.len());
                check(sys::cuGraphGetRootNodes(g, live.as_mut_ptr(), &mut n), seq, name)?;
                live.truncate(n);
                map_nodes(st, recorded, &live);
            }
            "cuGraphGetEdges" => {
                let (from, to) = (recorded_nodes(c.result("from")), recorded_nodes(c.result("to")));
                let len = from.len().max(to.len());
                if len == 0 {
                    return Ok(false);
                }
                let g = st.graph(c, "hGraph")?;
                let (mut lf, mut lt, mut n) = (vec![null(); len], vec![null(); len], len);
                check(sys::cuGraphGetEdges_v2(g, lf.as_mut_ptr(), lt.as_mut_ptr(), no_edges(), &mut n), seq, name)?;
                lf.truncate(n);
                lt.truncate(n);
                map_nodes(st, from, &lf);
                map_nodes(st, to, &lt);
            }
            "cuGraphNodeGetDependencies" | "cuGraphNodeGetDependentNodes" => {
                let arg = if name == "cuGraphNodeGetDependencies" { "dependencies" } else { "dependentNodes" };
                let recorded = recorded_nodes(c.result(arg));
                if recorded.is_empty() {
                    return Ok(false);
                }
                let node = st.node(c, c.word("hNode")?)?;
                let (mut live, mut n) = (vec![null(); recorded.len()], recorded.len());
                let r = if name == "cuGraphNodeGetDependencies" {
                    sys::cuGraphNodeGetDependencies_v2(node, live.as_mut_ptr(), no_edges(), &mut n)
                } else {
                    sys::cuGraphNodeGetDependentNodes_v2(node, live.as_mut_ptr(), no_edges(), &mut n)
                };
                check(r, seq, name)?;
                live.truncate(n);
                map_nodes(st, recorded, &live);
            }
            "cuGraphNodeFindInClone" => {
                // A client's question carries no answer: `graph_answer` names the node.
                let Some(recorded) = c.result("phNode").and_then(super::args::word) else { return Ok(false) };
                let original = st.node(c, c.word("hOriginalNode")?)?;
                let clone = st.graph(c, "hClonedGraph")?;
                let mut n = null();
                check(sys::cuGraphNodeFindInClone(&mut n, original, clone), seq, name)?;
                st.objects.nodes.insert(recorded, n);
            }
            "cuGraphKernelNodeGetParams" => {
                // The function the parameters name (first field): the program may pass it back
                // in new parameters. Map it when the replay does not know it yet.
                let Some(Value::Bytes(b)) = c.result("nodeParams") else { return Ok(false) };
                let recorded = b.get(..8).map_or(0, |w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])));
                if recorded == 0 || st.function(recorded).is_some() {
                    return Ok(false);
                }
                let node = st.node(c, c.word("hNode")?)?;
                let mut p: sys::CUDA_KERNEL_NODE_PARAMS = std::mem::zeroed();
                check(sys::cuGraphKernelNodeGetParams_v2(node, &mut p), seq, name)?;
                if !p.func.is_null() {
                    st.functions.insert(recorded, p.func);
                }
            }
            _ => return Ok(false),
        }
    }
    Ok(true)
}
