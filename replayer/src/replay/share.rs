//! Memory and events shared between a program's processes, on the executor's side
//! (`gpulessShare` records, `gpuless_traces::protocol::share`): exports to POSIX descriptors
//! offered to the server under the client's token, imports of another session's offer, and
//! events other processes see ([`super::ipc_events`]). The server brokers the descriptors ([`Broker`]); in a local
//! replay there is none, and a share record ends the replay with its index.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use cudarc::driver::sys;
use gpuless_traces::protocol::share::{IpcEventHandle, ShareAnswer, ShareRequest, SHARE};
use gpuless_traces::CallRecord;

use super::{ReplayError, Report, State};

/// What brokers descriptors between the sessions of a server (`server::executor`).
pub trait Broker: Send + Sync {
    /// Offers `fd` under `token` to the other sessions of this session's tenant.
    fn offer(&self, token: u128, fd: &OwnedFd) -> Result<(), String>;
    /// The descriptor another session offered under `token`.
    fn take(&self, token: u128) -> Result<OwnedFd, String>;
}

const INVALID_VALUE: u32 = 1;
const INVALID_HANDLE: u32 = 400;
/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
const POSIX_FD: sys::CUmemAllocationHandleType =
    sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;

/// Executes a `gpulessShare` record; its answer goes to the record's output.
pub(crate) fn call(st: &mut State, rec: &CallRecord, report: &mut Report) -> Result<(), ReplayError> {
    st.last_call = Some((rec.seq, SHARE));
    let bad = |problem: String| ReplayError::Inconsistent { seq: rec.seq, what: SHARE.into(), problem };
    let req = ShareRequest::from_args(&rec.args).map_err(|e| bad(e.to_string()))?;
    let Some(broker) = st.broker.clone() else {
        return Err(ReplayError::Unsupported {
            seq: rec.seq,
            what: SHARE.into(),
            problem: "memory shared between processes is brokered by a server; a local replay has no other process"
                .into(),
        });
    };
    // SAFETY (all): driver calls with live handles of this session and valid out-pointers.
    let answer = unsafe {
        match req {
            ShareRequest::OfferMemory { token, address } => {
                let mut h: sys::CUmemGenericAllocationHandle = 0;
                let r = sys::cuMemRetainAllocationHandle(&mut h, st.mem.translate(address) as *mut std::ffi::c_void);
                if r != sys::CUresult::CUDA_SUCCESS {
                    status(r as u32)
                } else {
                    let a = offer(&*broker, token, h);
                    sys::cuMemRelease(h);
                    a
                }
            }
            ShareRequest::OfferHandle { token, handle } => match st.mem.vmm.handles.get(&handle) {
                Some(&h) => offer(&*broker, token, h),
                None => status(INVALID_HANDLE),
            },
            ShareRequest::TakeHandle { token, handle } => match import(&*broker, token) {
                Ok(h) => {
                    st.mem.vmm.handles.insert(handle, h);
                    status(0)
                }
                Err(a) => a,
            },
            ShareRequest::MapMemory { token, handle, address, len } => match import(&*broker, token) {
                Ok(h) => match map(address, len, h) {
                    Ok(()) => {
                        st.mem.vmm.handles.insert(handle, h);
                        st.mem.vmm.maps.insert(address, len as usize);
                        status(0)
                    }
                    Err(r) => {
                        sys::cuMemRelease(h);
                        status(r)
                    }
                },
                Err(a) => a,
            },
            ShareRequest::Unmap { handle, address, len } => match st.mem.vmm.handles.remove(&handle) {
                Some(h) => {
                    // The work before it that uses the mapping completes first.
                    sys::cuCtxSynchronize();
                    let r = sys::cuMemUnmap(address, len as usize);
                    st.mem.vmm.maps.remove(&address);
                    sys::cuMemRelease(h);
                    status(r as u32)
                }
                None => status(INVALID_VALUE),
            },
            ShareRequest::EventHandle { event } => match st.events.get(&event) {
                Some(&e) => {
                    // The driver's own handle says whether the event may be shared (created
                    // interprocess, without timing); what other processes open is ours.
                    let mut h: sys::CUipcEventHandle = std::mem::zeroed();
                    let r = sys::cuIpcGetEventHandle(&mut h, e);
                    if r != sys::CUresult::CUDA_SUCCESS {
                        status(r as u32)
                    } else {
                        match st.ipc_events.export(&*broker, event, e) {
                            Ok(h) => ShareAnswer { status: 0, bytes: h.to_bytes().to_vec() },
                            Err(s) => status(s),
                        }
                    }
                }
                None => status(INVALID_HANDLE),
            },
            ShareRequest::OpenEvent { event, handle } => match IpcEventHandle::from_bytes(&handle) {
                None => status(INVALID_VALUE),
                Some(h) => {
                    // A driver event of this process's under the client's handle too.
                    let mut e: sys::CUevent = std::ptr::null_mut();
                    let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
                    let r = sys::cuEventCreate(&mut e, flags);
                    if r != sys::CUresult::CUDA_SUCCESS {
                        status(r as u32)
                    } else {
                        match st.ipc_events.open(&*broker, event, h) {
                            Ok(()) => {
                                st.events.insert(event, e);
                                status(0)
                            }
                            Err(s) => {
                                sys::cuEventDestroy_v2(e);
                                status(s)
                            }
                        }
                    }
                }
            },
            ShareRequest::Barrier => status(0),
        }
    };
    if let Some(o) = report.outputs.as_mut() {
        o.push((rec.seq, answer.encode()));
    }
    report.executed += 1;
    Ok(())
}

fn status(s: u32) -> ShareAnswer {
    ShareAnswer { status: s, bytes: Vec::new() }
}

/// Exports physical allocation `h` as a descriptor and offers it under `token`.
///
/// # Safety
/// `h` is a live allocation handle.
unsafe fn offer(broker: &dyn Broker, token: u128, h: sys::CUmemGenericAllocationHandle) -> ShareAnswer {
    let mut fd: std::ffi::c_int = -1;
    // SAFETY: the caller's handle; a valid out-pointer for the descriptor.
    let r = unsafe { sys::cuMemExportToShareableHandle((&raw mut fd).cast(), h, POSIX_FD, 0) };
    if r != sys::CUresult::CUDA_SUCCESS {
        return status(r as u32);
    }
    // SAFETY: the driver gave us this descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    match broker.offer(token, &fd) {
        Ok(()) => status(0),
        Err(e) => {
            eprintln!("gpuless executor: a shared allocation could not be offered: {e}");
            status(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY as u32)
        }
    }
}

/// The physical allocation another session offered under `token`, imported here.
///
/// # Safety
/// A context is current.
unsafe fn import(broker: &dyn Broker, token: u128) -> Result<sys::CUmemGenericAllocationHandle, ShareAnswer> {
    // A token no session offers is the driver's answer to a handle it does not know.
    let fd = broker.take(token).map_err(|_| status(INVALID_VALUE))?;
    let mut h: sys::CUmemGenericAllocationHandle = 0;
    // SAFETY: a descriptor of an exported allocation; a valid out-pointer.
    let r = unsafe {
        sys::cuMemImportFromShareableHandle(&mut h, fd.as_raw_fd() as usize as *mut std::ffi::c_void, POSIX_FD)
    };
    if r != sys::CUresult::CUDA_SUCCESS {
        return Err(status(r as u32));
    }
    Ok(h)
}

/// Maps `h` at `[address, address + len)` (reserved by the session's arena), readable and
/// writable by the current device.
///
/// # Safety
/// A context is current; the range is reserved and unmapped.
unsafe fn map(address: u64, len: u64, h: sys::CUmemGenericAllocationHandle) -> Result<(), u32> {
    // SAFETY (all): the caller's contract; valid pointers to plain structs.
    unsafe {
        let r = sys::cuMemMap(address, len as usize, 0, h, 0);
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(r as u32);
        }
        let mut dev: sys::CUdevice = 0;
        sys::cuCtxGetDevice(&mut dev);
        let desc = sys::CUmemAccessDesc {
            location: sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: dev },
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        let r = sys::cuMemSetAccess(address, len as usize, &desc, 1);
        if r != sys::CUresult::CUDA_SUCCESS {
            sys::cuMemUnmap(address, len as usize);
            return Err(r as u32);
        }
    }
    Ok(())
}
