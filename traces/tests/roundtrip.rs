//! Property tests: writer → reader round trips of every record type.

mod common;

use gpuless_analyzer::api::{self, ApiLevel, HandleKind};
use gpuless_traces::model::{BlobKind, Dim3, Function, KernelParams, LaunchAttr, LaunchConfig};
use gpuless_traces::{BlobRef, CallRecord, ChunkBody, Hash128, TraceMeta, Value};
use proptest::prelude::*;

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<u64>().prop_map(Value::U64),
        any::<i64>().prop_map(Value::I64),
        prop::num::f64::NORMAL.prop_map(Value::F64),
        any::<u64>().prop_map(Value::DevPtr),
        any::<u64>().prop_map(Value::HostPtr),
        any::<u64>().prop_map(Value::Size),
        (0..HandleKind::ALL.len(), any::<u64>()).prop_map(|(k, v)| Value::Handle(HandleKind::ALL[k], v)),
        (any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(x, y, z)| Value::Dim(Dim3 { x, y, z })),
        ".{0,40}".prop_map(Value::Str),
        prop::collection::vec(any::<u8>(), 0..64).prop_map(Value::Bytes),
        (any::<u128>(), any::<u64>()).prop_map(|(h, len)| Value::Digest(BlobRef { hash: Hash128(h), len })),
        (prop::collection::vec(any::<u8>(), 0..64), prop::collection::vec((any::<u32>(), any::<u32>()), 0..8))
            .prop_map(|(bytes, layout)| Value::KernelParams(KernelParams { bytes, layout })),
        (
            any::<[u32; 6]>(),
            any::<u32>(),
            any::<u64>(),
            prop::collection::vec((any::<u32>(), prop::collection::vec(any::<u8>(), 0..16)), 0..3)
        )
            .prop_map(|(d, shared_mem, stream, attrs)| {
                Value::LaunchConfig(LaunchConfig {
                    grid: Dim3 { x: d[0], y: d[1], z: d[2] },
                    block: Dim3 { x: d[3], y: d[4], z: d[5] },
                    shared_mem,
                    stream,
                    attrs: attrs.into_iter().map(|(id, value)| LaunchAttr { id, value }).collect(),
                })
            }),
        Just(Value::Null),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| prop::collection::vec(inner, 0..6).prop_map(Value::List))
}

fn function() -> impl Strategy<Value = (Function, api::Variant)> {
    let n = api::functions().len();
    prop_oneof![
        (0..n, any::<prop::sample::Index>()).prop_map(move |(i, s)| {
            let f = &api::functions()[i];
            (Function::Known(f.id), f.symbols[s.index(f.symbols.len())].variant)
        }),
        "[a-z]{1,12}".prop_map(|s| (Function::Other(format!("cuUnmodeled_{s}")), api::Variant::BASE)),
    ]
}

fn record() -> impl Strategy<Value = CallRecord> {
    (
        (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()),
        (0..ApiLevel::ALL.len(), prop::option::of(any::<u64>()), function(), any::<i32>()),
        prop::collection::vec(value(), 0..8),
        prop::collection::vec(value(), 0..4),
    )
        .prop_map(
            |(
                (seq, thread, timestamp_ns, duration_ns),
                (level, parent, (function, variant), status),
                args,
                results,
            )| {
                CallRecord {
                    seq,
                    thread,
                    timestamp_ns,
                    duration_ns,
                    level: ApiLevel::ALL[level],
                    parent,
                    function,
                    variant,
                    status,
                    args,
                    results,
                    repeat: (seq % 3) as u32,
                }
            },
        )
}

fn meta() -> impl Strategy<Value = TraceMeta> {
    (
        (".{0,20}", any::<i32>(), any::<i32>(), ".{0,20}", any::<u32>()),
        (prop::collection::vec(any::<u8>(), 0..17), prop::collection::vec(".{0,10}", 0..4)),
        (any::<u64>(), any::<u64>(), any::<u64>(), any::<u32>(), ".{0,10}"),
        prop::collection::vec((".{0,5}", ".{0,5}"), 0..3),
    )
        .prop_map(|(a, b, c, extra)| TraceMeta {
            tool_version: a.0,
            driver_version: a.1,
            cuda_version: a.2,
            gpu_name: a.3,
            sm: a.4,
            uuid: b.0,
            command_line: b.1,
            start_time_unix_ns: c.0,
            arena_base: c.1,
            arena_size: c.2,
            pid: c.3,
            hostname: c.4,
            extra,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn records_and_blobs_round_trip(
        records in prop::collection::vec(record(), 0..60),
        blobs in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..6000), 0..5),
        m in meta(),
    ) {
        let buf = common::SharedBuf::default();
        let w = gpuless_traces::TraceWriter::new(buf.clone(), &m, common::small_chunks()).expect("writer");
        let mut refs = Vec::new();
        for (i, b) in blobs.iter().enumerate() {
            let kind = [BlobKind::Other, BlobKind::CodeImage, BlobKind::HostToDevice, BlobKind::DeviceToHost][i % 4];
            refs.push(w.blob(kind, b).expect("blob"));
            // A second submission is deduplicated.
            prop_assert_eq!(w.blob(kind, b).expect("blob"), refs[i]);
        }
        let mut expected = Vec::new();
        for (i, mut r) in records.into_iter().enumerate() {
            if !refs.is_empty() {
                r.args.push(Value::Blob(refs[i % refs.len()]));
            }
            w.record(r.clone()).expect("record");
            expected.push(r);
        }
        let stats = w.finish().expect("finish");
        prop_assert_eq!(stats.calls, expected.len() as u64);
        let bytes = buf.bytes();
        let mut rd = common::reader(&bytes);
        prop_assert_eq!(rd.meta(), &m);
        let mut got = Vec::new();
        let mut blob_data: std::collections::HashMap<Hash128, Vec<u8>> = Default::default();
        let mut index = None;
        for c in rd.by_ref() {
            match c.expect("chunk").body {
                ChunkBody::Calls(v) => got.extend(v),
                ChunkBody::Blobs(parts) => for p in parts {
                    let e = blob_data.entry(p.hash).or_default();
                    prop_assert_eq!(e.len() as u64, p.offset);
                    e.extend_from_slice(&p.data);
                },
                ChunkBody::Index(ix) => index = Some(ix),
                ChunkBody::Unknown(k) => prop_assert!(false, "unknown chunk {}", k),
            }
        }
        prop_assert!(rd.recovery().finished);
        prop_assert_eq!(got, expected);
        let mut distinct: Vec<&Vec<u8>> = blobs.iter().collect();
        distinct.sort();
        distinct.dedup();
        prop_assert_eq!(blob_data.len(), distinct.len());
        for b in &blobs {
            prop_assert_eq!(blob_data.get(&Hash128::of(b)), Some(b));
        }
        let index = index.expect("index");
        prop_assert_eq!(index.calls, stats.calls);
        prop_assert_eq!(index.blobs.len(), distinct.len());
    }
}

#[test]
fn trace_file_fetches_blobs_by_hash() {
    let big: Vec<u8> = (0..50_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("t.gl");
    let w = gpuless_traces::TraceWriter::create(&path, &TraceMeta::default(), common::small_chunks()).expect("writer");
    let r = w.blob(BlobKind::CodeImage, &big).expect("blob");
    let small = w.blob(BlobKind::HostToDevice, b"hello").expect("blob");
    w.finish().expect("finish");
    let mut f = gpuless_traces::TraceFile::open(&path).expect("open");
    assert_eq!(f.blob(r.hash).expect("read"), Some(big));
    assert_eq!(f.blob(small.hash).expect("read"), Some(b"hello".to_vec()));
    assert_eq!(f.blob(Hash128(1)).expect("read"), None);
    assert!(f.index().chunks.len() > 10);
}

/// `read_all`: the records in sequence order, whatever order they were written in, and each
/// blob whole — one split over several chunks joined from its parts.
#[test]
fn read_all_gives_records_by_sequence_and_whole_blobs() {
    let big: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
    let mut refs = Vec::new();
    let bytes = common::write_mem(common::small_chunks(), |w| {
        refs.push(w.blob(BlobKind::HostToDevice, &big).expect("blob"));
        refs.push(w.blob(BlobKind::HostToDevice, b"hello").expect("blob"));
        let f = api::functions().iter().find(|f| f.name == "cuCtxSynchronize").expect("in the table");
        for seq in [3u64, 1, 2] {
            w.record(CallRecord::new(seq, ApiLevel::Driver, Function::Known(f.id))).expect("record");
        }
    });
    let (calls, blobs) = common::reader(&bytes).read_all().expect("read");
    assert_eq!(calls.iter().map(|c| c.seq).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(blobs[&refs[0].hash], big, "the split blob, joined");
    assert_eq!(blobs[&refs[1].hash], b"hello");
}
