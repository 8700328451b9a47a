//! Fixed-size binary layouts: file header, chunk header, trailer, limits.
//!
//! See docs/TRACE_FORMAT.md for the byte-level description.

use xxhash_rust::xxh3::xxh3_64;

/// The first 8 bytes of every trace file.
pub const MAGIC: [u8; 8] = [0x89, b'G', b'L', b'T', b'R', b'\r', b'\n', 0x1a];
/// Format major version written; readers refuse newer majors and read every older one (1.x:
/// arguments only as tables).
pub const FORMAT_MAJOR: u16 = 2;
/// Format minor version written; readers accept any minor of their major.
pub const FORMAT_MINOR: u16 = 0;
/// Size of the fixed part of the file header.
pub const FILE_HEADER_LEN: usize = 24;
/// Size of a chunk header.
pub const CHUNK_HEADER_LEN: usize = 32;
/// Magic at the start of every chunk header.
pub const CHUNK_MAGIC: [u8; 4] = *b"GLCK";
/// Size of the trailer after the index chunk.
pub const TRAILER_LEN: usize = 24;
/// Magic at the start of the trailer.
pub const TRAILER_MAGIC: [u8; 8] = *b"GLTRAILR";

/// Largest metadata flatbuffer accepted.
pub const MAX_META_LEN: u32 = 1 << 20;
/// Largest stored (compressed) chunk payload accepted.
pub const MAX_STORED_LEN: u32 = 256 << 20;
/// Largest decompressed chunk payload accepted.
pub const MAX_RAW_LEN: u32 = 256 << 20;

/// Chunk kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ChunkKind {
    /// A `CallBatch`.
    Calls = 1,
    /// A `BlobBatch`.
    Blobs = 2,
    /// The `TraceIndex`.
    Index = 3,
}

impl ChunkKind {
    /// Decode; `None` for kinds this reader does not know (they are skipped).
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::Calls),
            2 => Some(Self::Blobs),
            3 => Some(Self::Index),
            _ => None,
        }
    }
}

/// Payload encodings.
pub const CODEC_NONE: u8 = 0;
/// zstd frame.
pub const CODEC_ZSTD: u8 = 1;

/// A decoded chunk header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    /// Kind byte.
    pub kind: u8,
    /// Codec byte.
    pub codec: u8,
    /// Flags (0).
    pub flags: u16,
    /// Payload length in the file.
    pub stored_len: u32,
    /// Payload length after decompression.
    pub raw_len: u32,
    /// XXH3-64 of the stored payload.
    pub checksum: u64,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    let mut a = [0u8; 2];
    if let Some(s) = b.get(at..at + 2) {
        a.copy_from_slice(s);
    }
    u16::from_le_bytes(a)
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        a.copy_from_slice(s);
    }
    u32::from_le_bytes(a)
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        a.copy_from_slice(s);
    }
    u64::from_le_bytes(a)
}

/// Encode the fixed file header for `meta`.
pub fn encode_file_header(meta: &[u8], major: u16, minor: u16) -> [u8; FILE_HEADER_LEN] {
    let mut h = [0u8; FILE_HEADER_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[8..10].copy_from_slice(&major.to_le_bytes());
    h[10..12].copy_from_slice(&minor.to_le_bytes());
    h[12..16].copy_from_slice(&(meta.len() as u32).to_le_bytes());
    let sum = file_header_checksum(&h[..16], meta);
    h[16..24].copy_from_slice(&sum.to_le_bytes());
    h
}

/// The checksum stored in the file header: XXH3-64 over its first 16 bytes and the metadata.
pub fn file_header_checksum(first16: &[u8], meta: &[u8]) -> u64 {
    let mut st = xxhash_rust::xxh3::Xxh3::new();
    st.update(first16);
    st.update(meta);
    st.digest()
}

/// Fields of the fixed file header (not yet validated).
pub struct FileHeaderFields {
    /// Major version.
    pub major: u16,
    /// Minor version.
    pub minor: u16,
    /// Metadata length.
    pub meta_len: u32,
    /// Stored checksum.
    pub checksum: u64,
}

/// Split the fixed file header into its fields.
pub fn decode_file_header(h: &[u8; FILE_HEADER_LEN]) -> FileHeaderFields {
    FileHeaderFields { major: u16_at(h, 8), minor: u16_at(h, 10), meta_len: u32_at(h, 12), checksum: u64_at(h, 16) }
}

impl ChunkHeader {
    /// Encode, computing the header checksum.
    pub fn encode(&self) -> [u8; CHUNK_HEADER_LEN] {
        let mut h = [0u8; CHUNK_HEADER_LEN];
        h[..4].copy_from_slice(&CHUNK_MAGIC);
        h[4] = self.kind;
        h[5] = self.codec;
        h[6..8].copy_from_slice(&self.flags.to_le_bytes());
        h[8..12].copy_from_slice(&self.stored_len.to_le_bytes());
        h[12..16].copy_from_slice(&self.raw_len.to_le_bytes());
        h[16..24].copy_from_slice(&self.checksum.to_le_bytes());
        let hc = xxh3_64(&h[..24]) as u32;
        h[24..28].copy_from_slice(&hc.to_le_bytes());
        h
    }

    /// Decode; returns the header and (stored, computed) header checksums.
    pub fn decode(h: &[u8; CHUNK_HEADER_LEN]) -> (ChunkHeader, u32, u32) {
        let stored = u32_at(h, 24);
        let computed = xxh3_64(&h[..24]) as u32;
        (
            ChunkHeader {
                kind: h[4],
                codec: h[5],
                flags: u16_at(h, 6),
                stored_len: u32_at(h, 8),
                raw_len: u32_at(h, 12),
                checksum: u64_at(h, 16),
            },
            stored,
            computed,
        )
    }
}

/// Encode the trailer that points at the index chunk.
pub fn encode_trailer(index_offset: u64) -> [u8; TRAILER_LEN] {
    let mut t = [0u8; TRAILER_LEN];
    t[..8].copy_from_slice(&TRAILER_MAGIC);
    t[8..16].copy_from_slice(&index_offset.to_le_bytes());
    let sum = xxh3_64(&t[..16]);
    t[16..24].copy_from_slice(&sum.to_le_bytes());
    t
}

/// Decode a trailer: the index offset if magic and checksum are right.
pub fn decode_trailer(t: &[u8]) -> Option<u64> {
    if t.len() != TRAILER_LEN || t.get(..8)? != TRAILER_MAGIC {
        return None;
    }
    let sum = xxh3_64(t.get(..16)?);
    (sum == u64_at(t, 16)).then(|| u64_at(t, 8))
}

/// Recompute every checksum of a trace image in place (header, chunk headers, payloads,
/// trailer) so that fuzzers reach the decompressor and the flatbuffer verifier. Stops at the
/// first chunk that does not fit. Not for production use.
#[doc(hidden)]
pub fn fix_checksums(buf: &mut [u8]) {
    if buf.len() < FILE_HEADER_LEN {
        return;
    }
    let meta_len = u32_at(buf, 12) as usize;
    let Some(meta_end) = FILE_HEADER_LEN.checked_add(meta_len).filter(|e| *e <= buf.len()) else {
        return;
    };
    let sum = file_header_checksum(&buf[..16], &buf[FILE_HEADER_LEN..meta_end]);
    buf[16..24].copy_from_slice(&sum.to_le_bytes());
    let mut pos = meta_end;
    while pos + CHUNK_HEADER_LEN <= buf.len() {
        if buf[pos..pos + 8] == TRAILER_MAGIC && pos + TRAILER_LEN <= buf.len() {
            let sum = xxh3_64(&buf[pos..pos + 16]);
            buf[pos + 16..pos + 24].copy_from_slice(&sum.to_le_bytes());
            return;
        }
        let stored = u32_at(buf, pos + 8) as usize;
        let start = pos + CHUNK_HEADER_LEN;
        let Some(end) = start.checked_add(stored).filter(|e| *e <= buf.len()) else {
            return;
        };
        let sum = xxh3_64(&buf[start..end]);
        buf[pos + 16..pos + 24].copy_from_slice(&sum.to_le_bytes());
        let hc = xxh3_64(&buf[pos..pos + 24]) as u32;
        buf[pos + 24..pos + 28].copy_from_slice(&hc.to_le_bytes());
        pos = end;
    }
}
