//! What the client's part of a call comes to ([`Step`]), the refusal of a call client mode does
//! not cover ([`refused`]), and how an answer is written into one of the program's out-arguments
//! ([`put`]). The bottom of client mode: every layer above returns or writes these.

use std::collections::HashSet;
use std::sync::Mutex;

use gpuless_analyzer::api::ApiFunction;

use crate::capture::{self, Prim};

/// `CUDA_ERROR_NOT_SUPPORTED`.
const NOT_SUPPORTED: u32 = 801;

/// What a call needs after the client's part (`local::run`).
pub(crate) enum Step {
    /// Answered (this status); the server runs it later if the table says it must.
    Done(u32),
    /// Only the server can answer: send everything queued with it and wait.
    Wait,
    /// A step of the JIT linker (`=local(link)`): the session runs it with the server's driver
    /// (`jit.rs`), whose status is the call's.
    Link,
    /// `cuMemImportFromShareableHandle`: the session tells the executor of the import
    /// (`vmm.rs` keeps the books, the call's trip sends it).
    Import,
    /// Memory or events shared with the program's other processes (`=local(share)`: `cuIpc*`,
    /// a descriptor exported for them or received from one): the server brokers it (`ipc.rs`).
    Share,
}

/// Says once per function that client mode does not answer it yet; the call fails.
pub(crate) fn unsupported(f: &ApiFunction, why: &str) -> Step {
    Step::Done(refused(f, why))
}

/// [`unsupported`] as the status the call returns.
pub(crate) fn refused(f: &ApiFunction, why: &str) -> u32 {
    static SAID: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut g = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if g.get_or_insert_with(HashSet::new).insert(f.name) {
        eprintln!(
            "gpuless: {} is not supported in client mode yet ({why}); it returns CUDA_ERROR_NOT_SUPPORTED",
            f.name
        );
    }
    NOT_SUPPORTED
}

/// Writes `v` to out argument `i` at the width of its C type.
///
/// # Safety
/// Argument `i` of `raw` is a valid out-pointer of `f`'s declared type (or null).
pub(crate) unsafe fn put(f: &ApiFunction, raw: &[u64], i: usize, v: u64) {
    let p = raw.get(i).copied().unwrap_or(0);
    if p == 0 {
        return;
    }
    let t = match capture::plans(f).get(i) {
        Some(Prim::Ref(Some(t))) => Some(*t),
        _ => None,
    };
    // SAFETY: the caller's contract.
    unsafe {
        match t {
            Some(t) => capture::write_scalar(t, p, v),
            None => std::ptr::write_unaligned(p as *mut u64, v),
        }
    }
}
