//! Client mode (issue 19): the library stands in for `libcuda.so.1` and a `gpuless serve`
//! session executes the program's GPU work. Turned on by `GPULESS_REMOTE` (what `gpuless run
//! --remote` sets).
//!
//! The hooks and the argument capture are the recorder's; only the backend differs. Where the
//! recorder calls the driver, a hooked call in client mode comes here ([`call`]):
//! - answered locally, never waiting ([`local`]): device and driver queries from the session's
//!   device description, handles (client numbers), allocation addresses (the arena layout, the
//!   recorder's own `arena.rs` over the client's `driver.rs`), kernel parameter layouts and
//!   function attributes from the code images the program loads ([`modules`]);
//! - sent ahead without waiting: every driver call the server must execute, as a trace record
//!   in the session's current segment ([`session`]);
//! - waiting only where the program needs a result: device-to-host copies, synchronizations,
//!   state queries (event timings, memory information), a JIT link's adds and completion ([`jit`]). A
//!   synchronization when nothing was sent since the last answer is answered locally.
//!
//! The same library answers NVML (`libnvidia-ml.so.1`) for the session's device ([`nvml`]).
//!
//! What the recorder asks of "the driver" for itself (the arena's VMM calls, parameter layouts,
//! pointer types) resolves to [`driver`], the client's implementations of those entry points.

mod checks;
mod copies;
pub(crate) mod devices;
mod driver;
pub(crate) mod graph_mem;
mod host;
mod hostfn;
mod jit;
mod link;
mod local;
mod memo;
mod modules;
mod nodes;
mod nvml;
mod pieces;
mod ptx;
mod session;
mod shared;
mod tables;
mod vmm;
mod waits;

use std::sync::atomic::{AtomicU8, Ordering};

use gpuless_traces::{BlobKind, Value};

use crate::slots::Slot;

pub(crate) use driver::symbol;
pub(crate) use session::proc_address;

/// Environment: the server's endpoint (`unix:PATH`, `HOST:PORT`, or `tls://HOST:PORT` with the
/// CA file in `GPULESS_TLS_CA`); set, the library is a client.
pub const ENV_REMOTE: &str = "GPULESS_REMOTE";

/// 0 not asked yet, 1 client mode, 2 not.
static MODE: AtomicU8 = AtomicU8::new(0);

/// Whether this process is a client of a `gpuless serve` (`GPULESS_REMOTE` is set).
#[inline]
pub fn active() -> bool {
    match MODE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let on = std::env::var_os(ENV_REMOTE).is_some_and(|v| !v.is_empty());
            MODE.store(if on { 1 } else { 2 }, Ordering::Relaxed);
            on
        }
    }
}

/// The session's end when a signal ends the program (`signals.rs`, on its thread): the last
/// answer (errors the program never synchronized for are said), the session closed, the counts
/// written — what the exit path does, which a signal skips.
pub(crate) fn finish_at_signal() {
    if active() {
        session::finish();
    }
}

/// One hooked call in client mode.
///
/// # Safety
/// `raw` are the program's arguments to the slot's function, in the API table's order.
pub(crate) unsafe fn call(slot: usize, s: &Slot, raw: &[u64]) -> u32 {
    // SAFETY: forwarded from the caller.
    unsafe { session::call(slot, s, raw) }
}

/// Fills a trace's device facts from the session's device description (`gpuless record
/// --remote`).
pub(crate) fn describe(meta: &mut gpuless_traces::TraceMeta) {
    if let Some(d) = session::device() {
        meta.gpu_name = d.name.clone();
        meta.sm = d.sm();
        meta.uuid = d.uuid.to_vec();
        meta.driver_version = d.driver_version;
        meta.extra.push(("recorded_through".into(), "gpuless serve session (client mode)".into()));
    }
}

/// A blob captured from the program's memory (a host-to-device payload, a code image): kept
/// for the session, which uploads it before the segment that refers to it (or only its hash
/// when the server holds it).
pub(crate) fn blob(kind: BlobKind, data: &[u8]) -> Value {
    session::blob(kind, data)
}
