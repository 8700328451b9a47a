//! How calls reach the hooks (REFERENCE.md §3): `dlsym` is interposed, and every driver
//! entry point handed out through `cuGetProcAddress[_v2]` is replaced by its hook (or by a
//! counting trampoline when the table does not model it).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::dl::{is_ours, real_dlsym};
use crate::driver::libcuda_symbol;
use crate::hooks::{self, HOOKS};
use crate::{mode, state, unmodeled};

type GpaV2 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> u32;
type GpaV1 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> u32;

/// Interposed `dlsym`. `dlsym(RTLD_NEXT, name)` means "the next definition after the *caller*",
/// which the C library finds from the return address; so that case jumps straight into the C
/// library's `dlsym` with the caller's return address intact (a library that wraps `malloc`
/// through RTLD_NEXT would otherwise get its own wrapper back). Every other call goes to
/// [`dlsym_impl`].
///
/// # Safety
/// Same contract as the C library's `dlsym`.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "cmp rdi, -1",
        "jne {imp}",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz {imp}",
        "jmp rax",
        imp = sym dlsym_impl,
        real = sym crate::dl::REAL_DLSYM,
    )
}

/// Interposed `dlsym` (architectures without the RTLD_NEXT trampoline).
///
/// # Safety
/// Same contract as the C library's `dlsym`.
#[cfg(not(target_arch = "x86_64"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    unsafe { dlsym_impl(handle, symbol) }
}

/// Hands out our `cuGetProcAddress` and hooks for driver symbols; everything else is the C
/// library's answer.
unsafe extern "C" fn dlsym_impl(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    if crate::diag::diag() == crate::diag::Diag::SelfTime && !symbol.is_null() {
        let t = crate::clock::now_ns();
        // SAFETY: forwarded.
        let p = unsafe { dlsym_inner(handle, symbol) };
        // SAFETY: dlsym's contract: a NUL-terminated string.
        crate::diag::lookup("dlsym", unsafe { CStr::from_ptr(symbol) }, crate::clock::now_ns() - t);
        return p;
    }
    // SAFETY: forwarded.
    unsafe { dlsym_inner(handle, symbol) }
}

unsafe fn dlsym_inner(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    let Some(real) = real_dlsym() else { return std::ptr::null_mut() };
    // SAFETY: forwarded with the caller's arguments.
    let found = unsafe { real(handle, symbol) };
    if found.is_null() || symbol.is_null() || !state::enabled() || crate::diag::diag() == crate::diag::Diag::Bare {
        return found;
    }
    // SAFETY: dlsym's contract: `symbol` is a NUL-terminated string.
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    if !name.starts_with(b"cu") {
        return found;
    }
    let Ok(name) = std::str::from_utf8(name) else { return found };
    substitute(name, found, true)
}

/// What to hand out instead of the driver's `p` for `name`.
fn substitute(name: &str, p: *mut c_void, exact: bool) -> *mut c_void {
    match name {
        "cuGetProcAddress_v2" => {
            store_real(&REAL_GPA_V2, p, "cuGetProcAddress_v2\0");
            return cuGetProcAddress_v2 as *const () as *mut c_void;
        }
        "cuGetProcAddress" => {
            // `cuGetProcAddress` asked through cuGetProcAddress_v2 resolves to the v2 entry.
            if p == libcuda_symbol("cuGetProcAddress_v2\0") {
                store_real(&REAL_GPA_V2, p, "cuGetProcAddress_v2\0");
                return cuGetProcAddress_v2 as *const () as *mut c_void;
            }
            store_real(&REAL_GPA_V1, p, "cuGetProcAddress\0");
            return cuGetProcAddress as *const () as *mut c_void;
        }
        _ => {}
    }
    let real = if is_ours(p) { std::ptr::null_mut() } else { p };
    if exact {
        // dlsym names the exact exported symbol.
        if let Some(slot) = hooks::slot_of(name) {
            if !real.is_null() {
                crate::slots::set_real(slot, real);
            }
            return HOOKS[slot].hook.ptr();
        }
    } else {
        // cuGetProcAddress takes a base name; the driver picked the variant. Find which of the
        // exported variants it returned.
        for &slot in hooks::slots_of_base(name) {
            if libcuda_symbol(HOOKS[slot].cname) == p {
                crate::slots::set_real(slot, p);
                return HOOKS[slot].hook.ptr();
            }
        }
    }
    if real.is_null() || !state::level_enabled(unmodeled::level_of(name)) {
        return p;
    }
    if exact || gpuless_analyzer::api::by_name(name).is_none() {
        return unmodeled::wrap(name, real);
    }
    unmodeled::wrap(&unmodeled_version(name, p), real)
}

/// The name to count an entry point under that `cuGetProcAddress` gave for a modeled base
/// `name` but that is none of the table's variants (a version newer than the table, or a legacy
/// bare symbol asked for with a pre-3.2 version): its exported symbol when one has that address,
/// so that the trace does not mistake its count for a call of the modeled function with the same
/// base name.
fn unmodeled_version(name: &str, p: *mut c_void) -> String {
    const SUFFIXES: [&str; 12] =
        ["", "_v2", "_v3", "_v4", "_v5", "_v6", "_ptsz", "_ptds", "_v2_ptsz", "_v2_ptds", "_v3_ptsz", "_v3_ptds"];
    SUFFIXES
        .iter()
        .map(|s| format!("{name}{s}"))
        .find(|full| libcuda_symbol(&format!("{full}\0")) == p && gpuless_analyzer::api::lookup_symbol(full).is_none())
        .unwrap_or_else(|| format!("{name}@unexported-version"))
}

static REAL_GPA_V2: AtomicUsize = AtomicUsize::new(0);
static REAL_GPA_V1: AtomicUsize = AtomicUsize::new(0);

fn store_real(cell: &AtomicUsize, p: *mut c_void, cname: &str) {
    let p = if is_ours(p) { libcuda_symbol(cname) } else { p };
    if !p.is_null() {
        cell.store(p as usize, Ordering::Release);
    }
}

fn load_real(cell: &AtomicUsize, cname: &str) -> usize {
    let v = cell.load(Ordering::Acquire);
    if v != 0 {
        return v;
    }
    store_real(cell, libcuda_symbol(cname), cname);
    cell.load(Ordering::Acquire)
}

/// Our `cuGetProcAddress_v2`: the driver's answer, with hooks substituted.
///
/// # Safety
/// Same contract as the driver's `cuGetProcAddress_v2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> u32 {
    if mode::active() {
        // SAFETY: the caller's arguments.
        return unsafe { client_proc_address(symbol, pfn, version, flags, status) };
    }
    let real = load_real(&REAL_GPA_V2, "cuGetProcAddress_v2\0");
    if real == 0 {
        return hooks::NOT_FOUND;
    }
    state::note_cuda_version(version);
    // SAFETY: the driver's function with the caller's arguments.
    let r = unsafe { std::mem::transmute::<usize, GpaV2>(real)(symbol, pfn, version, flags, status) };
    // SAFETY: on success the driver wrote a function pointer to `*pfn`.
    unsafe { patch(r, symbol, pfn) };
    r
}

/// Our `cuGetProcAddress` (v1).
///
/// # Safety
/// Same contract as the driver's `cuGetProcAddress`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> u32 {
    if mode::active() {
        // SAFETY: the caller's arguments (no status pointer in v1).
        return unsafe { client_proc_address(symbol, pfn, version, flags, std::ptr::null_mut()) };
    }
    let real = load_real(&REAL_GPA_V1, "cuGetProcAddress\0");
    if real == 0 {
        return hooks::NOT_FOUND;
    }
    state::note_cuda_version(version);
    // SAFETY: the driver's function with the caller's arguments.
    let r = unsafe { std::mem::transmute::<usize, GpaV1>(real)(symbol, pfn, version, flags) };
    // SAFETY: as in cuGetProcAddress_v2.
    unsafe { patch(r, symbol, pfn) };
    r
}

unsafe fn patch(r: u32, symbol: *const c_char, pfn: *mut *mut c_void) {
    if r != 0
        || symbol.is_null()
        || pfn.is_null()
        || !state::enabled()
        || crate::diag::diag() == crate::diag::Diag::Bare
    {
        return;
    }
    if crate::diag::diag() == crate::diag::Diag::SelfTime {
        // SAFETY: checked non-null: the caller's NUL-terminated name.
        crate::diag::lookup("cuGetProcAddress", unsafe { CStr::from_ptr(symbol) }, 0);
    }
    // SAFETY: checked non-null; the driver succeeded, so both are valid.
    let (name, p) = unsafe { (CStr::from_ptr(symbol), *pfn) };
    if p.is_null() {
        return;
    }
    if let Ok(name) = name.to_str() {
        // SAFETY: `pfn` is a valid out-pointer.
        unsafe { *pfn = substitute(name, p, false) };
    }
}

/// `cuGetProcAddress[_v2]` in client mode: the variant of the name the driver hands out for
/// `version` — the newest whose `since` (cudaTypedefs.h's version) is at most `version`, the
/// per-thread-default-stream one when `flags` asks for it and the name has one — else not found
/// (`CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT` when the name exists only in newer versions).
///
/// # Safety
/// As the driver's `cuGetProcAddress_v2`; `status` may be null.
unsafe fn client_proc_address(
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
        "cuGetProcAddress" => Ok(cuGetProcAddress_v2 as *const () as *mut c_void),
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
fn pick_variant(name: &str, version: u32, per_thread: bool) -> Option<usize> {
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
