//! Fatbin containers, the format in which CUDA ships GPU code (REFERENCE.md §1).
//!
//! This crate owns the byte-level formats below the cubin: the `__fatBinC_Wrapper_t` that
//! host code registers, fatbin containers and their PTX/ELF entries, LZ4-block and zstd
//! decompression, finding fatbins inside host ELF files (memory-mapped), reading an image
//! from a pointer with an upper bound (for the recorder), and choosing the entry a given GPU
//! would run. Every parser is total: bad input gives an [`Error`] naming the offset; nothing
//! panics and no allocation is sized by an unchecked field.

pub mod arch;
pub mod compress;
pub mod container;
pub mod entry;
pub mod error;
pub mod host_elf;
pub mod image;
pub mod retain;
pub mod select;

pub use arch::{parse_arch, Arch, Variant};
pub use compress::Limits;
pub use container::{all_entries, containers, Container, FATBIN_MAGIC};
pub use entry::{Compression, Entry, EntryKind};
pub use error::{Error, Part, Result};
pub use host_elf::{fatbin_sections, is_elf, FatbinSection, MappedFile};
pub use image::{cubin_len, Image, Wrapper, EM_CUDA, WRAPPER_MAGIC};
pub use retain::retain_for_sm;
pub use select::{select, Choice};
