//! The gpuless trace file format: schema, writer, reader and trace analysis.
//!
//! A trace is a header (magic, format version, recording metadata) followed by self-delimiting,
//! checksummed, zstd-compressed chunks: call chunks hold batches of [`CallRecord`]s, blob chunks
//! hold content-addressed blobs (code images, host-to-device payloads, captured outputs), stored
//! once per content. A finished trace ends with an index chunk and a trailer; a trace cut at any
//! byte still yields every complete chunk. The byte-level format is in `docs/TRACE_FORMAT.md`.
//!
//! * [`TraceWriter`]: background writer thread fed by a bounded queue.
//! * [`TraceReader`]: streaming reader with bounded memory; [`TraceFile`]: random access to blobs.
//! * [`analysis`]: statistics and synchronization analysis of a trace; the Perfetto timeline.
//! * [`dump`]: records decoded for people (`gpuless dump`).

#![warn(missing_docs)]

pub mod analysis;
pub mod arena;
pub mod blob_bytes;
pub mod completion;
mod decode;
pub mod devices;
pub mod dump;
mod encode;
pub mod error;
pub mod format;
mod generated;
pub mod hostview;
pub mod mapped;
pub mod model;
pub mod protocol;
pub mod reader;
pub mod resident;
pub mod synthetic;
pub mod writer;

pub use blob_bytes::BlobBytes;
pub use error::TraceError;
pub use format::{FORMAT_MAJOR, FORMAT_MINOR, MAGIC};
pub use model::{
    BlobKind, BlobPart, BlobRef, CallRecord, Dim3, Function, Hash128, KernelParams, LaunchAttr, LaunchConfig,
    TraceIndex, TraceMeta, Value,
};
pub use reader::{Blobs, Chunk, ChunkBody, ReaderOptions, Recovery, TraceFile, TraceReader};
pub use writer::{default_compression_threads, TraceWriter, WriterOptions, WriterStats};

/// Whether a file starting with `prefix` is a gpuless trace (checks the magic).
pub fn is_trace(prefix: &[u8]) -> bool {
    prefix.starts_with(&MAGIC)
}
