//! Round trips of every message, and decoding that never panics on cut or damaged payloads.

use super::*;

fn samples() -> Vec<Message> {
    vec![
        Message::Hello(Hello {
            protocol: 1,
            tool: "gpuless 0.1.0".into(),
            token: "s3cret".into(),
            partition: PartitionRequest::Profile("3g.71gb".into()),
            priority: Priority::BestEffort,
            arena_base: 0x6400_0000_0000,
            arena_size: 1 << 40,
            recorded_sm: 90,
            program: "resnet50".into(),
            whole_segments: true,
            gpu: Some(1),
            devices: 2,
            more_gpus: vec![0],
        }),
        Message::Welcome(Box::new(Welcome {
            session: 7,
            executor_pid: 1234,
            server: "gpuless 0.1.0".into(),
            partition: PartitionInfo { kind: "emulated".into(), sms: 66, ..Default::default() },
            device: DeviceDescription {
                name: "NVIDIA H100".into(),
                uuid: [7; 16],
                total_mem: 80 << 30,
                nvml: NvmlFacts {
                    total_mem: (80 << 30) + (480 << 20),
                    driver_version: "580.159.04".into(),
                    nvml_version: "13.580.159.04".into(),
                },
                driver_version: 13000,
                attributes: vec![(16, 132), (75, 9), (76, 0)],
            },
            cached_execution: true,
            gpu: 1,
            more: MoreDevices {
                devices: vec![DeviceDescription { name: "NVIDIA H100".into(), uuid: [8; 16], ..Default::default() }],
                gpus: vec![0],
                peers: vec![
                    PeerFact { src: 0, dst: 1, attr: 0, value: 1 },
                    PeerFact { src: 1, dst: 0, attr: 1, value: 0 },
                ],
                links: vec![NvLinkFact {
                    device: 1,
                    link: 17,
                    remote_bus_id: "00000000:06:00.0".into(),
                    capabilities: 0b10_0001,
                    remote_type: 2,
                }],
            },
            rings: true,
        })),
        Message::Refused { code: code::AUTH, message: "wrong token".into() },
        Message::Segment { want_answer: true, zstd: false, records: vec![1, 2, 3] },
        Message::Segment { want_answer: false, zstd: true, records: vec![4] },
        Message::Answer(Answer {
            through_seq: 99,
            executed: 64,
            outputs: vec![(98, vec![9; 4096])],
            errors: vec![CallError { seq: 97, function: "cuLaunchKernel".into(), code: 700, message: "x".into() }],
            exec_us: 12,
            queries: vec![
                QueryResult { seq: 96, status: 0, values: vec![u64::from(1.5f32.to_bits())] },
                QueryResult { seq: 95, status: 600, values: vec![] },
            ],
            pieces: vec![Hash128(3), Hash128(u128::MAX)],
            printed: b"from a kernel\n".to_vec(),
        }),
        Message::OutputPart { seq: 98, total: 10, offset: 4, bytes: vec![1, 2, 3] },
        Message::HostCall(HostCall { ids: vec![17, 40], outputs: vec![(12, vec![5, 6, 7])] }),
        Message::HostCall(HostCall::default()),
        Message::HostReturned { ids: vec![17, 40], data: vec![(40, 0, vec![9; 5])] },
        Message::RingOffer { capacity: 4 << 20 },
        Message::RingReady,
        Message::BlobQuery(vec![Hash128(1), Hash128(u128::MAX)]),
        Message::BlobHave(vec![true, false]),
        Message::BlobData { hash: Hash128(5), total: 10, offset: 4, bytes: vec![1; 6] },
        Message::BlobShm(vec![(Hash128(7), 0, 100), (Hash128(8), 128, 4096)]),
        Message::Close,
        Message::Closed(SessionStats { records: 3, peak_memory: 9, ..Default::default() }),
        Message::Closed(SessionStats {
            pieces_graph: 26,
            pieces_captured: 3,
            pieces_eager: 3,
            records_graph: 174,
            ..Default::default()
        }),
        Message::Piece(crate::protocol::piece::PieceRef {
            key: Hash128(77),
            first_seq: 1_000_000,
            records: 6,
            payloads: vec![crate::model::BlobRef { hash: Hash128(5), len: 602_112 }],
        }),
        Message::Error { code: code::EXECUTOR, message: "gone".into() },
        Message::Deploy { name: "resnet50".into(), hash: Hash128(u128::MAX - 3), len: 97 << 20 },
        Message::Deployed { name: "resnet50".into(), manifest: "{\"format\": 1}".into() },
        Message::Invoke { name: "resnet50".into(), verify: false, inputs: vec![3; 24] },
        Message::Invoke { name: "f".into(), verify: true, inputs: Vec::new() },
        Message::Outputs(Outputs {
            prepare_us: 81_000,
            run_us: 1_900,
            graph: true,
            verified: 1,
            mismatches: vec!["call #155 cuMemcpyDtoH: 40000 bytes differ".into()],
            outputs: vec![7; 40],
        }),
        Message::Outputs(Outputs::default()),
    ]
}

#[test]
fn every_message_round_trips() {
    for m in samples() {
        let p = m.encode();
        assert_eq!(Message::decode(m.kind(), m.flags(), &p).unwrap(), m, "{}", m.name());
    }
    let d = match &samples()[1] {
        Message::Welcome(w) => w.device.clone(),
        _ => unreachable!(),
    };
    assert_eq!((d.sm(), d.sm_count()), (90, 132));
}

#[test]
fn every_cut_and_every_flipped_byte_is_an_error_or_a_message_never_a_panic() {
    for m in samples() {
        let p = m.encode();
        for cut in 0..p.len() {
            // A cut payload never decodes as the same message.
            if let Ok(d) = Message::decode(m.kind(), m.flags(), &p[..cut]) {
                assert_ne!(d, m);
            }
        }
        for i in 0..p.len() {
            let mut q = p.clone();
            q[i] ^= 0xff;
            let _ = Message::decode(m.kind(), m.flags(), &q);
        }
    }
    assert!(matches!(Message::decode(99, 0, &[]), Err(ProtocolError::UnknownKind(99))));
    // A count that the payload cannot hold is refused before anything is allocated.
    let mut p = Put::default();
    p.u32(u32::MAX);
    let e = Message::decode(kind::BLOB_QUERY, 0, &p.0).unwrap_err().to_string();
    assert!(e.contains("elements announced"), "{e}");
    let e = Message::decode(
        kind::BLOB_DATA,
        0,
        &Message::BlobData { hash: Hash128(1), total: 2, offset: 1, bytes: vec![0; 5] }.encode(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("outside the blob"), "{e}");
}

#[test]
fn partition_requests_parse() {
    assert_eq!(PartitionRequest::parse("whole"), PartitionRequest::Whole);
    assert_eq!(PartitionRequest::parse("sms:16"), PartitionRequest::Sms(16));
    assert_eq!(PartitionRequest::parse("1g.18gb"), PartitionRequest::Profile("1g.18gb".into()));
}

#[test]
fn function_messages_keep_their_fields_and_refuse_bad_flags_and_cut_payloads() {
    for (k, n) in
        [(kind::DEPLOY, "Deploy"), (kind::DEPLOYED, "Deployed"), (kind::INVOKE, "Invoke"), (kind::OUTPUTS, "Outputs")]
    {
        assert_eq!(kind_name(k), n);
    }
    // The inputs and outputs are the payload's rest: every byte kept, none added.
    let m = Message::Invoke { name: "f".into(), verify: true, inputs: vec![1, 2, 3] };
    let p = m.encode();
    assert_eq!(p.len(), 4 + 1 + 1 + 3);
    assert_eq!(invoke_request(&p).unwrap(), ("f".to_string(), true, &[1u8, 2, 3][..]));
    let mut bad = p.clone();
    bad[5] = 2;
    assert!(invoke_request(&bad).is_err());
    let e = Message::decode(kind::INVOKE, 0, &bad).unwrap_err().to_string();
    assert!(e.contains("verify flag 2"), "{e}");
    // A Deploy cut anywhere is an error naming the message.
    let p = Message::Deploy { name: "f".into(), hash: Hash128(9), len: 5 }.encode();
    for cut in 0..p.len() {
        let e = Message::decode(kind::DEPLOY, 0, &p[..cut]).unwrap_err().to_string();
        assert!(e.contains("bad Deploy message"), "{e}");
    }
    // An Outputs announcing more mismatches than its payload holds.
    let mut q = Put::default();
    q.u64(1).u64(2).u8(0).u64(0).u32(1000);
    let e = Message::decode(kind::OUTPUTS, 0, &q.0).unwrap_err().to_string();
    assert!(e.contains("elements announced"), "{e}");
}

/// A Hello from a client before `whole_segments` (no trailing byte) still decodes, as false.
#[test]
fn an_older_hello_without_its_last_byte_says_no_whole_segments() {
    let Message::Hello(h) = &samples()[0] else { panic!("the first sample is a Hello") };
    let mut bytes = Message::Hello(h.clone()).encode();
    // devices (4), the list of more GPUs (4 + 4 each)
    let tail = 8 + 4 * h.more_gpus.len();
    bytes.truncate(bytes.len() - tail);
    let one = Hello { devices: 0, more_gpus: Vec::new(), ..h.clone() };
    match Message::decode(kind::HELLO, 0, &bytes) {
        Ok(Message::Hello(old)) => assert_eq!(old, one),
        other => panic!("{other:?}"),
    }
    bytes.truncate(bytes.len() - 4);
    match Message::decode(kind::HELLO, 0, &bytes) {
        Ok(Message::Hello(old)) => assert_eq!(old, Hello { gpu: None, ..one.clone() }),
        other => panic!("{other:?}"),
    }
    assert_eq!(bytes.pop(), Some(1));
    match Message::decode(kind::HELLO, 0, &bytes) {
        Ok(Message::Hello(old)) => assert_eq!(old, Hello { whole_segments: false, gpu: None, ..one }),
        other => panic!("{other:?}"),
    }
}

/// A Welcome from a server before `gpu` (no trailing word) decodes as GPU 0; "any GPU" in a
/// Hello round-trips as `None`.
#[test]
fn a_welcome_without_its_gpu_says_gpu_0_and_a_hello_may_ask_for_any() {
    let Message::Welcome(w) = &samples()[1] else { panic!("the second sample is a Welcome") };
    let w = Welcome { gpu: 3, more: MoreDevices::default(), ..(**w).clone() };
    let mut bytes = Message::Welcome(Box::new(w.clone())).encode();
    bytes.truncate(bytes.len() - 1 - 16 - 4);
    match Message::decode(kind::WELCOME, 0, &bytes) {
        Ok(Message::Welcome(old)) => assert_eq!(*old, Welcome { gpu: 0, rings: false, ..w }),
        other => panic!("{other:?}"),
    }
    let Message::Hello(h) = &samples()[0] else { panic!("the first sample is a Hello") };
    let any = Hello { gpu: None, ..h.clone() };
    assert_eq!(Message::decode(kind::HELLO, 0, &Message::Hello(any.clone()).encode()).ok(), Some(Message::Hello(any)));
}
