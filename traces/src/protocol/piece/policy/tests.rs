//! What runs at once, what is held, what is captured, and what is kept for the program's next
//! session (without a GPU; the executor's graph work is covered end to end by
//! `cli/tests/run_remote_pieces.rs`).

use super::*;
use crate::protocol::piece::sample;

/// One inference (an upload, five launches of `k` blocks, a synchronization) through `p`: what
/// came out, as (single records, complete held pieces).
fn inference(p: &mut Policy, seq: &mut u64, k: u8) -> (usize, Vec<usize>) {
    let (singles, pieces) = inference_cuts(p, seq, k);
    (singles, pieces.iter().map(Vec::len).collect())
}

fn inference_cuts(p: &mut Policy, seq: &mut u64, k: u8) -> (usize, Vec<Vec<CallRecord>>) {
    let mut out = Vec::new();
    let mut next = || {
        *seq += 1;
        *seq
    };
    let first = next();
    p.push(sample::upload(first, 0, u128::from(first)), &mut out);
    for _ in 0..5 {
        p.push(sample::launch_blocks(next(), 0, 1, u64::from(k)), &mut out);
    }
    p.push(sample::sync(next(), 0), &mut out);
    let singles = out.iter().filter(|c| matches!(c, Cut::Single(_))).count();
    let pieces = out.into_iter().filter_map(|c| if let Cut::Piece(p) = c { Some(p) } else { None }).collect();
    (singles, pieces)
}

#[test]
fn records_run_as_they_come_until_a_piece_repeats_then_its_repetitions_are_held() {
    let mut p = Policy::new("python run.py", None);
    let mut seq = 0;
    assert_eq!(inference(&mut p, &mut seq, 2), (7, vec![]), "first: everything runs at once");
    assert_eq!(inference(&mut p, &mut seq, 2), (7, vec![]), "second: the same, and it becomes a template");
    assert_eq!((p.counts.eager, p.templates()), (2, 1));
    assert_eq!(inference(&mut p, &mut seq, 2), (1, vec![6]), "third: held whole, for a graph");
    assert_eq!(inference(&mut p, &mut seq, 9), (7, vec![]), "another shape: let go at its first launch");
    // A held piece that stops matching is let go: its records come out in order, then the rest.
    let mut out = Vec::new();
    p.push(sample::upload(100, 0, 5), &mut out);
    p.push(sample::launch_blocks(101, 0, 1, 2), &mut out);
    assert!(out.is_empty(), "held while it matches");
    p.push(sample::launch_blocks(102, 0, 1, 7), &mut out);
    let seqs: Vec<u64> =
        out.iter().map(|c| if let Cut::Single(r) = c { r.seq } else { panic!("no piece yet") }).collect();
    assert_eq!(seqs, [100, 101, 102]);
}

#[test]
fn a_held_piece_is_captured_then_its_graph_stands_for_it_and_a_refused_one_runs_eagerly() {
    let mut p = Policy::new("", None);
    let mut seq = 0;
    for _ in 0..2 {
        inference(&mut p, &mut seq, 2);
        inference(&mut p, &mut seq, 3);
    }
    let (_, mut pieces) = inference_cuts(&mut p, &mut seq, 2);
    let Decision::Capture(key, recs) = p.decide(pieces.remove(0), true) else { panic!("captured at its third sight") };
    let exact = crate::protocol::piece::key(&recs);
    assert!(p.captured_template(&exact).is_none(), "no graph yet");
    assert_eq!(p.captured(key, recs), exact, "the client is told the exact key");
    assert_eq!(p.captured_template(&exact).map(|(k, t)| (k, t.len())), Some((key, 6)));
    let (_, mut pieces) = inference_cuts(&mut p, &mut seq, 2);
    assert!(matches!(p.decide(pieces.remove(0), true), Decision::Graph(k, _) if k == key));
    p.launched(6);
    let (_, mut pieces) = inference_cuts(&mut p, &mut seq, 2);
    assert!(matches!(p.decide(pieces.remove(0), false), Decision::Eager(_)), "not usable: eager");
    // The other shape's capture fails: its pieces run at once from then on, never held.
    let (_, mut pieces) = inference_cuts(&mut p, &mut seq, 3);
    let Decision::Capture(other, _) = p.decide(pieces.remove(0), true) else { panic!("captured") };
    p.refused(other);
    assert_eq!(inference(&mut p, &mut seq, 3), (7, vec![]));
    assert_eq!(p.counts, Counts { graph: 1, captured: 1, eager: 4 + 1 + 1 + 1, records_graph: 12 });
}

#[test]
fn templates_are_kept_for_the_programs_next_session_which_holds_them_at_first_sight() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = Policy::new("python run.py", Some(dir.path()));
    p.save();
    assert!(!dir.path().join("pieces").exists(), "nothing repeated: nothing kept");
    p.saved = false;
    let mut seq = 0;
    for _ in 0..2 {
        inference(&mut p, &mut seq, 2);
    }
    p.save();
    let mut q = Policy::new("python run.py", Some(dir.path()));
    assert_eq!(q.templates(), 1);
    assert_eq!(inference(&mut q, &mut seq, 2), (1, vec![6]), "held at first sight");
    assert_eq!(Policy::new("python other.py", Some(dir.path())).templates(), 0, "templates are the program's own");
    let file = q.file().unwrap().to_path_buf();
    for damage in [&[7u8; 3][..], &[1, 0, 0, 0, 200, 0, 0, 0, 1, 2][..], &[1, 0, 0, 0, 2, 0, 0, 0, 1, 2][..]] {
        std::fs::write(&file, damage).unwrap();
        assert_eq!(Policy::new("python run.py", Some(dir.path())).templates(), 0, "a damaged file gives none");
    }
    assert!(Policy::new("", Some(dir.path())).file().is_none());
}

#[test]
fn a_piece_of_the_same_shape_with_other_addresses_and_parameters_is_run_by_the_same_graph() {
    let mut p = Policy::new("", None);
    let piece = |seq: u64, param: u8| -> Vec<CallRecord> {
        let mut up = sample::upload(seq, 0, u128::from(seq));
        up.args[0] = crate::model::Value::DevPtr(0x7e00_0000_0000 + u64::from(param) * 0x100);
        std::iter::once(up).chain((1..5).map(|i| sample::launch(seq + i, 0, param))).collect()
    };
    let mut out = Vec::new();
    for (n, param) in [1u8, 2, 3, 4].into_iter().enumerate() {
        for r in piece(10 * n as u64, param) {
            p.push(r, &mut out);
        }
        p.push(sample::sync(10 * n as u64 + 9, 0), &mut out);
    }
    let held: Vec<_> = out.into_iter().filter_map(|c| if let Cut::Piece(p) = c { Some(p) } else { None }).collect();
    assert_eq!(held.len(), 2, "the third and fourth are held: the same shape as the first two");
    let mut held = held.into_iter();
    let Some(Decision::Capture(key, recs)) = held.next().map(|h| p.decide(h, true)) else { panic!("captured") };
    assert_eq!(key, crate::protocol::piece::shape_key(&piece(0, 1)));
    p.captured(key, recs);
    assert!(matches!(held.next().map(|h| p.decide(h, true)), Some(Decision::Graph(k, _)) if k == key));
}
