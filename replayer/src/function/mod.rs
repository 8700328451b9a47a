//! GPU functions (issue 20), first part: a trace compiled into a function file (`.gfn`) — the
//! set-up and body of a recording of one inference (`replay::hot::split`), the blobs they use,
//! and the function's signature: its inputs (the body's host-to-device copies) and outputs (its
//! device-to-host copies), with addresses and sizes. Compiled from two recordings with
//! different inputs, the bodies are compared first: a body that depends on its input data
//! (another launch, size, address or order) is refused with the first difference.
//!
//! Only the code the function runs is kept (`prune`: code images none of whose kernels it
//! launches or uses are left out). [`Invoker`] runs a function without its program: set-up once,
//! the body captured as one CUDA graph, then each invocation writes its inputs, launches the
//! graph and reads its outputs.

mod file;
mod invoke;
mod prune;
mod signature;
#[cfg(test)]
mod tests;

pub use file::{open, open_blob, open_bytes, write, Function, FunctionError, MAGIC};
pub use invoke::{InvokeError, Invoker, Mode};
pub use prune::{prune, Pruned};
pub use signature::{compile, first_difference, Manifest, Port};
