//! `cuGetProcAddress` in client mode: the hook of the variant the driver hands out for the
//! CUDA version asked.

use std::ffi::{c_char, c_int, c_void, CStr};

use crate::hooks::{self, HOOKS};

/// `cuGetProcAddress[_v2]` in client mode: the variant of the name the driver hands out for
/// `version` — the newest whose `since` (cudaTypedefs.h's version) is at most `version`, the
/// per-thread-default-stream one when `flags` asks for it and the name has one — else not found
/// (`CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT` when the name exists only in newer versions).
///
/// # Safety
/// As the driver's `cuGetProcAddress_v2`; `status` may be null.
pub(crate) unsafe fn proc_address(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> u32 {
    const PER_THREAD: u64 = 2; // CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
    const SYMBOL_NOT_FOUND: c_int = 1;
    const VERSION_NOT_SUFFICIENT: c_int = 2;
    if symbol.is_null() || pfn.is_null() {
        return 1; // CUDA_ERROR_INVALID_VALUE
    }
    // SAFETY: the caller's NUL-terminated name.
    let name = unsafe { CStr::from_ptr(symbol) }.to_str().unwrap_or("");
    let found: Result<*mut c_void, c_int> = match name {
        "cuGetProcAddress" => Ok(crate::intercept::cuGetProcAddress_v2 as *const () as *mut c_void),
        _ => pick_variant(name, version.max(0) as u32, flags & PER_THREAD != 0)
            .map(|i| HOOKS[i].hook.ptr())
            .ok_or(if hooks::slots_of_base(name).is_empty() { SYMBOL_NOT_FOUND } else { VERSION_NOT_SUFFICIENT }),
    };
    // SAFETY: valid out-pointers (checked above; status may be null).
    unsafe {
        *pfn = *found.as_ref().unwrap_or(&std::ptr::null_mut());
        if !status.is_null() {
            *status = found.err().unwrap_or(0); // CU_GET_PROC_ADDRESS_SUCCESS
        }
    }
    // Driver 580 answers success with a null pointer where a status says why; without one,
    // not found.
    if found.is_ok() || !status.is_null() {
        0
    } else {
        hooks::NOT_FOUND
    }
}

/// The hook slot `cuGetProcAddress(name, version, flags)` hands out: among the name's
/// variants available at `version`, the newest; a per-thread one if asked for and there is one.
pub(crate) fn pick_variant(name: &str, version: u32, per_thread: bool) -> Option<usize> {
    let slots = hooks::slots_of_base(name);
    let since = |i: usize| {
        let h = &HOOKS[i];
        gpuless_analyzer::api::get(h.func)
            .and_then(|f| f.symbols.iter().find(|s| s.name == h.symbol))
            .map_or(0, |s| s.since)
    };
    let pick = |pt: bool| {
        slots
            .iter()
            .copied()
            .filter(|&i| HOOKS[i].variant.per_thread == pt && since(i) <= version)
            .max_by_key(|&i| (since(i), HOOKS[i].variant.version))
    };
    (if per_thread { pick(true) } else { None }).or_else(|| pick(false))
}
