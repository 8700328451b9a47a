//! "The driver" as the recorder finds it for its own calls (the arena's VMM calls, parameter
//! layouts, pointer types, device facts): libcuda's exports, found with the C library's
//! `dlsym` so that they never pass through the hooks — or, in client mode, the client's
//! implementations of those entry points (`remote/driver.rs`, lent through
//! [`mode`](crate::mode)).

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::{dl, mode};

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
    if mode::active() {
        // Client mode: "the driver" is the client's implementation of what the recorder asks.
        return mode::client().map_or(std::ptr::null_mut(), |c| (c.symbol)(cname));
    }
    let (Some(dlsym), lib) = (dl::real_dlsym(), libcuda()) else { return std::ptr::null_mut() };
    if lib.is_null() || !cname.ends_with('\0') {
        return std::ptr::null_mut();
    }
    // SAFETY: a valid handle and a NUL-terminated name.
    unsafe { dlsym(lib, cname.as_ptr().cast()) }
}
