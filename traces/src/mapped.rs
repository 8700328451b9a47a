//! Reading a whole trace that lies in memory (a memory-mapped file) at once, for a cold start:
//! the chunk headers are walked in order, then every payload is checked (XXH3), decompressed
//! and decoded in parallel; a blob stored uncompressed in one part is used where it lies in
//! the mapping, not copied. The trace must be whole: every chunk intact and the trailer at its
//! end.

use std::collections::HashMap;
use std::sync::Arc;

use rayon::prelude::*;

use crate::decode::{decode_blob_slices, decode_calls, Ctx};
use crate::error::TraceError;
use crate::format::{
    decode_trailer, ChunkHeader, ChunkKind, CHUNK_HEADER_LEN, CHUNK_MAGIC, CODEC_NONE, CODEC_ZSTD, MAX_RAW_LEN,
    MAX_STORED_LEN, TRAILER_LEN, TRAILER_MAGIC,
};
use crate::model::{CallRecord, Hash128, TraceMeta};
use crate::BlobBytes;

/// A whole trace read from memory.
pub struct MappedTrace {
    /// Header metadata.
    pub meta: TraceMeta,
    /// Every call record, in sequence order.
    pub calls: Vec<CallRecord>,
    /// Every blob, whole: in the mapping where it was stored uncompressed in one part.
    pub blobs: HashMap<Hash128, BlobBytes>,
}

/// A chunk found by the walk: its ordinal, header offset (in the trace), header and payload.
struct Found {
    ordinal: u64,
    offset: u64,
    hdr: ChunkHeader,
    payload: std::ops::Range<usize>,
}

/// One decoded blob part: (hash, whole length, offset in the blob, where its bytes are).
type Part = (Hash128, u64, u64, Bytes);

/// Where a part's bytes are: at an offset of the mapping, or decompressed.
enum Bytes {
    Mapped(usize, usize),
    Owned(Vec<u8>),
}

/// What one chunk decoded to.
enum Decoded {
    Calls(Vec<CallRecord>),
    Blobs(Vec<Part>),
    Other,
}

/// Reads the trace at `map[start..]`.
pub fn read_mapped(map: Arc<memmap2::Mmap>, start: usize) -> Result<MappedTrace, TraceError> {
    let bytes = map.get(start..).unwrap_or_default();
    let mut cursor = std::io::Cursor::new(bytes);
    let (_, _, meta, header_len) = crate::reader::read_header(&mut cursor)?;
    let chunks = walk(bytes, header_len as usize)?;
    let base = bytes.as_ptr() as usize;
    let decoded: Vec<Decoded> = chunks.par_iter().map(|c| decode(bytes, base, start, c)).collect::<Result<_, _>>()?;
    let mut calls = Vec::new();
    let mut whole: HashMap<Hash128, BlobBytes> = HashMap::new();
    let mut partial: HashMap<Hash128, Vec<u8>> = HashMap::new();
    for d in decoded {
        match d {
            Decoded::Calls(mut v) => calls.append(&mut v),
            Decoded::Blobs(parts) => {
                for (hash, total, offset, b) in parts {
                    if whole.contains_key(&hash) {
                        continue;
                    }
                    match b {
                        Bytes::Mapped(at, len) if offset == 0 && len as u64 == total => {
                            if let Some(m) = BlobBytes::mapped(map.clone(), at, len) {
                                whole.insert(hash, m);
                            }
                        }
                        b => {
                            let data: &[u8] = match &b {
                                Bytes::Mapped(at, len) => map.get(*at..*at + *len).unwrap_or_default(),
                                Bytes::Owned(v) => v,
                            };
                            let buf = partial.entry(hash).or_insert_with(|| {
                                crate::blob_bytes::buffer(total.min(u64::from(MAX_RAW_LEN)) as usize)
                            });
                            if buf.len() as u64 == offset {
                                buf.extend_from_slice(data);
                            }
                            if buf.len() as u64 == total {
                                if let Some(done) = partial.remove(&hash) {
                                    whole.insert(hash, BlobBytes::from(done));
                                }
                            }
                        }
                    }
                }
            }
            Decoded::Other => {}
        }
    }
    calls.sort_by_key(|c| c.seq);
    Ok(MappedTrace { meta, calls, blobs: whole })
}

/// Walks the chunk headers from `pos` to the trailer, checking each header.
fn walk(bytes: &[u8], mut pos: usize) -> Result<Vec<Found>, TraceError> {
    let mut out = Vec::new();
    loop {
        let (ordinal, offset) = (out.len() as u64, pos as u64);
        let rest = bytes.get(pos..).unwrap_or_default();
        if rest.starts_with(&TRAILER_MAGIC) {
            if rest.len() == TRAILER_LEN && decode_trailer(rest).is_some() {
                return Ok(out);
            }
            return Err(TraceError::Corrupt {
                chunk: ordinal,
                offset,
                reason: "bad trailer or data after the trailer".into(),
            });
        }
        let truncated = |needed: u64| TraceError::Truncated {
            chunk: ordinal,
            offset,
            needed,
            available: rest.len() as u64,
            lost: rest.len() as u64,
        };
        let h: &[u8; CHUNK_HEADER_LEN] = match rest.get(..CHUNK_HEADER_LEN).and_then(|h| h.try_into().ok()) {
            Some(h) => h,
            // The end without a trailer: a trace cut short (at a chunk boundary or inside one).
            None => return Err(truncated(if rest.is_empty() { TRAILER_LEN as u64 } else { CHUNK_HEADER_LEN as u64 })),
        };
        if !h.starts_with(&CHUNK_MAGIC) {
            let mut found = [0u8; 4];
            found.copy_from_slice(&h[..4]);
            return Err(TraceError::BadChunkMagic { chunk: ordinal, offset, found });
        }
        let (hdr, stored_sum, computed_sum) = ChunkHeader::decode(h);
        if stored_sum != computed_sum {
            return Err(TraceError::Checksum {
                chunk: ordinal,
                offset,
                what: "header",
                stored: u64::from(stored_sum),
                computed: u64::from(computed_sum),
            });
        }
        if hdr.stored_len > MAX_STORED_LEN || hdr.raw_len > MAX_RAW_LEN {
            return Err(TraceError::AbsurdLength {
                chunk: ordinal,
                offset,
                what: "payload",
                len: u64::from(hdr.stored_len.max(hdr.raw_len)),
                limit: u64::from(MAX_STORED_LEN),
            });
        }
        let start = pos + CHUNK_HEADER_LEN;
        let end = start + hdr.stored_len as usize;
        if end > bytes.len() {
            return Err(truncated((CHUNK_HEADER_LEN + hdr.stored_len as usize) as u64));
        }
        out.push(Found { ordinal, offset, hdr, payload: start..end });
        pos = end;
    }
}

/// Checks, decompresses and decodes one chunk. `base` is the address of `bytes`, which lie
/// at `start` in the mapping.
fn decode(bytes: &[u8], base: usize, start: usize, c: &Found) -> Result<Decoded, TraceError> {
    let (chunk, offset) = (c.ordinal, c.offset);
    let stored = bytes.get(c.payload.clone()).unwrap_or_default();
    let sum = xxhash_rust::xxh3::xxh3_64(stored);
    if sum != c.hdr.checksum {
        return Err(TraceError::Checksum { chunk, offset, what: "payload", stored: c.hdr.checksum, computed: sum });
    }
    let corrupt = |reason: String| TraceError::Corrupt { chunk, offset, reason };
    let owned;
    let raw: &[u8] = match c.hdr.codec {
        CODEC_NONE if c.hdr.raw_len == c.hdr.stored_len => stored,
        CODEC_NONE => return Err(corrupt("uncompressed chunk whose raw and stored lengths differ".into())),
        CODEC_ZSTD => {
            owned =
                zstd::bulk::decompress(stored, c.hdr.raw_len as usize).map_err(|e| corrupt(format!("zstd: {e}")))?;
            if owned.len() != c.hdr.raw_len as usize {
                return Err(corrupt(format!("decompressed to {} bytes, header says {}", owned.len(), c.hdr.raw_len)));
            }
            &owned
        }
        k => return Err(corrupt(format!("unknown codec {k}"))),
    };
    let ctx = Ctx { chunk, offset };
    Ok(match ChunkKind::from_u8(c.hdr.kind) {
        Some(ChunkKind::Calls) => Decoded::Calls(decode_calls(raw, ctx)?),
        Some(ChunkKind::Blobs) => {
            let in_place = c.hdr.codec == CODEC_NONE;
            let parts = decode_blob_slices(raw, ctx)?
                .into_iter()
                .map(|(p, data)| {
                    let b = if in_place {
                        Bytes::Mapped(data.as_ptr() as usize - base + start, data.len())
                    } else {
                        Bytes::Owned(data.to_vec())
                    };
                    (p.hash, p.total_len, p.offset, b)
                })
                .collect();
            Decoded::Blobs(parts)
        }
        _ => Decoded::Other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::BlobKind;
    use crate::synthetic::{synthetic_meta, Recorder};
    use crate::writer::{TraceWriter, WriterOptions};
    use crate::Value;

    fn write(path: &std::path::Path, store: bool, chunk: usize) -> Vec<u8> {
        let opts = WriterOptions { store_data_blobs: store, blob_chunk_bytes: chunk, ..WriterOptions::default() };
        let w = TraceWriter::create(path, &synthetic_meta("mapped"), opts).unwrap();
        let mut r = Recorder::new(&w);
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        let small = vec![7u8; 1000];
        for data in [&big, &small] {
            let b = r.blob(BlobKind::HostToDevice, data).unwrap();
            r.call("cuMemcpyHtoD_v2", vec![Value::DevPtr(0x7e00_0000_0000), Value::Blob(b), Value::Size(1)], vec![])
                .unwrap();
        }
        w.finish().unwrap();
        big
    }

    fn map(path: &std::path::Path) -> Arc<memmap2::Mmap> {
        // SAFETY: a test file nobody changes.
        Arc::new(unsafe { memmap2::Mmap::map(&std::fs::File::open(path).unwrap()) }.unwrap())
    }

    #[test]
    fn blobs_are_whole_and_stored_ones_stay_in_the_mapping() {
        let dir = tempfile::tempdir().unwrap();
        // Compressed or stored, in parts or in one: the same bytes; stored in one part: in place.
        for (store, chunk) in [(false, 1 << 20), (true, 1 << 20), (true, 8 << 20)] {
            let path = dir.path().join(format!("t{store}{chunk}.gl"));
            let big = write(&path, store, chunk);
            let t = read_mapped(map(&path), 0).unwrap();
            assert_eq!(t.calls.len(), 2);
            let got = t.blobs.get(&Hash128::of(&big)).expect("the big blob");
            assert_eq!(&got[..], &big[..]);
            let in_place = matches!(got, BlobBytes::Mapped { .. });
            assert_eq!(in_place, store && chunk > big.len(), "store {store}, chunk {chunk}");
            assert_eq!(t.blobs.get(&Hash128::of(&[7u8; 1000])).map(|b| b.len()), Some(1000));
        }
    }

    #[test]
    fn a_damaged_or_cut_trace_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.gl");
        write(&path, true, 8 << 20);
        let bytes = std::fs::read(&path).unwrap();
        for (name, b) in [
            ("cut at half", bytes[..bytes.len() / 2].to_vec()),
            ("no trailer", bytes[..bytes.len() - TRAILER_LEN].to_vec()),
            ("flipped", {
                let mut b = bytes.clone();
                let at = b.len() / 2;
                b[at] ^= 0xff;
                b
            }),
        ] {
            let p = dir.path().join("bad.gl");
            std::fs::write(&p, &b).unwrap();
            assert!(read_mapped(map(&p), 0).is_err(), "{name}");
        }
    }
}
