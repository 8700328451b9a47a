//! Lowering a trace's body to a CUDA graph for hot replay: the body's calls are replayed once
//! while one non-blocking stream captures them (every recorded stream mapped to it, so the
//! trace's own order is the graph's order), the graph is instantiated, and each iteration is
//! one `cuGraphLaunch`. Device-to-host results captured into the graph land in pinned buffers
//! and are compared with the recording after every launch.
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
) -> Result<GraphTiming, String> {
    if let Some(why) = refusal(trace, body) {
        return Err(why);
    }
    let e = |what: &str, r: sys::CUresult| format!("{what} failed with {r:?}");
    // SAFETY (whole function): driver calls on a stream, graph and buffers created here.
    unsafe {
        let mut cap = std::ptr::null_mut();
        let r = sys::cuStreamCreate(&mut cap, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32);
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(e("cuStreamCreate", r));
        }
        let r = sys::cuStreamBeginCapture_v2(cap, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED);
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(e("cuStreamBeginCapture", r));
        }
        st.stream_override = Some(cap);
        let mut captured = 0u64;
        let mut failed = None;
        for &i in body {
            let rec = &trace.calls[i];
            if rec.function.api().is_some_and(|f| waits(f.sync)) {
                continue;
            }
            if let Err(err) = exec::call(st, trace, rec, report) {
                failed = Some(err.to_string());
                break;
            }
            captured += 1;
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
        let min = wall.iter().copied().fold(f64::INFINITY, f64::min);
        Ok(GraphTiming {
            captured_calls: captured,
            wall_ms_median: hot::median(&mut wall),
            wall_ms_min: min,
            results_verified: verified,
            mismatches,
        })
    }
}
