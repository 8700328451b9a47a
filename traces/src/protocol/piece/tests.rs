//! The piece rule: what cuts pieces, what the key keeps and leaves out.

use super::sample::{download as dl, launch, record as rec, sync as sync_on, upload};
use super::*;
use crate::model::{BlobRef, Dim3, LaunchConfig};
use gpuless_analyzer::api::HandleKind;

fn download(seq: u64, host: u64) -> CallRecord {
    dl(seq, 5, host)
}

fn sync(seq: u64) -> CallRecord {
    sync_on(seq, 5)
}

#[test]
fn the_table_marks_launches_copies_and_sets_capturable_and_nothing_that_waits() {
    use gpuless_analyzer::api::{self, SyncClass};
    let marked: Vec<&str> = api::FUNCTIONS.iter().filter(|f| f.capturable).map(|f| f.name).collect();
    for n in ["cuLaunchKernel", "cuLaunchKernelEx", "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemsetD32Async"] {
        assert!(marked.contains(&n), "{n} must be capturable");
    }
    for f in api::FUNCTIONS.iter().filter(|f| f.capturable) {
        assert!(
            !matches!(
                f.sync,
                SyncClass::StreamSync | SyncClass::EventSync | SyncClass::CtxSync | SyncClass::DeviceToHost
            ),
            "{} waits: it cannot be a graph node",
            f.name
        );
    }
}

#[test]
fn streams_of_capturable_records_and_none_for_the_rest() {
    assert_eq!(stream_of(&launch(1, 5, 0)), Some(5));
    assert_eq!(stream_of(&launch(1, 1, 0)), Some(0), "the legacy stream is the default stream");
    assert_eq!(stream_of(&upload(1, 2, 0)), Some(0), "the per-thread stream is the default stream");
    assert_eq!(stream_of(&sync(1)), None);
    let cfg = LaunchConfig {
        grid: Dim3 { x: 1, y: 1, z: 1 },
        block: Dim3 { x: 32, y: 1, z: 1 },
        stream: 9,
        ..Default::default()
    };
    let ex = rec(1, "cuLaunchKernelEx", vec![Value::LaunchConfig(cfg), Value::Handle(HandleKind::Function, 1)]);
    assert_eq!(stream_of(&ex), Some(9), "cuLaunchKernelEx runs on its configuration's stream");
}

#[test]
fn the_key_leaves_out_what_varies_between_repetitions() {
    let a = vec![upload(10, 5, 0xaaaa), launch(11, 5, 1), download(12, 0x5000)];
    let mut b = vec![upload(90, 5, 0xbbbb), launch(91, 5, 1), download(92, 0x9000)];
    b[1].status = 0;
    assert_eq!(key(&a), key(&b), "new uploaded bytes, new host buffers, new sequence numbers: the same piece");
    assert!(a.iter().zip(&b).all(|(x, y)| same(x, y)));
    // What must be equal: a kernel parameter, an address, a size, a stream.
    let mut c = b.clone();
    c[1] = launch(91, 5, 2);
    assert_ne!(key(&a), key(&c));
    assert!(!same(&a[1], &c[1]));
    let mut d = b.clone();
    d[0].args[0] = Value::DevPtr(0x7e00_0000_0040);
    assert_ne!(key(&a), key(&d));
    assert!(!same(&a[0], &d[0]));
    let mut e = b.clone();
    e[0].args[1] = Value::Blob(BlobRef { hash: Hash128(0xaaaa), len: 65 });
    assert_ne!(key(&a), key(&e), "an upload of another length is another piece");
    assert_ne!(key(&a), key(&[upload(10, 5, 0xaaaa), launch(11, 6, 1), download(12, 0)]));
    assert_ne!(key(&a), key(&a[..2]), "a shorter run is another piece");
}

#[test]
fn pieces_are_cut_by_other_calls_other_streams_and_the_limit() {
    let mut asm = Assembler::default();
    let mut out = Vec::new();
    let mut seq = 0;
    let mut next = || {
        seq += 1;
        seq
    };
    for _ in 0..3 {
        asm.push(launch(next(), 5, 0), &mut out);
    }
    assert!(out.is_empty(), "an open piece is held");
    asm.push(sync(next()), &mut out);
    assert!(matches!(&out[..], [Cut::Piece(p), Cut::Single(s)] if p.len() == 3 && s.seq == 4));
    out.clear();
    asm.push(launch(next(), 5, 0), &mut out);
    asm.push(launch(next(), 7, 0), &mut out);
    assert!(matches!(&out[..], [Cut::Piece(p)] if p.len() == 1 && p[0].seq == 5), "another stream ends a piece");
    out.clear();
    for _ in 1..MAX_RECORDS {
        asm.push(launch(next(), 7, 0), &mut out);
    }
    assert!(matches!(&out[..], [Cut::Piece(p)] if p.len() == MAX_RECORDS), "the limit ends a piece");
    out.clear();
    asm.push(launch(next(), 7, 0), &mut out);
    assert_eq!(asm.held(), 1);
    asm.finish(&mut out);
    assert!(matches!(&out[..], [Cut::Piece(p)] if p.len() == 1));
    assert_eq!(asm.held(), 0);
}

#[test]
fn repetitions_cut_the_same_way_with_the_same_keys() {
    // Two repetitions of 40 launches, a download and a wait, with other sequence numbers and
    // host buffers: the same cuts, the same keys.
    let make = |base: u64| {
        let mut v: Vec<CallRecord> = (0..40).map(|i| launch(base + i, 5, (i % 3) as u8)).collect();
        v.push(download(base + 40, base));
        v.push(sync(base + 41));
        v
    };
    let keys = |recs: Vec<CallRecord>| {
        let mut asm = Assembler::default();
        let mut out = Vec::new();
        for r in recs {
            asm.push(r, &mut out);
        }
        out.iter()
            .map(|c| match c {
                Cut::Piece(p) => key(p),
                Cut::Single(s) => Hash128(u128::from(s.function.api().map_or(0, |f| f.id.0))),
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(keys(make(100)), keys(make(5000)));
    assert_eq!(keys(make(100)).len(), 3, "32 launches, then 8 launches and the download, then the wait");
}

#[test]
fn a_reference_stands_for_the_template_with_this_repetitions_numbers_and_uploads() {
    let template = vec![upload(10, 5, 0xaaaa), launch(11, 5, 1), download(12, 0x5000)];
    let new = BlobRef { hash: Hash128(0xcccc), len: 64 };
    let r = PieceRef { key: key(&template), first_seq: 500, records: 3, payloads: vec![new] };
    let recs = r.records(&template).unwrap();
    assert_eq!(recs.iter().map(|r| r.seq).collect::<Vec<_>>(), [500, 501, 502]);
    assert_eq!(payload(&recs[0]), Some(new));
    assert_eq!(key(&recs), key(&template), "the same piece");
    assert!(recs.iter().zip(&template).all(|(a, b)| same(a, b)));
    // What does not fit the template is no piece.
    let wrong_len = PieceRef { payloads: vec![BlobRef { hash: Hash128(1), len: 65 }], ..r.clone() };
    assert!(wrong_len.records(&template).is_none(), "an upload of another length");
    assert!(PieceRef { payloads: vec![], ..r.clone() }.records(&template).is_none(), "an upload missing");
    assert!(PieceRef { payloads: vec![new, new], ..r.clone() }.records(&template).is_none(), "an upload too many");
    assert!(PieceRef { records: 4, ..r.clone() }.records(&template).is_none(), "another length");
    assert!(PieceRef { first_seq: u64::MAX, ..r }.records(&template).is_none(), "sequence numbers past the end");
}

#[test]
fn the_shape_leaves_out_device_addresses_and_parameter_bytes_but_not_geometry_or_sizes() {
    let piece = |dst: u64, param: u8, blocks: u64| -> Vec<CallRecord> {
        let mut up = sample::upload(1, 0, 7);
        up.args[0] = Value::DevPtr(dst);
        vec![up, sample::launch_blocks(2, 0, param, blocks)]
    };
    let a = piece(0x7e00_0000_0000, 1, 4);
    let b = piece(0x7e00_0000_0400, 9, 4);
    assert_ne!(key(&a), key(&b));
    assert_eq!(shape_key(&a), shape_key(&b));
    assert!(a.iter().zip(&b).all(|(x, y)| same_shape(x, y)) && !same(&a[1], &b[1]));
    let c = piece(0x7e00_0000_0000, 1, 8);
    assert_ne!(shape_key(&a), shape_key(&c), "another grid is another graph");
    assert!(!same_shape(&a[1], &c[1]));
    let mut d = a.clone();
    if let Value::KernelParams(kp) = &mut d[1].args[9] {
        kp.bytes.push(0);
    }
    assert_ne!(shape_key(&a), shape_key(&d), "another parameter length is another shape");
}
