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
//! of being captured), captures or graphs of their own — are refused with the reason; the eager
//! timing stands alone then.

use std::time::Instant;

use cudarc::driver::sys;
use gpuless_analyzer::api::{Group, SyncClass};
use serde::Serialize;

use super::objects::SyncPoint;
use super::{exec, hot, LoadedTrace, Report, State};

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
        let Some(f) = r.function.api() else { continue };
        let sync_copy = matches!(f.group, Group::Copy | Group::Set) && !f.name.contains("Async");
        if sync_copy || f.name.contains("Capture") || f.name.contains("Graph") {
            return Some(format!("call #{} {} cannot be captured into a graph", r.seq, f.name));
        }
    }
    None
}

fn waits(sync: SyncClass) -> bool {
    matches!(sync, SyncClass::CtxSync | SyncClass::StreamSync | SyncClass::EventSync)
}

/// Captures the body, then launches the graph `iterations` times (after one verified warm-up).
pub(crate) fn run(
    st: &mut State,
    trace: &LoadedTrace,
    report: &mut Report,
    body: &[usize],
    iterations: u32,
    side: &[super::dataflow::SideLaunch],
    to: Side,
) -> Result<GraphTiming, String> {
    // Moved to the set-up: left out of the capture. On a branch: captured from a second stream.
    let (skip, side): (std::collections::HashSet<usize>, _) = match to {
        Side::Setup => (side.iter().map(|l| l.call).collect(), &[][..]),
        Side::Branch => (Default::default(), side),
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
    // SAFETY (whole function): driver calls on a stream, graph and buffers created here.
    unsafe {
        let mut cap = std::ptr::null_mut();
        let r = sys::cuStreamCreate(&mut cap, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32);
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(e("cuStreamCreate", r));
        }
        // The side branch: a stream forked from the capturing one, an event after each launch.
        let mut branch = std::ptr::null_mut();
        let mut events = vec![std::ptr::null_mut(); side.len() + 1];
        if !side.is_empty() {
            let r = sys::cuStreamCreate(&mut branch, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32);
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(e("cuStreamCreate", r));
            }
            for ev in events.iter_mut() {
                let r = sys::cuEventCreate(ev, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32);
                if r != sys::CUresult::CUDA_SUCCESS {
                    return Err(e("cuEventCreate", r));
                }
            }
        }
        let r = sys::cuStreamBeginCapture_v2(cap, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED);
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(e("cuStreamBeginCapture", r));
        }
        st.stream_override = Some(cap);
        let mut captured = 0u64;
        let mut failed = None;
        if !side.is_empty() {
            sys::cuEventRecord(events[side.len()], cap);
            sys::cuStreamWaitEvent(branch, events[side.len()], 0);
        }
        for (k, &i) in body.iter().enumerate() {
            let rec = &trace.calls[i];
            if skip.contains(&k) || rec.function.api().is_some_and(|f| waits(f.sync)) {
                continue;
            }
            for &n in wait_at.get(&k).into_iter().flatten() {
                sys::cuStreamWaitEvent(cap, events[n], 0);
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
                sys::cuEventRecord(events[n], branch);
            }
            captured += 1;
        }
        if !side.is_empty() {
            // Join: the branch's last launch before the end of the graph.
            sys::cuEventRecord(events[side.len()], branch);
            sys::cuStreamWaitEvent(cap, events[side.len()], 0);
        }
        st.stream_override = None;
        let mut graph = std::ptr::null_mut();
        let r = sys::cuStreamEndCapture(cap, &mut graph);
        if let Some(why) = failed {
            return Err(format!("capturing the body: {why}"));
        }
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(e("cuStreamEndCapture", r));
        }
        // Every result the capture deferred: compared after each launch.
        let results = st.objects.complete(SyncPoint::Stream(1));
        let mut exe = std::ptr::null_mut();
        let r = sys::cuGraphInstantiateWithFlags(&mut exe, graph, 0);
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(e("cuGraphInstantiateWithFlags", r));
        }
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
                exec::verify_value(st, p.seq, p.what, p.want.as_ref(), host, trace, report);
                if report.mismatches.len() > before {
                    mismatches += 1;
                } else {
                    verified += 1;
                }
            }
        }
        sys::cuGraphExecDestroy(exe);
        sys::cuGraphDestroy(graph);
        sys::cuStreamDestroy_v2(cap);
        if !side.is_empty() {
            for ev in events {
                sys::cuEventDestroy_v2(ev);
            }
            sys::cuStreamDestroy_v2(branch);
        }
        let min = wall.iter().copied().fold(f64::INFINITY, f64::min);
        Ok(GraphTiming {
            captured_calls: captured,
            wall_ms_median: hot::median(&mut wall),
            wall_ms_min: min,
            results_verified: verified,
            mismatches,
            moved: Vec::new(),
            moved_note: None,
        })
    }
}
