//! `--profile`: where a hot body's GPU time goes. After the timed iterations the body is
//! replayed a few more times on one stream with a pair of CUDA events around every launch; each
//! launch's GPU time is reported, and the launches are summed per kernel.
//!
//! One stream serializes what the recording ran on several; the sums are the kernels' own time
//! (plus the gap the GPU needs between two dependent kernels), not the body's wall time.

use std::collections::HashMap;

use cudarc::driver::sys;
use serde::Serialize;

use super::objects::SyncPoint;
use super::{exec, median, LoadedTrace, Report, State};

/// GPU time of one kernel's launches in the body.
#[derive(Debug, Clone, Serialize)]
pub struct KernelTime {
    /// The kernel's name (mangled, as recorded).
    pub name: String,
    /// Launches of it per iteration.
    pub launches: u64,
    /// Microseconds per iteration over all its launches (median over the passes).
    pub total_us: f64,
    /// Share of the body's summed launch time, in percent.
    pub percent: f64,
}

/// The profile of a hot body.
#[derive(Debug, Clone, Serialize)]
pub struct Profile {
    /// Passes over the body that were timed.
    pub passes: u32,
    /// Launches per pass.
    pub launches: u64,
    /// Sum of every launch's GPU time per pass, microseconds (median over the passes).
    pub launch_us: f64,
    /// Per kernel, most time first.
    pub kernels: Vec<KernelTime>,
    /// Every launch of the body in order: sequence number, kernel, microseconds (median).
    pub per_launch: Vec<(u64, String, f64)>,
}

fn waits(rec: &gpuless_traces::CallRecord) -> bool {
    use gpuless_analyzer::api::SyncClass;
    rec.function
        .api()
        .is_some_and(|f| matches!(f.sync, SyncClass::CtxSync | SyncClass::StreamSync | SyncClass::EventSync))
}

/// Replays `body` `passes` times on one stream with events around each launch.
pub(crate) fn run(
    st: &mut State,
    trace: &LoadedTrace,
    report: &mut Report,
    body: &[usize],
    passes: u32,
) -> Result<Profile, String> {
    let e = |what: &str, r: sys::CUresult| format!("{what} failed with {r:?}");
    let ok = |what: &str, r: sys::CUresult| if r == sys::CUresult::CUDA_SUCCESS { Ok(()) } else { Err(e(what, r)) };
    let launches_before = report.launches;
    let mut seqs = Vec::new();
    let mut times: Vec<Vec<f64>> = Vec::new();
    // SAFETY (whole function): driver calls on a stream and events created and destroyed here.
    unsafe {
        let mut s = std::ptr::null_mut();
        ok("cuStreamCreate", sys::cuStreamCreate(&mut s, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32))?;
        let mut events: Vec<sys::CUevent> = Vec::new();
        let result = (|| -> Result<(), String> {
            for pass in 0..passes {
                st.stream_override = Some(s);
                let mut k = 0usize;
                for &i in body {
                    let rec = &trace.calls[i];
                    if waits(rec) {
                        continue;
                    }
                    let before = report.launches;
                    while events.len() < 2 * (k + 1) {
                        let mut ev = std::ptr::null_mut();
                        ok("cuEventCreate", sys::cuEventCreate(&mut ev, 0))?;
                        events.push(ev);
                    }
                    ok("cuEventRecord", sys::cuEventRecord(events[2 * k], s))?;
                    exec::call(st, trace, rec, report).map_err(|err| err.to_string())?;
                    if report.launches == before {
                        continue;
                    }
                    ok("cuEventRecord", sys::cuEventRecord(events[2 * k + 1], s))?;
                    if pass == 0 {
                        let name = st.recent.back().map(|&h| st.kernel_name(h)).unwrap_or_default();
                        seqs.push((rec.seq, name));
                        times.push(Vec::new());
                    }
                    k += 1;
                }
                st.stream_override = None;
                ok("cuStreamSynchronize", sys::cuStreamSynchronize(s))?;
                // Results copied back in this pass are not compared: the timed iterations were.
                drop(st.objects.complete(SyncPoint::Stream(1)));
                for (j, t) in times.iter_mut().enumerate().take(k) {
                    let mut ms = 0f32;
                    ok("cuEventElapsedTime", sys::cuEventElapsedTime_v2(&mut ms, events[2 * j], events[2 * j + 1]))?;
                    t.push(f64::from(ms) * 1e3);
                }
            }
            Ok(())
        })();
        st.stream_override = None;
        for ev in events {
            sys::cuEventDestroy_v2(ev);
        }
        sys::cuStreamDestroy_v2(s);
        result?;
    }
    let launches = (report.launches - launches_before) / u64::from(passes.max(1));
    let per_launch: Vec<(u64, String, f64)> =
        seqs.into_iter().zip(times).map(|((seq, name), mut t)| (seq, name, median::median(&mut t))).collect();
    let launch_us: f64 = per_launch.iter().map(|l| l.2).sum();
    let mut by_name: HashMap<&str, (u64, f64)> = HashMap::new();
    for (_, name, us) in &per_launch {
        let e = by_name.entry(name).or_default();
        e.0 += 1;
        e.1 += us;
    }
    let mut kernels: Vec<KernelTime> = by_name
        .into_iter()
        .map(|(name, (n, us))| KernelTime {
            name: name.to_string(),
            launches: n,
            total_us: us,
            percent: if launch_us > 0.0 { 100.0 * us / launch_us } else { 0.0 },
        })
        .collect();
    kernels.sort_by(|a, b| b.total_us.total_cmp(&a.total_us));
    Ok(Profile { passes, launches, launch_us, kernels, per_launch })
}
