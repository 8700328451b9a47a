//! Results that reach the host at replay and their comparison with the recording: device-to-host
//! copies on their recorded streams (deferred to the synchronization that covers them inside a
//! capture), a client's copies into memory it shares with the device, the deferred results a
//! recorded synchronization covers, and the time of the first result.

use cudarc::driver::sys;
use gpuless_traces::{Hash128, Value};

use super::args::Call;
use super::objects::{capturing, Pending, SyncPoint};
use super::{check, LoadedTrace, ReplayError, Report, State};

/// Notes the time of the replay's first result (`Report::first_result_s`) once.
pub(crate) fn first_result(report: &mut Report) {
    if report.first_result_s.is_none() {
        report.first_result_s = Some(super::since_process_start());
    }
}

/// An async device-to-host copy on its recorded stream. Outside a capture it is waited for and
/// compared at once (the host buffer is pageable, so the copy completes before the call
/// returns anyway); inside one it becomes a graph node writing a pinned buffer, compared at the
/// synchronization that covers the stream, as the recorder hashed it.
pub(super) unsafe fn dtoh_async(
    st: &mut State,
    c: &Call<'_>,
    trace: &LoadedTrace,
    report: &mut Report,
) -> Result<(), ReplayError> {
    let n = c.word("ByteCount")? as usize;
    let src = st.mem.translate(c.word("srcDevice")?);
    // SAFETY: forwarded.
    unsafe { dtoh_async_at(st, c, src, n, c.word("hStream")?, "dstHost", trace, report) }
}

/// A device-to-host copy into memory the host shares with the device: the device's copy of
/// that range gets the bytes too.
///
/// - A client's (managed or mirrored pinned memory): the client writes them without marking
///   them to be sent back (`remote/shared.rs`, `write_synced`).
/// - A local replay's: host memory mapped for the device (or pinned memory a kernel reached) is
///   device memory at its address here, and the recorded download landed in the memory the
///   program's kernels and its host view (`gpulessHostView`) see (simpleStreams downloads into
///   memory registered with `cudaHostRegisterMapped`).
pub(super) fn mirror_output(
    st: &mut State,
    c: &Call<'_>,
    arg: &str,
    host: &[u8],
    report: &Report,
) -> Result<(), ReplayError> {
    let Some(&Value::HostPtr(a)) = c.arg(arg) else { return Ok(()) };
    if report.outputs.is_none() {
        let Some(region) = st.mem.find(a) else { return Ok(()) };
        if a + host.len() as u64 > region.recorded + region.size {
            return Ok(());
        }
        let live = region.live + (a - region.recorded);
        // SAFETY: device memory this replay made for the range, `host.len()` bytes there.
        check(unsafe { sys::cuMemcpyHtoD_v2(live, host.as_ptr().cast(), host.len()) }, c.rec.seq, c.f.name)?;
        st.copied_in();
        return Ok(());
    }
    if !st.managed.covers(a, host.len()) {
        return Ok(());
    }
    let live = st.mem.translate(a);
    st.managed.write(a, host, live, c.rec)
}

/// [`dtoh_async`] of `n` bytes from live address `src` on recorded stream `rec_s`, compared
/// with the result named `result`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn dtoh_async_at(
    st: &mut State,
    c: &Call<'_>,
    src: u64,
    n: usize,
    rec_s: u64,
    result: &str,
    trace: &LoadedTrace,
    report: &mut Report,
) -> Result<(), ReplayError> {
    let (seq, name) = (c.rec.seq, c.f.name);
    let stream = st.stream(rec_s)?;
    // SAFETY (block): copies into buffers that outlive them, on a live stream.
    unsafe {
        if capturing(stream) {
            let host = st.objects.pinned(n, seq)?;
            check(sys::cuMemcpyDtoHAsync_v2(host.cast(), src, n, stream), seq, name)?;
            if report.outputs.is_some() {
                // A client's session: the copy runs at every launch of the graph, and its bytes
                // go back after each (`exec_graph`'s launch).
                let out = super::objects::GraphOutput { seq, what: name, host, len: n };
                st.objects.graph_outputs.capturing.entry(rec_s).or_default().push(out);
                return Ok(());
            }
            let want = c.result(result).cloned();
            st.objects.defer(Pending { seq, what: name, stream: rec_s, live_stream: stream, host, len: n, want });
            return Ok(());
        }
        let mut host = vec![0u8; n];
        check(sys::cuMemcpyDtoHAsync_v2(host.as_mut_ptr().cast(), src, n, stream), seq, name)?;
        check(sys::cuStreamSynchronize(stream), seq, name)?;
        first_result(report);
        mirror_output(st, c, result, &host, report)?;
        verify_value(st, seq, name, c.result(result), &host, trace, report);
    }
    Ok(())
}

/// Compares the deferred results a recorded synchronization covers.
pub(super) unsafe fn complete(
    st: &mut State,
    at: SyncPoint,
    trace: &LoadedTrace,
    report: &mut Report,
) -> Result<(), ReplayError> {
    for p in st.objects.complete(at) {
        // A stream the program destroyed since (its work still completes): the context is
        // waited for instead of a handle the driver freed.
        let alive = (p.live_stream as usize) <= 2 || st.streams.values().any(|&l| l == p.live_stream);
        // SAFETY: the buffer is pinned memory owned by the replay; the stream (or the context)
        // is waited for.
        let host = unsafe {
            let r = if alive { sys::cuStreamSynchronize(p.live_stream) } else { sys::cuCtxSynchronize() };
            check(r, p.seq, p.what)?;
            std::slice::from_raw_parts(p.host, p.len)
        };
        first_result(report);
        verify_value(st, p.seq, p.what, p.want.as_ref(), host, trace, report);
    }
    Ok(())
}

pub(super) fn verify(st: &State, c: &Call<'_>, host: &[u8], trace: &LoadedTrace, report: &mut Report) {
    verify_value(st, c.rec.seq, c.f.name, c.result("dstHost"), host, trace, report);
}

/// Compares bytes that reached the host at replay with the recorded result `recorded` (a
/// digest, or the bytes with `--capture-outputs`).
pub(crate) fn verify_value(
    st: &State,
    seq: u64,
    what: &str,
    recorded: Option<&Value>,
    host: &[u8],
    trace: &LoadedTrace,
    report: &mut Report,
) {
    if let Some(o) = report.outputs.as_mut() {
        o.push((seq, host.to_vec()));
    }
    if st.opts.no_verify {
        return;
    }
    let want = match recorded {
        Some(Value::Digest(d)) => Some((d.hash, d.len)),
        Some(Value::Blob(b)) => Some((b.hash, b.len)),
        _ => None,
    };
    let Some((hash, len)) = want.filter(|_| !st.shared_with_processes) else {
        report.results_unverified += 1;
        return;
    };
    let got = Hash128::of(host);
    if got == hash && len == host.len() as u64 {
        report.results_verified += 1;
        return;
    }
    let recent: Vec<String> = st.recent.iter().map(|&h| st.kernel_name(h)).collect();
    let detail = match recorded {
        Some(Value::Blob(b)) => trace.blobs.get(&b.hash).and_then(|want| {
            want.iter().zip(host).position(|(a, b)| a != b).map(|i| format!(", first differing byte at {i}"))
        }),
        _ => None,
    };
    report.mismatches.push(format!(
        "call #{} {}: {} bytes differ from the recording{} (last kernels: {})",
        seq,
        what,
        host.len(),
        detail.unwrap_or_default(),
        if recent.is_empty() { "none".into() } else { recent.join(", ") }
    ));
}
