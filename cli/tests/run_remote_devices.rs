//! A session of several GPUs, end to end on the stand-in driver: a server owning two "GPUs"
//! (`gpuless serve --gpus 0,1`) starts the session's executor with `CUDA_VISIBLE_DEVICES=0,1`,
//! where the stand-in is a machine of two devices, and `recorder/tests/fake/devices.c` runs
//! through `gpuless run --remote ... --gpus 2`: two devices with their own names and UUIDs, peer
//! access between them, a primary context each, allocations in each device's slice of the arena,
//! a peer copy between them, peer access enabled and disabled as the driver answers, and NVML
//! listing both (a handle each, found by index, UUID and bus id). A session asking for more GPUs
//! than the server owns is refused. What two real GPUs do is proven by
//! scripts/gpu-suite-devices.sh on a machine of two.

mod serve_harness;
mod support;

use std::path::Path;

use serve_harness::{run_client_at, ClientRun, Server};

/// A stand-in server owning "GPUs" 0 and 1.
fn two_gpu_server(dir: &Path, libdir: &Path) -> Server {
    Server::start(dir, libdir, &["--gpus", "0,1"], &[])
}

/// Runs `prog` through `gpuless run --remote ... --gpus N` against `s`.
fn run_on_gpus(s: &Server, prog: &Path, n: &str) -> ClientRun {
    run_client_at(&s.tcp, &["--gpus", n], prog, &[], &[])
}

/// Every check `devices.c` makes.
const CHECKS: &[&str] = &[
    "count",
    "device_get_1",
    "device_get_2",
    "describe_0",
    "describe_1",
    "names_differ",
    "uuids_differ",
    "can_access_0_1",
    "can_access_0_0",
    "p2p_access_supported_0_1",
    "p2p_attribute_0_0",
    "retain",
    "contexts_differ",
    "ctx_device_1",
    "alloc_slice_1",
    "upload_1",
    "ctx_device_0",
    "alloc_slice_0",
    "copy_peer",
    "download_0",
    "round_trip",
    "enable_peer",
    "enable_peer_again",
    "disable_peer",
    "disable_peer_again",
    "free",
    "synchronize",
    "nvml_dlopen",
    "nvml_init",
    "nvml_count",
    "nvml_handles",
    "nvml_handle_2",
    "nvml_index_1",
    "nvml_name_1",
    "nvml_by_uuid_1",
    "nvml_by_bus_1",
    "nvml_p2p_read_0_1",
    "nvml_memory_0",
    "nvml_memory_1",
    "nvml_memory_other",
    "nvml_shutdown",
];

#[test]
fn a_program_sees_two_devices_and_copies_between_them() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "devices", &["-ldl"]);
    let s = two_gpu_server(dir.path(), &libdir);
    let ran = run_on_gpus(&s, &prog, "2");
    let (out, err) = (&ran.stdout, &ran.stderr);
    assert!(ran.ok, "stdout:\n{out}\nstderr:\n{err}");
    assert!(!out.lines().any(|l| l.starts_with("FAIL")), "stdout:\n{out}\nstderr:\n{err}");
    for check in CHECKS {
        ran.has(&format!("ok {check}"));
    }
    // The executor's device k is the server's GPU k: the stand-in's name and UUID say which.
    ran.has("device 0: Fake GPU 0 uuid[15]=0");
    ran.has("device 1: Fake GPU 1 uuid[15]=1");
    ran.has("devices: done");
    assert!(!err.contains("not supported"), "{err}");
}

#[test]
fn a_session_of_more_gpus_than_the_server_owns_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "devices", &["-ldl"]);
    let s = two_gpu_server(dir.path(), &libdir);
    let ran = run_on_gpus(&s, &prog, "3");
    let (out, err) = (&ran.stdout, &ran.stderr);
    assert!(!ran.ok, "stdout:\n{out}\nstderr:\n{err}");
    // The program sees no device: cuInit fails (CUDA_ERROR_NO_DEVICE), with the server's
    // refusal said on stderr.
    assert!(out.contains("FAIL cuInit got 100"), "stdout:\n{out}\nstderr:\n{err}");
    assert!(!out.contains("ok count"), "stdout:\n{out}");
    assert!(err.contains("3 GPUs asked for; this server owns 2"), "stderr:\n{err}");
    assert!(err.contains("the program sees no CUDA device"), "stderr:\n{err}");
    // The server goes on serving: a session of its two GPUs still runs.
    let ran = run_on_gpus(&s, &prog, "2");
    assert!(ran.ok, "stdout:\n{}\nstderr:\n{}", ran.stdout, ran.stderr);
    ran.has("devices: done");
}

/// simpleCallback's pattern (it failed intermittently through the client with two devices on
/// the GPU machine): a thread per workload on alternating devices queues copies and a host
/// callback, the callback's own thread frees on the same device. Three sessions in a row, every
/// workload's download checked.
#[test]
fn threads_and_host_callbacks_on_two_devices() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "callbacks_mt", &["-ldl", "-lpthread"]);
    let s = two_gpu_server(dir.path(), &libdir);
    for round in 0..3 {
        let ran = run_on_gpus(&s, &prog, "2");
        let (out, err) = (&ran.stdout, &ran.stderr);
        assert!(ran.ok, "round {round}: stdout:\n{out}\nstderr:\n{err}");
        ran.has("callbacks_mt: 8 ok of 8 (8 done)");
    }
}
