//! Unified addresses (`anybuf` in the API table: `cuMemcpy`, `cuMemcpyAsync`): a `CUdeviceptr`
//! that may name host memory — the runtime's `cudaMemcpyDefault` reaches the driver this way.
//! Which side is host memory is known only at run time, so the recorder asks per call:
//!
//! - device memory (the arena, managed or mapped memory the recorder mirrors, anything the driver
//!   calls device memory) is recorded as its address, a `DevPtr`, as a `devptr` would be;
//! - a host source's bytes are stored as a `HostToDevice` blob, as a `hostbuf`'s are;
//! - a host destination is recorded as a `HostPtr`, and what the copy brought there as the
//!   call's result: hashed on return for `cuMemcpy`, at the synchronization that completes it
//!   for `cuMemcpyAsync` (`pending.rs`).
//!
//! A replay reads the direction back from the values (`replay::unified`), so a trace says what the
//! copy did whatever the process it is replayed in has at those addresses.

use std::ffi::c_void;

use gpuless_analyzer::api::{structs, ApiFunction, ArgKind, BufLen, Direction, SyncClass};
use gpuless_traces::{BlobKind, BlobRef, Hash128, Value};

use crate::driver::libcuda_symbol;
use crate::{arena, hostview, mode, sink, state};

/// Whether unified address `p` is host memory the recorder must capture: not the arena, not a
/// region it mirrors (`hostview`), and host memory or unknown (pageable) to the driver. A
/// client (`remote`) has no device memory but the arena and no driver to ask.
pub fn is_host(p: u64) -> bool {
    if p == 0 || arena::contains(p) {
        return false;
    }
    mode::active() || (!hostview::contains(p) && driver_says_host(p))
}

/// The `anybuf` destination of `f` when it is host memory: (address, length).
pub fn host_destination(f: &ApiFunction, raw: &[u64]) -> Option<(u64, usize)> {
    f.args.iter().enumerate().find_map(|(i, a)| match (a.dir, a.kind) {
        (Direction::InOut | Direction::Out, ArgKind::AnyBuf(l)) => {
            let p = raw.get(i).copied().unwrap_or(0);
            is_host(p).then(|| (p, len(l, raw) as usize))
        }
        _ => None,
    })
}

/// The length of an `anybuf` argument.
fn len(l: BufLen, raw: &[u64]) -> u64 {
    match l {
        BufLen::Arg(i) => raw.get(usize::from(i)).copied().unwrap_or(0),
        BufLen::Fixed(n) => u64::from(n),
    }
}

/// The value of `anybuf` argument `v` before the call (`dir` its direction in the table).
///
/// # Safety
/// `raw` are the program's arguments to a call that reads `len` bytes at `v` when it is a
/// source.
pub unsafe fn input(dir: Direction, l: BufLen, v: u64, raw: &[u64]) -> Value {
    if !is_host(v) {
        return Value::DevPtr(v);
    }
    if dir != Direction::In {
        return Value::HostPtr(v);
    }
    let n = len(l, raw) as usize;
    // SAFETY: the copy reads these `n` bytes of host memory.
    let bytes = unsafe { std::slice::from_raw_parts(v as *const u8, n) };
    sink::blob(BlobKind::HostToDevice, bytes)
}

/// What a copy that has completed brought to host memory at `p` (`n` bytes): its hash, or its
/// bytes with `--capture-outputs`.
///
/// # Safety
/// `p` holds `n` bytes the copy wrote, complete.
pub unsafe fn written(p: u64, n: usize) -> Value {
    // SAFETY: the caller's contract.
    let bytes = unsafe { std::slice::from_raw_parts(p as *const u8, n) };
    if state::capture_outputs() {
        sink::blob(BlobKind::DeviceToHost, bytes)
    } else {
        Value::Digest(BlobRef { hash: Hash128::of(bytes), len: n as u64 })
    }
}

/// The result of `anybuf` destination `v` after a successful synchronous copy; `Null` for device
/// memory and for an asynchronous copy (its bytes are hashed when it completes).
///
/// # Safety
/// As [`written`], when `v` is host memory and `f` copies synchronously.
pub unsafe fn output(f: &ApiFunction, l: BufLen, v: u64, raw: &[u64]) -> Value {
    if f.sync != SyncClass::CopyAnyDirection || !is_host(v) {
        return Value::Null;
    }
    // SAFETY: a synchronous copy has written its destination when it returns.
    unsafe { written(v, len(l, raw) as usize) }
}

/// The host destinations of an asynchronous copy `f` with arguments `raw`, as its record's
/// `args` ([`input`]) say (a `HostPtr`: host memory; the driver is not asked again): (index
/// among the results, address, length). Empty for a synchronous copy and device destinations.
pub fn async_host_outs(f: &ApiFunction, raw: &[u64], args: &[Value]) -> Vec<(usize, u64, usize)> {
    if f.sync != SyncClass::CopyAnyDirectionAsync {
        return Vec::new();
    }
    f.out_args()
        .enumerate()
        .filter_map(|(k, (i, a))| match (a.kind, args.get(i)) {
            (ArgKind::AnyBuf(l), Some(&Value::HostPtr(p))) => Some((k, p, len(l, raw) as usize)),
            _ => None,
        })
        .collect()
}

type PointerGetAttribute = unsafe extern "C" fn(*mut c_void, u32, u64) -> u32;

/// Whether the driver calls unified address `p` host memory (pageable host memory is unknown
/// to it).
fn driver_says_host(p: u64) -> bool {
    const MEMORY_TYPE: u32 = 2; // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
    let f = libcuda_symbol("cuPointerGetAttribute\0");
    if f.is_null() {
        return false;
    }
    // SAFETY: the driver's function with this C signature; the real one, not our hook.
    let f: PointerGetAttribute = unsafe { std::mem::transmute::<*mut c_void, PointerGetAttribute>(f) };
    let mut t = 0u32;
    // SAFETY: a valid out-pointer for a CUmemorytype.
    let r = unsafe { f((&mut t as *mut u32).cast(), MEMORY_TYPE, p) };
    r != 0 || t == structs::MEMORYTYPE_HOST
}
