//! Blob upload throughput to a `gpuless serve`: `upload-bench ADDR MIB [RUNS]` opens a session,
//! sends a blob of MIB mebibytes of fresh bytes (a new hash each run, so it always travels),
//! asks whether the server holds it (the round trip that ends when the executor has every byte
//! and checked its hash) and prints the rate. Any server works; CI's stand-in driver is enough
//! (the blob is never executed).

use std::time::{Duration, Instant};

use gpuless_traces::protocol::{self, Endpoint, Hello, PartitionRequest, Priority};
use gpuless_traces::Hash128;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: upload-bench ADDR MIB [RUNS]");
        std::process::exit(2);
    }
    let mib: usize = args[2].parse().expect("MIB");
    let runs: usize = args.get(3).map_or(3, |r| r.parse().expect("RUNS"));
    let mut bytes = vec![0u8; mib << 20];
    for (i, c) in bytes.chunks_mut(8).enumerate() {
        c.copy_from_slice(&(i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes()[..c.len()]);
    }
    for run in 0..runs {
        bytes[0] = bytes[0].wrapping_add(1 + run as u8);
        let hash = Hash128::of(&bytes);
        let mut c = protocol::connect(&Endpoint::parse(&args[1]), Duration::from_secs(10)).expect("connect");
        c.set_timeout(Some(Duration::from_secs(60))).expect("timeout");
        let hello = Hello {
            protocol: protocol::PROTOCOL_VERSION,
            tool: "upload-bench".into(),
            token: std::env::var("GPULESS_TOKEN").unwrap_or_default(),
            partition: PartitionRequest::Whole,
            priority: Priority::LatencyCritical,
            arena_base: 0,
            arena_size: 0,
            recorded_sm: 0,
            program: String::new(),
            whole_segments: false,
            gpu: None,
            devices: 0,
            more_gpus: Vec::new(),
        };
        c.handshake(&hello).expect("session");
        let t0 = Instant::now();
        c.send_blob(hash, &bytes).expect("send");
        let held = c.query_blobs(&[hash]).expect("query");
        let s = t0.elapsed().as_secs_f64();
        assert_eq!(held, [true], "the server holds the blob");
        println!(
            "{} MiB in {:.3} s: {:.2} GB/s (written in {:.3} s)",
            mib,
            s,
            bytes.len() as f64 / s / 1e9,
            c.traffic.blob_send_s
        );
        let _ = c.close();
    }
}
