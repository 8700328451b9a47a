//! The gpuless recorder: a preload library that records every CUDA driver call of an
//! unmodified program into a trace file (REFERENCE.md §3).
//!
//! `gpuless record -o trace.gl -- CMD` runs CMD with `LD_PRELOAD` naming this library and
//! `GPULESS_TRACE` naming the trace. The library interposes `dlsym`, hands out its own
//! `cuGetProcAddress[_v2]`, and replaces every driver entry point with a hook generated from
//! the API table (`build.rs`); functions the table does not model pass through counting
//! trampolines. Hooks capture arguments and results by the table's argument kinds and queue
//! records for the trace writer's background thread. An internal failure disables recording
//! (said once on stderr); the program's behaviour is never changed.
//!
//! The runtime's registration functions (`__cudaRegisterFatBinary`, `__cudaRegisterFunction`,
//! ...) are exported too and recorded as runtime-level annotations, each call forwarded to the
//! libcudart the caller would have bound ([`cudart`](crate::cudart) says how that is found).
//!
//! Device allocations are served from a fixed-base VMM arena ([`arena`]), so recorded
//! addresses are reproducible and replay re-creates them exactly.

pub mod arena;
mod batches;
mod call;
mod capture;
mod clock;
mod cudart;
mod diag;
mod dispatch;
mod dl;
mod driver;
mod exits;
mod export_log;
mod export_tables;
mod fault_report;
mod finish;
mod fold;
mod functions;
mod graph_books;
mod hooks;
mod hostview;
mod hot;
mod init;
mod intercept;
mod ipc;
mod lane;
mod late;
mod late_download;
mod late_graph;
mod loaded;
mod memo;
mod mirror;
mod mode;
mod owner;
mod pending;
mod pools;
mod raw;
mod real;
mod record;
pub mod remote;
mod signals;
mod sink;
mod slots;
mod state;
mod tls;
mod unified;
mod unmodeled;

pub use diag::gpuless_diag_pause;
pub use intercept::{cuGetProcAddress, cuGetProcAddress_v2, dlsym};
pub use state::{ENV_CAPTURE_OUTPUTS, ENV_TRACE};

/// Records are built on the program's threads and freed on the writer's: mimalloc handles
/// that cross-thread pattern far better than the C library's allocator. Only this library's
/// own (Rust) allocations use it; the program's malloc is untouched.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
