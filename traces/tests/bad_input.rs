//! Bad input: typed errors with chunk index and offset, never a panic.

mod common;

use gpuless_traces::format::{self, ChunkHeader, CHUNK_HEADER_LEN, FILE_HEADER_LEN};
use gpuless_traces::model::{BlobKind, Function};
use gpuless_traces::synthetic::{resnet_like, vector_add, ResnetScale};
use gpuless_traces::{BlobRef, CallRecord, ChunkBody, Hash128, ReaderOptions, TraceError, TraceReader, Value};

fn vector_add_trace() -> Vec<u8> {
    common::write_mem(common::small_chunks(), |w| vector_add(w, 256).expect("synthetic"))
}

/// (offset, stored_len) of every chunk, walking the file structure.
fn chunk_offsets(b: &[u8]) -> Vec<(usize, usize)> {
    let meta = u32::from_le_bytes(b[12..16].try_into().unwrap()) as usize;
    let mut pos = FILE_HEADER_LEN + meta;
    let mut out = Vec::new();
    while pos + CHUNK_HEADER_LEN <= b.len() && &b[pos..pos + 4] == b"GLCK" {
        let stored = u32::from_le_bytes(b[pos + 8..pos + 12].try_into().unwrap()) as usize;
        out.push((pos, stored));
        pos += CHUNK_HEADER_LEN + stored;
    }
    out
}

/// Every chunk read and the first error.
fn read_all(b: &[u8]) -> (Vec<ChunkBody>, Option<TraceError>) {
    let (ok, err, _, _) = read_all_counted(b);
    (ok, err)
}

/// Every chunk read, the first error, how many chunks came before it, and what was skipped.
fn read_all_counted(b: &[u8]) -> (Vec<ChunkBody>, Option<TraceError>, usize, gpuless_traces::Recovery) {
    let mut r = match TraceReader::new(std::io::Cursor::new(b), ReaderOptions::default()) {
        Ok(r) => r,
        Err(e) => return (Vec::new(), Some(e), 0, Default::default()),
    };
    let mut ok = Vec::new();
    let mut err = None;
    let mut before = 0;
    for c in r.by_ref() {
        match c {
            Ok(c) => ok.push(c.body),
            Err(e) => {
                if err.is_none() {
                    before = ok.len();
                    err = Some(e);
                }
            }
        }
    }
    let rec = r.recovery().clone();
    (ok, err, before, rec)
}

#[test]
fn wrong_magic() {
    let mut b = vector_add_trace();
    b[1] = b'X';
    assert!(matches!(read_all(&b).1, Some(TraceError::BadMagic { .. })));
    assert!(matches!(read_all(b"").1, Some(TraceError::BadMagic { .. })));
    assert!(!gpuless_traces::is_trace(&b));
    assert!(gpuless_traces::is_trace(&vector_add_trace()));
}

fn set_version(b: &mut [u8], major: u16, minor: u16) {
    b[8..10].copy_from_slice(&major.to_le_bytes());
    b[10..12].copy_from_slice(&minor.to_le_bytes());
    format::fix_checksums(b);
}

#[test]
fn versions() {
    let mut b = vector_add_trace();
    set_version(&mut b, format::FORMAT_MAJOR + 1, 0);
    let e = read_all(&b).1.expect("error");
    assert!(matches!(e, TraceError::UnsupportedMajor { major: 3, .. }), "{e}");
    assert!(e.to_string().contains("newer than this reader"));
    // Other minors of the same major are read (fields added later are ignored).
    let mut b = vector_add_trace();
    set_version(&mut b, format::FORMAT_MAJOR, 7);
    let (ok, err) = read_all(&b);
    assert!(err.is_none(), "{err:?}");
    assert!(!ok.is_empty());
}

#[test]
fn bad_payload_checksum_names_the_chunk() {
    let mut b = vector_add_trace();
    let chunks = chunk_offsets(&b);
    let (off, stored) = chunks[3];
    b[off + CHUNK_HEADER_LEN + stored / 2] ^= 0x40;
    // The damaged chunk is reported and skipped by its header's length; the chunks after it are
    // still read, up to the index (a calls chunk referring to a blob of the damaged chunk is
    // reported too: chunk 3 holds blobs).
    let (ok, err, before, rec) = read_all_counted(&b);
    assert!(matches!(ok[3], ChunkBody::Blobs(_)), "chunk 3 of vecadd holds blobs");
    assert_eq!(before, 3);
    assert_eq!(ok.len() as u64 + rec.damaged, chunks.len() as u64);
    assert!(matches!(ok.last(), Some(ChunkBody::Index(_))) && rec.finished);
    assert_eq!(rec.skipped_bytes, 0);
    match err {
        Some(TraceError::Checksum { chunk: 3, offset, what: "payload", .. }) => {
            assert_eq!(offset, off as u64)
        }
        e => panic!("{e:?}"),
    }
    // A damaged header: the reader finds the next valid chunk header and goes on from there.
    let mut b = vector_add_trace();
    b[off + 5] ^= 1; // codec byte: header checksum
    let (ok, err, before, rec) = read_all_counted(&b);
    assert!(matches!(err, Some(TraceError::Checksum { chunk: 3, what: "header", .. })), "{err:?}");
    assert_eq!(before, 3);
    assert_eq!(ok.len() as u64 + rec.damaged, chunks.len() as u64);
    assert!(matches!(ok.last(), Some(ChunkBody::Index(_))) && rec.finished);
    assert_eq!(rec.skipped_bytes, (CHUNK_HEADER_LEN + stored) as u64);
    let mut b = vector_add_trace();
    b[off] = b'X';
    let (ok, err, _, _) = read_all_counted(&b);
    assert!(matches!(err, Some(TraceError::BadChunkMagic { chunk: 3, .. })), "{err:?}");
    assert!(matches!(ok.last(), Some(ChunkBody::Index(_))));
    let mut b = vector_add_trace();
    b[20] ^= 1; // file header checksum
    assert!(matches!(read_all(&b).1, Some(TraceError::BadHeader { .. })));
}

#[test]
fn cut_at_every_byte_recovers_every_complete_chunk() {
    let b = vector_add_trace();
    let chunks = chunk_offsets(&b);
    let header_end = chunks[0].0;
    for cut in 0..b.len() {
        let (ok, err) = read_all(&b[..cut]);
        if cut < header_end {
            assert!(err.is_some() && ok.is_empty(), "cut {cut}");
            continue;
        }
        let complete = chunks.iter().filter(|(o, s)| o + CHUNK_HEADER_LEN + s <= cut).count();
        assert_eq!(ok.len(), complete, "cut {cut}");
        let at_boundary = cut == header_end || chunks.iter().any(|(o, s)| o + CHUNK_HEADER_LEN + s == cut);
        match err {
            None => assert!(at_boundary, "cut {cut}"),
            Some(TraceError::Truncated { chunk, offset, lost, .. }) => {
                assert_eq!(chunk as usize, complete, "cut {cut}");
                assert!(lost > 0 && offset as usize + lost as usize == cut, "cut {cut}");
            }
            Some(e) => panic!("cut {cut}: {e}"),
        }
    }
}

fn forge_chunk(kind: u8, codec: u8, payload: &[u8], stored_len: u32, raw_len: u32) -> Vec<u8> {
    let h = ChunkHeader { kind, codec, flags: 0, stored_len, raw_len, checksum: xxhash_rust::xxh3::xxh3_64(payload) };
    let mut v = h.encode().to_vec();
    v.extend_from_slice(payload);
    v
}

fn header_only() -> Vec<u8> {
    let b = vector_add_trace();
    let first = chunk_offsets(&b)[0].0;
    b[..first].to_vec()
}

#[test]
fn absurd_lengths_are_refused_without_allocating() {
    let mut b = header_only();
    b.extend(forge_chunk(1, 1, b"", u32::MAX, 10));
    assert!(matches!(read_all(&b).1, Some(TraceError::AbsurdLength { chunk: 0, what: "stored payload", .. })));
    let mut b = header_only();
    b.extend(forge_chunk(1, 1, b"", 0, u32::MAX));
    assert!(matches!(read_all(&b).1, Some(TraceError::AbsurdLength { what: "raw payload", .. })));
    // Plausible but not present: a truncation, and the reader does not allocate 200 MB first.
    let mut b = header_only();
    b.extend(forge_chunk(1, 1, b"abc", 200 << 20, 10));
    b.truncate(b.len() - 3);
    assert!(matches!(read_all(&b).1, Some(TraceError::Truncated { chunk: 0, .. })));
    // A metadata length beyond the limit.
    let mut b = vector_add_trace();
    b[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(read_all(&b).1, Some(TraceError::BadHeader { .. })));
}

#[test]
fn corrupt_payloads_are_typed_errors() {
    // Garbage that is not a flatbuffer, stored uncompressed with a valid checksum.
    let mut b = header_only();
    let garbage = [0xffu8; 40];
    b.extend(forge_chunk(1, 0, &garbage, 40, 40));
    assert!(matches!(read_all(&b).1, Some(TraceError::Corrupt { chunk: 0, .. })));
    // Not a zstd frame.
    let mut b = header_only();
    b.extend(forge_chunk(1, 1, &garbage, 40, 100));
    assert!(matches!(read_all(&b).1, Some(TraceError::Corrupt { chunk: 0, .. })));
    // A zstd frame that decompresses to more than the header says.
    let frame = zstd::bulk::compress(&[0u8; 100_000], 1).expect("zstd");
    let mut b = header_only();
    b.extend(forge_chunk(1, 1, &frame, frame.len() as u32, 1000));
    assert!(matches!(read_all(&b).1, Some(TraceError::Corrupt { .. })));
    // Unknown codec.
    let mut b = header_only();
    b.extend(forge_chunk(1, 9, &garbage, 40, 40));
    assert!(matches!(read_all(&b).1, Some(TraceError::Corrupt { .. })));
    // An unknown chunk kind (a newer minor version) is skipped.
    let mut b = header_only();
    b.extend(forge_chunk(42, 0, &garbage, 40, 40));
    let (ok, err) = read_all(&b);
    assert!(err.is_none());
    assert_eq!(ok, vec![ChunkBody::Unknown(42)]);
}

#[test]
fn missing_blob_reference() {
    let b = common::write_mem(common::small_chunks(), |w| {
        let real = w.blob(BlobKind::HostToDevice, b"payload").expect("blob");
        let mut r = CallRecord::new(0, gpuless_analyzer::api::ApiLevel::Driver, Function::Other("x".into()));
        r.args = vec![Value::Blob(real)];
        w.record(r.clone()).expect("record");
        w.flush().expect("flush");
        r.seq = 1;
        r.args = vec![Value::List(vec![Value::Blob(BlobRef { hash: Hash128(0xdead), len: 4 })])];
        w.record(r).expect("record");
    });
    let (_, err, before, _) = read_all_counted(&b);
    match err {
        Some(TraceError::MissingBlob { seq: 1, chunk, offset, .. }) => {
            assert_eq!(chunk as usize, before);
            assert!(offset > 0);
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn unfinished_trace_cannot_be_opened_for_random_access() {
    let b = vector_add_trace();
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("cut.gl");
    std::fs::write(&p, &b[..b.len() - 10]).expect("write");
    assert!(gpuless_traces::TraceFile::open(&p).is_err());
    std::fs::write(&p, b"short").expect("write");
    assert!(gpuless_traces::TraceFile::open(&p).is_err());
}

#[test]
fn flipping_bytes_never_panics() {
    let b = common::write_mem(common::small_chunks(), |w| {
        resnet_like(w, ResnetScale { iterations: 1, launches: 20, weights: 3, ..ResnetScale::default() })
            .expect("synthetic")
    });
    let mut rng = gpuless_traces::synthetic::Rng::new(99);
    for _ in 0..300 {
        let mut c = b.clone();
        for _ in 0..1 + rng.next_u64() % 4 {
            let i = (rng.next_u64() as usize) % c.len();
            c[i] ^= 1 << (rng.next_u64() % 8);
        }
        if rng.next_u64() % 2 == 0 {
            format::fix_checksums(&mut c);
        }
        let _ = read_all(&c);
    }
}

/// Traces of format 1.x (arguments as tables only) are still read: the committed real traces
/// were written by the 1.1 recorder.
#[test]
fn format_1_traces_are_read() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/traces/streams.gl");
    let b = std::fs::read(path).unwrap();
    assert_eq!(u16::from_le_bytes([b[8], b[9]]), 1, "streams.gl is a format 1 trace");
    let (ok, err) = read_all(&b);
    assert!(err.is_none(), "{err:?}");
    let launches: Vec<_> = ok
        .iter()
        .flat_map(|c| match c {
            gpuless_traces::ChunkBody::Calls(c) => c.clone(),
            _ => Vec::new(),
        })
        .filter(|c| c.function.name() == "cuLaunchKernel")
        .collect();
    assert!(!launches.is_empty());
    assert!(launches.iter().all(|l| l.args.len() == 11 && matches!(l.args[9], gpuless_traces::Value::KernelParams(_))));
}
