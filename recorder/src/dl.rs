//! The C library's own `dlsym` (this library interposes `dlsym`, `intercept.rs`), and the
//! look-ups made with it: definitions after this library, in a given object, and whether an
//! address is this library's own.

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The C library's `dlsym`'s type.
pub(crate) type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// Address of the C library's `dlsym`, resolved when this library is loaded (see
/// `RESOLVE_AT_LOAD`); read by the interposed `dlsym`'s `RTLD_NEXT` trampoline.
pub(crate) static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

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
pub(crate) fn real_dlsym() -> Option<DlsymFn> {
    let mut p = REAL_DLSYM.load(Ordering::Acquire);
    if p == 0 {
        resolve_real_dlsym();
        p = REAL_DLSYM.load(Ordering::Acquire);
    }
    // SAFETY: a non-null address of the C library's dlsym.
    (p != 0).then(|| unsafe { std::mem::transmute::<usize, DlsymFn>(p) })
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
