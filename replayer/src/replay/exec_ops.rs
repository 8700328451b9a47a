//! Executing the stream memory operations, stream attributes, peer copies, context and module
//! settings and the default memory pool's settings: calls a program makes around its launches
//! that an executor used to count without running them.
//!
//! A session has one device and one context on the server: a peer copy between the session's
//! contexts is a device-to-device copy. Memory pools the program creates are created here too
//! (their settings apply to them); any other pool handle is the device's default pool. The
//! arena serves stream-ordered allocations, so what a pool reports about its memory comes from
//! the recorder's or the client's books (`recorder/src/pools.rs`).

use std::ffi::c_void;

use cudarc::driver::sys;
use gpuless_traces::Value;

use super::args::Call;
use super::blobs::blob;
use super::{check, LoadedTrace, ReplayError, State};

/// `cuStreamWaitValue32`-style entry points with the value and flags as plain integers.
type WaitValue32 = unsafe extern "C" fn(sys::CUstream, u64, u32, u32) -> sys::CUresult;
type WaitValue64 = unsafe extern "C" fn(sys::CUstream, u64, u64, u32) -> sys::CUresult;
type BatchMemOp = unsafe extern "C" fn(sys::CUstream, u32, *mut c_void, u32) -> sys::CUresult;
type StreamSetAttr = unsafe extern "C" fn(sys::CUstream, u32, *const c_void) -> sys::CUresult;
type PoolSetAttr = unsafe extern "C" fn(sys::CUmemoryPool, u32, *mut c_void) -> sys::CUresult;
type SetFlags = unsafe extern "C" fn(u32) -> sys::CUresult;

/// `CUstreamBatchMemOpParams` is a 48-byte union.
const BATCH_OP_BYTES: usize = 48;

/// Bytes recorded for a struct argument.
fn bytes<'a>(c: &Call<'a>, name: &str) -> Result<&'a [u8], ReplayError> {
    match c.arg(name) {
        Some(Value::Bytes(b)) => Ok(b),
        _ => Err(c.missing(name)),
    }
}

/// The live pool of a recorded handle: one the program created, else the device's default.
unsafe fn pool_of(st: &State, recorded: u64, seq: u64, what: &str) -> Result<sys::CUmemoryPool, ReplayError> {
    if let Some(&p) = st.pools.get(&recorded) {
        return Ok(p);
    }
    // A client's default pool: the current context's device's (a session of several devices
    // names each record's device first).
    let (mut pool, mut dev) = (std::ptr::null_mut(), 0);
    // SAFETY: valid out-pointers; without a current context, device 0.
    unsafe {
        if sys::cuCtxGetDevice(&mut dev) != sys::CUresult::CUDA_SUCCESS {
            dev = 0;
        }
        check(sys::cuDeviceGetDefaultMemPool(&mut pool, dev), seq, what)?;
    }
    Ok(pool)
}

/// Executes `c` if it is one of this module's; `Ok(false)` if not.
pub(crate) fn call(st: &mut State, trace: &LoadedTrace, c: &Call<'_>) -> Result<bool, ReplayError> {
    let (seq, name) = (c.rec.seq, c.f.name);
    // SAFETY (whole match): driver calls with live handles, recorded device addresses (the
    // session's own: the arena keeps them) and buffers built here of the sizes the driver reads.
    unsafe {
        match name {
            "cuStreamWaitValue32" | "cuStreamWriteValue32" | "cuStreamWaitValue64" | "cuStreamWriteValue64" => {
                // The `_v2` entry points (cuda.h's names for these since CUDA 11.7).
                let sym = format!("{name}_v2\0");
                let (s, addr) = (st.stream(c.word("stream")?)?, st.mem.translate(c.word("addr")?));
                let (value, flags) = (c.word("value")?, c.word("flags")? as u32);
                let r = if name.ends_with("32") {
                    let f: WaitValue32 = super::raw::raw_fn(sym.as_bytes(), seq)?;
                    f(s, addr, value as u32, flags)
                } else {
                    let f: WaitValue64 = super::raw::raw_fn(sym.as_bytes(), seq)?;
                    f(s, addr, value, flags)
                };
                check(r, seq, name)?;
            }
            "cuStreamBatchMemOp" => {
                let n = c.word("count")? as usize;
                let ops = bytes(c, "paramArray")?;
                if ops.len() < n * BATCH_OP_BYTES {
                    return Err(c.inconsistent(format!("{} bytes recorded for {n} operations", ops.len())));
                }
                let mut buf = ops[..n * BATCH_OP_BYTES].to_vec();
                let f: BatchMemOp = super::raw::raw_fn(b"cuStreamBatchMemOp_v2\0", seq)?;
                let s = st.stream(c.word("stream")?)?;
                check(f(s, n as u32, buf.as_mut_ptr().cast(), c.word("flags")? as u32), seq, name)?;
            }
            "cuStreamSetAttribute" => {
                let v = bytes(c, "value")?.to_vec();
                let f: StreamSetAttr = super::raw::raw_fn(b"cuStreamSetAttribute\0", seq)?;
                check(f(st.stream(c.word("hStream")?)?, c.word("attr")? as u32, v.as_ptr().cast()), seq, name)?;
            }
            "cuStreamCopyAttributes" => {
                let (dst, src) = (st.stream(c.word("dst")?)?, st.stream(c.word("src")?)?);
                check(sys::cuStreamCopyAttributes(dst, src), seq, name)?;
            }
            // Unified addresses: the arena's memory of every device is mapped for the others
            // (`super::devices`), so a peer copy is a device-to-device copy.
            "cuMemcpyPeer" => {
                let (dst, src) = (st.mem.translate(c.word("dstDevice")?), st.mem.translate(c.word("srcDevice")?));
                check(sys::cuMemcpyDtoD_v2(dst, src, c.word("ByteCount")? as usize), seq, name)?;
            }
            "cuMemcpyPeerAsync" => {
                let (dst, src) = (st.mem.translate(c.word("dstDevice")?), st.mem.translate(c.word("srcDevice")?));
                let s = st.stream(c.word("hStream")?)?;
                check(sys::cuMemcpyDtoDAsync_v2(dst, src, c.word("ByteCount")? as usize, s), seq, name)?;
            }
            "cuMemPoolSetAttribute" => {
                let v = blob(trace, c, c.arg("value"))?;
                let mut w = [0u8; 8];
                w[..v.len().min(8)].copy_from_slice(&v[..v.len().min(8)]);
                let f: PoolSetAttr = super::raw::raw_fn(b"cuMemPoolSetAttribute\0", seq)?;
                let pool = pool_of(st, c.word("pool")?, seq, name)?;
                check(f(pool, c.word("attr")? as u32, w.as_mut_ptr().cast()), seq, name)?;
            }
            "cuMemPoolTrimTo" => {
                let pool = pool_of(st, c.word("pool")?, seq, name)?;
                check(sys::cuMemPoolTrimTo(pool, c.word("minBytesToKeep")? as usize), seq, name)?;
            }
            "cuMemPoolCreate" => {
                let props = bytes(c, "poolProps")?;
                if props.len() < std::mem::size_of::<sys::CUmemPoolProps>() {
                    return Err(c.inconsistent(format!("{} bytes of pool properties", props.len())));
                }
                let mut pool = std::ptr::null_mut();
                check(sys::cuMemPoolCreate(&mut pool, props.as_ptr().cast()), seq, name)?;
                st.pools.insert(c.out_word("pool")?, pool);
            }
            "cuMemPoolDestroy" => {
                let recorded = c.word("pool")?;
                let pool = st.pools.remove(&recorded).ok_or_else(|| c.inconsistent("unknown memory pool".into()))?;
                check(sys::cuMemPoolDestroy(pool), seq, name)?;
            }
            "cuDeviceSetMemPool" => {
                let pool = pool_of(st, c.word("pool")?, seq, name)?;
                check(sys::cuDeviceSetMemPool(0, pool), seq, name)?;
            }
            "cuCtxSetFlags" | "cuDevicePrimaryCtxSetFlags" => {
                // The executor's context is the primary one, active: its scheduling flags
                // change in place (`cuCtxSetFlags`), as the driver does for an active primary.
                let f: SetFlags = super::raw::raw_fn(b"cuCtxSetFlags\0", seq)?;
                check(f(c.word("flags")? as u32), seq, name)?;
            }
            "cuDevicePrimaryCtxReset" => {
                // The program's reset: its work is finished (and device printf flushed), as the
                // driver does before destroying the context. The session's allocations stay
                // until the session ends (docs/FIDELITY.md).
                check(sys::cuCtxSynchronize(), seq, name)?;
            }
            "cuCtxResetPersistingL2Cache" => check(sys::cuCtxResetPersistingL2Cache(), seq, name)?,
            "cuFuncLoad" => {
                let f = st.function(c.word("function")?).ok_or_else(|| c.inconsistent("unknown function".into()))?;
                check(sys::cuFuncLoad(f), seq, name)?;
            }
            "cuModuleUnload" => {
                let m = st.modules.remove(&c.word("hmod")?).ok_or_else(|| c.inconsistent("unknown module".into()))?;
                st.warmed.forget(m as usize);
                check(sys::cuModuleUnload(m), seq, name)?;
            }
            "cuLibraryUnload" => {
                let l =
                    st.libraries.remove(&c.word("library")?).ok_or_else(|| c.inconsistent("unknown library".into()))?;
                st.warmed.forget(l as usize);
                check(sys::cuLibraryUnload(l), seq, name)?;
            }
            // Managed memory in a local replay of a recording (client mode refuses it): the
            // replay backs it with device memory (`Memory::alloc_shared`), where the data
            // already is; where-to-keep-it hints have nothing to act on, and the stream order
            // they would take part in holds without them.
            "cuMemPrefetchAsync" | "cuMemAdvise" | "cuStreamAttachMemAsync" => {}
            // Host functions in a replay: what they did to host memory reaches the device only
            // through later copies, whose bytes the recording holds; a host function that does
            // nothing keeps the stream's order (work after it waits for what came before).
            "cuLaunchHostFunc" | "cuStreamAddCallback" => {
                let s = st.stream(c.word("hStream")?)?;
                check(sys::cuLaunchHostFunc(s, Some(super::host_calls::noop), std::ptr::null_mut()), seq, name)?;
            }
            "cuProfilerStart" | "cuProfilerStop" => {
                type F = unsafe extern "C" fn() -> sys::CUresult;
                let sym: &[u8] = if name == "cuProfilerStart" { b"cuProfilerStart\0" } else { b"cuProfilerStop\0" };
                let f: F = super::raw::raw_fn(sym, seq)?;
                check(f(), seq, name)?;
            }
            _ => return Ok(false),
        }
    }
    Ok(true)
}
