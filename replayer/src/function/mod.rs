//! GPU functions (issue 20), first part: a trace compiled into a function file (`.gfn`) — the
//! set-up and body of a recording of one inference (`replay::hot::split`), the blobs they use,
//! and the function's signature: its inputs (the body's host-to-device copies) and outputs (its
//! device-to-host copies), with addresses and sizes. Compiled from two recordings with
//! different inputs, the bodies are compared first: a body that depends on its input data
//! (another launch, size, address or order) is refused with the first difference.
//!
//! Not yet: `gpuless invoke` (running a function without its program), pruning the code images
//! to the kernels the function runs, and lowering the body to a graph template.

mod file;
mod signature;
#[cfg(test)]
mod tests;

pub use file::{read, write, FunctionError, MAGIC};
pub use signature::{compile, first_difference, Manifest, Port};
