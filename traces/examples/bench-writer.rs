//! Writer throughput: `cargo run --release -p gpuless-traces --example bench-writer -- OUT_DIR [MB]`.
//!
//! Writes a trace of MB megabytes of tensor-like blob payloads plus call records, reports the
//! writer's throughput over the uncompressed chunk payloads, and dumps exactly those payloads
//! to OUT_DIR/raw.bin so that `scripts/bench-writer.sh` can time `zstd -1 -T0` on the same bytes.

use std::io::Write;
use std::time::Instant;

use gpuless_analyzer::api::{self, ApiLevel, HandleKind};
use gpuless_traces::format::{ChunkHeader, CHUNK_HEADER_LEN, CODEC_ZSTD, FILE_HEADER_LEN};
use gpuless_traces::model::{BlobKind, Function, KernelParams};
use gpuless_traces::synthetic::{launch_args, synthetic_meta, Rng};
use gpuless_traces::{CallRecord, TraceWriter, Value, WriterOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().ok_or("usage: bench-writer OUT_DIR [MB]")?);
    let mb: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(512);
    std::fs::create_dir_all(&dir)?;
    let mut rng = Rng::new(1);
    // Prepare the payloads first: generating them is not the writer's cost.
    let blobs: Vec<Vec<u8>> = (0..mb / 2).map(|_| rng.tensor_bytes(2 << 20)).collect();
    let launch = api::by_name("cuLaunchKernel").map(|f| f.id).ok_or("table")?;
    let h2d = api::by_name("cuMemcpyHtoDAsync").map(|f| f.id).ok_or("table")?;
    let path = dir.join("bench.gl");
    let t0 = Instant::now();
    let w = TraceWriter::create(&path, &synthetic_meta("bench-writer"), WriterOptions::default())?;
    let mut seq = 0;
    for b in &blobs {
        let r = w.blob(BlobKind::HostToDevice, b)?;
        let mut rec = CallRecord::new(seq, ApiLevel::Driver, Function::Known(h2d));
        rec.args = vec![
            Value::DevPtr(0x7e00_0000_0000 + seq * 4096),
            Value::Blob(r),
            Value::Size(r.len),
            Value::Handle(HandleKind::Stream, 7),
        ];
        w.record(rec)?;
        seq += 1;
        for i in 0..400u64 {
            let mut rec = CallRecord::new(seq, ApiLevel::Driver, Function::Known(launch));
            rec.timestamp_ns = seq * 900;
            let params =
                KernelParams { bytes: (seq * 4096).to_le_bytes().repeat(3), layout: vec![(0, 8), (8, 8), (16, 8)] };
            rec.args = launch_args(
                Value::Handle(HandleKind::Function, 0x5000 + i % 50),
                64,
                256,
                7,
                Value::KernelParams(params),
            );
            w.record(rec)?;
            seq += 1;
        }
    }
    let stats = w.finish()?;
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "writer: {} calls, {:.1} MB raw -> {:.1} MB stored in {:.3} s: {:.0} MB/s (raw payload bytes)",
        stats.calls,
        stats.raw_bytes as f64 / 1e6,
        stats.stored_bytes as f64 / 1e6,
        secs,
        stats.raw_bytes as f64 / 1e6 / secs
    );
    // Dump the uncompressed chunk payloads: exactly the bytes the writer compressed.
    let file = std::fs::read(&path)?;
    let meta = u32::from_le_bytes(file.get(12..16).ok_or("short")?.try_into()?) as usize;
    let mut pos = FILE_HEADER_LEN + meta;
    let mut raw = std::io::BufWriter::new(std::fs::File::create(dir.join("raw.bin"))?);
    while let Some(h) = file.get(pos..pos + CHUNK_HEADER_LEN) {
        if !h.starts_with(b"GLCK") {
            break;
        }
        let (hdr, _, _) = ChunkHeader::decode(h.try_into()?);
        let payload =
            file.get(pos + CHUNK_HEADER_LEN..pos + CHUNK_HEADER_LEN + hdr.stored_len as usize).ok_or("short")?;
        if hdr.codec == CODEC_ZSTD {
            raw.write_all(&zstd::bulk::decompress(payload, hdr.raw_len as usize)?)?;
        } else {
            raw.write_all(payload)?;
        }
        pos += CHUNK_HEADER_LEN + hdr.stored_len as usize;
    }
    raw.flush()?;
    println!("raw payloads: {}", dir.join("raw.bin").display());
    Ok(())
}
