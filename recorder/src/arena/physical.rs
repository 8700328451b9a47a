//! The physical memory behind the arena's ranges: created with `cuMemAlloc`'s capabilities
//! where the driver allows them, mapped and made accessible ([`map`]), unmapped when released
//! ([`unmap_all`]).

use std::sync::atomic::Ordering;

use cudarc::driver::sys;

use crate::real;

/// Whether physical memory may be asked for with `cuMemAlloc`'s capabilities (GPUDirect RDMA,
/// hardware decompression); cleared when the driver refuses them once.
static CAPABLE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

pub(super) fn map(r: &real::Real, device: i32, addr: u64, len: u64) -> Result<(), u32> {
    // SAFETY: all-zero is a valid starting value of these C structs.
    let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    // `cuMemAlloc` memory is RDMA- and decompression-capable on current GPUs (its pointer
    // attributes say so): the arena's is made the same where the driver allows it.
    let capable = CAPABLE.load(Ordering::Relaxed);
    if capable {
        prop.allocFlags.gpuDirectRDMACapable = 1;
        prop.allocFlags.usage = sys::CU_MEM_CREATE_USAGE_HW_DECOMPRESS as u16;
    }
    // SAFETY: as above.
    let mut access: sys::CUmemAccessDesc = unsafe { std::mem::zeroed() };
    access.location = prop.location;
    access.flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    let code = |st: sys::CUresult| st as u32;
    // SAFETY: the range lies in our reservation and is unmapped; valid pointers to structs.
    unsafe {
        let mut h: sys::CUmemGenericAllocationHandle = 0;
        // Exportable to another process, as `cuMemAlloc` memory is (`ipc.rs`), where the
        // driver allows it.
        prop.requestedHandleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        let mut st = (r.create)(&mut h, len as usize, &prop, 0);
        if matches!(st, sys::CUresult::CUDA_ERROR_INVALID_VALUE | sys::CUresult::CUDA_ERROR_NOT_SUPPORTED) {
            prop.requestedHandleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
            st = (r.create)(&mut h, len as usize, &prop, 0);
        }
        if capable && matches!(st, sys::CUresult::CUDA_ERROR_INVALID_VALUE | sys::CUresult::CUDA_ERROR_NOT_SUPPORTED) {
            CAPABLE.store(false, Ordering::Relaxed);
            prop.allocFlags.gpuDirectRDMACapable = 0;
            prop.allocFlags.usage = 0;
            st = (r.create)(&mut h, len as usize, &prop, 0);
        }
        if st != sys::CUresult::CUDA_SUCCESS {
            return Err(code(st));
        }
        let st = (r.map)(addr, len as usize, 0, h, 0);
        // The mapping keeps the memory alive; the handle is not needed any more.
        (r.release)(h);
        if st != sys::CUresult::CUDA_SUCCESS {
            return Err(code(st));
        }
        let st = (r.set_access)(addr, len as usize, &access, 1);
        if st != sys::CUresult::CUDA_SUCCESS {
            (r.unmap)(addr, len as usize);
            return Err(code(st));
        }
    }
    Ok(())
}

pub(super) fn unmap_all(r: &real::Real, ranges: &[(u64, u64)]) {
    for &(a, l) in ranges {
        // SAFETY: a range this module mapped; nothing uses it any more.
        unsafe { (r.unmap)(a, l as usize) };
    }
}
