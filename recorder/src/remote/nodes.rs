//! A kernel node's parameters for the program (`cuGraphKernelNodeGetParams[_v2]`, `gpu` in the
//! API table): the server's answer (`gpuless_analyzer::api::node_answer`) written as the
//! program's `CUDA_KERNEL_NODE_PARAMS`.
//!
//! The client asks the server every time rather than remembering what the program put into
//! nodes it made: a captured or cloned node's launch exists only on the server, the driver
//! names the function of a launched `CUkernel` itself, and a `cuGraphKernelNodeSetParams` the
//! client passed on may still be refused there — one round trip per query, and the answer is
//! the driver's in every case.
//!
//! `kernelParams` must point at argument values in this process that stay valid as long as
//! the driver's copy would (until the node changes or its graph is destroyed). Each node's
//! values are held here and handed out again while they are the same; a node whose answer
//! changed (it changed since, so the driver's earlier pointers are void too) gets new storage.
//! Storage of nodes never asked again stays until exit.

use std::collections::HashMap;
use std::sync::Mutex;

use gpuless_analyzer::api::node_answer::KernelNodeAnswer;
use gpuless_analyzer::api::ApiFunction;

use super::context_books::{current_context, primary_context};
use super::modules;
use super::step::refused;

/// `CUDA_ERROR_INVALID_VALUE`.
const INVALID_VALUE: u32 = 1;

/// One node's argument values and the pointer array the program gets.
struct Held {
    layout: Vec<(u32, u32)>,
    /// Bytes of values.
    len: usize,
    /// The values at their offsets, 16-byte aligned (an argument's alignment is at most its
    /// offset's in the parameter buffer).
    storage: Vec<u128>,
    /// One address per argument, into `storage` (a `void **`).
    pointers: Vec<u64>,
}

impl Held {
    /// Whether it holds these values in this layout.
    fn holds(&self, layout: &[(u32, u32)], params: &[u8]) -> bool {
        let bytes = self.storage.iter().flat_map(|v| v.to_ne_bytes()).take(self.len);
        self.layout == layout && self.len == params.len() && bytes.eq(params.iter().copied())
    }
}

static HELD: Mutex<Option<HashMap<u64, Held>>> = Mutex::new(None);

/// The address of a `void **` holding node `node`'s argument values (`layout`, `params`), or
/// 0 for a kernel without arguments; the same as last time while they are the same.
fn hold(node: u64, layout: &[(u32, u32)], params: &[u8]) -> u64 {
    if layout.is_empty() {
        return 0;
    }
    let mut g = HELD.lock().unwrap_or_else(|e| e.into_inner());
    let held = g.get_or_insert_with(HashMap::new);
    if let Some(h) = held.get(&node).filter(|h| h.holds(layout, params)) {
        return h.pointers.as_ptr() as u64;
    }
    let mut storage = vec![0u128; params.len().div_ceil(16)];
    // SAFETY: `storage` holds at least `params.len()` bytes.
    unsafe { std::ptr::copy_nonoverlapping(params.as_ptr(), storage.as_mut_ptr().cast::<u8>(), params.len()) };
    let base = storage.as_ptr() as u64;
    let pointers = layout.iter().map(|&(off, _)| base + u64::from(off)).collect();
    let h = Held { layout: layout.to_vec(), len: params.len(), storage, pointers };
    let at = h.pointers.as_ptr() as u64;
    held.insert(node, h);
    at
}

/// Writes the server's answer `values` to `f` about node `node` as the `ty` struct (v1 or v2
/// `CUDA_KERNEL_NODE_PARAMS`) at `out`; the call's status.
///
/// # Safety
/// `out` is null or the program's struct of type `ty`.
pub(crate) unsafe fn write_kernel_node(f: &ApiFunction, ty: &str, out: u64, node: u64, values: &[u64]) -> u32 {
    let size = crate::hooks::struct_size(ty).unwrap_or(0);
    if out == 0 || size == 0 {
        return INVALID_VALUE;
    }
    let a = match KernelNodeAnswer::from_words(values) {
        Ok(a) => a,
        Err(e) => return refused(f, &format!("the server's answer: {e}")),
    };
    let mut n = a.node;
    if n.func != 0 && n.kern != 0 {
        // A function the server named for a kernel: the client's function of that kernel from
        // now on (what `cuKernelGetFunction` answers), with the kernel's parameter layout.
        modules::kernel_function(n.kern, || n.func);
        if modules::kernel(n.func).is_none() {
            modules::alias(n.func, n.kern);
        }
    }
    n.kernel_params = hold(node, &a.layout, &a.params);
    n.extra = 0;
    n.ctx = match current_context() {
        0 => primary_context(),
        c => c,
    };
    let mut b = vec![0u8; size];
    n.write(&mut b);
    // SAFETY: the caller's contract: `size` bytes of the program's struct.
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), out as *mut u8, size) };
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of argument `i` through the pointer array at `at`.
    fn arg(at: u64, i: usize, size: usize) -> Vec<u8> {
        // SAFETY: `at` is a pointer array `hold` returned, still held.
        unsafe {
            let p = *(at as *const u64).add(i) as *const u8;
            std::slice::from_raw_parts(p, size).to_vec()
        }
    }

    #[test]
    fn values_stay_where_they_were_until_the_node_changes() {
        let layout = [(0, 8), (8, 4), (12, 4)];
        let mut params: Vec<u8> = (0..16).collect();
        let node = 0x7ffe_0000_1230;
        let at = hold(node, &layout, &params);
        assert_ne!(at, 0);
        assert_eq!(arg(at, 0, 8), (0..8).collect::<Vec<u8>>());
        assert_eq!(arg(at, 2, 4), [12, 13, 14, 15]);
        // SAFETY: the first argument's address.
        assert_eq!(unsafe { *(at as *const u64) } % 16, 0, "aligned as the driver aligns them");
        assert_eq!(hold(node, &layout, &params), at, "asked again unchanged: the same pointers");
        params[12] = 99;
        let moved = hold(node, &layout, &params);
        assert_eq!(arg(moved, 2, 4), [99, 13, 14, 15], "changed: the new values");
        assert_ne!(hold(node + 0x10, &layout, &params), moved, "another node: its own");
        assert_eq!(hold(node, &[], &[]), 0, "no arguments: no array");
    }
}
