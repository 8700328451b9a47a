//! A session of several devices ([`gpuless_traces::devices`]): the executor holds every
//! device's primary context, makes current the one a `gpulessSetDevice` record names, creates
//! each device's slice of the client's arena on that device (mapped for every device of the
//! session that can reach it: [`super::memory::Memory::set_devices`]), and describes the devices
//! ([`describe_device`], also for a session of one) and every pair of them for the session's
//! `Welcome`.
//!
//! The executor's process sees exactly the session's GPUs (the server starts it with
//! `CUDA_VISIBLE_DEVICES` naming them in the session's order), so a session's device `k` is
//! the executor's CUDA device `k`.

use cudarc::driver::sys;
use gpuless_traces::protocol::{MoreDevices, PeerFact};
use gpuless_traces::{CallRecord, Value};

use super::raw::raw_fn;
use super::{check, Device, ReplayError, State};

/// `CUdevice_P2PAttribute`s a client answers from the session's description (1: performance
/// rank, 2: access supported, 3: native atomics, 4: CUDA array access; 5: only partial native
/// atomics, CUDA 12.8).
const P2P_ATTRIBUTES: [u32; 5] = [1, 2, 3, 4, 5];

/// The CUDA devices this process sees (0 where the driver cannot say).
pub fn count() -> u32 {
    let mut n = 0;
    // SAFETY: a plain query with a valid out-pointer; the driver is initialized.
    if unsafe { sys::cuDeviceGetCount(&mut n) } != sys::CUresult::CUDA_SUCCESS {
        return 0;
    }
    u32::try_from(n).unwrap_or(0)
}

/// Everything a program can ask of the current context's device: name, UUID, total memory
/// (`memory_limit` where the partition has one), driver version and every attribute the
/// driver answers (ids 1 up to the first run of 16 unanswered ids past the newest known).
pub fn describe_device(memory_limit: Option<u64>) -> gpuless_traces::protocol::DeviceDescription {
    let mut dev = 0i32;
    // SAFETY: a valid out-pointer (no context current: device 0).
    if unsafe { sys::cuCtxGetDevice(&mut dev) } != sys::CUresult::CUDA_SUCCESS {
        dev = 0;
    }
    describe_device_at(dev, memory_limit)
}

/// [`describe_device`] of device `dev` of this process.
pub fn describe_device_at(dev: i32, memory_limit: Option<u64>) -> gpuless_traces::protocol::DeviceDescription {
    type Attr = unsafe extern "C" fn(*mut i32, u32, i32) -> sys::CUresult;
    type Name = unsafe extern "C" fn(*mut std::ffi::c_char, i32, i32) -> sys::CUresult;
    type Uuid = unsafe extern "C" fn(*mut u8, i32) -> sys::CUresult;
    type Total = unsafe extern "C" fn(*mut usize, i32) -> sys::CUresult;
    type Version = unsafe extern "C" fn(*mut i32) -> sys::CUresult;
    let ok = sys::CUresult::CUDA_SUCCESS;
    let mut d = gpuless_traces::protocol::DeviceDescription::default();
    // SAFETY: each entry point is typed with its C signature (enums as integers) and given
    // valid out-pointers and a device of this process.
    unsafe {
        if let Ok(f) = raw_fn::<Attr>(b"cuDeviceGetAttribute\0", 0) {
            let mut misses = 0;
            for id in 1u32.. {
                let mut v = 0i32;
                if f(&mut v, id, dev) == ok {
                    d.attributes.push((id, v));
                    misses = 0;
                } else {
                    misses += 1;
                    if misses >= 16 && id > 150 {
                        break;
                    }
                }
                if id > 1024 {
                    break;
                }
            }
        }
        if let Ok(f) = raw_fn::<Name>(b"cuDeviceGetName\0", 0) {
            let mut buf = [0 as std::ffi::c_char; 256];
            if f(buf.as_mut_ptr(), 255, dev) == ok {
                d.name = std::ffi::CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned();
            }
        }
        if let Ok(f) = raw_fn::<Uuid>(b"cuDeviceGetUuid_v2\0", 0) {
            let _ = f(d.uuid.as_mut_ptr(), dev);
        }
        if let Ok(f) = raw_fn::<Total>(b"cuDeviceTotalMem_v2\0", 0) {
            let mut n = 0usize;
            if f(&mut n, dev) == ok {
                d.total_mem = n as u64;
            }
        }
        if let Ok(f) = raw_fn::<Version>(b"cuDriverGetVersion\0", 0) {
            let _ = f(&mut d.driver_version);
        }
    }
    if let Some(limit) = memory_limit {
        d.total_mem = if d.total_mem == 0 { limit } else { d.total_mem.min(limit) };
    }
    d
}

/// Devices 1.. of this process described (`memory_limit` as for device 0), and what every
/// ordered pair of all of them can do; empty where the process sees one device.
pub fn describe_more(memory_limit: Option<u64>) -> MoreDevices {
    let n = count();
    let mut more = MoreDevices::default();
    for k in 1..n {
        more.devices.push(describe_device_at(k as i32, memory_limit));
    }
    type P2p = unsafe extern "C" fn(*mut i32, u32, i32, i32) -> sys::CUresult;
    // SAFETY: the entry point typed with its C signature (the attribute enum as an integer).
    let p2p = unsafe { raw_fn::<P2p>(b"cuDeviceGetP2PAttribute\0", 0) }.ok();
    for src in 0..n {
        for dst in (0..n).filter(|&d| d != src) {
            let (s, d) = (src as i32, dst as i32);
            let mut v = 0;
            // SAFETY (both): plain queries with valid out-pointers and devices of this process.
            if unsafe { sys::cuDeviceCanAccessPeer(&mut v, s, d) } == sys::CUresult::CUDA_SUCCESS {
                more.peers.push(PeerFact { src, dst, attr: 0, value: v });
            }
            for attr in P2P_ATTRIBUTES {
                let mut v = 0;
                if p2p.is_some_and(|f| unsafe { f(&mut v, attr, s, d) } == sys::CUresult::CUDA_SUCCESS) {
                    more.peers.push(PeerFact { src, dst, attr, value: v });
                }
            }
        }
    }
    more
}

/// Makes `st` a session of `n` devices: device 0 is `first` (the executor's prepared context),
/// devices 1.. get their primary contexts retained, and each device's slice of the arena is
/// mapped for every device that can access it.
pub(crate) fn use_devices(st: &mut State, first: Device, n: u32) -> Result<(), ReplayError> {
    let have = count();
    if n > have {
        return Err(ReplayError::Unsupported {
            seq: 0,
            what: "a session of several GPUs".into(),
            problem: format!("it asks for {n} devices; this executor sees {have}"),
        });
    }
    let mut contexts = vec![first.ctx];
    for k in 1..n as i32 {
        let mut ctx = std::ptr::null_mut();
        // SAFETY: a device of this process, a valid out-pointer; retained for the process.
        unsafe { check(sys::cuDevicePrimaryCtxRetain(&mut ctx, k), 0, "cuDevicePrimaryCtxRetain")? };
        contexts.push(ctx as usize);
    }
    let mut access = Vec::new();
    for k in 0..n as i32 {
        let mut on = vec![k];
        for j in (0..n as i32).filter(|&j| j != k) {
            let mut v = 0;
            // SAFETY: a plain query with a valid out-pointer.
            if unsafe { sys::cuDeviceCanAccessPeer(&mut v, j, k) } == sys::CUresult::CUDA_SUCCESS && v == 1 {
                on.push(j);
            }
        }
        access.push(on);
    }
    st.mem.set_devices(access);
    st.contexts = contexts;
    Ok(())
}

/// `gpulessSetDevice(ordinal)`: the records after it run in that device's primary context.
pub(super) fn set(st: &mut State, rec: &CallRecord) -> Result<(), ReplayError> {
    let k = match rec.args.first() {
        Some(Value::Size(k) | Value::U64(k)) => *k,
        other => {
            return Err(ReplayError::Unsupported {
                seq: rec.seq,
                what: gpuless_traces::devices::SET_DEVICE.into(),
                problem: format!("expected a device ordinal, found {other:?}"),
            })
        }
    };
    let Some(&ctx) = st.contexts.get(k as usize) else {
        return Err(ReplayError::Unsupported {
            seq: rec.seq,
            what: gpuless_traces::devices::SET_DEVICE.into(),
            problem: format!("device {k} is not one of the session's {} devices", st.contexts.len().max(1)),
        });
    };
    // SAFETY: a primary context retained for the process.
    unsafe { check(sys::cuCtxSetCurrent(ctx as sys::CUcontext), rec.seq, "cuCtxSetCurrent") }
}

/// Waits for the current context's work, or with several `contexts`, for every one's (the
/// current one stays current); the first failure.
///
/// # Safety
/// `contexts` are live contexts.
pub(crate) unsafe fn synchronize_all(contexts: &[usize]) -> sys::CUresult {
    // SAFETY (block): plain driver calls on live contexts.
    unsafe {
        if contexts.len() < 2 {
            return sys::cuCtxSynchronize();
        }
        let mut current = std::ptr::null_mut();
        sys::cuCtxGetCurrent(&mut current);
        let mut first = sys::CUresult::CUDA_SUCCESS;
        for &c in contexts {
            sys::cuCtxSetCurrent(c as sys::CUcontext);
            let r = sys::cuCtxSynchronize();
            if first == sys::CUresult::CUDA_SUCCESS {
                first = r;
            }
        }
        sys::cuCtxSetCurrent(current);
        first
    }
}
