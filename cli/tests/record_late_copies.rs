//! A recording holds what the device received from host memory a host function wrote after the
//! copy was queued (issue 35): `recorder/tests/fake/late_copy.c` on the stand-in driver in its
//! GPU-like mode (host functions and the uploads after them run at the synchronization,
//! `recorder/src/late.rs`) and `late_graph.c` (a graph's upload behind a captured host function,
//! `recorder/src/late_graph.rs`), recorded; the replay (the stand-in running everything at once)
//! must verify every download with no mismatch — the uploads' recorded bytes are the functions'.
//! Also a captured download completed after its stream was destroyed (`destroyed_stream.c`).

mod support;

use std::process::Command;

/// Runs `name` natively (its output must be `stdout`), records it (the same output), replays the
/// trace with `--json`: the replay's exit code, its report and what to show on failure. `env`
/// goes to the native and the recorded run.
fn record_and_replay(name: &str, env: &[(&str, &str)], stdout: &str) -> (i32, serde_json::Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), name, &["-l:libcuda.so.1"]);
    let native = Command::new(&prog).env("LD_LIBRARY_PATH", &libdir).envs(env.iter().copied()).output().unwrap();
    assert!(native.status.success(), "{native:?}");
    assert_eq!(String::from_utf8_lossy(&native.stdout), stdout);
    let trace = dir.path().join("t.gl");
    let recorded = support::record(&prog, &libdir, &trace, env);
    assert_eq!(recorded.as_bytes(), native.stdout, "recording changed the program");
    let (code, report, shown) = support::replay_json(&libdir, &trace, &[]);
    assert_eq!(report["mismatches"], serde_json::json!([]), "{shown}");
    (code, report, shown)
}

#[test]
fn an_upload_behind_a_host_function_is_recorded_with_the_bytes_the_stream_read() {
    // The stand-in's GPU-like order: the function ran before the upload read its source.
    let (code, report, shown) =
        record_and_replay("late_copy", &[("FAKE_CUDA_DEFER_HOSTFN", "1")], "device got: 7 14\n");
    assert_eq!(report["results_verified"], 1, "{shown}");
    assert_eq!(code, 0, "{shown}");
}

/// The graph form: an upload captured after a host function reads what the function wrote at
/// every launch; each launch's record carries those bytes and the replay verifies every download.
#[test]
fn a_graph_upload_behind_a_captured_host_function_is_recorded_at_every_launch() {
    let (code, report, shown) = record_and_replay("late_graph", &[], "device got: 10 20 30\n");
    assert_eq!(report["results_verified"], 3, "{shown}");
    assert_eq!(code, 0, "{shown}");
}

/// A captured download completed only after its stream was destroyed: the replay waits for it
/// through the context, not the freed stream (which the stand-in refuses as the driver's freed
/// handle), and verifies it.
#[test]
fn a_download_whose_stream_was_destroyed_is_verified_at_the_context_synchronization() {
    let (code, report, shown) = record_and_replay("destroyed_stream", &[], "downloaded: 42\n");
    assert!(report["results_verified"].as_u64() >= Some(1), "{shown}");
    assert_eq!(code, 0, "{shown}");
}
