//! `--iterations N`: the trace split into set-up (context, code, allocations, uploads before
//! the first launch that the body does not upload over, every handle creation) and body (the rest: launches, copies, sets,
//! synchronizations), the body replayed N times after one verified warm-up pass, each
//! iteration timed with CUDA events and the wall clock.

use gpuless_analyzer::api::SyncClass;
use gpuless_traces::resident::plain_upload;
use gpuless_traces::CallRecord;
use serde::Serialize;

/// Where each record goes: indices into the trace's calls.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Split {
    /// Replayed once, first (in trace order).
    pub setup: Vec<usize>,
    /// Replayed every iteration (in trace order).
    pub body: Vec<usize>,
    /// Frees and destroys: not replayed (the process ends after the iterations).
    pub teardown: Vec<usize>,
    /// Queries after the first launch: they change no device state and are left out.
    pub skipped: Vec<usize>,
}

fn is_launch(name: &str) -> bool {
    name.starts_with("cuLaunch") || name == "cuGraphLaunch"
}

/// The device address an allocation returned or a free released.
fn address(r: &CallRecord, sync: SyncClass) -> Option<u64> {
    let v = match sync {
        SyncClass::AllocatesDevice => r.results.first(),
        SyncClass::FreesDevice => r.args.first(),
        _ => None,
    }?;
    match v {
        gpuless_traces::Value::DevPtr(p) | gpuless_traces::Value::U64(p) => Some(*p),
        _ => None,
    }
}

/// Whether a handle creation depends on what the body does (graphs built by capture or node by
/// node, capture itself) and must stay in place instead of moving to the set-up.
fn body_bound(name: &str) -> bool {
    name.contains("Graph") || name.contains("Capture")
}

/// Splits `calls` into set-up, body and teardown. Everything before the first launch is
/// set-up, in order. After it: allocations, code loading and handle look-ups move to the set-up
/// (their addresses and handles stay valid for every iteration) and frees and destroys to the
/// teardown — except for addresses the body frees and allocates again, whose allocations and
/// frees stay in the body so each iteration balances; graph construction and stream capture
/// stay in the body in order. An upload before the first launch whose bytes the body uploads
/// over (an iterative program's first state, a solver's) is the body's first call: every
/// iteration starts from the bytes the recording's first launch read.
pub fn split(calls: &[CallRecord]) -> Split {
    let first_launch = calls.iter().position(|r| r.function.api().is_some_and(|f| is_launch(f.name)));
    let start = first_launch.unwrap_or(calls.len());
    let upload = |r: &CallRecord| {
        let f = r.function.api()?;
        plain_upload(f, r).map(|(dst, b)| (dst, dst.saturating_add(b.len)))
    };
    let body_uploads: Vec<(u64, u64)> = calls[start..].iter().filter_map(upload).collect();
    let uploaded_over =
        |r: &CallRecord| upload(r).is_some_and(|(a, b)| body_uploads.iter().any(|&(c, d)| a < d && c < b));
    // Addresses the body frees and then allocates again.
    let mut freed = std::collections::HashSet::new();
    let mut cycled = std::collections::HashSet::new();
    for r in &calls[start..] {
        let Some(f) = r.function.api() else { continue };
        match (f.sync, address(r, f.sync)) {
            (SyncClass::FreesDevice, Some(a)) => {
                freed.insert(a);
            }
            (SyncClass::AllocatesDevice, Some(a)) if freed.contains(&a) => {
                cycled.insert(a);
            }
            _ => {}
        }
    }
    let mut s = Split::default();
    for (i, r) in calls.iter().enumerate() {
        let Some(f) = r.function.api() else { continue };
        if i < start {
            if uploaded_over(r) {
                s.body.push(i);
            } else {
                s.setup.push(i);
            }
            continue;
        }
        let addr = address(r, f.sync);
        match f.sync {
            SyncClass::FreesDevice | SyncClass::AllocatesDevice if addr.is_some_and(|a| cycled.contains(&a)) => {
                s.body.push(i)
            }
            SyncClass::FreesDevice | SyncClass::DestroysHandle => s.teardown.push(i),
            // Queries change nothing on the device: replay skips them, the hot loop leaves them out.
            SyncClass::DeviceQuery | SyncClass::StateQuery | SyncClass::Local | SyncClass::AddressLookup => {
                s.skipped.push(i)
            }
            SyncClass::CreatesHandle if body_bound(f.name) => s.body.push(i),
            SyncClass::AllocatesDevice | SyncClass::CreatesHandle | SyncClass::HostMemory => s.setup.push(i),
            _ if f.name.contains("SetAttribute") || f.name.contains("SetCacheConfig") => s.setup.push(i),
            _ => s.body.push(i),
        }
    }
    s
}

/// Timing of the hot iterations.
#[derive(Debug, Default, Clone, Serialize)]
pub struct HotReport {
    /// Iterations timed (after one warm-up pass).
    pub iterations: u32,
    /// Records in the set-up and in the body.
    pub setup_calls: u64,
    /// See `setup_calls`.
    pub body_calls: u64,
    /// Kernel launches per iteration.
    pub body_launches: u64,
    /// Seconds the set-up took.
    pub setup_s: f64,
    /// Wall-clock milliseconds per iteration: median, minimum, mean.
    pub wall_ms_median: f64,
    /// See `wall_ms_median`.
    pub wall_ms_min: f64,
    /// See `wall_ms_median`.
    pub wall_ms_mean: f64,
    /// GPU milliseconds per iteration (CUDA events on the default stream), median.
    pub gpu_ms_median: f64,
    /// The body lowered to one CUDA graph per iteration, when it could be.
    pub graph: Option<super::lower::GraphTiming>,
    /// Why the body could not become a graph.
    pub graph_refused: Option<String>,
    /// GPU time per launch and per kernel (`--profile`).
    pub profile: Option<super::profile::Profile>,
}

pub use super::median::median;

#[cfg(test)]
mod tests {
    use gpuless_traces::{CallRecord, Function, Value};

    use super::*;

    fn rec(seq: u64, name: &str) -> CallRecord {
        let f = gpuless_analyzer::api::by_name(name).expect(name);
        CallRecord::new(seq, f.level, Function::Known(f.id))
    }

    #[test]
    fn allocations_after_the_first_launch_are_hoisted_and_frees_dropped() {
        let calls: Vec<CallRecord> = [
            "cuMemAlloc",
            "cuMemcpyHtoD",
            "cuLaunchKernel",
            "cuMemAlloc",
            "cuMemcpyHtoD",
            "cuLaunchKernel",
            "cuMemcpyDtoH",
            "cuMemFree",
        ]
        .iter()
        .enumerate()
        .map(|(i, n)| rec(i as u64, n))
        .collect();
        let s = split(&calls);
        assert_eq!(s.setup, [0, 1, 3]);
        assert_eq!(s.body, [2, 4, 5, 6]);
        assert_eq!(s.teardown, [7]);
    }

    fn with_ptr(mut r: CallRecord, p: u64) -> CallRecord {
        if r.function.name().starts_with("cuMemAlloc") {
            r.results = vec![Value::DevPtr(p)];
        } else {
            r.args = vec![Value::DevPtr(p)];
        }
        r
    }

    /// An address the body frees and allocates again keeps its allocation and free in the body
    /// (each iteration balances); before the first launch everything stays in order.
    #[test]
    fn recycled_addresses_and_capture_stay_in_the_body() {
        let names = [
            ("cuMemAlloc", 0xa),
            ("cuMemFree", 0xa),
            ("cuMemAlloc", 0xa),
            ("cuLaunchKernel", 0),
            ("cuMemFree", 0xa),
            ("cuMemAlloc", 0xa),
            ("cuStreamBeginCapture", 0),
            ("cuStreamEndCapture", 0),
            ("cuGraphInstantiateWithFlags", 0),
            ("cuGraphLaunch", 0),
            ("cuMemAlloc", 0xb),
            ("cuMemFree", 0xb),
        ];
        let calls: Vec<CallRecord> =
            names.iter().enumerate().map(|(i, &(n, p))| with_ptr(rec(i as u64, n), p)).collect();
        let s = split(&calls);
        assert_eq!(s.setup, [0, 1, 2, 10]);
        assert_eq!(s.body, [3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(s.teardown, [11]);
    }

    fn upload(seq: u64, dst: u64, len: u64) -> CallRecord {
        let mut r = rec(seq, "cuMemcpyHtoD");
        let blob = gpuless_traces::BlobRef { hash: Default::default(), len };
        r.args = vec![Value::DevPtr(dst), Value::Blob(blob), Value::U64(len)];
        r
    }

    /// A solver's first state, uploaded before the first launch into the buffer the body
    /// uploads every later state into, starts every iteration; an upload the body leaves alone
    /// (weights) stays in the set-up.
    #[test]
    fn uploads_the_body_uploads_over_start_the_body() {
        let calls = vec![
            with_ptr(rec(0, "cuMemAlloc"), 0x1000),
            upload(1, 0x1000, 256),
            upload(2, 0x2000, 64),
            upload(3, 0x3000, 64),
            rec(4, "cuLaunchKernel"),
            upload(5, 0x1080, 16),
            rec(6, "cuLaunchKernel"),
            upload(7, 0x3000 - 8, 16),
        ];
        let s = split(&calls);
        assert_eq!(s.setup, [0, 2]);
        assert_eq!(s.body, [1, 3, 4, 5, 6, 7]);
    }
}
