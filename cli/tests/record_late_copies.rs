//! A recording holds what the device received from pinned memory that a host function wrote
//! after the upload was queued (issue 35, `recorder/src/late.rs`): `recorder/tests/fake/late_copy.c`
//! on the stand-in driver in its GPU-like mode (host functions and the uploads after them run
//! at the synchronization), recorded; the replay (the stand-in running everything at once) must
//! verify the download with no mismatch — the upload's recorded bytes are the function's.

mod support;

use std::process::Command;

#[test]
fn an_upload_behind_a_host_function_is_recorded_with_the_bytes_the_stream_read() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "late_copy", &["-l:libcuda.so.1"]);
    let native =
        Command::new(&prog).env("LD_LIBRARY_PATH", &libdir).env("FAKE_CUDA_DEFER_HOSTFN", "1").output().unwrap();
    assert!(native.status.success(), "{native:?}");
    assert_eq!(String::from_utf8_lossy(&native.stdout), "device got: 7 14\n", "the stand-in's GPU-like order");

    let trace = dir.path().join("l.gl");
    let recorded = support::record(&prog, &libdir, &trace, &[("FAKE_CUDA_DEFER_HOSTFN", "1")]);
    assert_eq!(recorded.as_bytes(), native.stdout, "recording changed the program");
    let (code, report, shown) = support::replay_json(&libdir, &trace, &[]);
    assert_eq!(report["mismatches"], serde_json::json!([]), "{shown}");
    assert_eq!(report["results_verified"], 1, "{shown}");
    assert_eq!(code, 0, "{shown}");
}

/// The graph form (`recorder/src/late_graph.rs`): an upload captured after a host function reads
/// what the function wrote at every launch; each launch's record carries those bytes and the
/// replay verifies every download.
#[test]
fn a_graph_upload_behind_a_captured_host_function_is_recorded_at_every_launch() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "late_graph", &["-l:libcuda.so.1"]);
    let native = Command::new(&prog).env("LD_LIBRARY_PATH", &libdir).output().unwrap();
    assert!(native.status.success(), "{native:?}");
    assert_eq!(String::from_utf8_lossy(&native.stdout), "device got: 10 20 30\n");

    let trace = dir.path().join("g.gl");
    let recorded = support::record(&prog, &libdir, &trace, &[]);
    assert_eq!(recorded.as_bytes(), native.stdout, "recording changed the program");
    let (code, report, shown) = support::replay_json(&libdir, &trace, &[]);
    assert_eq!(report["mismatches"], serde_json::json!([]), "{shown}");
    assert_eq!(report["results_verified"], 3, "{shown}");
    assert_eq!(code, 0, "{shown}");
}

/// A captured download completed only after its stream was destroyed (`destroyed_stream.c`):
/// the replay waits for it through the context, not the freed stream (which the stand-in refuses
/// as the driver's freed handle), and verifies it.
#[test]
fn a_download_whose_stream_was_destroyed_is_verified_at_the_context_synchronization() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "destroyed_stream", &["-l:libcuda.so.1"]);
    let native = Command::new(&prog).env("LD_LIBRARY_PATH", &libdir).output().unwrap();
    assert!(native.status.success(), "{native:?}");
    assert_eq!(String::from_utf8_lossy(&native.stdout), "downloaded: 42\n");
    let trace = dir.path().join("d.gl");
    let recorded = support::record(&prog, &libdir, &trace, &[]);
    assert_eq!(recorded.as_bytes(), native.stdout, "recording changed the program");
    let (code, report, shown) = support::replay_json(&libdir, &trace, &[]);
    assert_eq!(report["mismatches"], serde_json::json!([]), "{shown}");
    assert!(report["results_verified"].as_u64() >= Some(1), "{shown}");
    assert_eq!(code, 0, "{shown}");
}
