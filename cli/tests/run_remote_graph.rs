//! A kernel node's parameters through client mode (`cuGraphKernelNodeGetParams`, answered by
//! the server): `recorder/tests/fake/graph_params.c` reads, changes and re-reads the parameters
//! of captured nodes (a module function's launch and a library kernel's, launched as cudart
//! launches them), of a node it added and of a clone's node, then launches both graphs — on
//! the stand-in driver directly and through `gpuless run --remote` against a real server on
//! the stand-in. The outputs must be the same: the function named as the program knows it, the
//! geometry, and the argument values behind `kernelParams` in the client's own memory.

mod serve_harness;
mod support;

use std::process::Command;

use serve_harness::{run_client, Server};

/// The program's `cuGraphKernelNodeGetParams[_v2]` calls, each one round trip.
const GET_PARAMS: u64 = 8;

#[test]
fn kernel_node_parameters_read_through_the_client_are_the_driver_s() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "graph_params", &["-l:libcuda.so.1"]);

    let native = Command::new(&prog).env("LD_LIBRARY_PATH", &libdir).output().expect("run natively");
    let native_out = String::from_utf8_lossy(&native.stdout).into_owned();
    assert!(native.status.success(), "{native_out}\n{}", String::from_utf8_lossy(&native.stderr));
    assert!(native_out.contains("captured_kernel func 1 grid 1 2 1 block 64 1 1 smem 16"), "{native_out}");

    let srv = Server::start(dir.path(), &libdir, &[], &[]);
    let ran = run_client(&srv, &prog);
    let (stdout, stderr) = (&ran.stdout, &ran.stderr);
    assert!(ran.ok, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(stdout, &native_out, "client mode answers as the driver does; stderr:\n{stderr}");
    assert!(!stderr.contains("not supported"), "{stderr}");
    let line = |key: &str| ran.line(key);
    assert_eq!(line("asked_again"), ["same_array", "1"], "unchanged: the same argument array");
    assert_eq!(line("set")[16..18], ["factor", "5.0"], "read back after the change");
    assert_eq!(line("in_clone_set")[16..18], ["factor", "7.0"]);
    assert_eq!(line("clone"), ["sum", "273000.0"]);

    let stats = ran.stats();
    assert_eq!(stats["waits_by_call"]["cuGraphKernelNodeGetParams"], GET_PARAMS, "{stats}");
}

/// A capture the program extends itself (`capture_deps.c`): the capture's graph and dependencies
/// come from the server (`cuStreamGetCaptureInfo`), the node added there and the replaced
/// dependencies (`cuStreamUpdateCaptureDependencies`) reach the server's capture: the same
/// output as the stand-in driver's own.
#[test]
fn a_capture_extended_by_the_program_runs_as_natively() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "capture_deps", &["-l:libcuda.so.1"]);
    let native = Command::new(&prog).env("LD_LIBRARY_PATH", &libdir).output().expect("run natively");
    let native_out = String::from_utf8_lossy(&native.stdout).into_owned();
    assert!(native.status.success(), "{native_out}\n{}", String::from_utf8_lossy(&native.stderr));
    assert!(native_out.contains("capture info: status 1, graph given 1, dependencies 1"), "{native_out}");
    let srv = Server::start(dir.path(), &libdir, &[], &[]);
    let ran = run_client(&srv, &prog);
    let (stdout, stderr) = (&ran.stdout, &ran.stderr);
    assert!(ran.ok, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(stdout, &native_out, "stderr:\n{stderr}");
    assert!(!stderr.contains("not supported"), "{stderr}");
}
