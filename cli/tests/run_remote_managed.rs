//! Managed memory in client mode (issue 35), through a real `gpuless serve` on the stand-in
//! driver: `recorder/tests/fake/managed.c` allocates managed memory, writes it on the host,
//! runs kernels on it and reads it after synchronizations. One address on both sides: the
//! kernel sees what the host wrote, the host what the kernel wrote; of an allocation the
//! host writes one page of, little more than that page goes up (a 2 MiB one: the stand-in device is small).

mod serve_harness;
mod support;

use serve_harness::{run_client, Server};

#[test]
fn managed_memory_is_coherent_at_launches_and_synchronizations() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "managed", &["-l:libcuda.so.1"]);
    let srv = Server::start(dir.path(), &libdir, &[], &[]);
    let ran = run_client(&srv, &prog);
    let (stdout, stderr) = (&ran.stdout, &ran.stderr);
    assert!(ran.ok, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let has = |line: &str| assert!(stdout.lines().any(|l| l == line), "no `{line}` in:\n{stdout}\n{stderr}");
    has("fresh: 0 0");
    has("after kernel: 0 2 30");
    has("second round: 0 200 60");
    has("big: 6 0");
    has("attributes: managed 1 pageable 0");
    has("advice: read mostly 1, preferred -1");
    has("advice v2: preferred 0 type 1 id 0");
    has("again: 0");
    let stats = ran.stats();
    let up = stats["bytes_up"].as_u64().unwrap();
    assert!(up < 256 << 10, "2 MiB allocated, one page written: {up} bytes went up");
}

#[test]
fn device_mapped_and_pinned_memory_given_to_kernels_are_mirrored() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "mapped", &["-l:libcuda.so.1"]);
    let srv = Server::start(dir.path(), &libdir, &[], &[]);
    let ran = run_client(&srv, &prog);
    let (stdout, stderr) = (&ran.stdout, &ran.stderr);
    assert!(ran.ok, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let has = |line: &str| assert!(stdout.lines().any(|l| l == line), "no `{line}` in:\n{stdout}\n{stderr}");
    has("device pointer is the host pointer: 1");
    has("after kernel: 0 2 30");
    has("second round: 0 200 60");
    has("plain pinned after kernel: 2 32");
    has("plain pinned second round: 100 64");
    has("registered after kernel: 20 300");
    has("registered after unregister: 7");
    has("asked pointer after kernel: 2 2");
    has("done");
    assert!(!stderr.contains("not supported"), "{stderr}");
}

/// Downloads into device-mapped memory (`mapped_d2h.c`): the executor writes its copy of the
/// range too and the client takes the bytes as the server's, so they are not sent back (the
/// session's upload stays far below one download), and a kernel on the memory afterwards sees
/// what the downloads brought.
#[test]
fn downloads_into_mapped_memory_are_not_sent_back() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "mapped_d2h", &["-l:libcuda.so.1"]);
    let srv = Server::start(dir.path(), &libdir, &[], &[]);
    let ran = run_client(&srv, &prog);
    let (stdout, stderr) = (&ran.stdout, &ran.stderr);
    assert!(ran.ok, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let has = |line: &str| assert!(stdout.lines().any(|l| l == line), "no `{line}` in:\n{stdout}\n{stderr}");
    has("downloads into mapped memory: last 7 8, sum 36");
    has("kernel on it: 21 24");
    has("done");
    let stats: serde_json::Value =
        serde_json::from_str(stderr.lines().find(|l| l.starts_with('{')).expect("stats")).expect("stats json");
    let up = stats["bytes_up"].as_u64().unwrap_or(u64::MAX);
    // Eight 1 MiB uploads of `src` go up (as blobs, deduplicated by content); the downloads' 8 MiB
    // must not follow them.
    assert!(up < 10 << 20, "{up} bytes up: the downloads went back up; {stderr}");
}
