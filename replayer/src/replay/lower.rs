//! Lowering a trace's body to a CUDA graph for hot replay: the body's calls are replayed once
//! while one non-blocking stream captures them (every recorded stream mapped to it, so the
//! trace's own order is the graph's order), the graph is instantiated, and each iteration is
//! one `cuGraphLaunch`. Device-to-host results captured into the graph land in pinned buffers
//! and are compared with the recording after every launch.
//!
//! Launches the body's data flow lets move (`dataflow.rs`, `side.rs`) are either captured from
//! a second stream that forks from the first at the start and joins it at each launch's first
//! reader (a second branch of the graph), or left out (they ran at set-up; their outputs stay).
//!
//! Bodies the graph cannot hold — synchronous copies or sets (they execute immediately instead
//! of being captured), captures or graphs of their own, what the host wrote to or read of
//! managed or mapped memory between calls — are refused with the reason; the eager timing
//! stands alone then.

use std::time::Instant;

use cudarc::driver::sys;
use gpuless_analyzer::api::{Group, SyncClass};
use serde::Serialize;

use super::objects::SyncPoint;
use super::{exec, median, results, LoadedTrace, Report, State};

/// Timing of the graph-lowered body.
#[derive(Debug, Clone, Serialize)]
pub struct GraphTiming {
    /// Records captured into the graph.
    pub captured_calls: u64,
    /// Wall-clock milliseconds per launch of the graph (launch + wait), median and minimum.
    pub wall_ms_median: f64,
    /// See `wall_ms_median`.
    pub wall_ms_min: f64,
    /// Device-to-host results compared after each launch, and how many differed.
    pub results_verified: u64,
    /// See `results_verified`.
    pub mismatches: u64,
    /// The same body with the launches whose inputs it never writes moved (`dataflow.rs`):
    /// onto a side branch, or to the set-up.
    pub moved: Vec<Moved>,
    /// Why no launch could move, or what happened to candidates.
    pub moved_note: Option<String>,
}

/// Where launches whose inputs the body never writes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// Into a second branch of the graph, forked at the start, joined at each first reader.
    Branch,
    /// Out of the body: run once at set-up, their outputs kept resident (constants).
    Setup,
}

/// Timing of the graph with launches moved.
#[derive(Debug, Clone, Serialize)]
pub struct Moved {
    /// Where they went.
    pub to: Side,
    /// Launches moved, and the bytes of the buffers they write.
    pub launches: u64,
    /// See `launches`.
    pub bytes: u64,
    /// As in [`GraphTiming`].
    pub wall_ms_median: f64,
    /// See `wall_ms_median`.
    pub wall_ms_min: f64,
    /// Results compared after each launch, and how many differed.
    pub results_verified: u64,
    /// See `results_verified`.
    pub mismatches: u64,
}

/// Why a body cannot become a graph, if it cannot.
pub fn refusal(trace: &LoadedTrace, body: &[usize]) -> Option<String> {
    for &i in body {
        let r = &trace.calls[i];
        // What the host wrote to (or could read of) shared memory between the body's calls: a
        // copy made when the record comes (`hostview.rs`, `managed.rs`), never a graph's node.
        if gpuless_traces::hostview::is_hostview(r.function.name()) {
            return Some(format!(
                "call #{} {} (host-shared memory) cannot be captured into a graph",
                r.seq,
                r.function.name()
            ));
        }
        let Some(f) = r.function.api() else { continue };
        // Synchronous host copies are captured as copies on the capturing stream (`exec`).
        let sync_copy = matches!(f.group, Group::Copy | Group::Set)
            && !f.name.contains("Async")
            && !matches!(f.name, "cuMemcpyHtoD" | "cuMemcpyDtoH");
        if sync_copy || f.name.contains("Capture") || f.name.contains("Graph") {
            return Some(format!("call #{} {} cannot be captured into a graph", r.seq, f.name));
        }
    }
    None
}

pub(crate) fn waits(sync: SyncClass) -> bool {
    matches!(sync, SyncClass::CtxSync | SyncClass::StreamSync | SyncClass::EventSync)
}

/// The driver objects of one capture, destroyed however [`run`] ends.
struct Objects {
    cap: sys::CUstream,
    branch: sys::CUstream,
    events: Vec<sys::CUevent>,
    graph: sys::CUgraph,
    exe: sys::CUgraphExec,
}

impl Drop for Objects {
    fn drop(&mut self) {
        // SAFETY: objects created by `run` (null where not created); a capture is ended before
        // `run` returns, and an executable graph still running is freed when it completes.
        unsafe {
            if !self.exe.is_null() {
                sys::cuGraphExecDestroy(self.exe);
            }
            if !self.graph.is_null() {
                sys::cuGraphDestroy(self.graph);
            }
            for &ev in self.events.iter().filter(|e| !e.is_null()) {
                sys::cuEventDestroy_v2(ev);
            }
            for s in [self.branch, self.cap] {
                if !s.is_null() {
                    sys::cuStreamDestroy_v2(s);
                }
            }
        }
    }
}

/// Notes the first failure of the capture's own fork and join calls.
fn note(failed: &mut Option<String>, what: &str, r: sys::CUresult) {
    if r != sys::CUresult::CUDA_SUCCESS && failed.is_none() {
        *failed = Some(format!("{what} failed with {r:?}"));
    }
}

/// Captures the body, then launches the graph `iterations` times (after one verified warm-up).
/// `moving`: launches whose inputs the body never writes, and where they go (`None`: the
/// plain graph of the body).
pub(crate) fn run(
    st: &mut State,
    trace: &LoadedTrace,
    report: &mut Report,
    body: &[usize],
    iterations: u32,
    moving: Option<(&[super::dataflow::SideLaunch], Side)>,
) -> Result<GraphTiming, String> {
    // Moved to the set-up: left out of the capture. On a branch: captured from a second stream.
    let (skip, side): (std::collections::HashSet<usize>, _) = match moving {
        None => (Default::default(), &[][..]),
        Some((side, Side::Setup)) => (side.iter().map(|l| l.call).collect(), &[][..]),
        Some((side, Side::Branch)) => (Default::default(), side),
    };
    if let Some(why) = refusal(trace, body) {
        return Err(why);
    }
    let side_at: std::collections::HashMap<usize, usize> = side.iter().enumerate().map(|(n, l)| (l.call, n)).collect();
    let mut wait_at: std::collections::HashMap<usize, Vec<usize>> = std::collections::HashMap::new();
    for (n, l) in side.iter().enumerate() {
        if let Some(&first) = l.readers.first() {
            wait_at.entry(first).or_default().push(n);
        }
    }
    let e = |what: &str, r: sys::CUresult| format!("{what} failed with {r:?}");
    let mut o = Objects {
        cap: std::ptr::null_mut(),
        branch: std::ptr::null_mut(),
        events: vec![std::ptr::null_mut(); if side.is_empty() { 0 } else { side.len() + 1 }],
        graph: std::ptr::null_mut(),
        exe: std::ptr::null_mut(),
    };
    // SAFETY (whole function): driver calls on streams, events, a graph and buffers created
    // here (destroyed with `o`).
    unsafe {
        let r = sys::cuStreamCreate(&mut o.cap, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32);
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(e("cuStreamCreate", r));
        }
        let cap = o.cap;
        // The side branch: a stream forked from the capturing one, an event after each launch.
        if !side.is_empty() {
            let r = sys::cuStreamCreate(&mut o.branch, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32);
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(e("cuStreamCreate", r));
            }
            for ev in o.events.iter_mut() {
                let r = sys::cuEventCreate(ev, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32);
                if r != sys::CUresult::CUDA_SUCCESS {
                    return Err(e("cuEventCreate", r));
                }
            }
        }
        let (branch, events) = (o.branch, o.events.clone());
        let r = sys::cuStreamBeginCapture_v2(cap, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED);
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(e("cuStreamBeginCapture", r));
        }
        st.stream_override = Some(cap);
        let mut captured = 0u64;
        let mut failed = None;
        if !side.is_empty() {
            note(&mut failed, "cuEventRecord (fork)", sys::cuEventRecord(events[side.len()], cap));
            note(&mut failed, "cuStreamWaitEvent (fork)", sys::cuStreamWaitEvent(branch, events[side.len()], 0));
        }
        for (k, &i) in body.iter().enumerate() {
            if failed.is_some() {
                break;
            }
            let rec = &trace.calls[i];
            if skip.contains(&k) || rec.function.api().is_some_and(|f| waits(f.sync)) {
                continue;
            }
            for &n in wait_at.get(&k).into_iter().flatten() {
                note(&mut failed, "cuStreamWaitEvent (join)", sys::cuStreamWaitEvent(cap, events[n], 0));
            }
            let on_side = side_at.get(&k).copied();
            if on_side.is_some() {
                st.stream_override = Some(branch);
            }
            let r = exec::call(st, trace, rec, report);
            st.stream_override = Some(cap);
            if let Err(err) = r {
                failed = Some(err.to_string());
                break;
            }
            if let Some(n) = on_side {
                note(&mut failed, "cuEventRecord (side)", sys::cuEventRecord(events[n], branch));
            }
            captured += 1;
        }
        if !side.is_empty() {
            // Join: the branch's last launch before the end of the graph.
            note(&mut failed, "cuEventRecord (join)", sys::cuEventRecord(events[side.len()], branch));
            note(&mut failed, "cuStreamWaitEvent (join)", sys::cuStreamWaitEvent(cap, events[side.len()], 0));
        }
        st.stream_override = None;
        let r = sys::cuStreamEndCapture(cap, &mut o.graph);
        if let Some(why) = failed {
            return Err(format!("capturing the body: {why}"));
        }
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(e("cuStreamEndCapture", r));
        }
        // Every result the capture deferred: compared after each launch.
        let results = st.objects.complete(SyncPoint::Stream(1));
        let r = sys::cuGraphInstantiateWithFlags(&mut o.exe, o.graph, 0);
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(e("cuGraphInstantiateWithFlags", r));
        }
        let exe = o.exe;
        let (mut verified, mut mismatches) = (0u64, 0u64);
        let mut wall = Vec::new();
        for k in 0..=iterations {
            let t = Instant::now();
            let r = sys::cuGraphLaunch(exe, cap);
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(e("cuGraphLaunch", r));
            }
            let r = sys::cuStreamSynchronize(cap);
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(e("cuStreamSynchronize", r));
            }
            if k > 0 {
                wall.push(t.elapsed().as_secs_f64() * 1e3);
            }
            for p in &results {
                let host = std::slice::from_raw_parts(p.host, p.len);
                let before = report.mismatches.len();
                results::verify_value(st, p.seq, p.what, p.want.as_ref(), host, trace, report);
                if report.mismatches.len() > before {
                    mismatches += 1;
                } else {
                    verified += 1;
                }
            }
        }
        drop(o);
        let min = wall.iter().copied().fold(f64::INFINITY, f64::min);
        Ok(GraphTiming {
            captured_calls: captured,
            wall_ms_median: median::median(&mut wall),
            wall_ms_min: min,
            results_verified: verified,
            mismatches,
            moved: Vec::new(),
            moved_note: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuless_analyzer::api::ApiLevel;
    use gpuless_traces::{CallRecord, Function};

    fn trace(names: &[&str]) -> LoadedTrace {
        let calls = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let f = match gpuless_analyzer::api::by_name(n) {
                    Some(f) => Function::Known(f.id),
                    None => Function::Other(n.to_string()),
                };
                CallRecord::new(i as u64, ApiLevel::Driver, f)
            })
            .collect();
        LoadedTrace { meta: Default::default(), calls, blobs: Default::default(), lost: None }
    }

    #[test]
    fn a_body_with_host_writes_to_shared_memory_stays_eager() {
        let t = trace(&["cuLaunchKernel", gpuless_traces::hostview::HOST_MEMORY, "cuLaunchKernel"]);
        assert!(refusal(&t, &[0, 2]).is_none());
        let why = refusal(&t, &[0, 1, 2]).expect("refused");
        assert!(why.contains("call #1 gpulessHostMemory"), "{why}");
        let t = trace(&["cuLaunchKernel", gpuless_traces::hostview::HOST_VIEW]);
        assert!(refusal(&t, &[0, 1]).is_some());
    }
}
