//! Errors of the trace reader and writer.

use std::io;

/// Everything that can go wrong reading or writing a trace.
///
/// Errors about a chunk carry its ordinal (`chunk`, 0-based, counting every chunk after the file
/// header) and the file offset of its header.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// An I/O error at a file offset.
    #[error("I/O error at offset {offset}: {source}")]
    Io {
        /// Offset where it happened.
        offset: u64,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The file does not start with the trace magic.
    #[error("not a gpuless trace: bad magic {found:02x?}")]
    BadMagic {
        /// The first bytes found.
        found: Vec<u8>,
    },
    /// The file was written by a newer, incompatible format.
    #[error("trace format {major}.{minor} is newer than this reader (supports {supported}.x)")]
    UnsupportedMajor {
        /// Major version found.
        major: u16,
        /// Minor version found.
        minor: u16,
        /// Major version supported.
        supported: u16,
    },
    /// The file header is damaged.
    #[error("bad file header at offset {offset}: {reason}")]
    BadHeader {
        /// Offset of the problem.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The file ends inside a chunk (the recording was cut). Every chunk before it was read.
    #[error(
        "trace truncated in chunk {chunk} at offset {offset}: {available} of {needed} bytes present ({lost} bytes lost)"
    )]
    Truncated {
        /// Ordinal of the incomplete chunk.
        chunk: u64,
        /// Offset of its header.
        offset: u64,
        /// Bytes the chunk needs (header, plus payload when the header was readable).
        needed: u64,
        /// Bytes present.
        available: u64,
        /// Bytes after the last complete chunk.
        lost: u64,
    },
    /// A chunk header does not start with the chunk magic.
    #[error("chunk {chunk} at offset {offset}: bad chunk magic {found:02x?}")]
    BadChunkMagic {
        /// Chunk ordinal.
        chunk: u64,
        /// Offset.
        offset: u64,
        /// Bytes found.
        found: [u8; 4],
    },
    /// A checksum does not match.
    #[error("chunk {chunk} at offset {offset}: {what} checksum mismatch (stored {stored:#x}, computed {computed:#x})")]
    Checksum {
        /// Chunk ordinal.
        chunk: u64,
        /// Offset.
        offset: u64,
        /// Which checksum (`header`, `payload`, `trailer`).
        what: &'static str,
        /// Stored value.
        stored: u64,
        /// Computed value.
        computed: u64,
    },
    /// A length field is beyond what the format allows.
    #[error("chunk {chunk} at offset {offset}: {what} of {len} bytes exceeds the limit of {limit}")]
    AbsurdLength {
        /// Chunk ordinal.
        chunk: u64,
        /// Offset.
        offset: u64,
        /// Which length.
        what: &'static str,
        /// The value.
        len: u64,
        /// The limit.
        limit: u64,
    },
    /// The payload is damaged (decompression, flatbuffer verification, inconsistent fields).
    #[error("chunk {chunk} at offset {offset}: corrupt payload: {reason}")]
    Corrupt {
        /// Chunk ordinal.
        chunk: u64,
        /// Offset.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A call record references a blob that no earlier chunk stores.
    #[error("chunk {chunk} at offset {offset}: call {seq} references missing blob {hash} ({len} bytes)")]
    MissingBlob {
        /// Chunk ordinal of the call chunk.
        chunk: u64,
        /// Its offset.
        offset: u64,
        /// The call's sequence number.
        seq: u64,
        /// The blob hash (hex).
        hash: String,
        /// The referenced length.
        len: u64,
    },
    /// The writer's background thread stopped (an earlier write failed).
    #[error("trace writer stopped: {0}")]
    WriterStopped(String),
}

impl TraceError {
    /// Wrap an I/O error with the offset where it happened.
    pub fn io(offset: u64, source: io::Error) -> Self {
        TraceError::Io { offset, source }
    }

    /// Whether this error only says the file was cut short (everything before was fine).
    pub fn is_truncation(&self) -> bool {
        matches!(self, TraceError::Truncated { .. })
    }
}

/// Result alias.
pub type Result<T, E = TraceError> = std::result::Result<T, E>;
