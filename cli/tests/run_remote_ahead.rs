//! Records go to the server while the program works, not at its next synchronization: the
//! client's flusher sends a segment shortly after its first record and it leaves the
//! connection's buffer at once (it once waited there for the synchronization, so the executor
//! could not run ahead of the program). `recorder/tests/fake/ahead.c` launches three times,
//! works 60 ms, then synchronizes; the executor's timeline (`GPULESS_EXECUTOR_TIMELINE`) must
//! show the launches arriving well before the synchronization.

mod serve_harness;
mod support;

use serve_harness::{run_client, Server};

#[test]
fn launches_reach_the_executor_before_the_synchronization_that_follows_them() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "ahead", &["-lcuda"]);
    let timeline = dir.path().join("timeline");
    std::fs::create_dir(&timeline).unwrap();
    let srv = Server::start(dir.path(), &libdir, &[], &[("GPULESS_EXECUTOR_TIMELINE", timeline.to_str().unwrap())]);
    let ran = run_client(&srv, &prog);
    assert!(ran.ok, "stdout:\n{}\nstderr:\n{}", ran.stdout, ran.stderr);
    // The executor writes its timeline when the session ends (the client has exited).
    let mut lines = Vec::new();
    for _ in 0..100 {
        lines = std::fs::read_dir(&timeline)
            .unwrap()
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
            .flat_map(|t| t.lines().map(str::to_string).collect::<Vec<_>>())
            .collect();
        if !lines.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let segments: Vec<serde_json::Value> = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get("segment_at_us").is_some())
        .collect();
    let at = |v: &serde_json::Value| v["segment_at_us"].as_i64().unwrap();
    let answered: Vec<&serde_json::Value> = segments.iter().filter(|v| v["answer_us"].as_i64() >= Some(0)).collect();
    // The last two answers are the program's two synchronizations (the code load before
    // them waits for its status too).
    assert!(answered.len() >= 2, "two synchronizations answered: {lines:#?}");
    let (first, second) = (at(answered[answered.len() - 2]), at(answered[answered.len() - 1]));
    let ahead: Vec<i64> = segments
        .iter()
        .filter(|v| v["answer_us"].as_i64() == Some(-1))
        .map(at)
        .filter(|&t| t > first && t < second)
        .collect();
    let earliest = ahead.iter().min().copied();
    assert!(
        earliest.is_some_and(|t| second - t >= 30_000),
        "the launches arrived {:?} µs before the synchronization (the program worked 60 ms in between): {lines:#?}",
        earliest.map(|t| second - t)
    );
}
