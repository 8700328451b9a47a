//! The survey of made-up recordings: the executor's policy, the lengths and what ends pieces.

use super::*;
use crate::protocol::piece::sample;

#[test]
fn ten_inferences_three_run_record_by_record_one_is_captured_six_by_graph() {
    let mut recs = Vec::new();
    let mut seq = 0;
    let mut next = || {
        seq += 1;
        seq
    };
    for i in 0..10 {
        recs.push(sample::upload(next(), 0, i));
        for _ in 0..5 {
            recs.push(sample::launch(next(), 0, 2));
        }
        recs.push(sample::sync(next(), 0));
    }
    // A last piece of 40 launches: cut at 32, then 8 more on another stream.
    for i in 0..40 {
        recs.push(sample::launch(next(), if i < 32 { 0 } else { 0x80 }, 3));
    }
    let s = survey(recs);
    assert_eq!((s.records_sent, s.records_capturable), (110, 100));
    assert_eq!((s.pieces, s.lengths), (12, [0, 0, 10, 1, 0, 1]));
    assert_eq!((s.pieces_long_enough, s.keys, s.keys_once, s.shapes, s.shapes_once), (12, 3, 2, 3, 2));
    let ended: Vec<(&str, u64)> = s.ended_by.iter().map(|(w, n)| (w.as_str(), *n)).collect();
    assert_eq!(ended, [("cuStreamSynchronize", 10), ("32 records", 1), ("end of the recording", 1)]);
    // Seen twice (template), captured at the third, graphs from the fourth; the long ones once.
    assert_eq!(s.counts, Counts { graph: 7, captured: 1, eager: 4, records_graph: 48 });
    assert!((s.graph_share - 0.48).abs() < 1e-9);
}

#[test]
fn a_stable_query_is_sent_once_and_calls_the_client_answers_are_not_sent() {
    use crate::model::Value;
    let q = |seq| sample::record(seq, "cuCtxGetLimit", vec![Value::U64(0), Value::U64(0)]);
    let local = |seq| sample::record(seq, "cuCtxGetCurrent", vec![Value::HostPtr(8)]);
    let recs = vec![q(1), q(2), local(3), q(4)];
    let s = survey(recs);
    assert_eq!(s.records_sent, 1);
    assert!(s.ended_by.is_empty(), "no pieces: {:?}", s.ended_by);
}
