//! Copies from pinned memory that read their source late (issue 35). The driver reads a
//! `cuMemcpyHtoDAsync` from pinned memory when its stream reaches it, not at the call; a host
//! function queued before it (`cuLaunchHostFunc`, `cuStreamAddCallback`) may write that memory
//! first. While a program host function may still be pending, such a copy's source is read by a
//! host function of the recorder's queued just before the copy on the same stream, and the
//! copy's record waits (`pending.rs`) until a synchronization guarantees the bytes were taken:
//! the trace holds what the device received. Not on a capturing stream (it would add a node to
//! the program's graph): a captured copy keeps the bytes at the call.

use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys;
use gpuless_analyzer::api::ApiFunction;
use gpuless_traces::{BlobKind, CallRecord};

use crate::driver::libcuda_symbol;

type LaunchHostFunc =
    unsafe extern "C" fn(sys::CUstream, Option<unsafe extern "C" fn(*mut c_void)>, *mut c_void) -> u32;
type PointerGetAttribute = unsafe extern "C" fn(*mut c_void, u32, u64) -> u32;

/// Streams with a program host function queued since they last synchronized.
static STREAMS: Mutex<Option<HashSet<u64>>> = Mutex::new(None);

fn streams<T>(f: impl FnOnce(&mut HashSet<u64>) -> T) -> T {
    let mut g = STREAMS.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(HashSet::new))
}

/// A successful `cuLaunchHostFunc` / `cuStreamAddCallback` on `stream`: pending until the
/// stream synchronizes (one on a capturing stream is a graph's node: not pending now).
pub fn host_function(stream: u64) {
    if let Some(r) = crate::real::get() {
        let mut cap = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: the program's stream; a valid out-pointer.
        let st = unsafe { (r.stream_is_capturing)(stream as sys::CUstream, &mut cap) };
        if st == sys::CUresult::CUDA_SUCCESS && cap != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
            return;
        }
    }
    streams(|s| s.insert(stream));
}

/// A synchronization: of one stream, or (`None`) of the context.
pub fn synchronized(stream: Option<u64>) {
    streams(|s| match stream {
        Some(x) => {
            s.remove(&x);
        }
        None => s.clear(),
    });
}

/// What a late read fills: the source, and the bytes taken when the stream reached the copy.
struct Snap {
    src: u64,
    bytes: Vec<u8>,
}

unsafe extern "C" fn snapshot(ud: *mut c_void) {
    // SAFETY: a `Snap` `before_copy` leaked for this host function, alive until its record is
    // written after a synchronization (never freed if none comes).
    let s = unsafe { &mut *(ud as *mut Snap) };
    // SAFETY: the program's pinned source of `bytes.len()` bytes, which the copy after this
    // function reads too.
    unsafe { std::ptr::copy_nonoverlapping(s.src as *const u8, s.bytes.as_mut_ptr(), s.bytes.len()) };
}

/// A copy whose source is read late: which argument its bytes go to, and the read.
pub struct Late {
    arg: usize,
    snap: usize,
}

fn symbol<T: Copy>(cell: &'static OnceLock<Option<T>>, name: &str) -> Option<T> {
    *cell.get_or_init(|| {
        let p = libcuda_symbol(name);
        // SAFETY: libcuda's export of this name has the C signature of `T`.
        (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
    })
}

/// Before `f` runs: for a `cuMemcpyHtoDAsync` from pinned memory on a stream that is not
/// capturing, while a program host function may be pending, queues the recorder's read of the
/// source just before the copy. `None` when the call's bytes are right at the call.
///
/// # Safety
/// `raw` are the program's arguments to `f`.
pub unsafe fn before_copy(f: &ApiFunction, raw: &[u64]) -> Option<Late> {
    static LAUNCH: OnceLock<Option<LaunchHostFunc>> = OnceLock::new();
    static ATTR: OnceLock<Option<PointerGetAttribute>> = OnceLock::new();
    if f.name != "cuMemcpyHtoDAsync" || streams(|s| s.is_empty()) {
        return None;
    }
    let arg = f.args.iter().position(|a| a.name == "srcHost")?;
    let (src, n) = (*raw.get(arg)?, *raw.get(f.args.iter().position(|a| a.name == "ByteCount")?)? as usize);
    let stream = *raw.get(f.args.iter().position(|a| a.name == "hStream")?)?;
    if src == 0 || n == 0 {
        return None;
    }
    // Pinned memory is host memory the driver knows (pageable memory is read at the call).
    let mut ty = 0u32;
    let attr = symbol(&ATTR, "cuPointerGetAttribute\0")?;
    // SAFETY: a valid out-pointer for CU_POINTER_ATTRIBUTE_MEMORY_TYPE (2).
    if unsafe { attr((&mut ty as *mut u32).cast(), 2, src) } != 0 || ty != 1 {
        return None;
    }
    let r = crate::real::get()?;
    let mut cap = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the program's stream; a valid out-pointer.
    let st = unsafe { (r.stream_is_capturing)(stream as sys::CUstream, &mut cap) };
    if st != sys::CUresult::CUDA_SUCCESS || cap != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
        return None;
    }
    let launch = symbol(&LAUNCH, "cuLaunchHostFunc\0")?;
    let snap = Box::into_raw(Box::new(Snap { src, bytes: vec![0; n] }));
    // SAFETY: the program's stream; our function and its data, alive as said at `snapshot`.
    if unsafe { launch(stream as sys::CUstream, Some(snapshot), snap.cast()) } != 0 {
        // SAFETY: not queued: ours to free.
        drop(unsafe { Box::from_raw(snap) });
        return None;
    }
    Some(Late { arg, snap: snap as usize })
}

/// The copy's record, once a synchronization covered it (`complete`): its source bytes are
/// those the stream reached. Without one, the bytes taken at the call stay (and the read, which
/// may still run, is never freed).
pub fn finish(late: Late, record: &mut CallRecord, complete: bool) {
    if !complete {
        return;
    }
    // SAFETY: the `Snap` of `before_copy`; its host function ran before the synchronization.
    let snap = unsafe { Box::from_raw(late.snap as *mut Snap) };
    if let Some(a) = record.args.get_mut(late.arg) {
        *a = crate::sink::blob(BlobKind::HostToDevice, &snap.bytes);
    }
}
