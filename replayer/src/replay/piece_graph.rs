//! One piece of a client's work as a CUDA graph (cached-trace execution, issue 20; the rule
//! that cuts pieces is `gpuless_traces::protocol::piece`; when to use a graph is the server's
//! `server::pieces`).
//!
//! [`Stream::capture_piece`] replays a piece's records while a stream of the replay's own
//! captures them (every recorded stream mapped to it, as hot replay's lowering does), so the
//! graph holds the piece's launches, copies and sets in their order. Host-to-device copies
//! read pinned buffers the graph owns; device-to-host copies write pinned buffers. The graph is
//! then launched into the piece's own live stream, ordered with the session's other work
//! there exactly as its records would have been. [`Stream::launch_piece`] runs a later
//! repetition: the repetition's uploaded bytes into the input buffers (after the previous
//! launch has read them), one `cuGraphLaunch`, and its device-to-host results queued under
//! the repetition's own sequence numbers for the synchronization that covers the stream, as an
//! eager copy's would be.

use cudarc::driver::sys;
use gpuless_analyzer::api::Group;
use gpuless_traces::protocol::piece;
use gpuless_traces::CallRecord;

use super::objects::Pending;
use super::stream::Stream;
use super::{check, exec, ReplayError};

/// A piece captured into an executable graph, with the buffers its copies use.
pub struct PieceGraph {
    graph: sys::CUgraph,
    exe: sys::CUgraphExec,
    /// Recorded after every launch: the input buffers may be written again once it completed.
    done: sys::CUevent,
    /// Position in the piece of each host-to-device copy, and the pinned buffer its node reads.
    inputs: Vec<(usize, *mut u8, usize)>,
    /// Position of each device-to-host copy, the pinned buffer its node writes, its length.
    outputs: Vec<(usize, *const u8, usize, &'static str)>,
    /// The node each record of the piece added (null: none of its own), for
    /// [`Stream::update_piece`].
    nodes: Vec<sys::CUgraphNode>,
    /// The records the graph was captured from: its nodes' own values (what a node's
    /// parameters read back say, whatever its executable graph was given since).
    captured: Vec<CallRecord>,
    /// The records whose addresses and parameters the executable graph holds now.
    current: Vec<CallRecord>,
    /// Launch records in the piece (the report's count).
    launches: u64,
    /// Whether the graph was launched and its inputs may still be read.
    launched: bool,
}

impl Drop for PieceGraph {
    fn drop(&mut self) {
        // SAFETY: objects created by `capture_piece`; an executable graph still running is
        // freed by the driver once it completes (its pinned buffers belong to the replay's
        // state, freed only after the context is synchronized).
        unsafe {
            if !self.exe.is_null() {
                sys::cuGraphExecDestroy(self.exe);
            }
            if !self.graph.is_null() {
                sys::cuGraphDestroy(self.graph);
            }
            if !self.done.is_null() {
                sys::cuEventDestroy_v2(self.done);
            }
        }
    }
}

fn e(what: &str, r: sys::CUresult) -> String {
    format!("{what} failed with {r:?}")
}

impl Stream {
    /// Captures `recs` (one piece) into a graph and launches it once: the graph does this
    /// repetition's work. On an error nothing of the piece ran: the caller runs its records
    /// one by one.
    pub fn capture_piece(&mut self, recs: &[CallRecord]) -> Result<PieceGraph, String> {
        if recs.is_empty() {
            return Err("an empty piece".into());
        }
        // The graph writes device memory without passing each record through `exec::call`.
        self.parts().0.resident.dirty();
        let mut g = PieceGraph {
            graph: std::ptr::null_mut(),
            exe: std::ptr::null_mut(),
            done: std::ptr::null_mut(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            nodes: Vec::with_capacity(recs.len()),
            captured: Vec::new(),
            current: Vec::new(),
            launches: 0,
            launched: false,
        };
        let cap = self.capture_stream()?;
        // SAFETY (block): driver calls on the replay's capture stream, a graph and an event
        // created here (owned by `g`); the records are the piece's, executed as a replay does.
        unsafe {
            let r = sys::cuEventCreate(&mut g.done, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32);
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(e("cuEventCreate", r));
            }
            let r = sys::cuStreamBeginCapture_v2(cap, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED);
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(e("cuStreamBeginCapture", r));
            }
            let (st, trace, report) = self.parts();
            st.stream_override = Some(cap);
            // Capturing runs nothing: the counts are the launch's (`launch_captured`).
            let counts = (report.calls, report.executed, report.launches);
            let mut failed = None;
            let mut tail = std::ptr::null_mut();
            for r in recs {
                if let Err(err) = exec::call(st, trace, r, report) {
                    failed = Some(err.to_string());
                    break;
                }
                g.nodes.push(added_node(cap, &mut tail));
            }
            (report.calls, report.executed, report.launches) = counts;
            st.stream_override = None;
            let end = sys::cuStreamEndCapture(cap, &mut g.graph);
            // What the capture left in the replay's state: the copies' buffers, by the
            // records' sequence numbers (the device-to-host ones by recorded stream: the
            // piece's records may name its stream as 0, 1 or 2).
            let mut streams: Vec<u64> = recs.iter().map(recorded_stream).collect();
            streams.sort_unstable();
            streams.dedup();
            let captured_outputs: Vec<_> =
                streams.iter().flat_map(|s| st.objects.graph_outputs.capturing.remove(s).unwrap_or_default()).collect();
            for (i, r) in recs.iter().enumerate() {
                if let Some((p, n)) = st.objects.staged.remove(&r.seq) {
                    g.inputs.push((i, p, n));
                }
                if let Some(o) = captured_outputs.iter().find(|o| o.seq == r.seq) {
                    g.outputs.push((i, o.host, o.len, o.what));
                }
                if r.function.api().is_some_and(|f| f.group == Group::Launch) {
                    g.launches += 1;
                }
            }
            if let Some(why) = failed {
                return Err(format!("capturing a piece: {why}"));
            }
            if end != sys::CUresult::CUDA_SUCCESS {
                return Err(e("cuStreamEndCapture", end));
            }
            if g.outputs.len() != recs.iter().filter(|r| is_download(r)).count() {
                return Err("a device-to-host copy of the piece was not captured".into());
            }
            let r = sys::cuGraphInstantiateWithFlags(&mut g.exe, g.graph, 0);
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(e("cuGraphInstantiateWithFlags", r));
            }
        }
        g.captured = recs.to_vec();
        g.current = recs.to_vec();
        // The capture wrote this repetition's bytes into the input buffers already.
        self.launch_captured(&mut g, recs).map_err(|e| e.to_string())?;
        Ok(g)
    }

    /// Gives `g`'s nodes the addresses and parameters of `recs` (a piece of the graph's shape,
    /// `piece::same_shape`) where they differ from those of its last launch: kernel nodes
    /// take the launch's parameters, copy and set nodes its device addresses. Launches already
    /// queued are not affected. On an error the nodes updated so far keep their new values
    /// (the graph remembers them) and nothing ran.
    pub fn update_piece(&mut self, g: &mut PieceGraph, recs: &[CallRecord]) -> Result<(), String> {
        if recs.len() != g.current.len() || recs.len() != g.nodes.len() {
            return Err(format!("a piece of {} records for a graph of {}", recs.len(), g.current.len()));
        }
        let (st, _, report) = self.parts();
        for (i, rec) in recs.iter().enumerate() {
            if piece::same(&g.current[i], rec) {
                continue;
            }
            let node = g.nodes[i];
            let f = rec.function.api().ok_or("a record of a function the table does not model")?;
            if node.is_null() {
                return Err(format!("{} (record {i} of a piece) added no node of its own to the graph", f.name));
            }
            // SAFETY: a node of `g`'s graph and its executable graph; the parameters are the
            // record's, read by the driver during the call.
            unsafe {
                match f.group {
                    Group::Launch => {
                        let c = super::args::Call { f, rec };
                        let mut args = super::launch::KernelArgs::new(st, &c, report).map_err(|e| e.to_string())?;
                        let mut p: sys::CUDA_KERNEL_NODE_PARAMS = std::mem::zeroed();
                        let r = sys::cuGraphKernelNodeGetParams_v2(node, &mut p);
                        if r != sys::CUresult::CUDA_SUCCESS {
                            return Err(e("cuGraphKernelNodeGetParams", r));
                        }
                        (p.kernelParams, p.extra) = (args.params(), args.extra());
                        let r = sys::cuGraphExecKernelNodeSetParams_v2(g.exe, node, &p);
                        if r != sys::CUresult::CUDA_SUCCESS {
                            return Err(e(&format!("cuGraphExecKernelNodeSetParams ({})", f.name), r));
                        }
                    }
                    Group::Copy | Group::Set => {
                        // From the node's own addresses (the capture's) to this repetition's.
                        let moves: Vec<(u64, u64)> = device_addresses(&g.captured[i])
                            .zip(device_addresses(rec))
                            .filter(|(a, b)| a != b)
                            .map(|(a, b)| (st.mem.translate(a), st.mem.translate(b)))
                            .collect();
                        point_node(g.exe, node, f.group, &moves).map_err(|why| format!("{}: {why}", f.name))?;
                    }
                    _ => return Err(format!("{}: no graph node of its kind can be updated", f.name)),
                }
            }
            g.current[i] = rec.clone();
        }
        Ok(())
    }

    /// Runs a later repetition of `g`'s piece: `recs` must be the same piece
    /// (`piece::same`, record by record, with the records [`Self::update_piece`] gave the
    /// graph). Its uploads' bytes go
    /// into the graph's input buffers, then the graph runs on the piece's stream.
    pub fn launch_piece(&mut self, g: &mut PieceGraph, recs: &[CallRecord]) -> Result<(), ReplayError> {
        let seq = recs.first().map_or(0, |r| r.seq);
        self.parts().0.resident.dirty();
        // SAFETY (block): the graph's pinned input buffers, written once its previous launch
        // has read them (its event); blob bytes of the session of each buffer's length.
        unsafe {
            if g.launched && !g.inputs.is_empty() {
                check(sys::cuEventSynchronize(g.done), seq, "cuEventSynchronize (piece inputs)")?;
            }
            for &(i, p, n) in &g.inputs {
                let r = &recs[i];
                let bytes = piece::payload(r)
                    .and_then(|b| self.blob_bytes(&b.hash))
                    .filter(|b| b.len() == n)
                    .ok_or_else(|| ReplayError::Inconsistent {
                        seq: r.seq,
                        what: r.function.name().to_string(),
                        problem: format!("the bytes it uploads ({n} bytes) are not in the session"),
                    })?;
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, n);
            }
        }
        self.launch_captured(g, recs)
    }

    /// Whether the live stream of a piece's records is capturing into a graph of the
    /// program's own: its records belong to that graph, not to one of the executor's.
    pub fn piece_stream_capturing(&mut self, recs: &[CallRecord]) -> bool {
        let Some(first) = recs.first() else { return false };
        let (st, _, _) = self.parts();
        st.stream(recorded_stream(first)).is_ok_and(super::objects::capturing)
    }

    /// Whether the live stream of the piece that starts with `rec` still has work on the GPU
    /// (`cuStreamQuery`: not ready): holding the piece until it is complete then keeps no idle
    /// GPU waiting.
    pub fn piece_stream_busy(&mut self, rec: &CallRecord) -> bool {
        let (st, _, _) = self.parts();
        let Ok(live) = st.stream(recorded_stream(rec)) else { return false };
        // SAFETY: a live stream of the session.
        unsafe { sys::cuStreamQuery(live) == sys::CUresult::CUDA_ERROR_NOT_READY }
    }

    /// Whether `g`'s device-to-host buffers still hold results no synchronization has
    /// returned: launching it again would overwrite them (run the piece eagerly instead).
    pub fn piece_results_pending(&self, g: &PieceGraph) -> bool {
        !g.outputs.is_empty() && self.pending_any(|p| g.outputs.iter().any(|o| o.1 == p.host))
    }

    /// Launches `g` on the live stream of `recs`' stream and queues its results under `recs`'
    /// sequence numbers.
    fn launch_captured(&mut self, g: &mut PieceGraph, recs: &[CallRecord]) -> Result<(), ReplayError> {
        let first = recs.first().ok_or_else(|| ReplayError::Inconsistent {
            seq: 0,
            what: "piece".into(),
            problem: "an empty piece".into(),
        })?;
        let last = recs.last().unwrap_or(first);
        let rec_stream = recorded_stream(first);
        let (st, _, report) = self.parts();
        let live = st.stream(rec_stream)?;
        // SAFETY: an executable graph and event owned by `g`, on a live stream of the session.
        unsafe {
            check(sys::cuGraphLaunch(g.exe, live), last.seq, "cuGraphLaunch (a cached piece)")?;
            check(sys::cuEventRecord(g.done, live), last.seq, "cuEventRecord (a cached piece)")?;
        }
        g.launched = true;
        for &(i, host, len, what) in &g.outputs {
            st.objects.defer(Pending {
                seq: recs[i].seq,
                what,
                stream: rec_stream,
                live_stream: live,
                host,
                len,
                want: None,
            });
        }
        st.last_call = last.function.api().map(|f| (last.seq, f.name));
        report.calls += recs.len() as u64;
        report.executed += recs.len() as u64;
        report.launches += g.launches;
        Ok(())
    }
}

/// The node the capture on `cap` added last, if it is not `tail` (the one before): the node of
/// the record just captured, or null when it added none of its own.
///
/// # Safety
/// `cap` is a stream being captured.
unsafe fn added_node(cap: sys::CUstream, tail: &mut sys::CUgraphNode) -> sys::CUgraphNode {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let (mut deps, mut n): (*const sys::CUgraphNode, usize) = (std::ptr::null(), 0);
    // SAFETY: outputs into locals; the dependencies stay valid until the next capture call.
    let r = unsafe {
        sys::cuStreamGetCaptureInfo_v3(
            cap,
            &mut status,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut deps,
            std::ptr::null_mut(),
            &mut n,
        )
    };
    if r != sys::CUresult::CUDA_SUCCESS || n != 1 || deps.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: `n` (1) dependencies at `deps`.
    let node = unsafe { *deps };
    if node == *tail {
        return std::ptr::null_mut();
    }
    *tail = node;
    node
}

/// The device addresses a record names, in argument order.
fn device_addresses(r: &CallRecord) -> impl Iterator<Item = u64> + '_ {
    r.args.iter().filter_map(|v| match v {
        gpuless_traces::Value::DevPtr(p) => Some(*p),
        _ => None,
    })
}

/// Points a copy or set node of `exe` from each `(old, new)` device address to the new one.
///
/// # Safety
/// `node` is a node of `exe`'s graph of the kind `group` says (a copy: memcpy; a set: memset).
unsafe fn point_node(
    exe: sys::CUgraphExec,
    node: sys::CUgraphNode,
    group: Group,
    moves: &[(u64, u64)],
) -> Result<(), String> {
    let mut ctx = std::ptr::null_mut();
    // SAFETY (block): node parameters read into locals, changed, handed back for `exe`.
    unsafe {
        sys::cuCtxGetCurrent(&mut ctx);
        if group == Group::Set {
            let mut p: sys::CUDA_MEMSET_NODE_PARAMS = std::mem::zeroed();
            let r = sys::cuGraphMemsetNodeGetParams(node, &mut p);
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(e("cuGraphMemsetNodeGetParams", r));
            }
            for &(old, new) in moves {
                if p.dst != old {
                    return Err(format!("its node does not set {old:#x}"));
                }
                p.dst = new;
            }
            let r = sys::cuGraphExecMemsetNodeSetParams(exe, node, &p, ctx);
            return if r == sys::CUresult::CUDA_SUCCESS { Ok(()) } else { Err(e("cuGraphExecMemsetNodeSetParams", r)) };
        }
        // Its memory types are enums without a zero: filled by the driver, never zeroed.
        let mut p = std::mem::MaybeUninit::<sys::CUDA_MEMCPY3D>::uninit();
        let r = sys::cuGraphMemcpyNodeGetParams(node, p.as_mut_ptr());
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(e("cuGraphMemcpyNodeGetParams", r));
        }
        let mut p = p.assume_init();
        let (src, dst) = (p.srcDevice, p.dstDevice);
        for &(old, new) in moves {
            let mut found = false;
            if src == old {
                (p.srcDevice, found) = (new, true);
            }
            if dst == old {
                (p.dstDevice, found) = (new, true);
            }
            if !found {
                return Err(format!("its node copies neither from nor to {old:#x}"));
            }
        }
        let r = sys::cuGraphExecMemcpyNodeSetParams(exe, node, &p, ctx);
        if r == sys::CUresult::CUDA_SUCCESS {
            Ok(())
        } else {
            Err(e("cuGraphExecMemcpyNodeSetParams", r))
        }
    }
}

/// The stream a piece's record names, as recorded (0 where none).
fn recorded_stream(r: &CallRecord) -> u64 {
    piece::named_stream(r).unwrap_or(0)
}

fn is_download(r: &CallRecord) -> bool {
    r.function.api().is_some_and(|f| f.sync == gpuless_analyzer::api::SyncClass::DeviceToHostAsync)
}
