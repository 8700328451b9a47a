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
//!
//! The modules' layers, top to bottom (none uses one above it; no child uses its parent; what
//! a lower one needs from above is lent at [`install`]):
//! - entry points: this module ([`call`]), [`nvml`];
//! - one call's way: [`trip`] (with [`staged`], [`jit`], [`ipc`], [`hostcalls`]: what a call
//!   asks of the session);
//! - the session: [`session`] (`connect`/`answers` → `outgoing`/`stats` → `base`);
//! - the client's part and its answers: [`local`], [`checks`], [`copies`], [`host`],
//!   [`shared`], [`vmm`], [`graph_mem`], [`nodes`], [`tables`], [`driver`], [`hostfn`];
//! - books and facts: [`step`], [`handles`], [`streams`], [`context_books`], [`attributes`],
//!   [`devices`], [`pci`], [`route`], [`modules`], [`ptx`], [`memo`], [`waits`], [`link`],
//!   [`pieces`].

mod altstack;
mod attributes;
mod checks;
mod context_books;
mod copies;
pub(crate) mod devices;
mod driver;
pub(crate) mod graph_mem;
mod handles;
mod host;
mod hostcalls;
mod hostfn;
mod ipc;
mod jit;
mod link;
mod local;
mod memo;
mod modules;
mod nodes;
mod nvml;
mod pci;
mod pieces;
mod ptx;
mod route;
mod session;
mod shared;
mod staged;
mod step;
mod streams;
mod tables;
mod trip;
mod vmm;
mod waits;

use crate::slots::Slot;

pub use crate::mode::{active, ENV_REMOTE};
pub(crate) use trip::install;

/// The session's end when a signal ends the program (`signals.rs`, on its thread): the last
/// answer (errors the program never synchronized for are said), the session closed, the counts
/// written — what the exit path does, which a signal skips.
pub(crate) fn finish_at_signal() {
    if active() {
        session::finish();
    }
}

/// One hooked call in client mode ([`trip`]).
///
/// # Safety
/// `raw` are the program's arguments to the slot's function, in the API table's order.
pub(crate) unsafe fn call(slot: usize, s: &Slot, raw: &[u64]) -> u32 {
    install();
    // SAFETY: forwarded from the caller.
    unsafe { trip::call(slot, s, raw) }
}
