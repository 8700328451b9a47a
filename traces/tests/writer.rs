//! Writer behaviour: concurrent recording threads, drop without finish, flush.

mod common;

use gpuless_analyzer::api::ApiLevel;
use gpuless_traces::model::{BlobKind, Function};
use gpuless_traces::{CallRecord, ChunkBody, TraceMeta, TraceWriter, Value};

#[test]
fn many_threads_share_blobs_without_missing_references() {
    let buf = common::SharedBuf::default();
    let w = TraceWriter::new(buf.clone(), &TraceMeta::default(), common::small_chunks()).expect("writer");
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let w = &w;
            s.spawn(move || {
                for i in 0..500u64 {
                    // Threads race to store the same contents.
                    let data = vec![(i % 17) as u8; 100 + (i % 17) as usize * 300];
                    let b = w.blob(BlobKind::HostToDevice, &data).expect("blob");
                    let mut r = CallRecord::new(w.next_seq(), ApiLevel::Driver, Function::Other("x".into()));
                    r.thread = t;
                    r.args = vec![Value::Blob(b)];
                    w.record(r).expect("record");
                }
            });
        }
    });
    let stats = w.finish().expect("finish");
    assert_eq!(stats.calls, 2000);
    assert_eq!(stats.blobs, 17);
    assert_eq!(stats.duplicate_blobs, 2000 - 17);
    let bytes = buf.bytes();
    let mut r = common::reader(&bytes);
    let mut seqs = Vec::new();
    for c in r.by_ref() {
        if let ChunkBody::Calls(calls) = c.expect("no missing blob").body {
            seqs.extend(calls.iter().map(|c| c.seq));
        }
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (0..2000).collect::<Vec<_>>());
    assert!(r.recovery().finished);
}

#[test]
fn drop_writes_the_index_and_flush_makes_chunks_visible() {
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("t.gl");
    {
        let w = TraceWriter::create(&p, &TraceMeta::default(), Default::default()).expect("writer");
        w.record(CallRecord::new(0, ApiLevel::Driver, Function::Other("a".into()))).expect("record");
        w.flush().expect("flush");
        let len = std::fs::metadata(&p).expect("file").len();
        let mut r = gpuless_traces::TraceReader::open(&p, Default::default()).expect("open");
        assert!(matches!(r.next(), Some(Ok(_))), "flushed chunk readable while writing");
        assert!(len > 24);
        w.record(CallRecord::new(1, ApiLevel::Driver, Function::Other("b".into()))).expect("record");
    }
    let f = gpuless_traces::TraceFile::open(&p).expect("finished by drop");
    assert_eq!(f.index().calls, 2);
}

/// `max_file_bytes`: once the file reaches the limit, records and blobs are refused with a
/// message naming the limit, and the trace is still finished (index, trailer) and readable.
#[test]
fn size_limit_stops_recording_and_keeps_the_trace_valid() {
    use gpuless_analyzer::api::{self, ApiLevel};
    use gpuless_traces::model::{BlobKind, Function};
    use gpuless_traces::synthetic::{synthetic_meta, Rng};
    use gpuless_traces::{
        CallRecord, ChunkBody, ReaderOptions, TraceFile, TraceReader, TraceWriter, Value, WriterOptions,
    };

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limited.gl");
    let opts = WriterOptions {
        call_chunk_bytes: 8 << 10,
        blob_chunk_bytes: 32 << 10,
        max_file_bytes: Some(256 << 10),
        ..WriterOptions::default()
    };
    let w = TraceWriter::create(&path, &synthetic_meta("limit"), opts).unwrap();
    let f = api::by_name("cuMemcpyHtoD").map(|f| f.id).unwrap();
    let mut rng = Rng::new(7);
    let mut refused = None;
    for seq in 0u64..20_000 {
        let data = rng.tensor_bytes(4 << 10);
        let b = match w.blob(BlobKind::HostToDevice, &data) {
            Ok(b) => b,
            Err(e) => {
                refused = Some((seq, e.to_string()));
                break;
            }
        };
        let mut r = CallRecord::new(seq, ApiLevel::Driver, Function::Known(f));
        r.args = vec![Value::DevPtr(0x7e00_0000_0000), Value::Blob(b), Value::Size(b.len)];
        if let Err(e) = w.record(r) {
            refused = Some((seq, e.to_string()));
            break;
        }
        if seq % 64 == 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    let (at, msg) = refused.expect("the limit was never reached");
    assert!(msg.contains("size limit of 262144 bytes") && msg.contains("--max-size"), "{msg}");
    w.finish().expect("a limited trace still finishes");
    // Finished: the index is there, and every record that was written reads back.
    assert!(TraceFile::open(&path).is_ok());
    let n: usize = TraceReader::open(&path, ReaderOptions::default())
        .unwrap()
        .map(|c| match c.unwrap().body {
            ChunkBody::Calls(c) => c.len(),
            _ => 0,
        })
        .sum();
    assert!(n > 0 && (n as u64) <= at, "{n} records, refused at {at}");
    assert!(std::fs::metadata(&path).unwrap().len() < 4 << 20);
}
