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

use gpuless_traces::{BlobKind, Value};

use crate::slots::Slot;

pub use crate::mode::{active, ENV_REMOTE};

/// Lends the layers below the backends what they need of the client ([`crate::mode::Client`]):
/// [`driver`]'s entry points as "the driver", and the session's store of captured blobs. Once
/// per process; called by every way into client mode that can come first (a hooked call,
/// NVML, the runtime's registrations), so that nothing below asks before it is done.
pub(crate) fn install() {
    if active() && crate::mode::client().is_none() {
        crate::mode::lend(crate::mode::Client { symbol: driver::symbol, blob });
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
    install();
    // SAFETY: forwarded from the caller.
    unsafe { session::call(slot, s, raw) }
}

/// A blob captured from the program's memory (a host-to-device payload, a code image): kept
/// for the session, which uploads it before the segment that refers to it (or only its hash
/// when the server holds it).
pub(crate) fn blob(kind: BlobKind, data: &[u8]) -> Value {
    session::blob(kind, data)
}
