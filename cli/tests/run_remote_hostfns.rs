//! Host functions in client mode (issue 35), through a real `gpuless serve` on the stand-in
//! driver: `recorder/tests/fake/hostfns.c` registers host functions on a stream, as stream
//! callbacks and as graph host nodes (added directly and captured), and prints what each saw.
//! They run on the client, in stream order: after the download before them (its bytes already
//! written), before the upload after them (which sends what they wrote); each with its own
//! userData; a callback with its stream and status; at every launch of a graph; while the
//! program waits without a CUDA call; and a CUDA call inside one gets CUDA_ERROR_NOT_PERMITTED.

mod serve_harness;
mod support;

use serve_harness::{run_client, Server};

#[test]
fn host_functions_run_on_the_client_in_stream_order() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "hostfns", &["-l:libcuda.so.1"]);
    let srv = Server::start(dir.path(), &libdir, &[], &[]);
    let ran = run_client(&srv, &prog);
    let (stdout, stderr) = (&ran.stdout, &ran.stderr);
    assert!(ran.ok, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let has = |line: &str| assert!(stdout.lines().any(|l| l.trim_end() == line), "no `{line}` in:\n{stdout}\n{stderr}");
    // scale(x2) of 0..7, downloaded; the function adds 100; uploaded; scale(x2) again.
    has("order: saw=0,14");
    has("order: result 200 228");
    has("user data: first second third");
    has("callback: stream=1 status=0 user=cb");
    has("cuda in a host function: cuCtxSynchronize=800");
    has("spin: 1");
    has("graph: 3 launches seen");
    // Each launch: download d[0], the function adds 1 in pinned memory, upload: 5 → 8.
    has("captured: saw=5 saw=6 saw=7");
    // The download, the function and the upload: the late read has no node of its own.
    has("captured: 3 nodes");
    has("captured: 3 launches seen, value 8");
    let said = stderr.lines().filter(|l| l.contains("called from a host function")).count();
    assert_eq!(said, 1, "the refused CUDA call is said once:\n{stderr}");
}
