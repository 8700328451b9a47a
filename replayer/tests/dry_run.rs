//! `--dry-run` on the real traces recorded on the H200 (testdata/traces) and on deliberately
//! broken copies of them: every break is reported with the call that exposes it.

use std::path::{Path, PathBuf};

use gpuless_replayer::replay::dryrun::{dry_run, DryRunReport};
use gpuless_replayer::replay::{load, LoadedTrace};
use gpuless_traces::{BlobKind, TraceWriter, Value, WriterOptions};

fn testdata(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/traces").join(name)
}

/// Writes `t` to a file and reads it back, so the broken traces go through the real format.
fn round_trip(t: &LoadedTrace, dir: &Path) -> LoadedTrace {
    let p = dir.join("broken.gl");
    let w = TraceWriter::create(&p, &t.meta, WriterOptions::default()).unwrap();
    for data in t.blobs.values() {
        w.blob(BlobKind::Other, data).unwrap();
    }
    for r in &t.calls {
        w.record(r.clone()).unwrap();
    }
    w.finish().unwrap();
    load(&p).unwrap()
}

fn first(r: &DryRunReport) -> &str {
    r.violations.first().map(String::as_str).unwrap_or("")
}

#[test]
fn real_traces_are_consistent() {
    for name in ["vecadd.gl", "rdc_app.gl", "streams.gl", "streams_v2.gl", "tiny_pytorch.gl"] {
        let r = dry_run(&load(&testdata(name)).unwrap());
        assert_eq!(r.violation_count, 0, "{name}: {:?}", r.violations);
        assert!(r.checked >= 5, "{name}: {r:?}");
    }
}

#[test]
fn broken_traces_are_caught() {
    let dir = tempfile::tempdir().unwrap();
    let base = load(&testdata("vecadd.gl")).unwrap();
    let idx = |t: &LoadedTrace, name: &str| t.calls.iter().position(|c| c.function.name() == name).unwrap();

    // A kernel whose library load is gone.
    let mut t = round_trip(&base, dir.path());
    let i = idx(&t, "cuLibraryLoadData");
    t.calls.remove(i);
    let r = dry_run(&round_trip(&t, dir.path()));
    assert!(first(&r).contains("cuLibraryGetKernel") && first(&r).contains("never loaded"), "{r:?}");

    // A copy larger than its allocation.
    let mut t = round_trip(&base, dir.path());
    let i = idx(&t, "cuMemcpyDtoH");
    let f = t.calls[i].function.api().unwrap();
    let n = f.args.iter().position(|a| a.name == "ByteCount").unwrap();
    t.calls[i].args[n] = Value::Size(1 << 30);
    let r = dry_run(&round_trip(&t, dir.path()));
    assert!(first(&r).contains("cuMemcpyDtoH") && first(&r).contains("outside every live allocation"), "{r:?}");

    // A missing host-to-device payload.
    let mut t = round_trip(&base, dir.path());
    let i = idx(&t, "cuMemcpyHtoD");
    let Value::Blob(b) = t.calls[i].args[1] else { panic!() };
    t.blobs.remove(&b.hash);
    let r = dry_run(&t);
    assert!(first(&r).contains("cuMemcpyHtoD") && first(&r).contains("missing"), "{r:?}");

    // A free of memory that was never allocated.
    let mut t = round_trip(&base, dir.path());
    let i = idx(&t, "cuMemAlloc");
    t.calls.remove(i);
    let r = dry_run(&t);
    assert!(r.violation_count >= 2, "{r:?}");
    assert!(r.violations.iter().any(|v| v.contains("cuMemFree") && v.contains("not a live allocation")), "{r:?}");
}

/// A trace recorded on the H200 with the arena: its allocations lie inside the arena recorded in
/// the header, so a replay re-creates them at their addresses without translation.
#[test]
fn arena_trace_allocations_lie_in_the_arena() {
    let t = load(&testdata("streams.gl")).unwrap();
    let (base, size) = (t.meta.arena_base, t.meta.arena_size);
    assert_eq!((base, size), (0x7e00_0000_0000, 1 << 40));
    let allocs: Vec<u64> = t
        .calls
        .iter()
        .filter(|c| c.function.name().starts_with("cuMemAlloc") && c.status == 0)
        .filter_map(|c| match c.results.first() {
            Some(gpuless_traces::Value::DevPtr(p)) => Some(*p),
            _ => None,
        })
        .collect();
    assert_eq!(allocs.len(), 3);
    assert!(
        allocs.iter().all(|&p| p >= base && p - base < size && p % gpuless_traces::arena::ALIGN == 0),
        "{allocs:x?}"
    );
}
