//! The driver entry points the recorder calls for itself (`intercept::libcuda_symbol`), as the
//! client implements them: the arena's VMM calls reserve this process's address space at the
//! arena's base (so no host allocation ever lands there) and otherwise only keep books — the
//! executor maps the memory on the server; parameter layouts and pointer types come from
//! what the client knows.

use std::ffi::c_void;

use std::collections::HashMap;
use std::sync::Mutex;

use super::context_books::{current_context, current_device};
use super::handles::new_handle;
use super::{modules, streams};

const SUCCESS: u32 = 0;
const INVALID_VALUE: u32 = 1;
const OUT_OF_MEMORY: u32 = 2;
const INVALID_CONTEXT: u32 = 201;

/// Memory pools per device: the default pool's handle (a client number, the same every time)
/// and the pool `cuDeviceSetMemPool` made current, where it is not the default.
#[derive(Default)]
struct Pools {
    default: HashMap<u32, u64>,
    current: HashMap<u32, u64>,
}

static POOLS: Mutex<Option<Pools>> = Mutex::new(None);

fn pools<R>(f: impl FnOnce(&mut Pools) -> R) -> R {
    let mut g = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(Pools::default))
}

/// Device `dev`'s default memory pool handle.
pub(crate) fn pool(dev: u32) -> u64 {
    pools(|p| *p.default.entry(dev).or_insert_with(new_handle))
}

/// Whether `h` is a device's default pool.
pub(crate) fn is_default_pool(h: u64) -> bool {
    pools(|p| p.default.values().any(|&d| d == h))
}

/// Device `dev`'s current memory pool (what `cuMemAllocAsync` takes from there).
pub(crate) fn current_pool(dev: u32) -> u64 {
    match pools(|p| p.current.get(&dev).copied()) {
        Some(h) => h,
        None => pool(dev),
    }
}

/// `cuDeviceSetMemPool(dev, p)`: `p` is current there from now on (0: the default again).
pub(crate) fn set_current_pool(dev: u32, h: u64) {
    let default = pool(dev);
    pools(|p| {
        if h == 0 || h == default {
            p.current.remove(&dev);
        } else {
            p.current.insert(dev, h);
        }
    });
}

/// A pool destroyed: no device's current pool any more.
pub(crate) fn pool_destroyed(h: u64) {
    pools(|p| p.current.retain(|_, c| *c != h));
}

/// The client's implementation of `cname` (NUL-terminated), or null.
pub(crate) fn symbol(cname: &str) -> *mut c_void {
    let p: *const () = match cname.trim_end_matches('\0') {
        "cuMemAddressReserve" => address_reserve as *const (),
        "cuMemAddressFree" => address_free as *const (),
        "cuMemCreate" => create as *const (),
        "cuMemRelease" | "cuEventSynchronize" => one_arg_ok as *const (),
        "cuMemMap" => map as *const (),
        "cuMemUnmap" => two_args_ok as *const (),
        "cuMemSetAccess" => four_args_ok as *const (),
        "cuCtxGetCurrent" => ctx_get_current as *const (),
        "cuCtxGetDevice" => ctx_get_device as *const (),
        "cuDeviceGetMemPool" => device_get_mem_pool as *const (),
        "cuCtxSynchronize" => no_args_ok as *const (),
        "cuEventCreate" => event_create as *const (),
        "cuEventRecord" => two_args_ok as *const (),
        "cuStreamIsCapturing" => stream_is_capturing as *const (),
        "cuFuncGetParamInfo" | "cuKernelGetParamInfo" => param_info as *const (),
        "cuPointerGetAttribute" => pointer_get_attribute as *const (),
        _ => std::ptr::null(),
    };
    p as *mut c_void
}

/// Takes `[addr, addr + size)` of this process's address space (it fails where anything is
/// mapped, as the driver's reservation does).
extern "C" fn address_reserve(out: *mut u64, size: usize, _align: usize, addr: u64, _flags: u64) -> u32 {
    if out.is_null() || size == 0 {
        return INVALID_VALUE;
    }
    // SAFETY: an anonymous PROT_NONE mapping that replaces nothing (FIXED_NOREPLACE).
    let p = unsafe {
        libc::mmap(
            addr as *mut c_void,
            size,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return OUT_OF_MEMORY;
    }
    // SAFETY: checked non-null.
    unsafe { *out = p as u64 };
    SUCCESS
}

extern "C" fn address_free(addr: u64, size: usize) -> u32 {
    // SAFETY: a range this module reserved.
    unsafe { libc::munmap(addr as *mut c_void, size) };
    SUCCESS
}

extern "C" fn create(out: *mut u64, size: usize, _prop: *const c_void, _flags: u64) -> u32 {
    if out.is_null() {
        return INVALID_VALUE;
    }
    let _ = size;
    // SAFETY: checked non-null.
    unsafe { *out = new_handle() };
    SUCCESS
}

extern "C" fn map(_addr: u64, _size: usize, _off: usize, _h: u64, _flags: u64) -> u32 {
    SUCCESS
}

extern "C" fn no_args_ok() -> u32 {
    SUCCESS
}

extern "C" fn one_arg_ok(_a: u64) -> u32 {
    SUCCESS
}

extern "C" fn two_args_ok(_a: u64, _b: u64) -> u32 {
    SUCCESS
}

extern "C" fn four_args_ok(_a: u64, _b: u64, _c: u64, _d: u64) -> u32 {
    SUCCESS
}

extern "C" fn ctx_get_current(out: *mut u64) -> u32 {
    if out.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: checked non-null.
    unsafe { *out = current_context() };
    SUCCESS
}

extern "C" fn ctx_get_device(out: *mut i32) -> u32 {
    if out.is_null() {
        return INVALID_VALUE;
    }
    if current_context() == 0 {
        return INVALID_CONTEXT;
    }
    // SAFETY: checked non-null.
    unsafe { *out = current_device() as i32 };
    SUCCESS
}

extern "C" fn device_get_mem_pool(out: *mut u64, dev: i32) -> u32 {
    if out.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: checked non-null.
    unsafe { *out = current_pool(dev.max(0) as u32) };
    SUCCESS
}

extern "C" fn event_create(out: *mut u64, _flags: u32) -> u32 {
    if out.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: checked non-null.
    unsafe { *out = new_handle() };
    SUCCESS
}

extern "C" fn stream_is_capturing(stream: u64, out: *mut u32) -> u32 {
    if out.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: checked non-null.
    unsafe { *out = u32::from(streams::is_capturing(stream)) };
    SUCCESS
}

extern "C" fn param_info(f: u64, i: usize, off: *mut usize, size: *mut usize) -> u32 {
    let Some((o, s)) = modules::param(f, i) else { return INVALID_VALUE };
    if off.is_null() || size.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: checked non-null.
    unsafe {
        *off = o as usize;
        *size = s as usize;
    }
    SUCCESS
}

/// Only arena memory is device memory here (for the program's own calls the arena answers
/// before this is asked; the recorder's capture asks memory types directly); anything else is
/// host memory the driver does not know.
extern "C" fn pointer_get_attribute(out: *mut c_void, attr: u32, p: u64) -> u32 {
    const MEMORY_TYPE: u32 = 2; // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
    if attr == MEMORY_TYPE && !out.is_null() && crate::arena::contains(p) {
        // SAFETY: checked non-null: a CUmemorytype out-value.
        unsafe { *(out as *mut u32) = gpuless_analyzer::api::structs::MEMORYTYPE_DEVICE };
        return SUCCESS;
    }
    INVALID_VALUE
}
