//! The driver call inside one hooked call, as the backends and the self-time diagnostics
//! (`diag.rs`) hand it around: the hook's closure, which calls the real function with the
//! program's arguments, and that function's address.

use std::ffi::c_void;

/// The driver call of one hooked call: the hook's closure and the real function's address.
pub struct Real<'a> {
    f: &'a mut dyn FnMut(*mut c_void) -> u32,
    p: *mut c_void,
}

impl<'a> Real<'a> {
    /// A driver call through `f` at `p`.
    pub(crate) fn new(f: &'a mut dyn FnMut(*mut c_void) -> u32, p: *mut c_void) -> Self {
        Real { f, p }
    }

    /// Calls the driver.
    #[inline(always)]
    pub(crate) fn call(&mut self) -> u32 {
        (self.f)(self.p)
    }

    /// The real function's address.
    pub(crate) fn address(&self) -> *mut c_void {
        self.p
    }
}
