//! The hook table: one slot per exported driver symbol of the API table (the real function's
//! address is kept in the slot's entry, `slots.rs`), plus look-ups from symbol names to slots.

use std::collections::HashMap;
use std::sync::OnceLock;

use gpuless_analyzer::api::{ApiId, Variant};

/// One generated hook.
pub struct Hook {
    /// Exported symbol, e.g. `cuMemAlloc_v2`.
    pub symbol: &'static str,
    /// The same, NUL-terminated.
    pub cname: &'static str,
    /// API table entry.
    pub func: ApiId,
    /// The symbol's variant (`_v2`, `_ptsz`...), fixed at build time.
    pub variant: Variant,
    /// Address of the hook function.
    pub hook: Addr,
}

/// A code address in a static table.
#[derive(Clone, Copy)]
pub struct Addr(pub *const ());

// SAFETY: the addresses of functions, immutable and valid for the whole process.
unsafe impl Sync for Addr {}

impl Addr {
    /// As a `void*`, the type dlsym and cuGetProcAddress hand out.
    pub fn ptr(self) -> *mut std::ffi::c_void {
        self.0 as *mut std::ffi::c_void
    }
}

mod generated {
    #![allow(clippy::all, unused_unsafe, non_snake_case)]
    include!(concat!(env!("OUT_DIR"), "/hooks.rs"));
}

pub use generated::{struct_size, HOOKS, SLOTS};

/// Generated constants shared with the trampolines.
pub mod generated_trampolines {
    pub use super::generated::TRAMPOLINES;
}

/// `CUDA_ERROR_NOT_FOUND`, returned by a hook whose real function cannot be found.
pub const NOT_FOUND: u32 = 500;

/// Slots by exported symbol name.
pub fn slot_of(symbol: &str) -> Option<usize> {
    static MAP: OnceLock<HashMap<&'static str, usize>> = OnceLock::new();
    MAP.get_or_init(|| HOOKS.iter().enumerate().map(|(i, h)| (h.symbol, i)).collect()).get(symbol).copied()
}

/// Slots of every exported variant of a base name (`cuMemAlloc` → `cuMemAlloc`, `cuMemAlloc_v2`).
pub fn slots_of_base(base: &str) -> &'static [usize] {
    static MAP: OnceLock<HashMap<&'static str, Vec<usize>>> = OnceLock::new();
    let map = MAP.get_or_init(|| {
        let mut m: HashMap<&'static str, Vec<usize>> = HashMap::new();
        for (i, h) in HOOKS.iter().enumerate() {
            if let Some(f) = gpuless_analyzer::api::get(h.func) {
                m.entry(f.name).or_default().push(i);
            }
        }
        m
    });
    map.get(base).map(Vec::as_slice).unwrap_or(&[])
}
