//! The program's own virtual memory (issue 35), end to end on the stand-in driver:
//! `recorder/tests/fake/vmm.c` reserves a range, creates physical memory, maps it, grants
//! access, runs a kernel there and reads it back, and checks the driver's errors for maps it
//! refuses. Through `gpuless run --remote` the client chooses the reservation (a range of its
//! arena) and the executor maps there; under `gpuless record` the reservation is the arena's
//! too, so `gpuless replay` maps at the recorded addresses and verifies the result.

mod serve_harness;
mod support;

use serve_harness::{run_client, Server};

fn has(out: &str, err: &str, line: &str) {
    assert!(out.lines().any(|l| l == line), "no `{line}` in:\n{out}\n{err}");
}

#[test]
fn the_programs_own_vmm_runs_remotely_and_replays_at_its_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "vmm", &["-l:libcuda.so.1"]);

    // Through the client, driver hidden.
    let srv = Server::start(dir.path(), &libdir, &[], &[]);
    let ran = run_client(&srv, &prog);
    let (out, err) = (&ran.stdout, &ran.stderr);
    assert!(ran.ok, "stdout:\n{out}\nstderr:\n{err}");
    for line in [
        "granularity: 2 MiB",
        "reserved: aligned 1",
        "map outside the reservation: 1",
        "map past the allocation: 1",
        "map over a mapping: 1",
        "properties: type 1 location 1/0",
        "after kernel: 0 3 189",
        "copy into the unmapped half: 1",
        "release again: 400",
        "copy after the free: 1",
        "copy past the end of an allocation: 1",
        "done",
    ] {
        has(out, err, line);
    }
    assert!(!out.contains("map of no allocation: 0"), "{out}");
    assert!(!err.contains("not supported"), "{err}");

    // Recorded on the stand-in, replayed with every result verified.
    let trace = dir.path().join("v.gl");
    let rec_out = support::record(&prog, &libdir, &trace, &[]);
    has(&rec_out, "", "after kernel: 0 3 189");
    has(&rec_out, "", "copy past the end of an allocation: 1");
    let (code, report, shown) = support::replay_json(&libdir, &trace, &[]);
    assert_eq!(code, 0, "{shown}");
    assert_eq!(report["mismatches"], serde_json::json!([]), "{shown}");
    assert!(report["results_verified"].as_u64().unwrap_or(0) >= 1, "{shown}");
}
