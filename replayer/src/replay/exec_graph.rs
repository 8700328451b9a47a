//! CUDA graphs and stream capture at replay. Explicitly built graphs are rebuilt node by node
//! with translated handles (kernel nodes get their recorded parameter bytes, laid out like a
//! launch's); captured graphs are rebuilt by replaying the captured calls while the live
//! stream captures, so `cuStreamEndCapture` hands out the equivalent graph (into an existing
//! graph for `cuStreamBeginCaptureToGraph`). Recorded graph, node and executable-graph handles
//! map to live ones; `cuGraphAddNode`'s generic node parameters are in `exec_node.rs`.

/// `CUDA_MEM_ALLOC_NODE_PARAMS`: its size, and where `bytesize` and the `dptr` the driver (or
/// the client) wrote lie.
const MEM_ALLOC_NODE_BYTES: usize = 120;
const MEM_ALLOC_NODE_SIZE_AT: usize = 104;
const MEM_ALLOC_NODE_DPTR_AT: usize = 112;

use cudarc::driver::sys;
use gpuless_analyzer::api::structs::Dims;
use gpuless_analyzer::api::HandleKind;
use gpuless_traces::Value;

use super::args::{word, Call};
use super::dry_model::Model;
use super::exec_array;
use super::graph_nodes::{deps_ok, edge_data, kernel_node_ok, recorded_nodes, with_kernel_node};
use super::launch::launched;
use super::{check, LoadedTrace, ReplayError, Report, State};

/// `CUDA_MEMSET_NODE_PARAMS`: offset of `dst` and size.
const MEMSET_NODE_DST_AT: usize = 0;

fn capture_mode(mode: u64) -> sys::CUstreamCaptureMode {
    match mode {
        1 => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        2 => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        _ => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
    }
}

/// What a recorded launch's copies read late (the recorder's `late_graph.rs`: the launch's
/// result, `[seq of the copy's record, bytes]` a copy): written where each copy reads its
/// host source from, by a host function queued on the stream before the launch (launches
/// before it still read what they read).
///
/// # Safety
/// `stream` is a live stream.
unsafe fn late_sources(
    st: &mut State,
    trace: &LoadedTrace,
    c: &Call<'_>,
    stream: sys::CUstream,
) -> Result<(), ReplayError> {
    struct Writes(Vec<(*mut u8, usize, *const u8)>);
    unsafe extern "C" fn write(ud: *mut std::ffi::c_void) {
        // SAFETY: the `Writes` leaked below for this function; freed here, after its one run.
        let w = unsafe { Box::from_raw(ud as *mut Writes) };
        for &(dst, n, src) in &w.0 {
            // SAFETY: a staging buffer of `n` bytes and the trace's bytes (at least `n`).
            unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
        }
    }
    let Some(Value::List(reads)) = c.rec.results.first() else { return Ok(()) };
    let mut writes = Vec::new();
    for r in reads {
        let Value::List(pair) = r else { return Err(c.inconsistent("a late read is not [seq, bytes]".into())) };
        let (Some(copy), Some(bytes)) = (pair.first().and_then(word), pair.get(1)) else {
            return Err(c.inconsistent("a late read is not [seq, bytes]".into()));
        };
        let data = super::blobs::blob(trace, c, Some(bytes))?;
        let &(dst, n) = st
            .objects
            .staged
            .get(&copy)
            .ok_or_else(|| c.inconsistent(format!("a late read of call #{copy}, which staged no host source")))?;
        writes.push((dst, n.min(data.len()), data.as_ptr()));
    }
    if writes.is_empty() {
        return Ok(());
    }
    let ud = Box::into_raw(Box::new(Writes(writes)));
    // SAFETY: a live stream, our function and its data (freed by the function).
    let r = unsafe { sys::cuLaunchHostFunc(stream, Some(write), ud.cast()) };
    if r != sys::CUresult::CUDA_SUCCESS {
        // SAFETY: not queued: ours to free.
        drop(unsafe { Box::from_raw(ud) });
        return Err(ReplayError::Driver { seq: c.rec.seq, what: "cuLaunchHostFunc (late reads)".into(), code: r });
    }
    Ok(())
}

/// Executes a graph or capture record; `Ok(false)` when `c` is none of them.
pub(crate) fn call(
    st: &mut State,
    trace: &LoadedTrace,
    c: &Call<'_>,
    report: &mut Report,
) -> Result<bool, ReplayError> {
    let (seq, name) = (c.rec.seq, c.f.name);
    // SAFETY (whole match): driver calls with live handles translated from recorded ones and
    // structs built here, alive for the call.
    unsafe {
        match name {
            "cuGraphCreate" => {
                let mut g = std::ptr::null_mut();
                check(sys::cuGraphCreate(&mut g, c.word("flags")? as u32), seq, name)?;
                st.objects.graphs.insert(c.out_word("phGraph")?, g);
            }
            "cuGraphClone" => {
                let mut g = std::ptr::null_mut();
                check(sys::cuGraphClone(&mut g, st.graph(c, "originalGraph")?), seq, name)?;
                st.objects.graphs.insert(c.out_word("phGraphClone")?, g);
            }
            "cuGraphDestroy" => {
                if let Some(g) = st.objects.graphs.remove(&c.word("hGraph")?) {
                    sys::cuGraphDestroy(g);
                }
            }
            "cuGraphAddKernelNode" => {
                let (g, deps) = (st.graph(c, "hGraph")?, st.dependencies(c)?);
                let mut n = std::ptr::null_mut();
                let r = with_kernel_node(st, c, c.arg("nodeParams"), report, |p| {
                    sys::cuGraphAddKernelNode_v2(&mut n, g, deps.as_ptr(), deps.len(), p)
                })?;
                check(r, seq, name)?;
                st.objects.nodes.insert(c.out_word("phGraphNode")?, n);
            }
            "cuGraphKernelNodeSetParams" => {
                let n = st.node(c, c.word("hNode")?)?;
                let r =
                    with_kernel_node(st, c, c.arg("nodeParams"), report, |p| sys::cuGraphKernelNodeSetParams_v2(n, p))?;
                check(r, seq, name)?;
            }
            "cuGraphExecKernelNodeSetParams" => {
                let (e, n) = (st.exec(c)?, st.node(c, c.word("hNode")?)?);
                let r = with_kernel_node(st, c, c.arg("nodeParams"), report, |p| {
                    sys::cuGraphExecKernelNodeSetParams_v2(e, n, p)
                })?;
                check(r, seq, name)?;
            }
            "cuGraphAddMemcpyNode" => {
                let (g, mut deps) = (st.graph(c, "hGraph")?, st.dependencies(c)?);
                let copy = exec_array::prepare(st, trace, c, "copyParams", Dims::Three, true)?;
                let mut ctx = std::ptr::null_mut();
                check(sys::cuCtxGetCurrent(&mut ctx), seq, "cuCtxGetCurrent")?;
                if let (Some((staging, len)), Some(calls)) = (copy.late, st.host_calls.clone()) {
                    // Host memory read at every launch: a host node before the copy has the
                    // client read it into the staging buffer the copy reads.
                    let (f, ud) = calls.late_read(seq, staging, len);
                    let p = sys::CUDA_HOST_NODE_PARAMS { fn_: Some(f), userData: ud };
                    let mut h = std::ptr::null_mut();
                    check(sys::cuGraphAddHostNode(&mut h, g, deps.as_ptr(), deps.len(), &p), seq, name)?;
                    deps = vec![h];
                }
                let mut n = std::ptr::null_mut();
                let r = sys::cuGraphAddMemcpyNode(&mut n, g, deps.as_ptr(), deps.len(), copy.ptr().cast(), ctx);
                check(r, seq, name)?;
                report.results_unverified += u64::from(copy.host_destination());
                if let (Some((host, len)), true) = (copy.pinned_destination(), report.outputs.is_some()) {
                    // A client's session: the bytes go back after every launch, and with the
                    // host calls after the node.
                    let out = super::objects::GraphOutput { seq, what: name, host, len };
                    st.objects.graph_outputs.graphs.entry(c.word("hGraph")?).or_default().push(out);
                }
                st.objects.nodes.insert(c.out_word("phGraphNode")?, n);
            }
            "cuGraphAddMemsetNode" => {
                let (g, deps) = (st.graph(c, "hGraph")?, st.dependencies(c)?);
                let Some(Value::Bytes(b)) = c.arg("memsetParams") else { return Err(c.missing("memsetParams")) };
                let mut params = exec_array::aligned_struct(b, std::mem::size_of::<sys::CUDA_MEMSET_NODE_PARAMS>());
                let bytes = exec_array::as_bytes(&mut params);
                let dst =
                    u64::from_le_bytes(bytes[MEMSET_NODE_DST_AT..MEMSET_NODE_DST_AT + 8].try_into().unwrap_or([0; 8]));
                bytes[MEMSET_NODE_DST_AT..MEMSET_NODE_DST_AT + 8].copy_from_slice(&st.mem.translate(dst).to_le_bytes());
                let mut ctx = std::ptr::null_mut();
                check(sys::cuCtxGetCurrent(&mut ctx), seq, "cuCtxGetCurrent")?;
                let mut n = std::ptr::null_mut();
                let r = sys::cuGraphAddMemsetNode(&mut n, g, deps.as_ptr(), deps.len(), params.as_ptr().cast(), ctx);
                check(r, seq, name)?;
                st.objects.nodes.insert(c.out_word("phGraphNode")?, n);
            }
            // A host node runs the client's host function in a client's session, a no-op in a
            // local replay (`host_calls`), at every launch of the graph.
            "cuGraphAddHostNode" => {
                let (g, deps) = (st.graph(c, "hGraph")?, st.dependencies(c)?);
                let live = st.objects.graph_outputs.live(None, Some(c.word("hGraph")?));
                let (f, ud) = super::host_calls::host_function(st, seq, Vec::new(), &live);
                let p = sys::CUDA_HOST_NODE_PARAMS { fn_: Some(f), userData: ud };
                let mut n = std::ptr::null_mut();
                check(sys::cuGraphAddHostNode(&mut n, g, deps.as_ptr(), deps.len(), &p), seq, name)?;
                st.objects.nodes.insert(c.out_word("phGraphNode")?, n);
            }
            "cuGraphAddEmptyNode" => {
                let (g, deps) = (st.graph(c, "hGraph")?, st.dependencies(c)?);
                let mut n = std::ptr::null_mut();
                check(sys::cuGraphAddEmptyNode(&mut n, g, deps.as_ptr(), deps.len()), seq, name)?;
                st.objects.nodes.insert(c.out_word("phGraphNode")?, n);
            }
            // Graph memory: the allocation's memory is mapped at its address (the recording's,
            // or the one the client chose) now and kept for every launch; the nodes themselves
            // are empty nodes, so what depends on them still waits for them.
            "cuGraphAddMemAllocNode" | "cuGraphAddMemFreeNode" => {
                let mut what = (sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_FREE, 0, 0);
                if name == "cuGraphAddMemAllocNode" {
                    let p = match c.result("nodeParams") {
                        Some(Value::Bytes(b)) if b.len() >= MEM_ALLOC_NODE_BYTES => b,
                        _ => return Err(c.missing("nodeParams")),
                    };
                    let word = |at: usize| u64::from_le_bytes(p[at..at + 8].try_into().unwrap_or([0; 8]));
                    let (size, dptr) = (word(MEM_ALLOC_NODE_SIZE_AT), word(MEM_ALLOC_NODE_DPTR_AT));
                    super::allocs::graph_alloc(st, dptr, size, seq)?;
                    what = (sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_ALLOC, dptr, size);
                } else {
                    what.1 = c.word("dptr")?;
                }
                let (g, deps) = (st.graph(c, "hGraph")?, st.dependencies(c)?);
                let mut n = std::ptr::null_mut();
                check(sys::cuGraphAddEmptyNode(&mut n, g, deps.as_ptr(), deps.len()), seq, name)?;
                st.objects.nodes.insert(c.out_word("phGraphNode")?, n);
                st.memory_nodes.insert(n as usize, what);
            }
            "cuDeviceGraphMemTrim" => check(sys::cuDeviceGraphMemTrim(0), seq, name)?,
            // A conditional node's handle: created here; a client is answered with it (the
            // kernels that set it get it from the program). A replay needs the recorded value,
            // which the program's kernels carry in their parameters.
            "cuGraphConditionalHandleCreate" => {
                let g = st.graph(c, "hGraph")?;
                let mut ctx = std::ptr::null_mut();
                check(sys::cuCtxGetCurrent(&mut ctx), seq, "cuCtxGetCurrent")?;
                let mut h: sys::CUgraphConditionalHandle = 0;
                let (default, flags) = (c.word("defaultLaunchValue")? as u32, c.word("flags")? as u32);
                check(sys::cuGraphConditionalHandleCreate(&mut h, g, ctx, default, flags), seq, name)?;
                let recorded = c.result("pHandle_out").and_then(super::args::word).unwrap_or(0);
                if recorded != 0 && recorded != h {
                    return Err(c.inconsistent(format!(
                        "the driver gave conditional handle {h:#x} where the recording had {recorded:#x}: the kernels that \
                         set it carry the recorded value"
                    )));
                }
                st.conditionals.insert(seq, h);
            }
            "cuGraphGetNodes" => {
                // Nodes come back in creation order, the same in the rebuilt graph.
                let recorded = recorded_nodes(c.result("nodes"));
                if recorded.is_empty() {
                    return Ok(false); // only the count was asked for
                }
                let g = st.graph(c, "hGraph")?;
                let mut live = vec![std::ptr::null_mut(); recorded.len()];
                let mut n = live.len();
                check(sys::cuGraphGetNodes(g, live.as_mut_ptr(), &mut n), seq, name)?;
                for (r, l) in recorded.into_iter().zip(live).take(n) {
                    if r != 0 {
                        st.objects.nodes.insert(r, l);
                    }
                }
            }
            "cuGraphGetRootNodes"
            | "cuGraphGetEdges"
            | "cuGraphNodeGetDependencies"
            | "cuGraphNodeGetDependentNodes"
            | "cuGraphNodeFindInClone"
            | "cuGraphKernelNodeGetParams" => return super::graph_query::call(st, c),
            "cuGraphInstantiate" | "cuGraphInstantiateWithFlags" | "cuGraphInstantiateWithParams" => {
                let g = st.graph(c, "hGraph")?;
                let mut e = std::ptr::null_mut();
                let r = if name == "cuGraphInstantiateWithParams" {
                    let Some(Value::Bytes(b)) = c.arg("instantiateParams") else {
                        return Err(c.missing("instantiateParams"));
                    };
                    let word_at =
                        |i: usize| b.get(i..i + 8).map_or(0, |w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])));
                    let mut p: sys::CUDA_GRAPH_INSTANTIATE_PARAMS = std::mem::zeroed();
                    p.flags = word_at(0);
                    p.hUploadStream = st.stream(word_at(8))?;
                    sys::cuGraphInstantiateWithParams(&mut e, g, &mut p)
                } else {
                    let flags = c.arg("flags").and_then(word).unwrap_or(0);
                    sys::cuGraphInstantiateWithFlags(&mut e, g, flags)
                };
                check(r, seq, name)?;
                st.objects.execs.insert(c.out_word("phGraphExec")?, e);
                st.objects.graph_outputs.instantiated(c.word("hGraph")?, c.out_word("phGraphExec")?);
            }
            "cuGraphExecDestroy" => {
                if let Some(e) = st.objects.execs.remove(&c.word("hGraphExec")?) {
                    sys::cuGraphExecDestroy(e);
                }
            }
            "cuGraphUpload" => check(sys::cuGraphUpload(st.exec(c)?, st.stream(c.word("hStream")?)?), seq, name)?,
            "cuGraphLaunch" => {
                let rec_s = c.word("hStream")?;
                let live_stream = st.stream(rec_s)?;
                late_sources(st, trace, c, live_stream)?;
                check(sys::cuGraphLaunch(st.exec(c)?, live_stream), seq, name)?;
                launched(st, c.word("hGraphExec")?, report);
                // A client's captured device-to-host copies: their bytes go back at the
                // synchronization that covers this launch.
                if let Some(outs) = st.objects.graph_outputs.execs.get(&c.word("hGraphExec")?).cloned() {
                    for o in outs {
                        st.objects.defer(super::objects::Pending {
                            seq: o.seq,
                            what: o.what,
                            stream: rec_s,
                            live_stream,
                            host: o.host,
                            len: o.len,
                            want: None,
                        });
                    }
                }
            }
            "cuGraphAddNode" => super::exec_node::add(st, trace, c, report)?,
            "cuGraphExecUpdate" => {
                let (e, g) = (st.exec(c)?, st.graph(c, "hGraph")?);
                // Both variants update the same way; the bare one only reports less.
                let mut info: sys::CUgraphExecUpdateResultInfo = std::mem::zeroed();
                let r = sys::cuGraphExecUpdate_v2(e, g, &mut info);
                if r != sys::CUresult::CUDA_SUCCESS {
                    let what = format!("{name} (update result {:?}; it succeeded when recorded)", info.result);
                    return Err(ReplayError::Driver { seq, what, code: r });
                }
            }
            "cuStreamBeginCapture" | "cuStreamBeginCaptureToGraph"
                if st.captured_host_fn.contains_key(&c.word("hStream")?) =>
            {
                st.captured_host_fn.remove(&c.word("hStream")?);
                return call(st, trace, c, report);
            }
            "cuStreamBeginCapture" => {
                // The CUDA 10.0 form has no mode: it captured globally.
                let mode = if c.arg("mode").is_some() { capture_mode(c.word("mode")?) } else { capture_mode(0) };
                check(sys::cuStreamBeginCapture_v2(st.stream(c.word("hStream")?)?, mode), seq, name)?;
            }
            "cuStreamBeginCaptureToGraph" => {
                let (g, deps) = (st.graph(c, "hGraph")?, st.dependencies(c)?);
                let edges = edge_data(c, deps.len())?;
                let mode = capture_mode(c.word("mode")?);
                let s = st.stream(c.word("hStream")?)?;
                check(sys::cuStreamBeginCaptureToGraph(s, g, deps.as_ptr(), edges, deps.len(), mode), seq, name)?;
            }
            "cuStreamEndCapture" => {
                let mut g = std::ptr::null_mut();
                check(sys::cuStreamEndCapture(st.stream(c.word("hStream")?)?, &mut g), seq, name)?;
                // A capture into an existing graph may end without asking for it (a null
                // `phGraph`: nothing recorded); the graph is the program's already.
                if let Some(rec_g) = c.result("phGraph").and_then(word).filter(|&g| g != 0) {
                    st.objects.graphs.insert(rec_g, g);
                    st.objects.graph_outputs.captured(c.word("hStream")?, rec_g);
                }
            }
            // The program replaced the capture's dependencies (after adding nodes itself).
            "cuStreamUpdateCaptureDependencies" => {
                let s = st.stream(c.word("hStream")?)?;
                let mut deps = st.dependencies(c)?;
                let edges = edge_data(c, deps.len())?;
                let flags = c.word("flags")? as u32;
                check(
                    sys::cuStreamUpdateCaptureDependencies_v2(s, deps.as_mut_ptr(), edges, deps.len(), flags),
                    seq,
                    name,
                )?;
            }
            "cuStreamGetCaptureInfo" if c.result("graph_out").and_then(word).is_some_and(|g| g != 0) => {
                // The graph being captured, when the program asked for it: later calls may
                // add nodes to it.
                let rec_g = c.result("graph_out").and_then(word).unwrap_or(0);
                if !st.objects.graphs.contains_key(&rec_g) {
                    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
                    let (mut id, mut g, mut n) = (0u64, std::ptr::null_mut(), 0usize);
                    let (mut deps, mut edges) = (std::ptr::null(), std::ptr::null());
                    let s = st.stream(c.word("hStream")?)?;
                    let r =
                        sys::cuStreamGetCaptureInfo_v3(s, &mut status, &mut id, &mut g, &mut deps, &mut edges, &mut n);
                    check(r, seq, name)?;
                    st.objects.graphs.insert(rec_g, g);
                }
            }
            _ => return Ok(false),
        }
    }
    report.executed += 1;
    Ok(true)
}

/// The dry-run model of the calls above; `None` when `c` is none of them.
pub(crate) fn check_dry(m: &mut Model, trace: &LoadedTrace, c: &Call<'_>) -> Option<Result<(), String>> {
    use HandleKind::{Graph, GraphExec, GraphNode};
    let w = |n: &str| c.word(n).map_err(|e| e.to_string());
    let ow = |n: &str| c.out_word(n).map_err(|e| e.to_string());
    let deps = |m: &Model| deps_ok(m, c);
    let need = |m: &Model, k: HandleKind, arg: &str, what: &str| -> Result<(), String> {
        let h = w(arg)?;
        if m.has(k, h) {
            Ok(())
        } else {
            Err(format!("uses unknown {what} {h:#x}"))
        }
    };
    let r = (|| -> Option<Result<(), String>> {
        Some(match c.f.name {
            "cuGraphCreate" => ow("phGraph").map(|g| m.add(Graph, g)),
            "cuGraphClone" => {
                need(m, Graph, "originalGraph", "graph").and_then(|_| ow("phGraphClone")).map(|g| m.add(Graph, g))
            }
            "cuGraphDestroy" => {
                need(m, Graph, "hGraph", "graph").map(|_| m.remove(Graph, c.word("hGraph").unwrap_or(0)))
            }
            "cuGraphAddKernelNode" => need(m, Graph, "hGraph", "graph")
                .and_then(|_| deps(m))
                .and_then(|_| kernel_node_ok(m, c.arg("nodeParams")))
                .and_then(|_| ow("phGraphNode"))
                .map(|n| m.add(GraphNode, n)),
            "cuGraphKernelNodeSetParams" => {
                need(m, GraphNode, "hNode", "graph node").and_then(|_| kernel_node_ok(m, c.arg("nodeParams")))
            }
            "cuGraphExecKernelNodeSetParams" => need(m, GraphExec, "hGraphExec", "executable graph")
                .and_then(|_| need(m, GraphNode, "hNode", "graph node"))
                .and_then(|_| kernel_node_ok(m, c.arg("nodeParams"))),
            "cuGraphAddMemcpyNode" => need(m, Graph, "hGraph", "graph")
                .and_then(|_| deps(m))
                .and_then(|_| exec_array::copy_ok(m, trace, c, "copyParams", Dims::Three))
                .and_then(|_| ow("phGraphNode"))
                .map(|n| m.add(GraphNode, n)),
            "cuGraphAddMemsetNode"
            | "cuGraphAddEmptyNode"
            | "cuGraphAddHostNode"
            | "cuGraphAddMemAllocNode"
            | "cuGraphAddMemFreeNode" => need(m, Graph, "hGraph", "graph")
                .and_then(|_| deps(m))
                .and_then(|_| ow("phGraphNode"))
                .map(|n| m.add(GraphNode, n)),
            "cuGraphGetNodes" => need(m, Graph, "hGraph", "graph").map(|_| {
                for n in recorded_nodes(c.result("nodes")) {
                    m.add(GraphNode, n);
                }
            }),
            "cuGraphGetRootNodes" | "cuGraphGetEdges" => need(m, Graph, "hGraph", "graph").map(|_| {
                for arg in ["rootNodes", "from", "to"] {
                    for n in recorded_nodes(c.result(arg)) {
                        m.add(GraphNode, n);
                    }
                }
            }),
            "cuGraphNodeGetDependencies" | "cuGraphNodeGetDependentNodes" => need(m, GraphNode, "hNode", "graph node")
                .map(|_| {
                    for arg in ["dependencies", "dependentNodes"] {
                        for n in recorded_nodes(c.result(arg)) {
                            m.add(GraphNode, n);
                        }
                    }
                }),
            "cuGraphNodeFindInClone" => need(m, GraphNode, "hOriginalNode", "graph node")
                .and_then(|_| need(m, Graph, "hClonedGraph", "graph"))
                .and_then(|_| ow("phNode"))
                .map(|n| m.add(GraphNode, n)),
            "cuGraphInstantiate" | "cuGraphInstantiateWithFlags" | "cuGraphInstantiateWithParams" => {
                need(m, Graph, "hGraph", "graph").and_then(|_| ow("phGraphExec")).map(|e| m.add(GraphExec, e))
            }
            "cuGraphExecDestroy" => need(m, GraphExec, "hGraphExec", "executable graph")
                .map(|_| m.remove(GraphExec, c.word("hGraphExec").unwrap_or(0))),
            "cuGraphUpload" | "cuGraphLaunch" => need(m, GraphExec, "hGraphExec", "executable graph").and_then(|_| {
                let s = w("hStream")?;
                if m.stream_ok(s) {
                    Ok(())
                } else {
                    Err(format!("uses unknown stream {s:#x}"))
                }
            }),
            "cuGraphAddNode" => need(m, Graph, "hGraph", "graph")
                .and_then(|_| deps(m))
                .and_then(|_| super::exec_node::check_dry(m, trace, c))
                .and_then(|_| ow("phGraphNode"))
                .map(|n| {
                    m.add(GraphNode, n);
                    // A conditional node's body graphs (recorded after the out arguments).
                    if let Some(Value::List(bodies)) = c.rec.results.get(1) {
                        for b in bodies.iter().filter_map(super::args::word) {
                            m.add(Graph, b);
                        }
                    }
                }),
            "cuGraphExecUpdate" => {
                need(m, GraphExec, "hGraphExec", "executable graph").and_then(|_| need(m, Graph, "hGraph", "graph"))
            }
            "cuStreamBeginCapture" | "cuStreamBeginCaptureToGraph" => {
                let s = w("hStream").ok()?;
                if !m.stream_ok(s) {
                    Err(format!("captures unknown stream {s:#x}"))
                } else if c.f.name == "cuStreamBeginCaptureToGraph" {
                    need(m, Graph, "hGraph", "graph").and_then(|_| deps(m))
                } else {
                    Ok(())
                }
            }
            "cuStreamEndCapture" => match c.result("phGraph").and_then(word) {
                Some(g) if g != 0 => {
                    m.add(Graph, g);
                    Ok(())
                }
                _ => Ok(()),
            },
            "cuStreamGetCaptureInfo" => match c.result("graph_out").and_then(word) {
                Some(g) if g != 0 => {
                    m.add(Graph, g);
                    Ok(())
                }
                _ => return None,
            },
            _ => return None,
        })
    })();
    r
}
