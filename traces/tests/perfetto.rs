//! The Perfetto timeline (`analysis::perfetto`) on synthetic traces whose times are set by hand.

mod common;

use gpuless_traces::analysis::perfetto::{timeline, Event, EventArgs, Timeline};
use gpuless_traces::dump::Shown;
use gpuless_traces::synthetic::{resnet_like, two_threads, ResnetScale};

fn build(f: impl FnOnce(&gpuless_traces::TraceWriter)) -> Timeline {
    let b = common::write_mem(common::small_chunks(), f);
    let (t, err) = timeline(common::reader(&b));
    assert!(err.is_none(), "{err:?}");
    t
}

fn ns(us: Option<f64>) -> u64 {
    (us.expect("time") * 1000.0).round() as u64
}

/// (start, end) in ns of the call with this seq.
fn span(t: &Timeline, seq: u64) -> (u64, u64) {
    let e = t
        .trace_events
        .iter()
        .find(|e| matches!(e.args, EventArgs::Call { seq: s, .. } if s == seq))
        .unwrap_or_else(|| panic!("no event for seq {seq}"));
    (ns(e.ts), ns(e.ts) + ns(e.dur))
}

fn counters(t: &Timeline) -> Vec<(u64, u64, u64)> {
    t.trace_events
        .iter()
        .filter(|e| e.ph == "C")
        .map(|e| {
            let EventArgs::Counter(f) = &e.args else { panic!("counter args: {e:?}") };
            let get = |k: &str| match f.get(k) {
                Some(Shown::Uint(v)) => *v,
                other => panic!("{k}: {other:?}"),
            };
            (ns(e.ts), get("allocations"), get("vmm"))
        })
        .collect()
}

#[test]
fn nesting_clock_skew_and_overlaps_are_resolved_per_thread() {
    let t = build(|w| two_threads(w).expect("synthetic"));
    // The untimed registration covers the call made from inside it.
    assert_eq!(span(&t, 1), (2000, 2900));
    assert_eq!(span(&t, 2), (2500, 2900));
    // The synchronization covers both nested queries: the early one moved to its start, the
    // late one's end reached.
    assert_eq!(span(&t, 4), (4000, 5200));
    assert_eq!(span(&t, 5), (4000, 4010));
    assert_eq!(span(&t, 6), (4900, 5200));
    // Overlapping siblings: the second is cut at the end of the first.
    assert_eq!(span(&t, 7), (6000, 6500));
    assert_eq!(span(&t, 8), (6400, 6500));
    // Untouched calls keep their times.
    assert_eq!(span(&t, 0), (1000, 1100));
    assert_eq!(span(&t, 10), (6900, 6950));
    let tids: Vec<Option<u64>> =
        t.trace_events.iter().filter(|e| e.name == "thread_name").map(|e: &Event| e.tid).collect();
    assert_eq!(tids, [Some(100), Some(200)]);
    // The summary record is no call at a time.
    assert_eq!(t.trace_events.iter().filter(|e| e.ph == "X").count(), 15);
    assert_eq!(t.other_data.unmodeled.get("cudnnCreate"), Some(&Shown::Uint(3)));
    assert_eq!(t.display_time_unit, "ns");
}

#[test]
fn memory_counters_follow_time_not_file_order() {
    let t = build(|w| two_threads(w).expect("synthetic"));
    // Thread 100's free of thread 200's allocation comes first in the file; a failed allocation
    // and a free of an unknown address change nothing.
    assert_eq!(
        counters(&t),
        [(0, 0, 0), (3050, 4096, 0), (6950, 12288, 0), (7010, 4096, 0), (7250, 4096, 1 << 20), (7310, 4096, 0)]
    );
}

#[test]
fn events_are_sorted_and_children_lie_in_their_parents() {
    let t = build(|w| resnet_like(w, ResnetScale::default()).expect("synthetic"));
    let first_timed = t.trace_events.iter().position(|e| e.ph != "M").expect("events");
    assert!(t.trace_events[..first_timed].iter().all(|e| e.ph == "M"));
    assert!(t.trace_events[first_timed..].iter().all(|e| e.ph != "M"));
    let ts: Vec<u64> = t.trace_events[first_timed..].iter().map(|e| ns(e.ts)).collect();
    assert!(ts.windows(2).all(|w| w[0] <= w[1]), "not sorted");
    let mut nested = 0;
    for e in &t.trace_events {
        if let EventArgs::Call { seq, parent: Some(p), .. } = e.args {
            let (c, p) = (span(&t, seq), span(&t, p));
            assert!(p.0 <= c.0 && c.1 <= p.1, "seq {seq}: {c:?} outside its parent {p:?}");
            nested += 1;
        }
    }
    assert_eq!(nested, 18);
    // Launches name their kernel.
    let launch = t.trace_events.iter().find(|e| e.name == "cuLaunchKernel").expect("a launch");
    assert!(matches!(&launch.args, EventArgs::Call { kernel: Some(k), .. } if k.starts_with("synthetic_kernel")));
}
