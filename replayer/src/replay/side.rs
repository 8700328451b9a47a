//! The side branch of a hot body's graph, on the device: the body's first pass with each call's
//! effects recorded ([`first_pass`]), and the plan that moves launches whose inputs the body
//! never writes onto a branch of their own ([`plan`], analysis in `dataflow.rs`), each writing a
//! buffer of its own that its readers are pointed at.

use cudarc::driver::sys;
use gpuless_analyzer::api::Group;
use gpuless_traces::{CallRecord, Value};

use super::blockhash::Hasher;
use super::dataflow::{self, Effect, SideLaunch};
use super::{exec, LoadedTrace, ReplayError, Report, State};

/// Parameter words and pointer arguments of `rec` that point into device memory.
fn words(st: &State, rec: &CallRecord) -> Vec<u64> {
    let device = |v: u64| st.mem.find(v).is_some();
    let scan = |b: &[u8]| -> Vec<u64> {
        b.chunks_exact(8)
            .map(|w| u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]))
            .filter(|&v| device(v))
            .collect()
    };
    let mut out = Vec::new();
    for a in &rec.args {
        match a {
            Value::KernelParams(kp) => out.extend(scan(&kp.bytes)),
            Value::Bytes(b) => out.extend(scan(b)),
            Value::DevPtr(p) | Value::U64(p) if device(*p) => out.push(*p),
            _ => {}
        }
    }
    out
}

/// The body's first pass after the set-up (its warm-up), with what each call did when the
/// device can tell (`None`: it could not, the pass ran plainly).
pub(crate) fn first_pass(
    st: &mut State,
    trace: &LoadedTrace,
    report: &mut Report,
    body: &[usize],
) -> Result<Option<Vec<Effect>>, ReplayError> {
    // Hashing all memory after every launch, copy and set: skipped when that would read more
    // than this many bytes (about a second on a current GPU).
    const MAX_BYTES_READ: u64 = 2 << 40;
    let touching = body
        .iter()
        .filter(|&&i| {
            trace.calls[i].function.api().is_some_and(|f| matches!(f.group, Group::Launch | Group::Copy | Group::Set))
        })
        .count() as u64;
    let bytes: u64 = st.mem.ranges().iter().map(|r| r.2).sum();
    let mut hasher = if touching.saturating_mul(bytes) <= MAX_BYTES_READ { Hasher::new(&st.mem).ok() } else { None };
    let mut effects = Vec::with_capacity(body.len());
    for &i in body {
        let rec = &trace.calls[i];
        exec::call(st, trace, rec, report)?;
        let Some(h) = hasher.as_mut() else { continue };
        let group = rec.function.api().map(|f| f.group);
        let mut e = Effect { launch: group == Some(Group::Launch), words: words(st, rec), writes: Vec::new() };
        if matches!(group, Some(Group::Launch | Group::Copy | Group::Set)) {
            // SAFETY: waits for the call just made.
            let synced = unsafe { sys::cuCtxSynchronize() } == sys::CUresult::CUDA_SUCCESS;
            match h.changes() {
                Ok(w) if synced => e.writes = w,
                _ => {
                    hasher = None;
                    continue;
                }
            }
        }
        effects.push(e);
    }
    Ok(hasher.is_some().then_some(effects))
}

/// Launches moved to the side branch, with their buffers.
pub(crate) struct Plan {
    /// In body order.
    pub side: Vec<SideLaunch>,
    buffers: Vec<sys::CUdeviceptr>,
    /// Bytes of the buffers.
    pub bytes: u64,
    /// Candidates the device check turned down (they read their output's old bytes).
    pub rejected: u64,
}

impl Plan {
    /// Frees the buffers and forgets the relocations.
    pub fn drop_from(self, st: &mut State) {
        st.relocations.clear();
        for b in self.buffers {
            // SAFETY: buffers allocated by `plan`, no longer used by any graph.
            unsafe { sys::cuMemFree_v2(b) };
        }
    }
}

fn ok(what: &str, r: sys::CUresult) -> Result<(), String> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what} failed with {r:?}"))
    }
}

/// Runs launch `rec` alone into `buf` filled with `fill` first; the bytes it leaves there.
fn run_alone(
    st: &mut State,
    trace: &LoadedTrace,
    report: &mut Report,
    rec: &CallRecord,
    buf: sys::CUdeviceptr,
    len: usize,
    fill: u8,
) -> Result<Vec<u8>, String> {
    let mut host = vec![0u8; len];
    // SAFETY: our own buffer of `len` bytes; the launch writes only there (its output was
    // relocated) and reads memory the body never writes.
    unsafe {
        ok("cuMemsetD8", sys::cuMemsetD8_v2(buf, fill, len))?;
        ok("cuCtxSynchronize", sys::cuCtxSynchronize())?;
        exec::call(st, trace, rec, report).map_err(|e| e.to_string())?;
        ok("cuCtxSynchronize", sys::cuCtxSynchronize())?;
        ok("cuMemcpyDtoH", sys::cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), buf, len))?;
    }
    Ok(host)
}

/// The side branch for `body` given its first pass's effects: a buffer per moved launch, and
/// the relocations that point the launch and its readers there (in `st`). A candidate whose
/// output depends on the bytes its output range held before (it works in place) stays.
pub(crate) fn plan(
    st: &mut State,
    trace: &LoadedTrace,
    report: &mut Report,
    body: &[usize],
    effects: &[Effect],
) -> Result<Plan, String> {
    let mut plan = Plan { side: Vec::new(), buffers: Vec::new(), bytes: 0, rejected: 0 };
    let launches_before = report.launches;
    for l in dataflow::side_launches(effects) {
        let len = (l.out.1 - l.out.0) as usize;
        let mut buf = 0;
        // SAFETY: an out-pointer for a new allocation.
        if let Err(e) = ok("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut buf, len) }) {
            // The buffers placed so far go back with their relocations.
            plan.drop_from(st);
            return Err(e);
        }
        let rec = &trace.calls[body[l.call]];
        st.relocations.entry(rec.seq).or_default().push((l.out, buf));
        let zero = run_alone(st, trace, report, rec, buf, len, 0);
        let ones = run_alone(st, trace, report, rec, buf, len, 0xff);
        let keep = matches!((&zero, &ones), (Ok(a), Ok(b)) if a == b);
        if !keep {
            st.relocations.remove(&rec.seq);
            // SAFETY: allocated above, unused.
            unsafe { sys::cuMemFree_v2(buf) };
            plan.rejected += 1;
            continue;
        }
        for &r in &l.readers {
            st.relocations.entry(trace.calls[body[r]].seq).or_default().push((l.out, buf));
        }
        plan.bytes += len as u64;
        plan.buffers.push(buf);
        plan.side.push(l);
    }
    // The check's launches are not the body's.
    report.launches = launches_before;
    Ok(plan)
}
