//! Analysis of GPU code and CUDA API usage.
//!
//! This crate owns what can be learned from GPU binaries without a GPU — kernels, their
//! parameter layouts and resources read from cubins ([`cubin`]), whole host ELF / fatbin /
//! cubin files analyzed in parallel ([`binary`]) — and the declarative CUDA API table
//! ([`api`]) with the synchronization analysis built on it ([`sync`]); for client mode, what
//! the driver answers about a kernel without running it (function [`attributes`],
//! [`occupancy`]) and what its private integrity check answers ([`integrity`]).

pub mod api;
pub mod attributes;
pub mod binary;
pub mod cubin;
pub mod integrity;
pub mod occupancy;
pub mod sync;

pub use binary::{analyze, detect, AnalyzeError, EntryInfo, InputKind, NoProgress, Options, Progress, Report};
