//! `gpuless replay` end to end without a GPU: the recorder's stand-in driver
//! (`recorder/tests/fake/libcuda.c`) and its driver-API program are built, the program is
//! recorded with the real preload library, and the `gpuless` binary replays the trace on the
//! same stand-in (cudarc loads it from `LD_LIBRARY_PATH`). The stand-in's memory and kernel are
//! real enough that the replay's device-to-host results are compared with the recording's.

mod support;

use std::path::Path;
use std::process::Command;

/// `gpuless replay TRACE --json` on the stand-in (`support::replay_json`).
fn replay(libdir: &Path, trace: &Path, env: &[(&str, &str)]) -> (i32, serde_json::Value, String) {
    support::replay_json(libdir, trace, env)
}

/// The trace's records of function `name`.
fn records_named(trace: &Path, name: &str) -> Vec<gpuless_traces::CallRecord> {
    gpuless_traces::TraceReader::open(trace, gpuless_traces::ReaderOptions::default())
        .unwrap()
        .flat_map(|c| match c.unwrap().body {
            gpuless_traces::ChunkBody::Calls(c) => c,
            _ => Vec::new(),
        })
        .filter(|c| c.function.name() == name)
        .collect()
}

fn count(report: &serde_json::Value, key: &str) -> u64 {
    report[key].as_u64().unwrap_or_else(|| panic!("no {key} in {report}"))
}

#[test]
fn replays_a_recorded_program_on_the_stand_in_and_verifies_its_results() {
    let dir = tempfile::tempdir().unwrap();
    let trace = support::record_stand_in(dir.path(), None);
    let (code, report, shown) = replay(dir.path(), &trace, &[]);
    assert_eq!(code, 0, "{shown}");
    assert_eq!(report["mismatches"], serde_json::json!([]), "{shown}");
    // cuMemcpyDtoH and cuMemcpyDtoHAsync: both hashed when recorded, both compared now.
    assert!(count(&report, "results_verified") >= 1, "{shown}");
    assert_eq!(count(&report, "results_verified"), 2, "{shown}");
    // The one allocation was served by the recorder's arena and re-created there.
    assert!(count(&report, "allocations_in_arena") >= 1, "{shown}");
    assert_eq!(count(&report, "allocations_translated"), 0, "{shown}");
    // cuLaunchKernel and cuLaunchKernelEx were executed, not skipped.
    assert_eq!(count(&report, "launches"), 2, "{shown}");
    assert_eq!(report["partition"]["kind"], "full", "{shown}");
}

#[test]
fn a_device_computing_other_results_is_a_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let trace = support::record_stand_in(dir.path(), None);
    // The same stand-in, whose kernel now adds 1 to every element it scales.
    let (code, report, shown) = replay(dir.path(), &trace, &[("FAKE_CUDA_SCALE_BIAS", "1")]);
    assert_eq!(code, 3, "a mismatch exits with 3: {shown}");
    let mismatches = report["mismatches"].as_array().unwrap_or_else(|| panic!("{shown}"));
    assert_eq!(mismatches.len(), 2, "{shown}");
    assert!(mismatches[0].as_str().is_some_and(|m| m.contains("cuMemcpyDtoH") && m.contains("scale")), "{shown}");
    assert_eq!(count(&report, "results_verified"), 0, "{shown}");
}

#[test]
fn an_error_at_the_replayers_synchronization_names_the_call_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let trace = support::record_stand_in(dir.path(), None);
    let out = Command::new(env!("CARGO_BIN_EXE_gpuless"))
        .arg("replay")
        .arg(&trace)
        .env("LD_LIBRARY_PATH", dir.path())
        .env_remove("FAKE_CUDA_SCALE_BIAS")
        .env("FAKE_CUDA_SYNC_FAULT", "1")
        .output()
        .expect("run gpuless replay");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    // A sequence number of the trace and the function recorded there, never u64::MAX.
    assert!(!err.contains("18446744073709551615"), "{err}");
    assert!(err.contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{err}");
    let named = err.split("call #").nth(1).and_then(|rest| rest.split_once(' ')).is_some_and(|(n, f)| {
        n.parse::<u64>().is_ok() && f.starts_with("cu") && f.contains("synchronization after it")
    });
    assert!(named, "{err}");
    assert!(err.contains("last kernels: scale"), "{err}");
}

/// A function the program took from a private export table (as cuFFT does), never from
/// `cuModuleGetFunction`: the recorder records where it comes from (`gpulessFunctionFound`:
/// its module and name, asked of the driver) and the replay launches it, verified.
#[test]
fn a_function_taken_without_a_recorded_call_is_found_and_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let trace = support::record_stand_in(dir.path(), Some("-14"));
    let found = records_named(&trace, gpuless_traces::model::FUNCTION_FOUND);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].args.get(1), Some(&gpuless_traces::Value::Str("wide".into())), "{found:?}");
    let (code, report, shown) = replay(dir.path(), &trace, &[]);
    assert_eq!(code, 0, "{shown}");
    assert_eq!(report["mismatches"], serde_json::json!([]), "{shown}");
    assert_eq!(count(&report, "launches"), 3, "{shown}");
    assert!(count(&report, "results_verified") >= 3, "{shown}");
}

/// A synchronous upload from the replayer's own bytes may still be in flight when the driver
/// returns (it returns once they are staged, `FAKE_CUDA_STAGED_HTOD`); the program's, from the
/// host memory it recorded, had landed. A launch on another stream that reads the destination
/// must see the upload: the replay waits for the legacy stream before giving another stream
/// work (`State::stream`).
#[test]
fn a_launch_on_another_stream_sees_the_synchronous_upload_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let trace = support::record_stand_in(dir.path(), Some("-20"));
    let (code, report, shown) = replay(dir.path(), &trace, &[("FAKE_CUDA_STAGED_HTOD", "1")]);
    assert_eq!(code, 0, "{shown}");
    assert_eq!(report["mismatches"], serde_json::json!([]), "{shown}");
    assert!(count(&report, "results_verified") >= 3, "{shown}");
}

/// Downloads into host memory registered for the device (`cudaHostRegisterMapped`, as
/// simpleStreams does; program.c mode -21): the replay re-creates the memory as device memory
/// at its address, and the downloads land there too, so what the host could read after the
/// synchronization (the recorder's `gpulessHostView`) is verified equal.
#[test]
fn downloads_into_registered_memory_reach_its_device_copy() {
    let dir = tempfile::tempdir().unwrap();
    let trace = support::record_stand_in(dir.path(), Some("-21"));
    let views = records_named(&trace, gpuless_traces::hostview::HOST_VIEW).len();
    assert!(views >= 1, "the recording holds no host view");
    let (code, report, shown) = replay(dir.path(), &trace, &[]);
    assert_eq!(code, 0, "{shown}");
    assert_eq!(report["mismatches"], serde_json::json!([]), "{shown}");
}

/// A call that does not return long after the recording's did (a kernel polling host memory
/// the trace cannot carry, as UnifiedMemoryPerf's latch; here the stand-in's launch made to take
/// 30 s) ends the replay with exit status 4, naming the call, instead of waiting for ever.
#[test]
fn a_call_that_does_not_return_ends_the_replay_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let trace = support::record_stand_in(dir.path(), None);
    let began = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_gpuless"))
        .arg("replay")
        .arg(&trace)
        .env("LD_LIBRARY_PATH", dir.path())
        .env("FAKE_CUDA_LAUNCH_US", "30000000")
        .env("GPULESS_REPLAY_STALL_S", "1")
        .env_remove("FAKE_CUDA_SCALE_BIAS")
        .output()
        .expect("run gpuless replay");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(said.contains("gpuless: replay stalled: call #") && said.contains("cuLaunchKernel"), "{said}");
    assert!(began.elapsed() < std::time::Duration::from_secs(20), "the watch ended it in {:?}", began.elapsed());
}

/// Two downloads on one stream into the same pinned buffer before one synchronization
/// (simpleStreams' rounds; program.c mode -22): the first copy's record carries the bytes it
/// brought, kept by a host function of the recorder's queued before the second copy, not the
/// second copy's bytes found at the synchronization — so the replay, which compares each copy as
/// it completes, verifies both.
#[test]
fn a_download_overwritten_before_its_synchronization_keeps_its_own_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let trace = support::record_stand_in(dir.path(), Some("-22"));
    let (code, report, shown) = replay(dir.path(), &trace, &[]);
    assert_eq!(code, 0, "{shown}");
    assert_eq!(report["mismatches"], serde_json::json!([]), "{shown}");
    assert!(count(&report, "results_verified") >= 4, "{shown}");
}
