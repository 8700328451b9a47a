//! `cuGraphAddNode`: a graph node described by the generic, tagged `CUgraphNodeParams`. The
//! recorder stores the union's bytes, followed by the member its type selects when that member
//! leads to more bytes (`gpuless_analyzer::api::structs::embedded`: a kernel node's parameters,
//! a copy's host source). Kernel, memcpy, memset, empty, event-record and event-wait nodes are
//! rebuilt with translated handles and addresses, as the dedicated add-node functions rebuild
//! theirs; other node types (host functions, child graphs, memory nodes, ...) are refused by
//! name.

use cudarc::driver::sys;
use gpuless_analyzer::api::structs::{
    conditional_bodies, Dims, MemsetNode, NodeType, NODE_COND_BODIES_AT, NODE_COND_CTX_AT, NODE_EVENT_AT,
    NODE_MEMBER_AT, NODE_MEMCPY_COPY_AT, NODE_MEMCPY_CTX_AT, NODE_MEMSET_CTX_AT, NODE_MEMSET_DST_AT, NODE_PARAMS_SIZE,
};
use gpuless_traces::Value;

use super::args::Call;
use super::dry_model::Model;
use super::exec_array::{self, aligned_struct, as_bytes};
use super::graph_nodes::{edge_data, kernel_node_ok, with_kernel_node};
use super::{check, LoadedTrace, ReplayError, Report, State};

/// The recorded `nodeParams`: the union's bytes and, for kernel and memcpy nodes, the member as
/// the recorder captured it.
fn parts<'a>(c: &Call<'a>) -> Result<(&'a [u8], Option<&'a Value>), String> {
    let (bytes, member) = match c.arg("nodeParams") {
        Some(Value::List(items)) => match items.first() {
            Some(Value::Bytes(b)) => (b.as_slice(), items.get(1)),
            other => return Err(format!("node parameters not recorded ({other:?})")),
        },
        Some(Value::Bytes(b)) => (b.as_slice(), None),
        other => return Err(format!("node parameters not recorded ({other:?})")),
    };
    if bytes.len() < NODE_PARAMS_SIZE {
        return Err(format!("node parameters hold {} bytes, CUgraphNodeParams has {NODE_PARAMS_SIZE}", bytes.len()));
    }
    Ok((bytes, member))
}

/// Why a node type cannot be replayed, or `None` when it can.
fn refusal(ty: NodeType) -> Option<String> {
    match ty {
        NodeType::Kernel
        | NodeType::Memcpy
        | NodeType::Memset
        | NodeType::Empty
        | NodeType::EventRecord
        | NodeType::WaitEvent
        | NodeType::Host
        | NodeType::Conditional => None,
        other => Some(format!(
            "adds a {} node; gpuless replays kernel, memcpy, memset, empty, event, host and conditional nodes only",
            other.name()
        )),
    }
}

/// The kernel member: as captured (`[struct, parameters, extra]`), else the union's bytes alone
/// (enough for a kernel without parameters; otherwise `node_args` reports them missing).
fn kernel_member(bytes: &[u8], member: Option<&Value>) -> Value {
    match member {
        Some(m @ Value::List(_)) => m.clone(),
        _ => Value::List(vec![Value::Bytes(bytes[NODE_MEMBER_AT..NODE_PARAMS_SIZE].to_vec())]),
    }
}

/// The memcpy member as `(CUDA_MEMCPY3D bytes, host source)`: as captured, else the struct
/// inside the union (enough for device and array sides).
fn memcpy_member<'a>(bytes: &'a [u8], member: Option<&'a Value>) -> (&'a [u8], Option<&'a Value>) {
    exec_array::copy_value(member)
        .unwrap_or((&bytes[NODE_MEMCPY_COPY_AT..NODE_MEMCPY_COPY_AT + Dims::Three.size()], None))
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    if let Some(w) = b.get_mut(at..at + 8) {
        w.copy_from_slice(&v.to_le_bytes());
    }
}

fn get_u64(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8).map_or(0, |w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
}

/// Replays `cuGraphAddNode` (both variants).
pub(super) fn add(st: &mut State, trace: &LoadedTrace, c: &Call<'_>, report: &mut Report) -> Result<(), ReplayError> {
    let (seq, name) = (c.rec.seq, c.f.name);
    let (bytes, member) = parts(c).map_err(|p| c.inconsistent(p))?;
    let ty = NodeType::of_params(bytes);
    if let Some(why) = refusal(ty) {
        return Err(ReplayError::Unsupported { seq, what: name.into(), problem: why });
    }
    let (g, deps) = (st.graph(c, "hGraph")?, st.dependencies(c)?);
    let edges = edge_data(c, deps.len())?;
    let mut buf = aligned_struct(bytes, NODE_PARAMS_SIZE);
    let mut node = std::ptr::null_mut();
    let mut bodies: Vec<sys::CUgraph> = Vec::new();
    // SAFETY (block): driver calls with live handles; `buf` is a CUgraphNodeParams-sized,
    // aligned copy of the recorded struct whose handles and addresses are rewritten to live
    // ones; everything it points to lives until the call returns (the driver copies it).
    unsafe {
        let mut ctx = std::ptr::null_mut();
        check(sys::cuCtxGetCurrent(&mut ctx), seq, "cuCtxGetCurrent")?;
        let mut add =
            |params: *mut u64| sys::cuGraphAddNode_v2(&mut node, g, deps.as_ptr(), edges, deps.len(), params.cast());
        let r = match ty {
            NodeType::Kernel => {
                let k = kernel_member(bytes, member);
                with_kernel_node(st, c, Some(&k), report, |p| {
                    let n = std::mem::size_of::<sys::CUDA_KERNEL_NODE_PARAMS>();
                    let b = as_bytes(&mut buf);
                    std::ptr::copy_nonoverlapping(p.cast::<u8>(), b[NODE_MEMBER_AT..].as_mut_ptr(), n);
                    add(buf.as_mut_ptr())
                })?
            }
            NodeType::Memcpy => {
                let copy =
                    exec_array::prepare_value(st, trace, c, memcpy_member(bytes, member), None, Dims::Three, true)?;
                let b = as_bytes(&mut buf);
                let n = Dims::Three.size();
                std::ptr::copy_nonoverlapping(copy.ptr().cast::<u8>(), b[NODE_MEMCPY_COPY_AT..].as_mut_ptr(), n);
                put_u64(b, NODE_MEMCPY_CTX_AT, ctx as u64);
                report.results_unverified += u64::from(copy.host_destination());
                add(buf.as_mut_ptr())
            }
            NodeType::Memset => {
                let b = as_bytes(&mut buf);
                put_u64(b, NODE_MEMSET_DST_AT, st.mem.translate(get_u64(b, NODE_MEMSET_DST_AT)));
                put_u64(b, NODE_MEMSET_CTX_AT, ctx as u64);
                add(buf.as_mut_ptr())
            }
            NodeType::EventRecord | NodeType::WaitEvent => {
                let b = as_bytes(&mut buf);
                let h = get_u64(b, NODE_EVENT_AT);
                let e = *st.events.get(&h).ok_or_else(|| c.inconsistent(format!("unknown event {h:#x}")))?;
                put_u64(b, NODE_EVENT_AT, e as u64);
                add(buf.as_mut_ptr())
            }
            NodeType::Host => {
                // The program's function and data: the client's, run through the session's
                // trampoline (a no-op in a local replay).
                let live = st.objects.graph_outputs.live(None, Some(c.word("hGraph")?));
                let (f, ud) = super::host_calls::host_function(st, seq, Vec::new(), &live);
                let b = as_bytes(&mut buf);
                put_u64(b, NODE_MEMBER_AT, f as usize as u64);
                put_u64(b, NODE_MEMBER_AT + 8, ud as u64);
                add(buf.as_mut_ptr())
            }
            NodeType::Conditional => {
                // The handle is the live one (a client's answer; a replay checked it); the
                // driver makes the body graphs, which the recorded ones map to.
                let b = as_bytes(&mut buf);
                let n = conditional_bodies(b).map_or(0, |(n, _)| n);
                bodies = vec![std::ptr::null_mut(); n.min(64)];
                // An output: the driver points it at an array of its own.
                put_u64(b, NODE_COND_BODIES_AT, 0);
                put_u64(b, NODE_COND_CTX_AT, ctx as u64);
                add(buf.as_mut_ptr())
            }
            _ => add(buf.as_mut_ptr()),
        };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(ReplayError::Driver { seq, what: format!("{name} ({} node)", ty.name()), code: r });
        }
    }
    st.objects.nodes.insert(c.out_word("phGraphNode")?, node);
    if ty == NodeType::Conditional {
        let Some(Value::List(recorded)) = c.rec.results.last() else {
            return Err(c.inconsistent("a conditional node's body graphs were not recorded".into()));
        };
        // The driver points `phGraph_out` at an array of its own (CUDA-owned).
        let arr = get_u64(as_bytes(&mut buf), NODE_COND_BODIES_AT);
        if arr == 0 {
            return Err(ReplayError::Driver {
                seq,
                what: format!("{name}: no body graphs"),
                code: sys::CUresult::CUDA_ERROR_UNKNOWN,
            });
        }
        let n = bodies.len();
        // SAFETY: the driver's array of the node's `n` body graphs.
        bodies.copy_from_slice(unsafe { std::slice::from_raw_parts(arr as *const sys::CUgraph, n) });
        for (r, &live) in recorded.iter().zip(&bodies) {
            if let Some(r) = super::args::word(r) {
                st.objects.graphs.insert(r, live);
            }
        }
    }
    Ok(())
}

/// The dry-run model of `cuGraphAddNode`'s node parameters (graph and dependencies are checked
/// by the caller).
pub(super) fn check_dry(m: &Model, trace: &LoadedTrace, c: &Call<'_>) -> Result<(), String> {
    let (bytes, member) = parts(c)?;
    let ty = NodeType::of_params(bytes);
    if let Some(why) = refusal(ty) {
        return Err(why);
    }
    match ty {
        NodeType::Kernel => kernel_node_ok(m, Some(&kernel_member(bytes, member))),
        NodeType::Memcpy => exec_array::copy_value_ok(m, trace, memcpy_member(bytes, member), None, Dims::Three),
        NodeType::Memset => {
            let s = MemsetNode::parse(bytes).ok_or("memset node parameters too short")?;
            let len = s.extent().ok_or("memset node extent overflows")?;
            if m.inside(s.dst, len) {
                Ok(())
            } else {
                Err(format!("memset node destination {:#x}..+{len} lies outside every live allocation", s.dst))
            }
        }
        NodeType::EventRecord | NodeType::WaitEvent => {
            let e = get_u64(bytes, NODE_EVENT_AT);
            if m.event_ok(e) {
                Ok(())
            } else {
                Err(format!("{} node uses unknown event {e:#x}", ty.name()))
            }
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use gpuless_analyzer::api::structs;

    use super::*;

    /// The offsets of `gpuless_analyzer::api::structs` agree with cudarc's `CUgraphNodeParams`.
    #[test]
    fn node_params_layout_matches_the_driver_struct() {
        use std::mem::{offset_of, size_of};
        type P = sys::CUgraphNodeParams;
        assert_eq!(size_of::<P>(), NODE_PARAMS_SIZE);
        assert_eq!(offset_of!(P, __bindgen_anon_1), NODE_MEMBER_AT);
        let m = NODE_MEMBER_AT;
        assert_eq!(m + offset_of!(sys::CUDA_MEMCPY_NODE_PARAMS, copyCtx), NODE_MEMCPY_CTX_AT);
        assert_eq!(m + offset_of!(sys::CUDA_MEMCPY_NODE_PARAMS, copyParams), NODE_MEMCPY_COPY_AT);
        type S = sys::CUDA_MEMSET_NODE_PARAMS_v2;
        assert_eq!(m + offset_of!(S, dst), NODE_MEMSET_DST_AT);
        assert_eq!(m + offset_of!(S, pitch), structs::NODE_MEMSET_PITCH_AT);
        assert_eq!(m + offset_of!(S, elementSize), structs::NODE_MEMSET_ELEMENT_SIZE_AT);
        assert_eq!(m + offset_of!(S, width), structs::NODE_MEMSET_WIDTH_AT);
        assert_eq!(m + offset_of!(S, height), structs::NODE_MEMSET_HEIGHT_AT);
        assert_eq!(m + offset_of!(S, ctx), NODE_MEMSET_CTX_AT);
        assert_eq!(m + offset_of!(sys::CUDA_EVENT_RECORD_NODE_PARAMS, event), NODE_EVENT_AT);
        // The kernel member (v3) has the layout of the v2 struct the replayer builds.
        type K3 = sys::CUDA_KERNEL_NODE_PARAMS_v3;
        type K2 = sys::CUDA_KERNEL_NODE_PARAMS;
        assert_eq!(size_of::<K3>(), size_of::<K2>());
        assert_eq!(offset_of!(K3, kernelParams), offset_of!(K2, kernelParams));
        assert_eq!(offset_of!(K3, kern), offset_of!(K2, kern));
        assert_eq!(offset_of!(K3, ctx), offset_of!(K2, ctx));
        assert_eq!(sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMSET as u32, 2);
        assert_eq!(sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EVENT_RECORD as u32, 7);
        assert_eq!(
            NodeType::from_u32(sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL as u32),
            NodeType::Conditional
        );
    }

    #[test]
    fn refusals_name_the_node_type() {
        assert!(refusal(NodeType::Kernel).is_none());
        assert!(refusal(NodeType::Host).is_none());
        assert!(refusal(NodeType::MemAlloc).is_some_and(|r| r.contains("memory allocation node")));
        assert!(refusal(NodeType::Other(77)).is_some_and(|r| r.contains("unknown type 77")));
    }
}
