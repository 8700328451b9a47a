//! Memory and events shared between a program's processes through the client (`cuIpc*`, and a
//! physical allocation's POSIX descriptor imported by another process): the program
//! `recorder/tests/fake/ipc.c` runs through `gpuless run --remote` against a real server on the
//! stand-in driver; its child (fork and exec) is a session of its own, and the server brokers
//! the parent's exports to it (`gpuless_traces::protocol::share`). The statuses must be the
//! driver's; the bytes shared are proven on the GPU (testdata/cuda/suite/ipc.cu).

mod serve_harness;
mod support;

use serve_harness::{run_client, Server};

#[test]
fn a_child_process_opens_what_its_parent_exported() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "ipc", &["-l:libcuda.so.1"]);
    let srv = Server::start(dir.path(), &libdir, &[], &[]);
    let ran = run_client(&srv, &prog);
    let (stdout, stderr) = (&ran.stdout, &ran.stderr);
    assert!(ran.ok, "stdout:\n{stdout}\nstderr:\n{stderr}");
    // The parent: an allocation exported (the stand-in's memory holds one arena chunk; the GPU
    // suite's program also shares an allocation of a range of its own), the same handle for the
    // same allocation, an address of no allocation refused.
    assert_eq!(ran.line("get"), ["0", "0", "same", "1"]);
    assert_eq!(ran.line("get_bad"), ["1"], "CUDA_ERROR_INVALID_VALUE");
    assert_eq!(ran.line("event_handle"), ["0"]);
    assert_eq!(ran.line("export"), ["0", "0"]);
    // The child: opened (twice, the same pointer), in its own arena, usable by copies.
    assert_eq!(ran.line("open"), ["0", "0", "same", "1", "arena", "1"]);
    assert_eq!(ran.line("copies"), ["0", "0"]);
    // The parent's event opened, recorded and waited for (each reaching the server first).
    assert_eq!(ran.line("event"), ["0", "0", "0", "0"]);
    assert_eq!(ran.line("bad"), ["1"], "a handle that names nothing: CUDA_ERROR_INVALID_VALUE");
    // Opened twice: two closes; a third is the driver's CUDA_ERROR_INVALID_VALUE.
    assert_eq!(ran.line("close"), ["0", "0", "1"]);
    // The descriptor imported in the other process, mapped and written.
    assert_eq!(ran.line("import"), ["0", "0", "0", "0"]);
    // A pool shared: its pointer imports into the imported pool (not into another), in the
    // arena; the imported pool is read-write; the pointer's free and the pool's destruction.
    assert_eq!(ran.line("pool_export"), ["0", "0", "0", "0"]);
    assert_eq!(ran.line("pool"), ["0", "1", "0", "arena", "1", "access", "0", "3"]);
    assert_eq!(ran.line("pool_free"), ["0", "0"]);
    ran.has("child done");
    assert_eq!(ran.line("child_status"), ["0"]);
    ran.has("parent done");
    assert!(!stderr.contains("not supported in client mode"), "{stderr}");
}
