//! Where every hook's call goes (the generated hooks of `hooks.rs` call [`call`]): the slot's
//! entry, decided once from the API table (`slots.rs`), then one backend — the session in
//! client mode (`remote/`), else the driver, recorded (`record.rs`), timed around it under
//! `GPULESS_DIAG=selftime` (`diag.rs`).

use std::ffi::c_void;

use crate::call::Real;
use crate::hooks::NOT_FOUND;
use crate::{diag, lane, mode, record, slots};

/// `CUDA_ERROR_UNKNOWN`: what a call answers when client mode fails inside it.
const UNKNOWN: u32 = cudarc::driver::sys::CUresult::CUDA_ERROR_UNKNOWN as u32;

/// Handles one call of the hook in `slot`, whose raw arguments are `raw`; `real` performs
/// the call itself, given the real function's address.
///
/// # Safety
/// `raw` must be the arguments the program passed, in the API table's order; `real` must call
/// the address it is given as the slot's C function.
#[inline(always)]
pub unsafe fn call(slot: usize, raw: &[u64], mut real: impl FnMut(*mut c_void) -> u32) -> u32 {
    // One copy of the recording code for every hook: the hot calls share their instructions.
    // SAFETY: forwarded from the caller.
    unsafe { call_dyn(slot, raw, &mut real) }
}

/// [`call`], not generic over the driver call.
///
/// # Safety
/// As [`call`].
#[inline(never)]
unsafe fn call_dyn(slot: usize, raw: &[u64], real: &mut dyn FnMut(*mut c_void) -> u32) -> u32 {
    let Some(s) = slots::get(slot) else { return NOT_FOUND };
    if mode::active() {
        // Client mode: no driver here; the session is the backend. A fault of ours becomes
        // this call's error, never an abort of the program (a panic cannot cross the C ABI).
        // SAFETY: forwarded from the caller.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { crate::remote::call(slot, s, raw) }));
        return r.unwrap_or_else(|_| {
            eprintln!(
                "gpuless: client mode failed inside {} (an internal error, printed above); the call returns \
                 CUDA_ERROR_UNKNOWN",
                s.func.name
            );
            UNKNOWN
        });
    }
    let Some(p) = s.real(slot) else { return NOT_FOUND };
    let mut real = Real::new(real, p);
    lane::with(|lane| {
        if s.timed {
            // SAFETY: forwarded from the caller.
            return diag::timed(slot, &mut real, |real| unsafe { record::hooked(slot, s, raw, real, lane) });
        }
        // SAFETY: forwarded from the caller.
        unsafe { record::hooked(slot, s, raw, &mut real, lane) }
    })
}
