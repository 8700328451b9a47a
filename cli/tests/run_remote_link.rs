//! The JIT linker in client mode (issue 34), through a real `gpuless serve` on the stand-in
//! driver, which links by concatenating its inputs: `recorder/tests/fake/link.c` links PTX data
//! and a PTX file (read by the client), loads the image and launches from it, reads the info log,
//! the log sizes and the wall time the server's driver wrote; a damaged input gets the driver's
//! error and error log when it is added, as natively, and its link goes on; a creation the
//! driver refuses fails the link's first add; the session goes on. The program prints the same
//! lines natively on the stand-in as through the session; the executor keeps each link's state,
//! and every add and completion is one round trip.

mod serve_harness;
mod support;

use std::process::Command;

use serve_harness::{run_client, Server};

#[test]
fn a_link_runs_on_the_server_step_by_step_with_the_drivers_answers() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "link", &["-l:libcuda.so.1"]);
    let native = Command::new(&prog).env("LD_LIBRARY_PATH", &libdir).output().unwrap();
    assert!(native.status.success(), "{native:?}");
    let native = String::from_utf8_lossy(&native.stdout).into_owned();

    let srv = Server::start(dir.path(), &libdir, &[], &[]);
    let ran = run_client(&srv, &prog);
    assert!(ran.ok, "stdout:\n{}\nstderr:\n{}", ran.stdout, ran.stderr);
    assert!(!ran.stderr.contains("not supported"), "{}", ran.stderr);
    ran.has("linked yes");
    // Symbol names and addresses (options 17-19) reach the server's driver by value.
    ran.has("symbols // symbol g_table=0x640000001000 // symbol g_scale=0x640000002000");
    ran.has("info stand-in linker: 2 inputs, 321 bytes");
    ran.has("info_size 36 of 36");
    ran.has("wall 0.25");
    ran.has("scaled 3 21");
    ran.has("damaged add 218");
    ran.has("error ptxas fatal   : damaged.ptx: not PTX (no .version directive)");
    ran.has("error_size 60 of 60");
    ran.has("wall before completion -1");
    ran.has("completed after the refused input 0");
    ran.has("info stand-in linker: 1 inputs, 163 bytes");
    ran.has("too many options 1");
    ran.has("missing file 301");
    ran.has("destroyed again 400");
    ran.has("after 9 63");
    assert_eq!(ran.stdout, native, "through the session and natively");
    // One wait per input added (the driver's answer to it) and per link completed; none for
    // creating, destroying, or a file the client could not read.
    let stats = ran.stats();
    let waits = &stats["waits_by_call"];
    assert_eq!(waits["cuLinkAddData"], 5, "{stats}");
    assert_eq!(waits["cuLinkAddFile"], 1, "{stats}");
    assert_eq!(waits["cuLinkComplete"], 3, "{stats}");
    for f in ["cuLinkCreate", "cuLinkDestroy"] {
        assert!(waits.get(f).is_none(), "{f}: {stats}");
    }
}

/// Recording passes the linker's calls to the driver, and a replay counts them without
/// re-executing them (the table answers them on the client): the linked image reaches the device
/// through the recorded `cuModuleLoadData`, and every download verifies.
#[test]
fn a_recorded_link_replays_through_the_load_of_its_image() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "link", &["-l:libcuda.so.1"]);
    let native = Command::new(&prog).env("LD_LIBRARY_PATH", &libdir).output().unwrap();
    assert!(native.status.success(), "{native:?}");
    let trace = dir.path().join("t.gl");
    let recorded = support::record(&prog, &libdir, &trace, &[]);
    assert_eq!(recorded.as_bytes(), native.stdout, "recording changed the program");
    let (code, report, shown) = support::replay_json(&libdir, &trace, &[]);
    assert_eq!(code, 0, "{shown}");
    assert_eq!(report["mismatches"], serde_json::json!([]), "{shown}");
    assert_eq!(report["results_verified"], 2, "{shown}");
    for f in ["cuLinkCreate", "cuLinkAddData", "cuLinkAddFile", "cuLinkComplete", "cuLinkDestroy"] {
        assert!(report["not_replayed"][f].as_u64() >= Some(1), "{f} counted, not executed: {shown}");
    }
}

/// JIT list options given to the loaders (`jit_loader.c`): refused with
/// `CUDA_ERROR_NOT_SUPPORTED` and one line naming the function, not dropped (the driver's answer
/// depends on them: `testdata/cuda/suite/jit_lists.c` on the GPU); a plain option loads.
#[test]
fn list_options_outside_the_linker_are_refused_not_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "jit_loader", &["-l:libcuda.so.1"]);
    let srv = Server::start(dir.path(), &libdir, &[], &[]);
    let ran = run_client(&srv, &prog);
    assert!(ran.ok, "stdout:\n{}\nstderr:\n{}", ran.stdout, ran.stderr);
    ran.has("module with lists 801");
    ran.has("library with lists 801");
    ran.has("module with a plain option 0");
    assert_eq!(ran.stderr.matches("gpuless: cuModuleLoadDataEx is not supported").count(), 1, "{}", ran.stderr);
    assert_eq!(ran.stderr.matches("gpuless: cuLibraryLoadData is not supported").count(), 1, "{}", ran.stderr);
}
