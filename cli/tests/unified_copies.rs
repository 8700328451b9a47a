//! Copies between unified addresses (`cuMemcpy`, `cuMemcpyAsync`; what the runtime's
//! `cudaMemcpyDefault` reaches) in every direction, end to end on the stand-in driver: the
//! program `recorder/tests/fake/unified.c` runs natively, under `gpuless record`, in `gpuless
//! replay` and through `gpuless run --remote`. The trace must carry a host source's bytes and a
//! host destination's result (for the async copy too, hashed at its synchronization); the
//! replay must compare every result and catch a device computing others; the client must send
//! the bytes up and write what comes back, so the program prints what it prints natively, and
//! wait exactly where the analyzer's `gpuless` policy says a client waits.

mod serve_harness;
mod support;

use std::path::Path;
use std::process::Command;

use gpuless_traces::{BlobRef, Hash128, ReaderOptions, TraceReader, Value};
use serve_harness::{run_client, Server};

fn run(prog: &Path, libdir: &Path, trace: Option<&Path>) -> String {
    let mut cmd = Command::new(prog);
    cmd.env("LD_LIBRARY_PATH", libdir).env_remove("FAKE_CUDA_SCALE_BIAS");
    if let Some(t) = trace {
        cmd.env("LD_PRELOAD", support::common::recorder_lib()).env("GPULESS_TRACE", t);
    }
    let out = cmd.output().expect("run the program");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn replay(libdir: &Path, trace: &Path, bias: Option<&str>) -> (i32, serde_json::Value, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpuless"));
    cmd.arg("replay").arg(trace).arg("--json").env("LD_LIBRARY_PATH", libdir).env_remove("FAKE_CUDA_SCALE_BIAS");
    if let Some(b) = bias {
        cmd.env("FAKE_CUDA_SCALE_BIAS", b);
    }
    let out = cmd.output().expect("run gpuless replay");
    let shown = format!("{out:?}");
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("no JSON report ({e}): {shown}"));
    (out.status.code().unwrap_or(-1), report, shown)
}

#[test]
fn copies_between_unified_addresses_are_recorded_replayed_and_run_remotely() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "unified", &["-ldl"]);
    let native = run(&prog, &libdir, None);
    assert_eq!(native.lines().count(), 5, "{native}");
    let trace = dir.path().join("u.gl");
    assert_eq!(run(&prog, &libdir, Some(&trace)), native, "recording changed the program");

    let reader = TraceReader::open(&trace, ReaderOptions { blob_data: true, check_blob_refs: true }).unwrap();
    let (calls, blobs) = reader.read_all().unwrap();
    let copies: Vec<_> = calls.iter().filter(|c| c.function.name().starts_with("cuMemcpy")).collect();
    let names: Vec<&str> = copies.iter().map(|c| c.function.name()).collect();
    assert_eq!(
        names,
        [
            "cuMemcpy",
            "cuMemcpy",
            "cuMemcpy",
            "cuMemcpyAsync",
            "cuMemcpyAsync",
            "cuMemcpy",
            "cuMemcpy2DAsync",
            "cuMemcpy"
        ]
    );
    let input: Vec<u8> = (0..64).flat_map(|i| ((i % 7) as f32 + 0.5).to_le_bytes()).collect();
    let is_dev = |v: &Value| matches!(v, Value::DevPtr(_));
    let is_host = |v: &Value| matches!(v, Value::HostPtr(_));
    let digest = |v: &Value| matches!(v, Value::Digest(BlobRef { len: 256, .. }));
    // Host to device: the source's bytes are stored.
    let Value::Blob(b) = &copies[0].args[1] else { panic!("host source not stored: {:?}", copies[0]) };
    assert_eq!(blobs[&b.hash], input);
    assert!(is_dev(&copies[0].args[0]) && copies[0].results == [Value::Null], "{:?}", copies[0]);
    // Device to host: the destination's address and the result's hash.
    assert!(
        is_host(&copies[1].args[0]) && is_dev(&copies[1].args[1]) && digest(&copies[1].results[0]),
        "{:?}",
        copies[1]
    );
    // Device to device: two addresses, nothing brought back.
    assert!(is_dev(&copies[2].args[0]) && is_dev(&copies[2].args[1]) && copies[2].results == [Value::Null]);
    // Async device to host: hashed when its synchronization came.
    assert!(is_host(&copies[3].args[0]) && digest(&copies[3].results[0]), "{:?}", copies[3]);
    // Async host to device, then the sync copy back, then host to host (the source's bytes,
    // whose hash is the result).
    assert!(matches!(copies[4].args[1], Value::Blob(_)) && is_dev(&copies[4].args[0]), "{:?}", copies[4]);
    assert!(is_host(&copies[5].args[0]) && digest(&copies[5].results[0]));
    // The async 2D copy into host rows (a unified destination): the packed rows' hash, taken at
    // the synchronization — the same bytes the synchronous copy before it brought back.
    assert!(digest(&copies[6].results[0]), "{:?}", copies[6]);
    assert_eq!(copies[6].results, copies[5].results);
    let plain = &copies[7];
    assert!(matches!(plain.args[1], Value::Blob(_)) && is_host(&plain.args[0]), "{plain:?}");
    assert_eq!(plain.results, [Value::Digest(BlobRef { hash: Hash128::of(&input), len: 256 })]);

    // Replayed: the five results compared, equal; a device computing others is caught.
    let (code, report, shown) = replay(&libdir, &trace, None);
    assert_eq!(code, 0, "{shown}");
    assert_eq!(report["mismatches"], serde_json::json!([]), "{shown}");
    assert_eq!(report["results_verified"], 5, "{shown}");
    assert_eq!(report["results_unverified"], 0, "{shown}");
    let (code, report, shown) = replay(&libdir, &trace, Some("1"));
    assert_eq!(code, 3, "{shown}");
    let mismatches = report["mismatches"].as_array().unwrap_or_else(|| panic!("{shown}"));
    assert_eq!(mismatches.len(), 4, "the four results the kernel computed: {shown}");

    // Through the client, against a server on the stand-in: the same output.
    let srv = Server::start(dir.path(), &libdir, &[], &[]);
    let ran = run_client(&srv, &prog);
    assert!(ran.ok, "stdout:\n{}\nstderr:\n{}", ran.stdout, ran.stderr);
    assert_eq!(ran.stdout, native, "stderr:\n{}", ran.stderr);
    // The client waited where the copies brought bytes to the host (three synchronous copies
    // and the synchronization of the async one): the analyzer's `gpuless` policy, on the local
    // recording, says the same.
    let stats = ran.stats();
    assert_eq!(stats["waits_by_call"]["cuMemcpy"], 3, "{stats}");
    let policy = support::gpuless_policy(&trace);
    assert_eq!(policy["syncs"], stats["waits"], "the policy's synchronizations, the client's waits: {policy} {stats}");
}
