//! Replay state beyond modules, kernels, streams and events: graphs, graph nodes, executable
//! graphs, arrays, texture and surface objects (recorded handle → live handle); pinned host
//! buffers that must outlive the graphs that copy into or out of them; and device-to-host
//! copies captured into graphs, whose results are verified at the synchronization that covers
//! them — the same rule by which the recorder hashed them (`recorder/src/pending.rs`).

use gpuless_traces::completion::Completion;
use std::collections::HashMap;
use std::ffi::c_void;

use cudarc::driver::sys;
use gpuless_traces::Value;

use super::{check, ReplayError};

/// Handles and buffers of a replay in progress (a field of `State`).
#[derive(Default)]
pub(crate) struct Objects {
    pub graphs: HashMap<u64, sys::CUgraph>,
    pub nodes: HashMap<u64, sys::CUgraphNode>,
    pub execs: HashMap<u64, sys::CUgraphExec>,
    pub arrays: HashMap<u64, sys::CUarray>,
    pub mipmapped: HashMap<u64, sys::CUmipmappedArray>,
    /// Texture and surface objects: recorded → live.
    pub textures: HashMap<u64, u64>,
    /// Recorded texture/surface handles that live under another value now (kernel parameters
    /// holding them are rewritten).
    moved: HashMap<u64, u64>,
    pinned: Vec<Pinned>,
    /// Device-to-host results in flight, completed by the recorder's rule
    /// ([`gpuless_traces::completion`]), on recorded handles.
    pub pending: Completion<Pending>,
    /// For a client's session: device-to-host copies captured into graphs, returned to the
    /// client after every launch — by capturing stream (recorded handle) until the capture
    /// ends, then by graph, then by executable graph.
    pub graph_outputs: GraphOutputs,
    /// Host-to-device copies captured into a graph: the pinned buffer each one's node reads
    /// (by the copy's sequence number). A function's invocation writes its inputs there.
    pub staged: HashMap<u64, (*mut u8, usize)>,
}

/// A captured device-to-host copy: its record, and the pinned buffer its graph node writes.
#[derive(Clone, Copy)]
pub(crate) struct GraphOutput {
    pub seq: u64,
    pub what: &'static str,
    pub host: *const u8,
    pub len: usize,
}

/// [`Objects::graph_outputs`].
#[derive(Default)]
pub(crate) struct GraphOutputs {
    pub capturing: HashMap<u64, Vec<GraphOutput>>,
    pub graphs: HashMap<u64, Vec<GraphOutput>>,
    pub execs: HashMap<u64, Vec<GraphOutput>>,
}

impl GraphOutputs {
    /// The copies whose bytes a host function reached now goes with: those captured so far on
    /// recorded stream `stream`, or added so far to recorded graph `graph`.
    pub fn live(&self, stream: Option<u64>, graph: Option<u64>) -> Vec<super::host_calls::LiveOutput> {
        let v = match (stream, graph) {
            (Some(s), _) => self.capturing.get(&s),
            (_, Some(g)) => self.graphs.get(&g),
            _ => None,
        };
        v.map(|v| v.iter().map(|o| (o.seq, o.host, o.len)).collect()).unwrap_or_default()
    }

    /// The capture on recorded stream `stream` ended in recorded graph `graph`.
    pub fn captured(&mut self, stream: u64, graph: u64) {
        if let Some(v) = self.capturing.remove(&stream) {
            self.graphs.entry(graph).or_default().extend(v);
        }
    }

    /// Recorded graph `graph` was instantiated as `exec`.
    pub fn instantiated(&mut self, graph: u64, exec: u64) {
        if let Some(v) = self.graphs.get(&graph) {
            self.execs.insert(exec, v.clone());
        }
    }
}

/// Page-locked host memory owned by the replay.
struct Pinned {
    ptr: *mut c_void,
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAllocHost; the replay's work has completed (the replay
        // synchronizes the context before its state is dropped).
        unsafe { sys::cuMemFreeHost(self.ptr) };
    }
}

/// A device-to-host copy whose bytes are compared once a synchronization covers its stream.
pub(crate) struct Pending {
    pub seq: u64,
    pub what: &'static str,
    /// Recorded stream (for matching synchronizations) and live stream (to wait for).
    pub stream: u64,
    pub live_stream: sys::CUstream,
    pub host: *const u8,
    pub len: usize,
    pub want: Option<Value>,
}

/// A synchronization the trace recorded.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SyncPoint {
    Stream(u64),
    Event(u64),
    All,
}

impl Objects {
    /// Records that the texture or surface object recorded as `recorded` is `live` now.
    pub fn add_texture(&mut self, recorded: u64, live: u64) {
        self.textures.insert(recorded, live);
        if recorded != live {
            self.moved.insert(recorded, live);
        } else {
            self.moved.remove(&recorded);
        }
    }

    /// Forgets a destroyed texture or surface object; returns its live handle.
    pub fn remove_texture(&mut self, recorded: u64) -> Option<u64> {
        self.moved.remove(&recorded);
        self.textures.remove(&recorded)
    }

    /// Whether kernel parameters may hold texture/surface handles that must be rewritten.
    pub fn handles_moved(&self) -> bool {
        !self.moved.is_empty()
    }

    /// Rewrites every 8-byte parameter that holds a recorded texture or surface object whose
    /// live handle differs. With no layout (a packed `extra` buffer), every aligned word.
    pub fn translate_handles(&self, bytes: &mut [u8], layout: &[(u32, u32)]) -> usize {
        if self.moved.is_empty() {
            return 0;
        }
        let mut n = 0;
        let mut fix = |w: &mut [u8]| {
            let mut a = [0u8; 8];
            a.copy_from_slice(w);
            if let Some(&live) = self.moved.get(&u64::from_le_bytes(a)) {
                w.copy_from_slice(&live.to_le_bytes());
                n += 1;
            }
        };
        if layout.is_empty() {
            bytes.chunks_exact_mut(8).for_each(&mut fix);
        } else {
            for &(off, size) in layout {
                if size == 8 {
                    if let Some(w) = bytes.get_mut(off as usize..off as usize + 8) {
                        fix(w);
                    }
                }
            }
        }
        n
    }

    /// `len` bytes of page-locked host memory that live until the replay ends (graphs may copy
    /// into or out of them at every launch). Allowed while a stream captures in global mode.
    pub fn pinned(&mut self, len: usize, seq: u64) -> Result<*mut u8, ReplayError> {
        let mut p = std::ptr::null_mut();
        // SAFETY: the thread's capture mode is relaxed around the allocation and restored.
        unsafe {
            let mut mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
            sys::cuThreadExchangeStreamCaptureMode(&mut mode);
            let r = sys::cuMemAllocHost_v2(&mut p, len.max(1));
            sys::cuThreadExchangeStreamCaptureMode(&mut mode);
            check(r, seq, "cuMemAllocHost (replay buffer)")?;
        }
        self.pinned.push(Pinned { ptr: p });
        Ok(p.cast())
    }

    /// A host source captured into a graph: `data` copied into pinned memory that outlives the
    /// graph (the graph copies from it at every launch), remembered as call `seq`'s staging
    /// (a cached piece's relaunch refreshes it). Returns the pinned copy.
    pub fn stage(&mut self, data: &[u8], seq: u64) -> Result<*const u8, ReplayError> {
        let p = self.pinned(data.len(), seq)?;
        // SAFETY: `p` holds `data.len()` bytes, just allocated; the two do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        self.staged.insert(seq, (p, data.len()));
        Ok(p.cast_const())
    }

    /// Queues a device-to-host result for comparison at the next synchronization covering
    /// its stream.
    pub fn defer(&mut self, p: Pending) {
        self.pending.push(p.stream, p);
    }

    /// The queued results a synchronization completes (the recorder's rule).
    pub fn complete(&mut self, at: SyncPoint) -> Vec<Pending> {
        match at {
            SyncPoint::Event(e) => self.pending.sync_event(e),
            SyncPoint::Stream(s) => self.pending.sync_stream(s),
            SyncPoint::All => self.pending.sync_all(),
        }
    }
}

/// Whether `stream` is capturing into a graph now.
pub(crate) fn capturing(stream: sys::CUstream) -> bool {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: a query with a valid out-pointer.
    let r = unsafe { sys::cuStreamIsCapturing(stream, &mut status) };
    r == sys::CUresult::CUDA_SUCCESS && status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moved_texture_handles_are_rewritten_in_8_byte_parameters_only() {
        let mut o = Objects::default();
        o.add_texture(1, 1);
        o.add_texture(2, 7);
        assert!(o.handles_moved());
        let mut b = [0u8; 24];
        b[0] = 2; // a texture object parameter
        b[8] = 2; // an int and another int
        b[16] = 1; // a handle that did not move
        assert_eq!(o.translate_handles(&mut b, &[(0, 8), (8, 4), (12, 4), (16, 8)]), 1);
        assert_eq!((b[0], b[8], b[16]), (7, 2, 1));
        assert_eq!(o.remove_texture(2), Some(7));
        assert!(!o.handles_moved());
    }

    #[test]
    fn synchronizations_complete_what_the_recorder_completed() {
        let mut o = Objects::default();
        let p = |seq, stream| Pending {
            seq,
            what: "cuMemcpyDtoHAsync",
            stream,
            live_stream: std::ptr::null_mut(),
            host: std::ptr::null(),
            len: 0,
            want: None,
        };
        o.defer(p(1, 10));
        o.defer(p(2, 20));
        o.defer(p(3, 20));
        o.pending.record_event(99, 20);
        assert!(o.complete(SyncPoint::Event(98)).is_empty(), "an event never recorded covers nothing");
        assert_eq!(o.complete(SyncPoint::Stream(10)).iter().map(|p| p.seq).collect::<Vec<_>>(), [1]);
        assert_eq!(o.complete(SyncPoint::Event(99)).iter().map(|p| p.seq).collect::<Vec<_>>(), [2, 3]);
        o.defer(p(4, 30));
        assert_eq!(o.complete(SyncPoint::Stream(1)).len(), 1, "the legacy stream covers every stream");
    }
}
