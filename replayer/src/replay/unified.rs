//! `cuMemcpy` and `cuMemcpyAsync` (`anybuf` arguments): copies between unified addresses, whose
//! direction the recorder wrote into the values (`recorder/src/unified.rs`). A device side is a
//! `DevPtr` (translated like any); a host source is its stored bytes (a blob); a host
//! destination is a `HostPtr` whose result — the bytes the copy brought — is compared as a
//! device-to-host copy's is. A trace from before host sides were recorded holds two `DevPtr`s:
//! a device-to-device copy, as it was replayed then.

use cudarc::driver::sys;
use gpuless_traces::Value;

use super::args::{word, Call};
use super::blobs::blob;
use super::objects::{capturing, Pending};
use super::results::{dtoh_async_at, first_result, mirror_output, verify_value};
use super::{check, LoadedTrace, ReplayError, Report, State};

/// Replays one `cuMemcpy` / `cuMemcpyAsync` record.
///
/// # Safety
/// A current context; the record's device addresses are the replay's (translated here).
pub(super) unsafe fn copy(
    st: &mut State,
    c: &Call<'_>,
    trace: &LoadedTrace,
    report: &mut Report,
) -> Result<(), ReplayError> {
    let (seq, name) = (c.rec.seq, c.f.name);
    let n = c.word("ByteCount")? as usize;
    // The recorded stream of an async copy; a synchronous one runs on the stream a hot
    // replay's capture substitutes, if any.
    let rec_stream = c.arg("hStream").map(|v| word(v).ok_or_else(|| c.missing("hStream"))).transpose()?;
    let stream = match rec_stream {
        Some(s) => Some(st.stream(s)?),
        None => st.stream_override.filter(|&s| capturing(s)),
    };
    let dst = c.arg("dst").ok_or_else(|| c.missing("dst"))?;
    let src = c.arg("src").ok_or_else(|| c.missing("src"))?;
    let host_src = matches!(src, Value::Blob(_));
    // SAFETY (block): copies into buffers that outlive them (blob bytes live as long as the
    // trace, pinned buffers as long as the replay's objects), on live streams.
    unsafe {
        match (dst, host_src) {
            // Host to host: nothing on the device; the result is the source's bytes.
            (Value::HostPtr(_), true) => {
                let data = blob(trace, c, Some(src))?;
                first_result(report);
                verify_value(st, seq, name, c.result("dst"), data, trace, report);
            }
            (Value::HostPtr(_), false) => {
                let from = st.mem.translate(word(src).ok_or_else(|| c.missing("src"))?);
                match (rec_stream, stream) {
                    (Some(rec_s), _) => dtoh_async_at(st, c, from, n, rec_s, "dst", trace, report)?,
                    (None, Some(s)) => {
                        let host = st.objects.pinned(n, seq)?;
                        check(sys::cuMemcpyDtoHAsync_v2(host.cast(), from, n, s), seq, name)?;
                        let want = c.result("dst").cloned();
                        st.objects.defer(Pending { seq, what: name, stream: 0, live_stream: s, host, len: n, want });
                    }
                    (None, None) => {
                        let mut host = vec![0u8; n];
                        check(sys::cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), from, n), seq, name)?;
                        first_result(report);
                        mirror_output(st, c, "dst", &host, report)?;
                        verify_value(st, seq, name, c.result("dst"), &host, trace, report);
                    }
                }
            }
            (d, true) => {
                let data = blob(trace, c, Some(src))?;
                let to = st.mem.translate(word(d).ok_or_else(|| c.missing("dst"))?);
                match stream {
                    Some(s) => {
                        let from = if capturing(s) { st.objects.stage(data, seq)? } else { data.as_ptr() };
                        check(sys::cuMemcpyHtoDAsync_v2(to, from.cast(), data.len(), s), seq, name)?;
                    }
                    None => {
                        check(sys::cuMemcpyHtoD_v2(to, data.as_ptr().cast(), data.len()), seq, name)?;
                        st.copied_in();
                    }
                }
            }
            (d, false) => {
                let to = st.mem.translate(word(d).ok_or_else(|| c.missing("dst"))?);
                let from = st.mem.translate(word(src).ok_or_else(|| c.missing("src"))?);
                match rec_stream {
                    Some(_) => {
                        let s = stream.unwrap_or(std::ptr::null_mut());
                        check(sys::cuMemcpyDtoDAsync_v2(to, from, n, s), seq, name)?;
                    }
                    None => check(sys::cuMemcpyDtoD_v2(to, from, n), seq, name)?,
                }
            }
        }
    }
    Ok(())
}
