//! The client's pieces: what goes by reference, what waits, what goes as records.

use super::*;
use gpuless_traces::protocol::piece::sample;
use gpuless_traces::BlobRef;

fn launch(seq: u64, k: u8) -> CallRecord {
    sample::launch(seq, 0, k)
}

fn upload(seq: u64, content: u128) -> CallRecord {
    sample::upload(seq, 0, content)
}

fn sync(seq: u64) -> CallRecord {
    sample::sync(seq, 0)
}

/// One inference: an upload of `content`, five launches of factor `k`, a synchronization.
fn inference(
    p: &mut ClientPieces,
    pending: &mut Vec<CallRecord>,
    refs: &mut Vec<Placed>,
    seq: &mut u64,
    content: u128,
    k: u8,
) {
    let mut push = |r: CallRecord, p: &mut ClientPieces| {
        pending.push(r);
        p.pushed(pending, refs);
    };
    *seq += 1;
    push(upload(*seq, content), p);
    for _ in 0..5 {
        *seq += 1;
        push(launch(*seq, k), p);
    }
    *seq += 1;
    push(sync(*seq), p);
}

/// A client whose first inference (factor 2) went as records and was then announced as held
/// by the executor: (its pieces, the pending records, the references).
fn held_after_one_inference() -> (ClientPieces, Vec<CallRecord>, Vec<Placed>) {
    let (mut p, mut pending, mut refs, mut seq) = (ClientPieces::new(true), Vec::new(), Vec::new(), 0);
    inference(&mut p, &mut pending, &mut refs, &mut seq, 1, 2);
    let key = piece::key(&pending[..6]);
    pending.clear();
    p.announced(&[key]);
    (p, pending, refs)
}

#[test]
fn a_piece_the_server_holds_goes_by_reference_with_this_inferences_upload() {
    let (mut p, mut pending, mut refs, mut seq) = (ClientPieces::new(true), Vec::new(), Vec::new(), 0);
    inference(&mut p, &mut pending, &mut refs, &mut seq, 1, 2);
    assert_eq!((pending.len(), refs.len()), (7, 0), "not held yet: records");
    let key = piece::key(&pending[..6]);
    pending.clear();
    p.announced(&[key, Hash128(999)]);
    inference(&mut p, &mut pending, &mut refs, &mut seq, 2, 2);
    assert_eq!(pending.len(), 1, "only the synchronization is left as a record");
    assert_eq!(pending[0].seq, 14);
    let (at, r) = &refs[0];
    assert_eq!((*at, r.key, r.first_seq, r.records), (0, key, 8, 6));
    assert_eq!(r.payloads, [BlobRef { hash: Hash128(2), len: 64 }], "this inference's upload");
    assert_eq!((p.refs, p.records_saved), (1, 6));
    // Another factor is another piece: records.
    pending.clear();
    refs.clear();
    inference(&mut p, &mut pending, &mut refs, &mut seq, 3, 9);
    assert_eq!((pending.len(), refs.len()), (7, 0));
}

#[test]
fn the_open_piece_waits_while_it_matches_a_held_one_and_keeps_its_key_when_let_go() {
    let (mut p, mut pending, mut refs) = held_after_one_inference();
    // A record before the piece, then the piece's start: the first may leave, the rest waits.
    for r in [sync(100), upload(101, 5), launch(102, 2)] {
        pending.push(r);
        p.pushed(&mut pending, &mut refs);
    }
    assert_eq!(p.sendable(pending.len()), 1);
    // The flusher sends the first record; the held piece moves down and still waits.
    pending.drain(..1);
    p.sent(1);
    assert_eq!(p.sendable(pending.len()), 0);
    // A launch no held piece has there: everything may leave, and the flusher takes it.
    pending.push(launch(103, 7));
    p.pushed(&mut pending, &mut refs);
    assert_eq!(p.sendable(pending.len()), 3);
    let sent: Vec<CallRecord> = std::mem::take(&mut pending);
    p.sent(3);
    for i in 0..3 {
        pending.push(launch(104 + i, 7));
        p.pushed(&mut pending, &mut refs);
    }
    p.finish(&mut pending, &mut refs);
    assert!(refs.is_empty(), "a piece that differs goes as records");
    // Its key is the whole piece's, though the flusher sent it in two parts.
    let whole: Vec<CallRecord> = sent.into_iter().chain(pending.iter().cloned()).collect();
    assert!(p.recent.contains_key(&piece::key(&whole)), "kept under the whole piece's key");
}

#[test]
fn gaps_in_sequence_numbers_send_records() {
    let (mut p, mut pending, mut refs) = held_after_one_inference();
    for (i, r) in [upload(50, 4), launch(51, 2), launch(52, 2), launch(60, 2), launch(61, 2), launch(62, 2)]
        .into_iter()
        .enumerate()
    {
        pending.push(r);
        p.pushed(&mut pending, &mut refs);
        assert_eq!(pending.len(), i + 1);
    }
    p.finish(&mut pending, &mut refs);
    assert!(refs.is_empty(), "a reference stands for consecutive sequence numbers only");
    assert_eq!(pending.len(), 6);
}

#[test]
fn nothing_happens_when_the_server_does_not_run_cached_execution() {
    let (mut p, mut pending, mut refs, mut seq) = (ClientPieces::default(), Vec::new(), Vec::new(), 0);
    for i in 0..3 {
        inference(&mut p, &mut pending, &mut refs, &mut seq, i, 2);
        p.announced(&[]);
    }
    assert!(p.recent.is_empty() && refs.is_empty() && p.open.is_empty());
    assert_eq!(p.sendable(pending.len()), 21);
}
