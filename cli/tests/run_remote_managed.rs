//! Managed memory in client mode (issue 35), through a real `gpuless serve` on the stand-in
//! driver: `recorder/tests/fake/managed.c` allocates managed memory, writes it on the host,
//! runs kernels on it and reads it after synchronizations. One address on both sides: the
//! kernel sees what the host wrote, the host what the kernel wrote; of an allocation the
//! host writes one page of, little more than that page goes up (a 2 MiB one: the stand-in device is small).

mod serve_harness;
mod support;

use serve_harness::run_program;

#[test]
fn managed_memory_is_coherent_at_launches_and_synchronizations() {
    let ran = run_program("managed");
    ran.has("fresh: 0 0");
    ran.has("after kernel: 0 2 30");
    ran.has("second round: 0 200 60");
    ran.has("big: 6 0");
    ran.has("attributes: managed 1 pageable 0");
    ran.has("advice: read mostly 1, preferred -1");
    ran.has("advice v2: preferred 0 type 1 id 0");
    ran.has("again: 0");
    let stats = ran.stats();
    let up = stats["bytes_up"].as_u64().unwrap();
    assert!(up < 256 << 10, "2 MiB allocated, one page written: {up} bytes went up");
}

#[test]
fn device_mapped_and_pinned_memory_given_to_kernels_are_mirrored() {
    let ran = run_program("mapped");
    ran.has("device pointer is the host pointer: 1");
    ran.has("after kernel: 0 2 30");
    ran.has("second round: 0 200 60");
    ran.has("plain pinned after kernel: 2 32");
    ran.has("plain pinned second round: 100 64");
    ran.has("registered after kernel: 20 300");
    ran.has("registered after unregister: 7");
    ran.has("asked pointer after kernel: 2 2");
    ran.has("done");
}

/// Downloads into device-mapped memory (`mapped_d2h.c`): the executor writes its copy of the
/// range too and the client takes the bytes as the server's, so they are not sent back (the
/// session's upload stays far below one download), and a kernel on the memory afterwards sees
/// what the downloads brought.
#[test]
fn downloads_into_mapped_memory_are_not_sent_back() {
    let ran = run_program("mapped_d2h");
    ran.has("downloads into mapped memory: last 7 8, sum 36");
    ran.has("kernel on it: 21 24");
    ran.has("done");
    let up = ran.stats()["bytes_up"].as_u64().unwrap_or(u64::MAX);
    // Eight 1 MiB uploads of `src` go up (as blobs, deduplicated by content); the downloads' 8 MiB
    // must not follow them.
    assert!(up < 10 << 20, "{up} bytes up: the downloads went back up; {}", ran.stderr);
}

/// A fault of the program's own while managed memory is live goes past the client's fault
/// handler to the default action (the process ends by SIGSEGV, not SIGALRM after a loop of
/// faults), and `GPULESS_FAULT_REPORT` says where it happened.
#[test]
fn a_programs_own_fault_beside_managed_memory_ends_it_and_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "managed", &["-l:libcuda.so.1"]);
    let srv = serve_harness::Server::start(dir.path(), &libdir, &[], &[]);
    let ran = serve_harness::run_client_env(&srv, &prog, &[("MANAGED_FAULT", "1"), ("GPULESS_FAULT_REPORT", "1")]);
    // 128 + SIGSEGV; the program's alarm (20 s) would have ended a loop of faults (128 + 14).
    assert_eq!(ran.code, Some(139), "{}", ran.stderr);
    assert!(ran.stderr.contains("gpuless: signal 0xb on thread"), "{}", ran.stderr);
    assert!(ran.stderr.contains("address 0x10, instruction"), "{}", ran.stderr);
    assert!(ran.stderr.contains("gpuless: instruction at offset"), "{}", ran.stderr);
    // scripts/fault-where.py names the program's function that faulted (main, in managed.c).
    let report = dir.path().join("report.txt");
    std::fs::write(&report, &ran.stderr).unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/fault-where.py");
    let out = std::process::Command::new("python3").arg(&script).arg(&report).output().expect("run fault-where.py");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        said.lines().any(|l| l.starts_with("instruction: ") && l.contains("managed+") && l.contains(" main")),
        "{said}"
    );
}

/// The program's own stack registered with DEVICEMAP (`stack_mapped.c`; NPP's
/// watershedSegmentationNPP does it): the client write-protects those pages, the very next push
/// faults, and the fault handler runs on an alternate stack the client gave the thread (without
/// it the kernel cannot deliver the fault and the program dies by SIGSEGV); the host's writes
/// to the registered buffer go up.
#[test]
fn a_registered_stack_buffer_keeps_the_program_running() {
    let ran = run_program("stack_mapped");
    ran.has("calls after: 1");
    ran.has("done");
    assert!(ran.stats()["shared_pages_up"].as_u64().is_some_and(|n| n >= 1), "{}", ran.stderr);
}

/// A kernel that polls pinned memory until the host writes it (`poll.c`; the stand-in's
/// FAKE_CUDA_POLL keeps such a launch running until the flag is set, and answers an error to
/// anything that would wait for it forever on a GPU): the executor writes the host's bytes and
/// reads shared memory on a stream of its own, so neither waits behind the program's streams
/// (UnifiedMemoryPerf's latch hung the session at its first fully asynchronous round).
#[test]
fn a_kernel_polling_pinned_memory_sees_the_hosts_write() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "poll", &["-l:libcuda.so.1"]);
    let srv = serve_harness::Server::start(dir.path(), &libdir, &[], &[("FAKE_CUDA_POLL", "1")]);
    let ran = serve_harness::run_client(&srv, &prog);
    assert!(ran.ok, "stdout:\n{}\nstderr:\n{}", ran.stdout, ran.stderr);
    ran.has("plain pinned: poller released, flag 1");
    ran.has("plain pinned again: poller released, flag 1");
    ran.has("mapped: poller released, flag 1");
    ran.has("work queued behind: poller released, flag 1");
    ran.has("managed after the queued kernel: 2 14");
    ran.has("done");
}
