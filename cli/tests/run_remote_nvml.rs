//! NVML in client mode: `recorder/tests/fake/nvml.c` `dlopen`s `libnvidia-ml.so.1` under
//! `gpuless run --remote` against a real server on the stand-in driver and prints what the
//! library answered — the session's device (the stand-in's name, UUID bytes, PCI attributes,
//! compute capability), its memory (free as the server's `cuMemGetInfo` says), no processes,
//! MIG disabled, shutdown counted. Also: an unreachable server (init fails, said once), and
//! outside client mode the preloaded library's NVML exports passing through to the real
//! library (a stand-in `libnvidia-ml.so.1`).

mod serve_harness;
mod support;

use std::process::Command;

use serve_harness::{run_client, Server, GL};
use support::common;

/// The stand-in's device memory (`heap` in libcuda.c) and what it holds before any allocation.
const STAND_IN_TOTAL: u64 = 4 << 20;
const STAND_IN_HELD: u64 = 256;

#[test]
fn nvml_answers_the_sessions_device_in_client_mode() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "nvml", &["-ldl"]);
    let srv = Server::start(dir.path(), &libdir, &[], &[]);
    let ran = run_client(&srv, &prog);
    assert!(ran.ok, "stdout:\n{}\nstderr:\n{}", ran.stdout, ran.stderr);
    let line = |key: &str| ran.line(key);
    assert_eq!(line("init"), ["0", "Success"]);
    assert_eq!(line("count"), ["0", "1"], "one device: the session's");
    assert_eq!(line("cuda_version"), ["0", "13000"], "the stand-in's cuDriverGetVersion");
    assert_eq!(line("handle"), ["0"]);
    assert_eq!(line("handle1"), ["2"], "NVML_ERROR_INVALID_ARGUMENT: there is no device 1");
    assert_eq!(line("name"), ["0", "Fake", "GPU"]);
    assert_eq!(line("name_short"), ["7"], "NVML_ERROR_INSUFFICIENT_SIZE");
    // cuDeviceGetUuid of the stand-in: 16 bytes of 0xab.
    assert_eq!(line("uuid"), ["0", "GPU-abababab-abab-abab-abab-abababababab"]);
    assert_eq!(line("by_uuid"), ["0", "1"]);
    assert_eq!(line("by_uuid_other"), ["6"], "NVML_ERROR_NOT_FOUND");
    assert_eq!(line("index"), ["0", "0"]);
    // The stand-in answers 1 for the PCI domain, bus and device attributes (50, 33, 34).
    assert_eq!(line("pci"), ["0", "00000001:01:01.0", "0001:01:01.0", "1", "1", "1"]);
    assert_eq!(line("by_bus"), ["0", "1"], "PyTorch's bus id form finds the device");
    assert_eq!(line("cc"), ["0", "9", "0"]);
    let (total, free) = (STAND_IN_TOTAL, STAND_IN_TOTAL - STAND_IN_HELD);
    let mem: Vec<String> = [0, total, free, total - free].iter().map(u64::to_string).collect();
    assert_eq!(line("memory"), mem, "total from the description, free from the server");
    let mem2: Vec<String> = [0, total, 0, free, total - free].iter().map(u64::to_string).collect();
    assert_eq!(line("memory_v2"), mem2);
    assert_eq!(line("processes"), ["0", "0"]);
    assert_eq!(line("mig"), ["0", "0", "0"], "MIG disabled, now and pending");
    assert_eq!(line("temperature"), ["3"], "NVML_ERROR_NOT_SUPPORTED");
    assert_eq!(line("shutdown"), ["0"]);
    assert_eq!(line("after_shutdown"), ["1", "Uninitialized"]);
    assert_eq!(line("shutdown_again"), ["1"]);
    assert!(!ran.stderr.lines().any(|l| l.starts_with("gpuless:")), "{}", ran.stderr);
    let stats = ran.stats();
    // Free memory is the server's answer, once per question; nothing else waited.
    assert_eq!(stats["waits_by_call"], serde_json::json!({"cuMemGetInfo": 2}), "{stats}");
    assert_eq!(stats["round_trips"], 3, "the Welcome and the two memory questions: {stats}");
}

#[test]
fn without_a_server_nvml_init_fails_and_says_so_once() {
    let dir = tempfile::tempdir().unwrap();
    let (_, prog) = support::build_program(dir.path(), "nvml", &["-ldl"]);
    let out = Command::new(GL)
        .args(["run", "--remote", "127.0.0.1:1", "--"])
        .arg(&prog)
        .env("GPULESS_RECORDER", common::recorder_lib())
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("LD_PRELOAD")
        .env_remove("GPULESS_TRACE")
        .output()
        .expect("run gpuless run");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "the program's own exit on a failed init:\n{stdout}\n{stderr}");
    assert_eq!(stdout.trim(), "init 9 Driver Not Loaded", "NVML_ERROR_DRIVER_NOT_LOADED");
    let said: Vec<&str> = stderr.lines().filter(|l| l.starts_with("gpuless:")).collect();
    assert_eq!(said.len(), 1, "one `gpuless:` line says why:\n{stderr}");
    assert!(said[0].contains("127.0.0.1:1"), "{stderr}");
}

#[test]
fn outside_client_mode_nvml_passes_through_to_the_real_library() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "nvml", &["-ldl"]);
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../recorder/tests/fake/libnvidia-ml.c");
    let nvml = libdir.join("libnvidia-ml.so.1");
    common::cc(&["-shared", "-fPIC", "-o", nvml.to_str().unwrap(), src.to_str().unwrap()]);
    // The recorder preloaded, as `gpuless record` runs a program: its NVML exports are the
    // first the program finds (`global`: dlsym(RTLD_DEFAULT)).
    let run = || {
        let out = Command::new(&prog)
            .arg("global")
            .env("LD_LIBRARY_PATH", &libdir)
            .env("LD_PRELOAD", common::recorder_lib())
            .env_remove("GPULESS_REMOTE")
            .env_remove("GPULESS_TRACE")
            .output()
            .expect("run the program");
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (code, stdout) = run();
    assert_eq!(code, Some(0), "{stdout}");
    let line = |key: &str| {
        let l = stdout.lines().find(|l| l.split(' ').next() == Some(key));
        l.unwrap_or_else(|| panic!("no `{key}` line in:\n{stdout}")).split(' ').skip(1).collect::<Vec<_>>()
    };
    assert_eq!(line("init"), ["0", "Success"], "the stand-in's nvmlInit_v2");
    assert_eq!(line("count"), ["0", "7"], "the stand-in's device count");
    assert_eq!(line("handle"), ["13"], "NVML_ERROR_FUNCTION_NOT_FOUND: the stand-in lacks it");
    assert_eq!(line("shutdown"), ["0"]);
    // Without a libnvidia-ml.so.1 (where the machine has none of its own):
    // NVML_ERROR_LIBRARY_NOT_FOUND.
    std::fs::remove_file(&nvml).unwrap();
    let installed = Command::new("sh")
        .args(["-c", "ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml.so.1 '"])
        .status()
        .is_ok_and(|s| s.success());
    if !installed {
        let (code, stdout) = run();
        assert_eq!((code, stdout.trim()), (Some(1), "init 12 NVML Shared Library Not Found"));
    }
}
