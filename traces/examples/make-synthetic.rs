//! Write the synthetic example traces: `cargo run -p gpuless-traces --example make-synthetic [DIR]`
//! (default `testdata/traces`). They are built through the writer API and are not recordings.

use std::path::PathBuf;

use gpuless_traces::synthetic::{resnet_like, synthetic_meta, two_threads, vector_add, ResnetScale};
use gpuless_traces::{TraceWriter, WriterOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/traces"));
    std::fs::create_dir_all(&dir)?;
    // One compression thread keeps chunk boundaries, and so the files, deterministic.
    let opts = WriterOptions { compression_threads: 0, call_chunk_bytes: 64 << 10, ..WriterOptions::default() };

    let path = dir.join("synthetic-vector-add.gl");
    let w = TraceWriter::create(&path, &synthetic_meta("vector-add"), opts.clone())?;
    vector_add(&w, 4096)?;
    let s = w.finish()?;
    println!("{}: {} calls, {} bytes", path.display(), s.calls, s.file_bytes);

    let path = dir.join("synthetic-resnet-like.gl");
    let w = TraceWriter::create(&path, &synthetic_meta("resnet-like"), opts.clone())?;
    resnet_like(&w, ResnetScale::default())?;
    let s = w.finish()?;
    println!("{}: {} calls, {} bytes", path.display(), s.calls, s.file_bytes);

    let path = dir.join("synthetic-threads.gl");
    let w = TraceWriter::create(&path, &synthetic_meta("threads"), opts)?;
    two_threads(&w)?;
    let s = w.finish()?;
    println!("{}: {} calls, {} bytes", path.display(), s.calls, s.file_bytes);
    Ok(())
}
