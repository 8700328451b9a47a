//! `gpuless analyze TRACE --perfetto OUT.json` on the committed traces: every event checked
//! against what the Chrome trace-event format requires of it, as Perfetto and chrome://tracing
//! read it.

mod support;
use support::gpuless;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::Value;

fn trace(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/traces").join(name).to_string_lossy().into_owned()
}

/// Microseconds (a JSON number) to integer nanoseconds.
fn ns(v: &Value, what: &str) -> i64 {
    let us = v.as_f64().unwrap_or_else(|| panic!("{what}: not a number: {v}"));
    (us * 1000.0).round() as i64
}

/// What a timeline holds, for the tests' own checks.
#[derive(Default, Debug)]
struct Summary {
    calls: usize,
    counters: Vec<(i64, BTreeMap<String, u64>)>,
    tids: BTreeSet<u64>,
    /// seq → (tid, start, end).
    spans: BTreeMap<u64, (u64, i64, i64)>,
    /// (child seq, parent seq).
    parents: Vec<(u64, u64)>,
}

/// Checks every event and returns what the timeline holds.
fn validate(doc: &Value) -> Summary {
    let events = doc["traceEvents"].as_array().expect("traceEvents: an array");
    assert!(doc["displayTimeUnit"] == "ns" || doc["displayTimeUnit"] == "ms", "{}", doc["displayTimeUnit"]);
    let mut s = Summary::default();
    let mut named_threads = BTreeSet::new();
    let mut last_ts = i64::MIN;
    let mut seen_timed = false;
    // Per thread: ends of the open enclosing calls.
    let mut stacks: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    for e in events {
        let ph = e["ph"].as_str().unwrap_or_else(|| panic!("no phase: {e}"));
        let name = e["name"].as_str().unwrap_or_else(|| panic!("no name: {e}"));
        assert!(!name.is_empty(), "{e}");
        assert!(e["pid"].is_u64(), "pid: {e}");
        match ph {
            "M" => {
                assert!(!seen_timed, "metadata after timed events: {e}");
                match name {
                    "process_name" => assert!(e["args"]["name"].is_string(), "{e}"),
                    "thread_name" => {
                        assert!(e["args"]["name"].is_string(), "{e}");
                        named_threads.insert(e["tid"].as_u64().unwrap_or_else(|| panic!("tid: {e}")));
                    }
                    "thread_sort_index" => assert!(e["tid"].is_u64() && e["args"]["sort_index"].is_i64(), "{e}"),
                    other => panic!("unexpected metadata {other}: {e}"),
                }
                continue;
            }
            "X" | "C" => {}
            other => panic!("unexpected phase {other}: {e}"),
        }
        seen_timed = true;
        let ts = ns(&e["ts"], "ts");
        assert!(ts >= 0, "{e}");
        assert!(ts >= last_ts, "events not sorted by ts: {e} after {last_ts} ns");
        last_ts = ts;
        if ph == "C" {
            let args = e["args"].as_object().unwrap_or_else(|| panic!("counter args: {e}"));
            assert!(!args.is_empty(), "{e}");
            let mut values = BTreeMap::new();
            for (k, v) in args {
                assert!(v.is_number(), "counter {k} not a number: {e}");
                assert!(v.as_f64().is_some_and(|x| x >= 0.0), "negative counter {k}: {e}");
                values.insert(k.clone(), v.as_u64().unwrap_or(0));
            }
            s.counters.push((ts, values));
            continue;
        }
        let dur = ns(&e["dur"], "dur");
        assert!(dur >= 0, "{e}");
        let tid = e["tid"].as_u64().unwrap_or_else(|| panic!("tid: {e}"));
        assert!(e["cat"].is_string(), "{e}");
        let end = ts + dur;
        // Proper nesting: a call that starts inside another ends inside it.
        let stack = stacks.entry(tid).or_default();
        while stack.last().is_some_and(|&top| top <= ts) {
            stack.pop();
        }
        if let Some(&top) = stack.last() {
            assert!(end <= top, "tid {tid}: {e} starts inside a call ending at {top} ns and ends at {end} ns");
        }
        stack.push(end);
        s.calls += 1;
        s.tids.insert(tid);
        let seq = e["args"]["seq"].as_u64().unwrap_or_else(|| panic!("seq: {e}"));
        assert!(s.spans.insert(seq, (tid, ts, end)).is_none(), "seq {seq} twice");
        if let Some(p) = e["args"]["parent"].as_u64() {
            s.parents.push((seq, p));
        }
        if name.starts_with("cuLaunchKernel") {
            assert!(e["args"]["kernel"].is_string(), "a launch without its kernel: {e}");
        }
    }
    assert!(s.tids.is_subset(&named_threads), "threads without names: {:?} vs {named_threads:?}", s.tids);
    // Nested calls lie inside their parents, on their tracks.
    for (c, p) in &s.parents {
        let (Some(c), Some(p)) = (s.spans.get(c), s.spans.get(p)) else { continue };
        assert!(c.0 == p.0 && p.1 <= c.1 && c.2 <= p.2, "child {c:?} outside its parent {p:?}");
    }
    s
}

/// Runs `gpuless analyze --perfetto` on a committed trace and validates the result.
fn timeline(name: &str) -> (Summary, Value) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.json");
    let (code, _, err) = gpuless(&["analyze", &trace(name), "--perfetto", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{name}: {err}");
    assert!(err.contains("wrote") && err.contains("calls"), "{err}");
    let doc: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).expect("valid JSON");
    (validate(&doc), doc)
}

/// Records of a trace that are calls (not the recorder's summaries), from `gpuless dump`.
fn dumped_calls(name: &str) -> usize {
    let (code, out, err) = gpuless(&["dump", "--json", &trace(name)]);
    assert_eq!(code, 0, "{err}");
    out.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).filter(|r| r["summary"] == false).count()
}

#[test]
fn vecadd_timeline_is_valid_with_its_memory_counter() {
    let (s, doc) = timeline("vecadd.gl");
    assert_eq!(s.calls, dumped_calls("vecadd.gl"));
    assert_eq!(s.tids, BTreeSet::from([495]));
    let allocated: Vec<u64> = s.counters.iter().map(|(_, v)| v["allocations"]).collect();
    // Three 16 KiB buffers allocated, then freed.
    assert_eq!(allocated, [0, 16384, 32768, 49152, 32768, 16384, 0]);
    let launch =
        doc["traceEvents"].as_array().unwrap().iter().find(|e| e["name"] == "cuLaunchKernel").expect("the launch");
    assert_eq!(launch["args"]["kernel"], "_Z10vector_addPKfS0_Pfi");
    assert_eq!(launch["args"]["args"]["grid"], serde_json::json!([16, 1, 1]));
    assert_eq!(doc["otherData"]["unmodeled"]["cuCtxGetDevice"], 1);
}

#[test]
fn two_threads_nesting_and_memory_across_threads() {
    // Hand-set times: nested calls with clock skew, overlapping siblings, a free recorded
    // (in file order) before the other thread's allocation it frees.
    let (s, _) = timeline("synthetic-threads.gl");
    assert_eq!(s.tids, BTreeSet::from([100, 200]));
    assert_eq!(s.calls, dumped_calls("synthetic-threads.gl"));
    assert_eq!(s.parents.len(), 3);
    let last = s.counters.last().expect("counters");
    assert_eq!((last.1["allocations"], last.1["vmm"]), (4096, 0));
    assert_eq!(s.counters.iter().map(|(_, v)| v["allocations"]).max(), Some(12288));
    assert_eq!(s.counters.iter().map(|(_, v)| v["vmm"]).max(), Some(1 << 20));
}

#[test]
fn other_committed_traces_are_valid() {
    for name in [
        "tiny_pytorch.gl",
        "synthetic-resnet-like.gl",
        "streams.gl",
        "graph.gl",
        "texture.gl",
        "managed.gl",
        "graph_query.gl",
        "event_d2h.gl",
    ] {
        let (s, _) = timeline(name);
        assert_eq!(s.calls, dumped_calls(name), "{name}");
        assert!(!s.counters.is_empty(), "{name}: no device-memory counter");
        if name == "synthetic-resnet-like.gl" {
            assert_eq!(s.parents.len(), 18);
        }
    }
}

#[test]
fn bad_requests_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.json");
    let out = out.to_str().unwrap();
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/bin/vecadd");
    let (code, _, err) = gpuless(&["analyze", bin.to_str().unwrap(), "--perfetto", out]);
    assert_eq!(code, 2);
    assert!(err.contains("vecadd") && err.contains("traces only"), "{err}");
    let t = trace("vecadd.gl");
    let (code, _, err) = gpuless(&["analyze", &t, &t, "--perfetto", out]);
    assert_eq!(code, 2);
    assert!(err.contains("exactly one trace"), "{err}");
    let unwritable = dir.path().join("no/such/dir/t.json");
    let (code, _, err) = gpuless(&["analyze", &t, "--perfetto", unwritable.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("t.json") && !err.contains("panicked"), "{err}");
}
