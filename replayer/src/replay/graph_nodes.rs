//! A graph's recorded nodes, shared by the graph executors (`exec_graph`, `exec_node`,
//! `graph_query`, `graph_answer`): State's lookups of live graphs, executable graphs and nodes,
//! recorded dependency lists and edge data, and a kernel node's recorded parameters made live
//! (`with_kernel_node`), with their dry-run checks.

use std::ffi::c_void;

use cudarc::driver::sys;
use gpuless_analyzer::api::structs::KernelNode;
use gpuless_analyzer::api::HandleKind;
use gpuless_traces::Value;

use super::args::{word, Call};
use super::dry_model::Model;
use super::launch::translated;
use super::{ReplayError, Report, State};

/// A kernel node's recorded parameters: the struct, the packed parameters and their layout,
/// the packed `extra` buffer.
struct NodeArgs<'a> {
    node: KernelNode,
    params: &'a [u8],
    layout: &'a [(u32, u32)],
    extra: Option<&'a [u8]>,
}

/// The parts of a recorded `CUDA_KERNEL_NODE_PARAMS` argument (`[struct, parameters, extra]`).
fn node_args(v: Option<&Value>) -> Result<NodeArgs<'_>, String> {
    let items = match v {
        Some(Value::List(items)) => items.as_slice(),
        Some(Value::Bytes(_)) => {
            return Err("kernel node parameters were not recorded (trace from a recorder before graph support)".into())
        }
        other => return Err(format!("kernel node parameters not recorded ({other:?})")),
    };
    let node = match items.first() {
        Some(Value::Bytes(b)) => KernelNode::parse(b).ok_or("kernel node struct too short")?,
        _ => return Err("kernel node struct not recorded".into()),
    };
    let (params, layout): (&[u8], &[(u32, u32)]) = match items.get(1) {
        Some(Value::KernelParams(kp)) => (&kp.bytes, &kp.layout),
        Some(Value::Null) | None => (&[], &[]),
        Some(other) => return Err(format!("kernel node parameters not recorded ({other:?})")),
    };
    let extra = match items.get(2) {
        Some(Value::Bytes(b)) => Some(b.as_slice()),
        _ => None,
    };
    if node.kernel_params != 0 && layout.is_empty() && params.is_empty() && extra.is_none() {
        return Err("kernel node parameters were not recorded".into());
    }
    Ok(NodeArgs { node, params, layout, extra })
}

/// The node handles of a recorded node list (8 bytes each).
pub(super) fn recorded_nodes(v: Option<&Value>) -> Vec<u64> {
    match v {
        Some(Value::Bytes(b)) => {
            b.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8]))).collect()
        }
        _ => Vec::new(),
    }
}

impl State {
    pub(super) fn graph(&self, c: &Call<'_>, arg: &str) -> Result<sys::CUgraph, ReplayError> {
        let h = c.word(arg)?;
        self.objects.graphs.get(&h).copied().ok_or_else(|| c.inconsistent(format!("unknown graph {h:#x}")))
    }

    pub(super) fn exec(&self, c: &Call<'_>) -> Result<sys::CUgraphExec, ReplayError> {
        let h = c.word("hGraphExec")?;
        self.objects.execs.get(&h).copied().ok_or_else(|| c.inconsistent(format!("unknown executable graph {h:#x}")))
    }

    pub(super) fn node(&self, c: &Call<'_>, h: u64) -> Result<sys::CUgraphNode, ReplayError> {
        self.objects.nodes.get(&h).copied().ok_or_else(|| c.inconsistent(format!("unknown graph node {h:#x}")))
    }

    /// The live nodes of a recorded dependency list.
    pub(super) fn dependencies(&self, c: &Call<'_>) -> Result<Vec<sys::CUgraphNode>, ReplayError> {
        let n = c.arg("numDependencies").and_then(word).unwrap_or(0) as usize;
        let deps = recorded_nodes(c.arg("dependencies"));
        if deps.len() < n {
            return Err(c.inconsistent(format!("{n} dependencies, {} recorded", deps.len())));
        }
        deps[..n].iter().map(|&h| self.node(c, h)).collect()
    }
}

/// Calls `f` with a live `CUDA_KERNEL_NODE_PARAMS` (v2) for the recorded one, `v`.
pub(super) unsafe fn with_kernel_node(
    st: &State,
    c: &Call<'_>,
    v: Option<&Value>,
    report: &mut Report,
    f: impl FnOnce(*const sys::CUDA_KERNEL_NODE_PARAMS) -> sys::CUresult,
) -> Result<sys::CUresult, ReplayError> {
    let a = node_args(v).map_err(|p| c.inconsistent(p))?;
    let h = a.node.handle();
    // The live handle goes where the program put the recorded one (cudart passes a library
    // kernel as `func`, as it does to cuLaunchKernel; `kern` is read only when `func` is null).
    let live = st.function(h).ok_or_else(|| c.inconsistent(format!("kernel handle {h:#x} was never loaded")))?;
    let (func, kern) =
        if a.node.func != 0 { (live, std::ptr::null_mut()) } else { (std::ptr::null_mut(), live.cast()) };
    let bytes = translated(st, a.params, a.layout, report);
    let mut ptrs: Vec<*mut c_void> =
        a.layout.iter().map(|&(off, _)| bytes.as_ptr().wrapping_add(off as usize).cast_mut().cast()).collect();
    let packed = a.extra.map(|e| translated(st, e, &[], report));
    let mut packed_len = packed.as_ref().map_or(0, |p| p.len());
    // CU_LAUNCH_PARAM_BUFFER_POINTER (1), CU_LAUNCH_PARAM_BUFFER_SIZE (2), CU_LAUNCH_PARAM_END (0)
    let mut extra_list: [*mut c_void; 5] = [
        std::ptr::without_provenance_mut(1),
        packed.as_ref().map_or(std::ptr::null_mut(), |p| p.as_ptr().cast_mut().cast()),
        std::ptr::without_provenance_mut(2),
        (&mut packed_len as *mut usize).cast(),
        std::ptr::null_mut(),
    ];
    let k = a.node;
    let p = sys::CUDA_KERNEL_NODE_PARAMS {
        func,
        gridDimX: k.grid[0],
        gridDimY: k.grid[1],
        gridDimZ: k.grid[2],
        blockDimX: k.block[0],
        blockDimY: k.block[1],
        blockDimZ: k.block[2],
        sharedMemBytes: k.shared_mem,
        kernelParams: if ptrs.is_empty() { std::ptr::null_mut() } else { ptrs.as_mut_ptr() },
        extra: if packed.is_some() { extra_list.as_mut_ptr() } else { std::ptr::null_mut() },
        kern,
        ctx: std::ptr::null_mut(),
    };
    // The driver copies the parameters before returning.
    Ok(f(&p))
}

/// The recorded `dependencyData` of `n` dependencies (`CUgraphEdgeData`: 8 plain bytes each),
/// or null when the program passed none.
pub(super) fn edge_data(c: &Call<'_>, n: usize) -> Result<*const sys::CUgraphEdgeData, ReplayError> {
    const EDGE: usize = std::mem::size_of::<sys::CUgraphEdgeData>();
    match c.arg("dependencyData") {
        Some(Value::Bytes(b)) if b.len() >= n * EDGE => Ok(b.as_ptr().cast()),
        Some(Value::Bytes(b)) => Err(c.inconsistent(format!("{n} dependencies, edge data for {}", b.len() / EDGE))),
        _ => Ok(std::ptr::null()),
    }
}

/// The dry-run check of a recorded dependency list: every node known.
pub(super) fn deps_ok(m: &Model, c: &Call<'_>) -> Result<(), String> {
    let n = c.arg("numDependencies").and_then(word).unwrap_or(0) as usize;
    let d = recorded_nodes(c.arg("dependencies"));
    if d.len() < n {
        return Err(format!("{n} dependencies, {} recorded", d.len()));
    }
    match d[..n].iter().find(|&&h| !m.has(HandleKind::GraphNode, h)) {
        Some(h) => Err(format!("depends on unknown graph node {h:#x}")),
        None => Ok(()),
    }
}

/// The dry-run check of a kernel node's recorded parameters `v`.
pub(super) fn kernel_node_ok(m: &Model, v: Option<&Value>) -> Result<(), String> {
    let a = node_args(v)?;
    let h = a.node.handle();
    if !m.kernel_loaded(h) {
        return Err(format!("kernel node launches kernel handle {h:#x}, which was never loaded"));
    }
    Ok(())
}
