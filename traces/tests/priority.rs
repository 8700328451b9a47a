//! The writer's compression threads run beside the recorded program at the lowest priority,
//! a bounded number of them (issue 4: a recorded hot loop must stay within 5% of native).

mod common;

use gpuless_traces::{default_compression_threads, TraceWriter, WriterOptions};

/// (name, nice) of every thread of this process.
fn threads() -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc/self/task").expect("/proc/self/task").flatten() {
        let Ok(s) = std::fs::read_to_string(e.path().join("stat")) else { continue };
        let (Some(a), Some(b)) = (s.find('('), s.rfind(')')) else { continue };
        let name = s[a + 1..b].to_string();
        // Fields after the name start at field 3 (state); nice is field 19.
        let nice = s[b + 2..].split_whitespace().nth(16).and_then(|v| v.parse().ok()).unwrap_or(i64::MIN);
        out.push((name, nice));
    }
    out
}

#[test]
fn compression_threads_lower_their_priority() {
    let opts = WriterOptions { compression_threads: 3, compression_nice: 19, ..WriterOptions::default() };
    let buf = common::SharedBuf::default();
    let w = TraceWriter::new(buf, &gpuless_traces::synthetic::synthetic_meta("nice"), opts).expect("writer");
    // The threads set their priority as they start: wait for all three.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let zstd = loop {
        let z: Vec<_> = threads().into_iter().filter(|(n, _)| n.starts_with("gpuless-trace-z")).collect();
        if (z.len() >= 3 && z.iter().all(|(_, nice)| *nice == 19)) || std::time::Instant::now() > deadline {
            break z;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    w.finish().expect("finish");
    assert!(zstd.len() >= 3, "compression threads: {zstd:?}");
    assert!(zstd.iter().all(|(_, nice)| *nice == 19), "every compression thread at nice 19: {zstd:?}");
    // The calling thread keeps its priority.
    let me = std::fs::read_to_string("/proc/thread-self/stat").expect("stat");
    let nice: i64 = me[me.rfind(')').expect(")") + 2..].split_whitespace().nth(16).expect("nice").parse().expect("num");
    assert_eq!(nice, 0, "the recording thread is not lowered");
}

#[test]
fn compression_threads_are_a_bounded_share_of_the_cpus() {
    let n = default_compression_threads();
    let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
    assert!((1..=4).contains(&n), "{n} threads");
    assert!(n <= cpus.max(1), "{n} threads on {cpus} CPUs");
    assert_eq!(WriterOptions::default().compression_threads, n);
    assert_eq!(WriterOptions::default().compression_nice, 19);
}
