use super::*;
use crate::api::SyncClass::*;

fn ev(class: SyncClass, up: u64, down: u64, stream: Option<u64>) -> CallEvent {
    CallEvent { class: Some(class), bytes_up: up, bytes_down: down, stream, ..CallEvent::default() }
}

#[test]
fn policies_on_a_small_program() {
    let calls = [
        ev(DeviceQuery, 0, 0, None),
        ev(AllocatesDevice, 0, 0, None),
        ev(CreatesHandle, 0, 0, None),
        ev(HostToDevice, 4096, 0, Some(1)),
        ev(Async, 0, 0, Some(1)),
        ev(DeviceToHostAsync, 0, 1024, Some(1)),
        ev(StreamSync, 0, 0, Some(1)),
        ev(FreesDevice, 0, 0, None),
        CallEvent { class: None, ..CallEvent::default() },
    ];
    let mut a = SyncAnalyzer::default();
    for c in &calls {
        a.push(c);
    }
    let r = a.finish();
    assert_eq!(r[0].policy, "per-call");
    assert_eq!(r[0].syncs, 9);
    assert_eq!(r[0].segments.max, 1);
    assert_eq!(r[1].policy, "gpuless-2022");
    // query, alloc, handle, D2H async, free, unmodeled
    assert_eq!(r[1].syncs, 6);
    assert_eq!(r[2].policy, "gpuless");
    // stream sync delivering the download, unmodeled, the wait at exit for the free
    assert_eq!(r[2].syncs, 3);
    assert_eq!(r[2].reasons.get("exit"), Some(&1));
    assert_eq!(r[2].reasons.get("deferred-download"), Some(&1));
    assert_eq!(r[2].bytes_down, 1024);
    assert_eq!(r[2].max_bytes_down_per_sync, 1024);
    assert_eq!(r[2].max_bytes_up_per_sync, 4096);
    assert_eq!(r[2].segments.count, 3);
    assert_eq!(r[2].segments.histogram, vec![(1, 1), (2, 1), (7, 1)]);
    assert!((r[2].sync_percent - 100.0 * 3.0 / 9.0).abs() < 1e-9);
}

#[test]
fn copy_direction_comes_from_bytes() {
    let mut a = SyncAnalyzer::new(&[Policy::Gpuless]);
    a.push(&ev(CopyAnyDirection, 10, 0, None));
    a.push(&ev(CopyAnyDirection, 0, 0, None));
    a.push(&ev(CopyAnyDirection, 0, 10, None));
    let r = a.finish();
    assert_eq!(r[0].syncs, 1);
    assert_eq!(r[0].reasons.get("DeviceToHost"), Some(&1));
}

#[test]
fn pending_downloads_flush_at_the_end() {
    let mut a = SyncAnalyzer::new(&[Policy::Gpuless]);
    a.push(&ev(DeviceToHostAsync, 0, 8, Some(2)));
    a.push(&ev(StreamSync, 0, 0, Some(3)));
    let r = a.finish();
    assert_eq!(r[0].syncs, 1);
    assert_eq!(r[0].trailing_calls, 0);
}

#[test]
fn timeline_stays_bounded() {
    let mut t = Timeline::new(16);
    for i in 0..10_000 {
        t.add(i, 1, 2);
    }
    assert!(t.bins.len() <= 16);
    assert_eq!(t.bins.iter().map(|b| b.syncs).sum::<u64>(), 10_000);
    assert_eq!(t.bins.iter().map(|b| b.bytes_down).sum::<u64>(), 20_000);
    assert_eq!(t.bins[1].first_call, t.bin_width);
}

#[test]
fn policy_names_round_trip() {
    for p in Policy::ALL {
        assert_eq!(Policy::from_name(p.name()), Some(p));
    }
}

#[test]
fn gpuless_waits_only_with_work_outstanding_or_for_an_answer() {
    let mut a = SyncAnalyzer::new(&[Policy::Gpuless]);
    let timing = CallEvent { class: Some(StateQuery), answers: true, ..CallEvent::default() };
    let calls = [
        ev(CtxSync, 0, 0, None),       // nothing sent yet: answered locally
        ev(DeviceQuery, 0, 0, None),   // local
        ev(AddressLookup, 0, 0, None), // local answer, sent
        ev(EventSync, 0, 0, None),     // waits: the lookup is outstanding
        ev(StateQuery, 0, 0, Some(3)), // an event's completion says nothing of stream 3: waits
        ev(StateQuery, 0, 0, Some(3)), // stream 3 found done, nothing sent since: local
        timing,                        // an event timing: the server fills it
        ev(StreamSync, 0, 0, Some(1)), // stream 1 is not known done: waits
        ev(StreamSync, 0, 0, Some(1)), // ... now it is: local
        ev(CtxSync, 0, 0, None),       // the context is not: waits
        ev(StreamSync, 0, 0, Some(4)), // every stream is done: local
        ev(DeviceToHost, 0, 64, None), // waits
    ];
    for c in &calls {
        a.push(c);
    }
    let r = a.finish();
    assert_eq!(r[0].syncs, 6, "{:?}", r[0].reasons);
    assert_eq!(r[0].reasons.get("EventSync"), Some(&1));
    assert_eq!(r[0].reasons.get("StateQuery"), Some(&2));
    assert_eq!(r[0].reasons.get("StreamSync"), Some(&1));
    assert_eq!(r[0].reasons.get("CtxSync"), Some(&1));
    assert_eq!(r[0].reasons.get("DeviceToHost"), Some(&1));
}

#[test]
fn gpuless_asks_a_stable_question_again_only_after_a_call_that_forgets() {
    let mut a = SyncAnalyzer::new(&[Policy::Gpuless]);
    let ask = |q| CallEvent { class: Some(StateQuery), answers: true, memo: Some(q), ..CallEvent::default() };
    let forget = CallEvent { class: Some(Async), forgets: true, ..CallEvent::default() };
    let handle = ev(CreatesHandle, 0, 0, None); // creates a handle: remembered answers stay
    for c in [ask(1), ask(1), ask(2), handle, ask(2), forget, ask(1), ask(1)] {
        a.push(&c);
    }
    let r = a.finish();
    assert_eq!(r[0].syncs, 3, "asked: 1, 2, and 1 again after the forgetting call: {:?}", r[0].reasons);
}
