//! Writes the committed traces that a replay must refuse on an H200 (`scripts/gpu-suite.sh`,
//! section "bad input"), through the trace writer:
//!
//! - `oversized.gl`: allocates 200 GiB in the recorder's arena, sets 4 KiB of it and copies
//!   them back (more memory than any GPU has: the replay must stop with free/needed bytes);
//! - `vecadd-sm100.gl`: `vecadd.gl` (recorded on the H200) with its code image replaced by the
//!   same program built for sm_100 only, as if recorded on a B200 (the replay must refuse it
//!   before running anything).
//!
//! ```text
//! nvcc -fatbin -gencode arch=compute_100,code=sm_100 testdata/cuda/vecadd.cu -o /tmp/vecadd_sm100.fatbin
//! cargo run -p gpuless-replayer --example make-bad-traces -- /tmp/vecadd_sm100.fatbin [DIR]
//! ```
//! DIR defaults to `testdata/traces`.

use std::path::PathBuf;

use gpuless_analyzer::api::ArgKind;
use gpuless_replayer::replay::load;
use gpuless_traces::arena::{Layout, DEFAULT_BASES, DEFAULT_SIZE};
use gpuless_traces::synthetic::{synthetic_meta, Recorder};
use gpuless_traces::{BlobKind, BlobRef, Hash128, TraceWriter, Value, WriterOptions};

/// Bytes the oversized trace allocates.
const OVERSIZED: u64 = 200 << 30;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let fatbin = PathBuf::from(args.next().ok_or("usage: make-bad-traces SM100_FATBIN [DIR]")?);
    let dir = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/traces"));
    // One compression thread keeps chunk boundaries, and so the files, deterministic.
    let opts = WriterOptions { compression_threads: 0, ..WriterOptions::default() };

    let path = dir.join("oversized.gl");
    let mut meta = synthetic_meta("oversized");
    meta.gpu_name = "SYNTHETIC: allocates 200 GiB".into();
    (meta.arena_base, meta.arena_size) = (DEFAULT_BASES[0], DEFAULT_SIZE);
    let w = TraceWriter::create(&path, &meta, opts.clone())?;
    let mut r = Recorder::new(&w);
    let p = Layout::new(meta.arena_base, meta.arena_size).alloc(OVERSIZED).ok_or("the arena cannot place it")?.addr;
    let zeros = vec![0u8; 4096];
    r.call("cuInit", vec![Value::U64(0)], vec![])?;
    r.call("cuMemAlloc_v2", vec![Value::Null, Value::Size(OVERSIZED)], vec![Value::DevPtr(p)])?;
    r.call("cuMemsetD8_v2", vec![Value::DevPtr(p), Value::U64(0), Value::U64(4096)], vec![])?;
    r.call(
        "cuMemcpyDtoH_v2",
        vec![Value::HostPtr(0x5600_0000), Value::DevPtr(p), Value::Size(4096)],
        vec![Value::Digest(BlobRef { hash: Hash128::of(&zeros), len: 4096 })],
    )?;
    r.call("cuMemFree_v2", vec![Value::DevPtr(p)], vec![])?;
    let s = w.finish()?;
    println!("{}: {} calls, {} bytes", path.display(), s.calls, s.file_bytes);

    let path = dir.join("vecadd-sm100.gl");
    let base = load(&dir.join("vecadd.gl"))?;
    let code = std::fs::read(&fatbin)?;
    let mut meta = base.meta.clone();
    meta.sm = 100;
    meta.gpu_name = "NVIDIA B200 (vecadd.gl with its code rebuilt for sm_100 only)".into();
    let w = TraceWriter::create(&path, &meta, opts)?;
    let new_code = w.blob(BlobKind::CodeImage, &code)?;
    let mut replaced = 0;
    let mut calls = base.calls.clone();
    for c in &mut calls {
        let Some(f) = c.function.api() else { continue };
        for (a, v) in f.args.iter().zip(c.args.iter_mut()) {
            if a.kind == ArgKind::Image && matches!(v, Value::Blob(_)) {
                *v = Value::Blob(new_code);
                replaced += 1;
            }
        }
    }
    if replaced != 1 {
        return Err(format!("vecadd.gl should load one code image, found {replaced}").into());
    }
    for c in &calls {
        for b in c.blob_refs().filter(|b| b.hash != new_code.hash) {
            if let Some(data) = base.blobs.get(&b.hash) {
                w.blob(BlobKind::HostToDevice, data)?;
            }
        }
        w.record(c.clone())?;
    }
    let s = w.finish()?;
    println!("{}: {} calls, {} bytes", path.display(), s.calls, s.file_bytes);
    Ok(())
}
