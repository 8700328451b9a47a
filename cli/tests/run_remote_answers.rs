//! Client mode answers as the driver does (issue 34), through a real `gpuless serve` on the
//! stand-in driver: every function the API table refuses is exported and refused (status 801,
//! one `gpuless:` line naming it); bad devices, missing out-pointers, unknown kernel handles, bad
//! launch configurations, copies outside device memory, error names and strings and
//! `cuGetProcAddress` by version get the real driver's answers (measured on driver 580 by
//! `testdata/cuda/suite/driver_answers.c`), before anything reaches the server.

mod serve_harness;
mod support;

use std::process::Command;

use gpuless_analyzer::api::{functions, ApiLevel, Disposition};
use serve_harness::{Server, GL};
use support::common;

#[test]
fn refused_functions_and_bad_arguments_get_the_drivers_answers() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "answers", &["-l:libcuda.so.1", "-ldl"]);
    // Every refused symbol of the table, its every variant.
    let refused: Vec<&str> = functions()
        .iter()
        .filter(|f| f.level == ApiLevel::Driver && matches!(f.disposition, Disposition::Refused(_)))
        .flat_map(|f| f.symbols.iter().map(|s| s.name))
        .collect();
    assert!(refused.len() > 200, "{}", refused.len());
    let s = Server::start(dir.path(), &libdir, &[], &[]);
    let out = Command::new(GL)
        .args(["run", "--remote", &s.tcp, "--"])
        .arg(&prog)
        .args(&refused)
        .env("GPULESS_RECORDER", common::recorder_lib())
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    for name in &refused {
        assert!(stdout.contains(&format!("REFUSED {name} 801\n")), "{name}:\n{stdout}");
    }
    // One line per refused function (variants share their function's line).
    let said = stderr.lines().filter(|l| l.contains("is not supported in client mode yet")).count();
    let bases = functions()
        .iter()
        .filter(|f| f.level == ApiLevel::Driver && matches!(f.disposition, Disposition::Refused(_)))
        .map(|f| f.name)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    assert_eq!(said, bases, "{stderr}");
    let want = [
        "cuDeviceGet(1): 101",
        "cuDeviceTotalMem(dev 3): 101",
        "cuDeviceGetCount(NULL): 1",
        "cuDeviceGetCount: 0 1",
        "cuGetErrorString(1): 0 invalid argument",
        "cuGetErrorName(700): 0 CUDA_ERROR_ILLEGAL_ADDRESS",
        "cuGetErrorName(123456): 1 NULL",
        "cuGetProcAddress(cuLaunchKernelEx, 11000): 0 status 2 null",
        "cuGetProcAddress(cuLaunchKernelEx, 11080): 0 status 0 found",
        "cuGetProcAddress(cuNoSuchFunction, 13000): 0 status 1 null",
        "cuMemAlloc at 3000 is the one at 13000: no",
        "launch of a bogus handle: 400",
        "launch with 2048 threads: 1",
        "launch with a grid of 0: 1",
        "launch: 0",
        "cuMemcpyDtoH from a host address: 1",
        "cuMemcpyDtoH past the end: 1",
        "cuMemcpyDtoH: 0",
        "cuMemAlloc(0 bytes): 1",
        "cuCtxSynchronize: 0",
    ];
    for w in want {
        assert!(stdout.lines().any(|l| l == w), "want `{w}`:\n{stdout}\nstderr:\n{stderr}");
    }
}
