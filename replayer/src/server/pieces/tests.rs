//! What runs at once, what is held, and what is kept for the program's next session (without a
//! GPU: `Pieces::run` is covered end to end by `cli/tests/run_remote_pieces.rs`).

use super::*;
use gpuless_traces::protocol::piece::sample;

fn launch(seq: u64, k: u8) -> CallRecord {
    sample::launch(seq, 0, k)
}

fn upload(seq: u64, content: u128) -> CallRecord {
    sample::upload(seq, 0, content)
}

fn sync(seq: u64) -> CallRecord {
    sample::sync(seq, 0)
}

/// One inference (an upload, five launches of factor `k`, a synchronization) through `p`: what
/// came out, as (single records, complete held pieces).
fn inference(p: &mut Pieces, seq: &mut u64, k: u8) -> (usize, Vec<usize>) {
    let mut out = Vec::new();
    let mut next = || {
        *seq += 1;
        *seq
    };
    let first = next();
    p.push(upload(first, u128::from(first)), &mut out);
    for _ in 0..5 {
        p.push(launch(next(), k), &mut out);
    }
    p.push(sync(next()), &mut out);
    let singles = out.iter().filter(|c| matches!(c, Cut::Single(_))).count();
    let pieces = out.iter().filter_map(|c| if let Cut::Piece(p) = c { Some(p.len()) } else { None }).collect();
    (singles, pieces)
}

#[test]
fn records_run_as_they_come_until_a_piece_repeats_then_its_repetitions_are_held() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = Pieces::new("python run.py", dir.path());
    let mut seq = 0;
    assert_eq!(inference(&mut p, &mut seq, 2), (7, vec![]), "first: everything runs at once");
    assert_eq!(inference(&mut p, &mut seq, 2), (7, vec![]), "second: the same, and it becomes a template");
    assert_eq!((p.eager, p.templates), (2, 1));
    assert_eq!(inference(&mut p, &mut seq, 2), (1, vec![6]), "third: held whole, for a graph");
    assert_eq!(inference(&mut p, &mut seq, 9), (7, vec![]), "another factor: let go at its first launch");
    // A held piece that stops matching is let go: its records come out in order, then the rest.
    let mut out = Vec::new();
    p.push(upload(100, 5), &mut out);
    p.push(launch(101, 2), &mut out);
    assert!(out.is_empty(), "held while it matches");
    p.push(launch(102, 7), &mut out);
    let seqs: Vec<u64> =
        out.iter().map(|c| if let Cut::Single(r) = c { r.seq } else { panic!("no piece yet") }).collect();
    assert_eq!(seqs, [100, 101, 102]);
}

#[test]
fn templates_are_kept_for_the_programs_next_session_which_holds_them_at_first_sight() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = Pieces::new("python run.py", dir.path());
    p.save();
    assert!(!dir.path().join("pieces").exists(), "nothing repeated: nothing kept");
    p.saved = false;
    let mut seq = 0;
    for _ in 0..2 {
        inference(&mut p, &mut seq, 2);
    }
    p.save();
    let mut q = Pieces::new("python run.py", dir.path());
    assert_eq!(q.templates, 1);
    assert_eq!(inference(&mut q, &mut seq, 2), (1, vec![6]), "held at first sight");
    assert_eq!(Pieces::new("python other.py", dir.path()).templates, 0, "templates are the program's own");
    let file = q.file.clone().unwrap();
    for damage in [&[7u8; 3][..], &[1, 0, 0, 0, 200, 0, 0, 0, 1, 2][..], &[1, 0, 0, 0, 2, 0, 0, 0, 1, 2][..]] {
        std::fs::write(&file, damage).unwrap();
        assert_eq!(Pieces::new("python run.py", dir.path()).templates, 0, "a damaged file gives none");
    }
    assert!(Pieces::new("", dir.path()).file.is_none());
}
