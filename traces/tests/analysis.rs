//! Analysis of the synthetic traces: statistics, sync policies, plots, and the committed files.

mod common;

use gpuless_traces::analysis::analyze;
use gpuless_traces::synthetic::{resnet_like, vector_add, ResnetScale};
use gpuless_traces::{ReaderOptions, TraceReader};

#[test]
fn vector_add_statistics() {
    let b = common::write_mem(common::small_chunks(), |w| vector_add(w, 1024).expect("synthetic"));
    let (a, err) = analyze(common::reader(&b), &mut |_, _| {});
    assert!(err.is_none(), "{err:?}");
    let s = &a.stats;
    assert_eq!(s.kernel_launches, 1);
    assert_eq!(s.unique_kernels, 1);
    assert_eq!(s.unique_kernel_names, 1);
    assert_eq!(s.allocations.count, 3);
    assert_eq!(s.allocations.bytes, 3 * 4096);
    assert_eq!(s.h2d.count, 2);
    assert_eq!(s.h2d.bytes, 2 * 4096);
    assert_eq!(s.d2h.count, 1);
    assert_eq!(s.d2h.bytes, 4096);
    assert_eq!(s.frees, 3);
    assert_eq!(s.module_loads, 1);
    assert_eq!(s.unmodeled_calls, 0);
    assert!(a.integrity.finished);
    let gpuless = a.sync.iter().find(|r| r.policy == "gpuless").expect("policy");
    // Device queries (count, version, attributes, name, ctx) and the D2H copy.
    assert_eq!(gpuless.reasons.get("DeviceToHost"), Some(&1));
    assert_eq!(gpuless.bytes_down, 4096 + 256);
    let per_call = a.sync.iter().find(|r| r.policy == "per-call").expect("policy");
    assert_eq!(per_call.syncs, s.calls);
}

#[test]
fn resnet_like_policies_are_ordered_and_plots_are_written() {
    let b = common::write_mem(common::small_chunks(), |w| resnet_like(w, ResnetScale::default()).expect("synthetic"));
    let mut calls_seen = 0;
    let (a, err) = analyze(common::reader(&b), &mut |pos, _| calls_seen = pos);
    assert!(err.is_none());
    assert!(calls_seen > 0);
    assert!(a.stats.calls > 2000, "{}", a.stats.calls);
    assert_eq!(a.stats.kernel_launches, 10 * 188);
    assert_eq!(a.stats.nested_calls, 18);
    let g = &a.stats.registrations;
    assert_eq!((g.fatbins, g.functions, g.variables), (18, 72, 0));
    assert_eq!(g.function_list[5].name, "synthetic_kernel_1_1");
    assert_eq!(g.function_list[5].fatbin, 0x6001);
    assert_eq!(a.stats.module_loads, 18, "registrations are not module loads");
    // Its two profiler calls (cuProfilerStart/Stop) are in the API table since it covers cudaProfiler.h.
    assert_eq!(a.stats.unmodeled_calls, 0);
    let syncs: Vec<u64> = a.sync.iter().map(|r| r.syncs).collect();
    assert!(syncs[0] > syncs[1] && syncs[1] > syncs[2], "{syncs:?}");
    for r in &a.sync {
        let seg_total: u64 = r.segments.histogram.iter().map(|(s, c)| s * c).sum();
        assert_eq!(seg_total + r.trailing_calls, r.calls, "{}", r.policy);
        assert_eq!(r.timeline.bins.iter().map(|b| b.syncs).sum::<u64>(), r.syncs);
    }
    let json = serde_json::to_string(&a).expect("json");
    assert!(json.contains("\"gpuless-2022\""));
    let dir = tempfile::tempdir().expect("tmp");
    let out = gpuless_traces::analysis::plot::write_plots(&a, dir.path()).expect("plots");
    assert_eq!(out.files.len(), 4);
    for f in &out.files {
        assert!(std::fs::metadata(f).expect("file").len() > 1000, "{}", f.display());
    }
}

#[test]
fn truncated_trace_is_analyzed_up_to_the_cut() {
    let b = common::write_mem(common::small_chunks(), |w| resnet_like(w, ResnetScale::default()).expect("synthetic"));
    let cut = &b[..b.len() * 2 / 3];
    let (a, err) = analyze(common::reader(cut), &mut |_, _| {});
    assert!(err.as_ref().is_some_and(|e| e.is_truncation()), "{err:?}");
    assert!(a.integrity.error.is_some());
    assert!(!a.integrity.finished);
    assert!(a.stats.calls > 100);
}

#[test]
fn committed_synthetic_traces_read_cleanly() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/traces");
    for name in ["synthetic-vector-add.gl", "synthetic-resnet-like.gl"] {
        let r = TraceReader::open(&dir.join(name), ReaderOptions::default()).expect(name);
        let (a, err) = analyze(r, &mut |_, _| {});
        assert!(err.is_none(), "{name}: {err:?}");
        assert!(a.integrity.finished, "{name}");
        assert!(a.stats.calls > 20, "{name}");
    }
}

/// A trace holds an async download's record after the synchronization that completed it (the
/// recorder writes it when it has hashed the bytes); the `gpuless` policy still sees the
/// download before the synchronization, which therefore waits, as the client does.
#[test]
fn a_download_recorded_after_its_synchronization_is_analyzed_before_it() {
    use gpuless_analyzer::api::{self, ApiLevel, HandleKind};
    use gpuless_traces::{BlobRef, CallRecord, Function, Hash128, Value};
    let f = |name: &str| api::functions().iter().find(|f| f.name == name).expect(name).id;
    let b = common::write_mem(common::small_chunks(), |w| {
        let mut sync = CallRecord::new(2, ApiLevel::Driver, Function::Known(f("cuStreamSynchronize")));
        sync.args = vec![Value::Handle(HandleKind::Stream, 0)];
        let mut copy = CallRecord::new(1, ApiLevel::Driver, Function::Known(f("cuMemcpyDtoHAsync")));
        copy.args =
            vec![Value::HostPtr(0x1000), Value::DevPtr(0x7000), Value::Size(64), Value::Handle(HandleKind::Stream, 0)];
        copy.variant = api::Variant { version: 2, per_thread: false };
        copy.results = vec![Value::Digest(BlobRef { hash: Hash128(9), len: 64 })];
        // Then more work and a synchronization that waits for it.
        let mut set = CallRecord::new(3, ApiLevel::Driver, Function::Known(f("cuMemsetD8Async")));
        set.args = vec![Value::DevPtr(0x7000), Value::U64(0), Value::Size(64), Value::Handle(HandleKind::Stream, 0)];
        let mut again = sync.clone();
        again.seq = 4;
        w.records(vec![sync, copy, set, again]).expect("records");
    });
    let (a, err) = analyze(common::reader(&b), &mut |_, _| {});
    assert!(err.is_none(), "{err:?}");
    let gpuless = a.sync.iter().find(|r| r.policy == "gpuless").expect("policy");
    assert_eq!(gpuless.syncs, 2, "{gpuless:?}");
    assert_eq!(gpuless.reasons.get("StreamSync"), Some(&1), "{gpuless:?}");
    assert_eq!(
        gpuless.reasons.get("deferred-download"),
        Some(&1),
        "the synchronization brings the download: {gpuless:?}"
    );
    assert_eq!(gpuless.trailing_calls, 0, "{gpuless:?}");
    assert_eq!(gpuless.bytes_down, 64);
}
