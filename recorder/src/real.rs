//! The real driver functions the recorder calls for itself (the arena), resolved from libcuda's
//! exports so they never pass through the hooks. Types are cudarc's.

use std::ffi::c_void;
use std::sync::OnceLock;

use cudarc::driver::sys;

use crate::driver::libcuda_symbol;

macro_rules! real_fns {
    ($($field:ident = $sym:literal fn($($t:ty),*);)*) => {
        /// Typed pointers to libcuda's own functions.
        pub struct Real {
            $(
                #[doc = concat!("`", $sym, "`")]
                pub $field: unsafe extern "C" fn($($t),*) -> sys::CUresult,
            )*
        }

        /// The real functions, or `None` if libcuda lacks one of them.
        pub fn get() -> Option<&'static Real> {
            static R: OnceLock<Option<Real>> = OnceLock::new();
            R.get_or_init(|| {
                Some(Real {
                    $($field: {
                        let p = libcuda_symbol(concat!($sym, "\0"));
                        if p.is_null() {
                            return None;
                        }
                        // SAFETY: libcuda's export of this name has this C signature.
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($t),*) -> sys::CUresult>(p) }
                    },)*
                })
            })
            .as_ref()
        }
    };
}

real_fns! {
    address_reserve = "cuMemAddressReserve" fn(*mut sys::CUdeviceptr, usize, usize, sys::CUdeviceptr, u64);
    address_free = "cuMemAddressFree" fn(sys::CUdeviceptr, usize);
    create = "cuMemCreate" fn(*mut sys::CUmemGenericAllocationHandle, usize, *const sys::CUmemAllocationProp, u64);
    release = "cuMemRelease" fn(sys::CUmemGenericAllocationHandle);
    map = "cuMemMap" fn(sys::CUdeviceptr, usize, usize, sys::CUmemGenericAllocationHandle, u64);
    unmap = "cuMemUnmap" fn(sys::CUdeviceptr, usize);
    set_access = "cuMemSetAccess" fn(sys::CUdeviceptr, usize, *const sys::CUmemAccessDesc, usize);
    ctx_get_current = "cuCtxGetCurrent" fn(*mut sys::CUcontext);
    ctx_get_device = "cuCtxGetDevice" fn(*mut sys::CUdevice);
    device_get_mem_pool = "cuDeviceGetMemPool" fn(*mut sys::CUmemoryPool, sys::CUdevice);
    ctx_synchronize = "cuCtxSynchronize" fn();
    event_create = "cuEventCreate" fn(*mut sys::CUevent, u32);
    event_record = "cuEventRecord" fn(sys::CUevent, sys::CUstream);
    event_synchronize = "cuEventSynchronize" fn(sys::CUevent);
    stream_is_capturing = "cuStreamIsCapturing" fn(sys::CUstream, *mut sys::CUstreamCaptureStatus);
}
