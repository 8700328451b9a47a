//! Downloads whose destination a later download overwrites before a synchronization covers the
//! first. An async device-to-host copy's result is hashed when a synchronization covers it
//! (`pending.rs`); by then a later copy on the same stream into the same host memory may have
//! overwritten it, and the earlier record would carry the later copy's bytes, which no replay
//! reproduces (a replay compares each copy as it completes). simpleStreams does this: ten rounds
//! of a kernel and a download per stream into the same pinned buffer, one synchronization at
//! the end. So before such a later copy a host function of the recorder's is queued on the
//! stream: it runs when the stream reaches it — after the earlier copy, before the later one —
//! and keeps the earlier copy's bytes for its record. Not on a capturing stream (it would add a
//! node to the program's graph), and only for copies on the same stream (between streams the
//! program orders nothing, natively either).

use std::ffi::c_void;
use std::sync::OnceLock;

use cudarc::driver::sys;
use gpuless_analyzer::api::ApiFunction;
use gpuless_traces::Value;

use crate::driver::libcuda_symbol;

type LaunchHostFunc =
    unsafe extern "C" fn(sys::CUstream, Option<unsafe extern "C" fn(*mut c_void)>, *mut c_void) -> u32;

/// The bytes of an earlier copy's destination, taken when the stream reached the host function.
struct Kept {
    ptr: u64,
    bytes: Vec<u8>,
}

unsafe extern "C" fn keep(ud: *mut c_void) {
    // SAFETY: a `Kept` `before_copy` leaked for this host function, alive until its record is
    // written after a synchronization (never freed if none comes).
    let k = unsafe { &mut *(ud as *mut Kept) };
    // SAFETY: the program's destination of `bytes.len()` bytes, which the earlier copy wrote.
    unsafe { std::ptr::copy_nonoverlapping(k.ptr as *const u8, k.bytes.as_mut_ptr(), k.bytes.len()) };
}

fn launch_host_func() -> Option<LaunchHostFunc> {
    static F: OnceLock<Option<LaunchHostFunc>> = OnceLock::new();
    *F.get_or_init(|| {
        let p = libcuda_symbol("cuLaunchHostFunc\0");
        // SAFETY: libcuda's cuLaunchHostFunc has this C signature.
        (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, LaunchHostFunc>(&p) })
    })
}

/// Before `f` runs: for a `cuMemcpyDtoHAsync` on a stream that is not capturing, every copy
/// still pending on that stream whose destination overlaps this one's gets its bytes kept by a
/// host function queued now, just before this copy.
///
/// # Safety
/// `raw` are the program's arguments to `f`.
pub unsafe fn before_copy(f: &ApiFunction, raw: &[u64]) {
    if f.name != "cuMemcpyDtoHAsync" {
        return;
    }
    let arg = |name: &str| f.args.iter().position(|a| a.name == name).and_then(|i| raw.get(i).copied());
    let (Some(dst), Some(n), Some(stream)) = (arg("dstHost"), arg("ByteCount"), arg("hStream")) else { return };
    if dst == 0 || n == 0 || !crate::pending::any_on(stream) {
        return;
    }
    let Some(r) = crate::real::get() else { return };
    let mut cap = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the program's stream; a valid out-pointer.
    let st = unsafe { (r.stream_is_capturing)(stream as sys::CUstream, &mut cap) };
    if st != sys::CUresult::CUDA_SUCCESS || cap != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
        return;
    }
    let Some(launch) = launch_host_func() else { return };
    crate::pending::overlapping(stream, dst, n, |ptr, len| {
        let kept = Box::into_raw(Box::new(Kept { ptr, bytes: vec![0; len] }));
        // SAFETY: the program's stream; our function and its data, alive as said at `keep`.
        if unsafe { launch(stream as sys::CUstream, Some(keep), kept.cast()) } != 0 {
            // SAFETY: not queued: ours to free.
            drop(unsafe { Box::from_raw(kept) });
            return None;
        }
        let at = kept as usize;
        Some(crate::pending::Kept(Box::new(move || finish(at))))
    });
}

/// The result of a copy whose bytes were kept (`kept`, the `Kept` of [`before_copy`]), once a
/// synchronization covered it (its host function ran before).
fn finish(kept: usize) -> Value {
    // SAFETY: the `Kept` of `before_copy`; its host function ran before the synchronization.
    let k = unsafe { Box::from_raw(kept as *mut Kept) };
    // SAFETY: our own bytes.
    unsafe { crate::unified::written(k.bytes.as_ptr() as u64, k.bytes.len()) }
}
