//! Cost of `TraceWriter::record` on the recording thread (target: < 1 µs per record).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use gpuless_analyzer::api::{self, HandleKind};
use gpuless_traces::model::{Function, KernelParams};
use gpuless_traces::synthetic::{launch_args, synthetic_meta};
use gpuless_traces::{CallRecord, TraceWriter, Value, WriterOptions};

fn launch(seq: u64) -> CallRecord {
    let f = api::by_name("cuLaunchKernel").map(|f| f.id);
    let mut r = CallRecord::new(
        seq,
        api::ApiLevel::Driver,
        f.map_or(Function::Other("cuLaunchKernel".into()), Function::Known),
    );
    r.thread = 1;
    r.timestamp_ns = seq * 1000;
    r.duration_ns = 150 + seq % 7;
    // cuLaunchKernel's 11 arguments as the recorder stores them.
    let params = KernelParams { bytes: vec![0u8; 28], layout: vec![(0, 8), (8, 8), (16, 8), (24, 4)] };
    r.args =
        launch_args(Value::Handle(HandleKind::Function, 0x1234 + seq % 50), 64, 256, 7, Value::KernelParams(params));
    r
}

fn bench(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("gpuless-bench-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let w = TraceWriter::create(
        &dir.join("bench.gl"),
        &synthetic_meta("bench"),
        WriterOptions { queue_capacity: 16 << 10, ..WriterOptions::default() },
    )
    .expect("writer");
    let mut g = c.benchmark_group("record");
    g.throughput(Throughput::Elements(1));
    // The recording thread's cost when the queue has room (the normal case: a program makes
    // calls slower than the writer drains them). Batches stay below the queue capacity; the
    // writer is flushed between batches, outside the timed region.
    g.bench_function("cuLaunchKernel: build + push, queue not full", |b| {
        b.iter_custom(|iters| {
            let mut total = std::time::Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(8192);
                let t = std::time::Instant::now();
                for _ in 0..n {
                    let seq = w.next_seq();
                    w.record(launch(seq)).expect("record");
                }
                total += t.elapsed();
                w.flush().expect("flush");
                left -= n;
            }
            total
        })
    });
    // The writer thread's cost: records pushed in batches and flushed, so the time is the
    // writer's encoding and compression of every record (format 2.0 words: ~0.4 µs a launch,
    // ~2 µs as 1.x tables).
    g.bench_function("cuLaunchKernel: writer throughput (batches of 512, flushed)", |b| {
        b.iter_custom(|iters| {
            let t = std::time::Instant::now();
            let mut left = iters;
            while left > 0 {
                let n = left.min(512);
                let batch: Vec<_> = (0..n).map(|_| launch(w.next_seq())).collect();
                w.records(batch).expect("records");
                left -= n;
            }
            w.flush().expect("flush");
            t.elapsed()
        })
    });
    g.bench_function("unmodeled: build + push, queue not full", |b| {
        b.iter_custom(|iters| {
            let mut total = std::time::Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(8192);
                let t = std::time::Instant::now();
                for _ in 0..n {
                    let seq = w.next_seq();
                    let r = CallRecord::new(seq, api::ApiLevel::Driver, Function::Other("cuSomethingNew".into()));
                    w.record(r).expect("record");
                }
                total += t.elapsed();
                w.flush().expect("flush");
                left -= n;
            }
            total
        })
    });
    // Back-to-back records with nothing else to do: the queue fills and the producer runs at
    // the writer thread's speed (encoding + compression), an upper bound on the cost.
    g.bench_function("cuLaunchKernel: sustained, queue saturated", |b| {
        b.iter(|| {
            let seq = w.next_seq();
            w.record(launch(seq)).expect("record");
        })
    });
    g.finish();
    let _ = w.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

// No HTML plots: plotters' `ab_glyph` font backend (enabled by this crate's `plot` feature)
// has no fonts registered inside criterion.
criterion_group! {
    name = benches;
    config = Criterion::default().without_plots();
    targets = bench
}
criterion_main!(benches);
