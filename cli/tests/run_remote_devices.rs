//! A session of several GPUs, end to end on the stand-in driver: a server owning two "GPUs"
//! (`gpuless serve --gpus 0,1`) starts the session's executor with `CUDA_VISIBLE_DEVICES=0,1`,
//! where the stand-in is a machine of two devices, and `recorder/tests/fake/devices.c` runs
//! through `gpuless run --remote ... --gpus 2`: two devices with their own names and UUIDs, peer
//! access between them, a primary context each, allocations in each device's slice of the arena,
//! a peer copy between them, peer access enabled and disabled as the driver answers, and NVML
//! listing both (a handle each, found by index, UUID and bus id). A session asking for more GPUs
//! than the server owns is refused. Two servers of one "GPU" each, given as one list (`--remote
//! A,B`), give the program the same two devices, apart: no peer access, the copies between them
//! through the client, an event of one ordering the other's stream; endpoints that cannot be
//! reached or refuse the session are skipped with a line. What two real GPUs do is proven by
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

/// Managed memory made on each of a session's two devices (`managed_devices.c`): each
/// allocation's copies and comparisons run in its own device's context on the executor, the host
/// writing one device's memory while the other is current. (The stand-in does not tie streams to
/// contexts, so this runs the path; which context does what on a GPU is `multi_gpu.cu`'s.)
#[test]
fn managed_memory_on_each_of_two_devices() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "managed_devices", &["-l:libcuda.so.1"]);
    let s = two_gpu_server(dir.path(), &libdir);
    let ran = run_on_gpus(&s, &prog, "2");
    assert!(ran.ok, "stdout:\n{}\nstderr:\n{}", ran.stdout, ran.stderr);
    ran.has("managed on device 0: 2 30");
    ran.has("managed on device 1: 22 50");
    ran.has("device 0's memory written while device 1 was current: 200 22");
    ran.has("done");
}

/// The `devices.c` checks of devices on different servers.
const APART: &[&str] = &[
    "apart_upload_1",
    "apart_stream_0",
    "apart_wait_event",
    "apart_copy_async",
    "apart_round_trip",
    "apart_record_refused",
];

/// Two stand-in servers of one "GPU" each (GPU 0 and GPU 1), a port nothing listens on and a
/// server that refuses clients without its token, as one list: the program sees the two GPUs as
/// devices 0 and 1 and copies between them; the other two are skipped with a line each.
#[test]
fn the_devices_of_two_servers_are_one_list() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "devices", &["-ldl"]);
    let a = Server::start(dir.path(), &libdir, &["--gpus", "0"], &[]);
    let b = Server::start(dir.path(), &libdir, &["--gpus", "1"], &[]);
    let token = dir.path().join("token");
    std::fs::write(&token, "sesame\n").unwrap();
    let locked = Server::start(dir.path(), &libdir, &["--token-file", token.to_str().unwrap()], &[]);
    let dead = {
        // A port that was free a moment ago: nothing listens there.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let list = format!("{},{dead},{},{}", a.tcp, locked.tcp, b.tcp);
    // Four endpoints of one GPU each: the arena is cut in four.
    let env = [("DEVICES_APART", "1"), ("DEVICES_SLICES", "4")];
    let ran = run_client_at(&list, &[], &prog, &[], &env);
    let (out, err) = (&ran.stdout, &ran.stderr);
    assert!(ran.ok, "stdout:\n{out}\nstderr:\n{err}");
    assert!(!out.lines().any(|l| l.starts_with("FAIL")), "stdout:\n{out}\nstderr:\n{err}");
    for check in CHECKS.iter().chain(APART) {
        ran.has(&format!("ok {check}"));
    }
    ran.has("device 0: Fake GPU 0 uuid[15]=0");
    ran.has("device 1: Fake GPU 1 uuid[15]=1");
    ran.has("devices: done");
    assert!(err.contains(&format!("skipping the GPU server at {dead}")), "{err}");
    assert!(err.contains(&format!("skipping the GPU server at {}", locked.tcp)), "{err}");
    assert_eq!(err.matches("skipping the GPU server").count(), 2, "{err}");
    // The event recorded on the other server's stream: refused, said once.
    assert!(err.contains("cuEventRecord is not supported in client mode"), "{err}");
    // The statistics: the two servers that took the session, each with its own counts.
    let stats: serde_json::Value = err
        .lines()
        .find_map(|l| serde_json::from_str(l).ok().filter(|v: &serde_json::Value| v.is_object()))
        .unwrap_or_else(|| panic!("no statistics in {err}"));
    assert_eq!(stats["endpoint"], format!("{},{}", a.tcp, b.tcp).as_str(), "{stats}");
    let servers = stats["servers"].as_array().unwrap_or_else(|| panic!("{stats}"));
    assert_eq!(servers.len(), 2, "{stats}");
    assert!(servers.iter().all(|s| s["sent"].as_u64().unwrap_or(0) > 0), "{stats}");
}

/// A list none of whose servers takes the session: the program sees no device, said once.
#[test]
fn a_list_of_servers_that_all_refuse_gives_no_device() {
    let dir = tempfile::tempdir().unwrap();
    let (_libdir, prog) = support::build_program(dir.path(), "devices", &["-ldl"]);
    let dead: Vec<String> =
        (0..2).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string()).collect();
    let ran = run_client_at(&dead.join(","), &[], &prog, &[], &[]);
    assert!(!ran.ok);
    assert!(ran.stdout.contains("FAIL cuInit got 100"), "{}", ran.stdout);
    assert!(ran.stderr.contains("no server would take the session"), "{}", ran.stderr);
    // A recording is of one server's session.
    let trace = dir.path().join("t.gl");
    let (code, out, err) = support::gpuless(&[
        "record",
        "--remote",
        "127.0.0.1:1,127.0.0.1:2",
        "-o",
        trace.to_str().unwrap(),
        "--",
        prog.to_str().unwrap(),
    ]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains("records a session of one server"), "{out}{err}");
    // `--gpu` names one server's GPUs.
    let (code, _, err) = support::gpuless(&["run", "--remote", "127.0.0.1:1,127.0.0.1:2", "--gpu", "1", "--", "true"]);
    assert_ne!(code, 0);
    assert!(err.contains("--gpu names GPUs of one server"), "{err}");
}

/// Two stand-in servers of two "GPUs" each as one list of four devices (`--gpus 2` from each):
/// the program's own virtual memory on device 2 — the second server's device 0 — with the
/// memory's location, the access descriptors and a device argument numbered as that server
/// numbers its devices (the stand-in refuses an ordinal past its two).
#[test]
fn device_ordinals_reach_each_server_in_its_own_numbering() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "apart_vmm", &["-ldl"]);
    let a = two_gpu_server(dir.path(), &libdir);
    let b = two_gpu_server(dir.path(), &libdir);
    let ran = run_client_at(&format!("{},{}", a.tcp, b.tcp), &["--gpus", "2"], &prog, &[], &[]);
    let (out, err) = (&ran.stdout, &ran.stderr);
    assert!(ran.ok, "stdout:\n{out}\nstderr:\n{err}");
    for check in [
        "count_4",
        "device_2_current",
        "vmm_create_on_2",
        "vmm_map",
        "vmm_set_access_2",
        "vmm_round_trip",
        "vmm_release",
        "reset_2",
    ] {
        ran.has(&format!("ok {check}"));
    }
    ran.has("apart_vmm: done");
}
