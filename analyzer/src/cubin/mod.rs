//! Cubin (device ELF) analysis: kernels, their parameter layouts and resources, read from the
//! symbol table and the `.nv.info` sections (REFERENCE.md §2), without a GPU or cuobjdump.

mod elf;
mod kernel;
pub mod nvinfo;

pub use elf::{analyze_cubin, Cubin, Global};
pub use kernel::{demangle, Kernel, Param};

/// Errors reading a cubin. Offsets are relative to the start of the cubin (or of the
/// `.nv.info` section, for [`CubinError::NvInfo`] before it is placed in its section).
#[derive(Debug, thiserror::Error)]
pub enum CubinError {
    /// The ELF structure itself is broken.
    #[error("cubin is not a readable ELF: {0}")]
    Elf(String),
    /// The ELF is not a CUDA cubin.
    #[error("ELF machine {0} is not EM_CUDA (190): not a cubin")]
    NotCuda(u16),
    /// An `.nv.info` record is malformed.
    #[error(".nv.info record at offset {offset:#x}: {what}")]
    NvInfo { offset: usize, what: String },
    /// A record inside a named section is malformed (offset is from the cubin's start).
    #[error("section {section} at cubin offset {offset:#x}: {what}")]
    Section { section: String, offset: u64, what: String },
}
