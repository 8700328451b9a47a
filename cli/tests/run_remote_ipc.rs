//! Memory and events shared between a program's processes (`cuIpc*`, a physical allocation's
//! POSIX descriptor imported by another process, a pool and its pointers): the program
//! `recorder/tests/fake/ipc.c` runs through `gpuless run --remote` against a real server on the
//! stand-in driver — its child (fork and exec) is a session of its own, and the server brokers
//! the parent's exports to it (`gpuless_traces::protocol::share`) — and under `gpuless record`,
//! where the recorders of the two processes share the arena's memory themselves
//! (`recorder/src/ipc.rs`). The statuses must be the driver's; the bytes shared are proven on
//! the GPU (testdata/cuda/suite/ipc.cu).

mod serve_harness;
mod support;

use serve_harness::{run_client, Server};
use std::process::Command;

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
    // Read-write is the imported pool's access; read-only is refused, said once.
    assert_eq!(ran.line("pool_access"), ["0", "801"]);
    assert!(stderr.contains("an imported pool's access is read-write only"), "{stderr}");
    assert_eq!(ran.line("pool_free"), ["0", "0"]);
    ran.has("child done");
    assert_eq!(ran.line("child_status"), ["0"]);
    ran.has("parent done");
    let refused: Vec<&str> = stderr.lines().filter(|l| l.contains("not supported in client mode")).collect();
    assert_eq!(refused.len(), 1, "only the read-only pool access is refused: {stderr}");
}

#[test]
fn under_the_recorder_a_child_process_opens_its_parents_arena_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "ipc", &["-l:libcuda.so.1"]);
    let out = Command::new(env!("CARGO_BIN_EXE_gpuless"))
        .args(["record", "-o"])
        .arg(dir.path().join("t.gl"))
        .arg("--")
        .arg(&prog)
        .env("GPULESS_RECORDER", support::common::recorder_lib())
        .env("LD_LIBRARY_PATH", &libdir)
        .env_remove("GPULESS_REMOTE")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = |key: &str| -> Vec<String> {
        let l = stdout.lines().find(|l| l.split(' ').next() == Some(key));
        let l = l.unwrap_or_else(|| panic!("no `{key}` line in:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
        l.split(' ').skip(1).map(str::to_string).collect()
    };
    assert!(out.status.success(), "{out:?}");
    // The arena's allocation exported by the recorder (the stand-in driver's legacy IPC is
    // not asked), the same handle again; an address outside the arena is the driver's.
    assert_eq!(line("get"), ["0", "0", "same", "1"]);
    assert_eq!(line("get_bad"), ["801"], "the stand-in driver's own answer");
    // Opened by the child's recorder from the parent's (twice: one mapping), in its arena,
    // usable; two closes, the third the driver's.
    assert_eq!(line("open"), ["0", "0", "same", "1", "arena", "1"]);
    assert_eq!(line("copies"), ["0", "0"]);
    assert_eq!(line("close"), ["0", "0", "801"]);
    // The driver's pool, exported and imported by it; a pointer from it (the arena's) imports
    // only into the pool its data names, and its free unmaps it.
    assert_eq!(line("pool_export"), ["0", "0", "0", "0"]);
    assert_eq!(line("pool")[..5], ["0", "1", "0", "arena", "1"]);
    assert_eq!(line("pool_free"), ["0", "0"]);
    assert_eq!(line("child_status"), ["0"]);

    // Each process's trace replayed alone: the exporter's with what follows its first export
    // unverified (said), the child's ending at the memory another process shared, by name.
    let replay = |trace: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_gpuless"))
            .args(["replay", "--json"])
            .arg(trace)
            .env("LD_LIBRARY_PATH", &libdir)
            .output()
            .unwrap()
    };
    let parent = replay(&dir.path().join("t.gl"));
    let out = String::from_utf8_lossy(&parent.stdout);
    assert!(parent.status.success(), "{parent:?}");
    assert!(out.contains("cuIpcGetMemHandle: the program shares device memory with other processes"), "{out}");
    let child = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("t.gl.")))
        .expect("the child's trace, t.gl.PID");
    let r = replay(&child);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success(), "{r:?}");
    assert!(err.contains("cuIpcOpenMemHandle: memory or events another process shared"), "{err}");
}
