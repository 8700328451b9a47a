//! How calls reach the hooks (REFERENCE.md §3): `dlsym` is interposed, and every driver
//! entry point handed out through `cuGetProcAddress[_v2]` is replaced by its hook (or by a
//! counting trampoline when the table does not model it).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use crate::hooks::{self, HOOKS};
use crate::{state, unmodeled};

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
type GpaV2 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> u32;
type GpaV1 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> u32;

/// Address of the C library's `dlsym`, resolved when this library is loaded (see `resolve`).
static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

/// Finds the C library's `dlsym` with `dlvsym`, which is not interposed.
extern "C" fn resolve_real_dlsym() {
    for version in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
        // SAFETY: dlvsym with constant NUL-terminated strings.
        let p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
        if !p.is_null() {
            REAL_DLSYM.store(p as usize, Ordering::Release);
            return;
        }
    }
}

/// Runs `resolve_real_dlsym` when the loader maps this library, before any program code, so
/// that `dlsym(RTLD_NEXT, ...)` can be forwarded from the first call on.
#[used]
#[unsafe(link_section = ".init_array")]
static RESOLVE_AT_LOAD: extern "C" fn() = resolve_real_dlsym;

/// The C library's `dlsym`.
fn real_dlsym() -> Option<DlsymFn> {
    let mut p = REAL_DLSYM.load(Ordering::Acquire);
    if p == 0 {
        resolve_real_dlsym();
        p = REAL_DLSYM.load(Ordering::Acquire);
    }
    // SAFETY: a non-null address of the C library's dlsym.
    (p != 0).then(|| unsafe { std::mem::transmute::<usize, DlsymFn>(p) })
}

/// `dlopen("libcuda.so.1")`, without loading it twice.
fn libcuda() -> *mut c_void {
    static HANDLE: AtomicUsize = AtomicUsize::new(0);
    let h = HANDLE.load(Ordering::Acquire);
    if h != 0 {
        return h as *mut c_void;
    }
    // SAFETY: dlopen with a constant name.
    let mut p = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if p.is_null() {
        // SAFETY: as above.
        p = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_LAZY) };
    }
    HANDLE.store(p as usize, Ordering::Release);
    p
}

/// libcuda's own export of `cname` (NUL-terminated), or null.
pub fn libcuda_symbol(cname: &str) -> *mut c_void {
    if crate::remote::active() {
        // Client mode: "the driver" is the client's implementation of what the recorder asks.
        return crate::remote::symbol(cname);
    }
    let (Some(dlsym), lib) = (real_dlsym(), libcuda()) else { return std::ptr::null_mut() };
    if lib.is_null() || !cname.ends_with('\0') {
        return std::ptr::null_mut();
    }
    // SAFETY: a valid handle and a NUL-terminated name.
    unsafe { dlsym(lib, cname.as_ptr().cast()) }
}

/// The first definition of `name` in the global scope after this library:
/// `dlsym(RTLD_NEXT, name)` asked by this library (the C library's `dlsym` takes the object
/// searched after from its caller's address, which is here).
pub(crate) fn next_symbol(name: &CStr) -> *mut c_void {
    let Some(dlsym) = real_dlsym() else { return std::ptr::null_mut() };
    // SAFETY: the C library's dlsym with a NUL-terminated name.
    unsafe { dlsym(libc::RTLD_NEXT, name.as_ptr()) }
}

/// `name` in the object `handle` came from (`dlopen`'s handle), by the C library's `dlsym`.
pub(crate) fn symbol_in(handle: *mut c_void, name: &CStr) -> *mut c_void {
    let Some(dlsym) = real_dlsym() else { return std::ptr::null_mut() };
    // SAFETY: the C library's dlsym with a handle from dlopen and a NUL-terminated name.
    unsafe { dlsym(handle, name.as_ptr()) }
}

/// Whether `p` is an address inside this library (our own exports).
pub(crate) fn is_ours(p: *mut c_void) -> bool {
    static BASE: OnceLock<usize> = OnceLock::new();
    let base = *BASE.get_or_init(|| base_of(is_ours as *const () as *mut c_void));
    base != 0 && base_of(p) == base
}

fn base_of(p: *mut c_void) -> usize {
    // SAFETY: dladdr only reads loader data; `info` is a valid out-pointer.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(p, &mut info) == 0 {
            return 0;
        }
        info.dli_fbase as usize
    }
}

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
        real = sym REAL_DLSYM,
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
    if crate::remote::active() {
        // SAFETY: the caller's arguments.
        return unsafe { crate::remote::proc_address(symbol, pfn, version, flags, status) };
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
    if crate::remote::active() {
        // SAFETY: the caller's arguments (no status pointer in v1).
        return unsafe { crate::remote::proc_address(symbol, pfn, version, flags, std::ptr::null_mut()) };
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
