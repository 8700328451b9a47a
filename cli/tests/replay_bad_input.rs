//! `gpuless replay` and `gpuless replay --dry-run` on broken copies of the committed H200
//! traces: a corrupt blob chunk, a truncated file, a missing blob. Each must exit with code 2
//! and a message that names the file, where the damage is (chunk and offset, or the call) and
//! what to do — never a panic. The full replay fails on reading the trace, before it needs a GPU.

mod support;
use support::gpuless;

use std::path::{Path, PathBuf};

use gpuless_replayer::replay::load;
use gpuless_traces::format::CHUNK_HEADER_LEN;
use gpuless_traces::{BlobKind, ChunkBody, ReaderOptions, TraceReader, TraceWriter, Value, WriterOptions};

fn testdata(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/traces").join(name)
}

/// Both `replay --dry-run` and `replay` exit 2 with every one of `needles` in the message.
fn refused(path: &Path, needles: &[&str]) {
    let p = path.to_str().unwrap();
    for args in [vec!["replay", "--dry-run", p], vec!["replay", p]] {
        let (code, out, err) = gpuless(&args);
        assert_eq!(code, 2, "{args:?}: stdout {out} stderr {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        for n in needles.iter().chain([&p]) {
            assert!(err.contains(n), "{args:?}: {n:?} missing from: {err}");
        }
    }
}

/// (ordinal, offset, stored length, is a blob chunk) of every chunk.
fn chunks(path: &Path) -> Vec<(u64, u64, u32, bool)> {
    let r = TraceReader::open(path, ReaderOptions::default()).unwrap();
    r.map(|c| c.unwrap()).map(|c| (c.ordinal, c.offset, c.stored_len, matches!(c.body, ChunkBody::Blobs(_)))).collect()
}

#[test]
fn a_corrupt_blob_chunk_is_refused_with_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let src = testdata("streams.gl");
    let (ordinal, offset, stored, _) = *chunks(&src).iter().find(|c| c.3).expect("a blob chunk");
    let mut b = std::fs::read(&src).unwrap();
    b[offset as usize + CHUNK_HEADER_LEN + stored as usize / 2] ^= 0x10;
    let p = dir.path().join("corrupt.gl");
    std::fs::write(&p, &b).unwrap();
    let at = format!("chunk {ordinal} at offset {offset}");
    refused(&p, &[&at, "checksum", "damaged", "--partial"]);
    // With --partial the chunks before the damage are checked; the loss is reported.
    let (code, out, err) = gpuless(&["replay", "--dry-run", "--partial", p.to_str().unwrap()]);
    assert_eq!(code, 0, "{out} {err}");
    assert!(out.contains("damaged tail") && out.contains(&at), "{out}");
}

#[test]
fn a_truncated_trace_is_refused_with_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let src = testdata("streams.gl");
    let all = chunks(&src);
    let &(ordinal, offset, stored, _) = all.last().unwrap();
    let b = std::fs::read(&src).unwrap();
    let p = dir.path().join("truncated.gl");
    std::fs::write(&p, &b[..offset as usize + CHUNK_HEADER_LEN + stored as usize / 2]).unwrap();
    let at = format!("truncated in chunk {ordinal} at offset {offset}");
    let good = format!("after {ordinal} complete chunks ({offset} bytes");
    refused(&p, &[&at, &good, "--partial"]);
}

#[test]
fn a_missing_blob_is_refused_naming_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let t = load(&testdata("streams.gl")).unwrap();
    let upload = t.calls.iter().find(|c| c.function.name() == "cuMemcpyHtoDAsync").unwrap();
    let Some(gone) = upload.blob_refs().next() else { panic!("{upload:?}") };
    let p = dir.path().join("missing-blob.gl");
    let w = TraceWriter::create(&p, &t.meta, WriterOptions::default()).unwrap();
    for (hash, data) in &t.blobs {
        if *hash != gone.hash {
            w.blob(BlobKind::Other, data).unwrap();
        }
    }
    for r in &t.calls {
        w.record(r.clone()).unwrap();
    }
    w.finish().unwrap();
    let call = format!("call #{} cuMemcpyHtoDAsync (chunk ", upload.seq);
    let blob = format!("refers to blob {} of {} bytes, which the trace does not hold", gone.hash, gone.len);
    refused(&p, &[&call, &blob, "record the program again"]);
    // A blob the trace holds only in part.
    let p2 = dir.path().join("short-blob.gl");
    let w = TraceWriter::create(&p2, &t.meta, WriterOptions::default()).unwrap();
    for (hash, data) in &t.blobs {
        let data = if *hash == gone.hash { &data[..data.len() / 2] } else { &data[..] };
        w.blob(BlobKind::Other, data).unwrap();
    }
    let mut calls = t.calls.clone();
    for r in &mut calls {
        for v in &mut r.args {
            if matches!(v, Value::Blob(b) if b.hash == gone.hash) {
                // The record keeps the full length; the stored blob under its hash is shorter.
                let half = &t.blobs[&gone.hash][..gone.len as usize / 2];
                let h = gpuless_traces::Hash128::of(half);
                *v = Value::Blob(gpuless_traces::BlobRef { hash: h, len: gone.len });
            }
        }
        w.record(r.clone()).unwrap();
    }
    w.finish().unwrap();
    refused(&p2, &[&format!("which the trace holds only {} bytes of", gone.len / 2), "record the program again"]);
}

/// The committed traces the GPU suite must see refused (`replayer/examples/make-bad-traces.rs`)
/// are consistent in themselves: what stops their replay is the GPU, not the file.
#[test]
fn committed_bad_traces_pass_the_dry_run() {
    for name in ["oversized.gl", "vecadd-sm100.gl"] {
        let (code, out, err) = gpuless(&["replay", "--dry-run", testdata(name).to_str().unwrap()]);
        assert_eq!(code, 0, "{name}: {out} {err}");
        assert!(out.contains("every replayed call is consistent"), "{name}: {out}");
    }
    let t = load(&testdata("oversized.gl")).unwrap();
    let alloc = t.calls.iter().find(|c| c.function.name() == "cuMemAlloc").unwrap();
    assert_eq!(alloc.args.get(1), Some(&Value::Size(200 << 30)));
    let sm100 = load(&testdata("vecadd-sm100.gl")).unwrap();
    assert_eq!(sm100.meta.sm, 100);
    let problems = gpuless_replayer::replay::compat::incompatible_code(&sm100, 90);
    assert!(
        problems.len() == 1 && problems[0].contains("sm_100") && problems[0].contains("vector_add"),
        "{problems:?}"
    );
    assert!(gpuless_replayer::replay::compat::incompatible_code(&sm100, 100).is_empty());
}
