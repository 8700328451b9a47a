//! SIGKILL a process while it writes a trace, at many points; the reader must recover every
//! complete chunk (records numbered without gaps, at least everything the writer had flushed).
//!
//! The test re-executes its own binary: `child_writer` does the writing when
//! `GPULESS_KILL_CHILD` names an output file and does nothing otherwise.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use gpuless_analyzer::api::{self, ApiLevel};
use gpuless_traces::model::{BlobKind, Function};
use gpuless_traces::synthetic::{synthetic_meta, Rng};
use gpuless_traces::{
    CallRecord, ChunkBody, ReaderOptions, TraceError, TraceReader, TraceWriter, Value, WriterOptions,
};

#[test]
fn child_writer() {
    let Ok(path) = std::env::var("GPULESS_KILL_CHILD") else {
        return;
    };
    let opts = WriterOptions {
        call_chunk_bytes: 16 << 10,
        blob_chunk_bytes: 64 << 10,
        flush_interval: Duration::from_millis(5),
        ..WriterOptions::default()
    };
    let w = TraceWriter::create(path.as_ref(), &synthetic_meta("kill"), opts).expect("writer");
    let f = api::by_name("cuMemcpyHtoD").map(|f| f.id).expect("table");
    let mut rng = Rng::new(std::process::id().into());
    let mut seq = 0u64;
    for i in 0u64.. {
        let data = rng.tensor_bytes(32 << 10);
        let b = w.blob(BlobKind::HostToDevice, &data).expect("blob");
        for _ in 0..50 {
            let mut r = CallRecord::new(seq, ApiLevel::Driver, Function::Known(f));
            r.args = vec![Value::DevPtr(0x7e00_0000_0000 + seq * 64), Value::Blob(b), Value::Size(b.len)];
            w.record(r).expect("record");
            seq += 1;
        }
        if i % 8 == 7 {
            w.flush().expect("flush");
            println!("flushed {seq}");
        }
    }
}

#[test]
fn sigkill_at_random_points_loses_only_the_incomplete_chunk() {
    let exe = std::env::current_exe().expect("exe");
    let dir = tempfile::tempdir().expect("tmp");
    let mut rng = Rng::new(12345);
    let mut cut_mid_chunk = 0;
    for round in 0..12 {
        let path = dir.path().join(format!("kill-{round}.gl"));
        let mut child = Command::new(&exe)
            .args(["--exact", "child_writer", "--nocapture", "--test-threads=1"])
            .env("GPULESS_KILL_CHILD", &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let wait_flushes = 1 + rng.next_u64() % 4;
        let mut flushed = 0u64;
        let mut seen = 0;
        while seen < wait_flushes {
            let Some(Ok(line)) = lines.next() else { break };
            if let Some(n) = line.strip_prefix("flushed ") {
                flushed = n.parse::<u64>().expect("number");
                seen += 1;
            }
        }
        std::thread::sleep(Duration::from_micros(rng.next_u64() % 20_000));
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        let len = std::fs::metadata(&path).expect("trace").len();
        let mut r = TraceReader::open(&path, ReaderOptions::default()).expect("header survives");
        let mut next_seq = 0u64;
        let mut err = None;
        for c in r.by_ref() {
            match c {
                Ok(c) => {
                    if let ChunkBody::Calls(calls) = c.body {
                        for call in calls {
                            assert_eq!(call.seq, next_seq, "round {round}: gap in sequence numbers");
                            next_seq += 1;
                        }
                    }
                }
                Err(e) => err = Some(e),
            }
        }
        let rec = r.recovery().clone();
        assert!(!rec.finished, "round {round}: a killed writer cannot have written the trailer");
        assert!(next_seq >= flushed, "round {round}: recovered {next_seq} < flushed {flushed}");
        match err {
            None => assert_eq!(rec.good_bytes, len, "round {round}"),
            Some(TraceError::Truncated { offset, lost, .. }) => {
                assert_eq!(offset, rec.good_bytes);
                assert_eq!(offset + lost, len, "round {round}");
                cut_mid_chunk += 1;
            }
            Some(e) => panic!("round {round}: {e}"),
        }
        eprintln!("round {round}: {len} bytes, {} chunks, {next_seq} calls (flushed {flushed})", rec.chunks);
    }
    eprintln!("{cut_mid_chunk} of 12 kills landed inside a chunk");
}
