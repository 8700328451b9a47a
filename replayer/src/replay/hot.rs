//! `--iterations N`: the trace split into set-up (context, code, allocations, uploads before
//! the first launch, every handle creation) and body (the rest: launches, copies, sets,
//! synchronizations), the body replayed N times after one verified warm-up pass, each
//! iteration timed with CUDA events and the wall clock.

use gpuless_analyzer::api::SyncClass;
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

/// Splits `calls` into set-up, body and teardown.
pub fn split(calls: &[CallRecord]) -> Split {
    let first_launch = calls.iter().position(|r| r.function.api().is_some_and(|f| is_launch(f.name)));
    let mut s = Split::default();
    for (i, r) in calls.iter().enumerate() {
        let Some(f) = r.function.api() else { continue };
        let before = first_launch.is_none_or(|l| i < l);
        match f.sync {
            SyncClass::FreesDevice | SyncClass::DestroysHandle => s.teardown.push(i),
            // Queries change nothing on the device: replay skips them, the hot loop leaves them out.
            SyncClass::DeviceQuery | SyncClass::StateQuery | SyncClass::Local | SyncClass::AddressLookup if !before => {
                s.skipped.push(i)
            }
            SyncClass::AllocatesDevice | SyncClass::CreatesHandle | SyncClass::HostMemory => s.setup.push(i),
            _ if before || f.name.contains("SetAttribute") || f.name.contains("SetCacheConfig") => s.setup.push(i),
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
}

/// Median of `v` (sorted in place).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use gpuless_traces::{CallRecord, Function};

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
}
