//! Helpers shared by the CLI's end-to-end tests.

use std::path::{Path, PathBuf};
use std::process::Command;

#[allow(dead_code)] // only the tests that use the stand-in driver need it
#[path = "../../../recorder/tests/common/mod.rs"]
pub mod common;

/// Runs the `gpuless` binary with `args`: (exit code, stdout, stderr).
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn gpuless(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuless")).args(args).output().expect("run gpuless");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Builds the recorder's stand-in driver and its driver-API program (`recorder/tests/fake/`
/// `libcuda.c` and `program.c`) with `cc` in `dir`; returns (the directory holding the stand-in
/// libcuda, the program).
///
/// The directory holds the stand-in as `libcuda.so.1` (the name programs `dlopen`) and as
/// `libcuda.so` (the first name cudarc tries): with `LD_LIBRARY_PATH` set to it, both a
/// recorded program and `gpuless replay` run on the stand-in, also on a machine where the real
/// driver is installed. The stand-in behaves like a tiny device: memory lives in a 4 MiB host
/// buffer, `cuLaunchKernel` of its kernel `scale(float *data, float factor, int n)` multiplies
/// in place; with `FAKE_CUDA_SCALE_BIAS=x` in the environment of the process that loads it, the
/// kernel adds `x` as well (a device whose results differ from the recording's).
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn build_stand_in(dir: &Path) -> (PathBuf, PathBuf) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../recorder/tests/fake");
    let lib = dir.join("libcuda.so.1");
    common::cc(&["-O2", "-shared", "-fPIC", "-o", lib.to_str().unwrap(), src.join("libcuda.c").to_str().unwrap()]);
    let alias = dir.join("libcuda.so");
    if alias.symlink_metadata().is_err() {
        std::os::unix::fs::symlink("libcuda.so.1", &alias).expect("link libcuda.so to the stand-in");
    }
    let prog = dir.join("program");
    common::cc(&["-O2", "-o", prog.to_str().unwrap(), src.join("program.c").to_str().unwrap(), "-ldl"]);
    (dir.to_path_buf(), prog)
}

/// Builds the stand-in in `dir` ([`build_stand_in`]) and the test program
/// `recorder/tests/fake/NAME.c` as `dir/NAME`, with `-Wall`, the stand-in's directory on the
/// library path and `libs` (`-l:libcuda.so.1` links it against the stand-in); returns (the
/// stand-in's directory, the program).
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn build_program(dir: &Path, name: &str, libs: &[&str]) -> (PathBuf, PathBuf) {
    let (libdir, _) = build_stand_in(dir);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../recorder/tests/fake/{name}.c"));
    let prog = dir.join(name);
    let (p, s, l) = (prog.to_str().unwrap(), src.to_str().unwrap(), libdir.to_str().unwrap());
    common::cc(&[&["-O2", "-Wall", "-o", p, s, "-L", l], libs].concat());
    (libdir, prog)
}

/// Builds the stand-in in `dir` ([`build_stand_in`]: the stand-in libcuda is in `dir`
/// afterwards) and records its program under the real recorder (`LD_PRELOAD` of the recorder
/// library, built if needed; `GPULESS_TRACE`); returns the trace, `dir/t.gl`.
///
/// `arg` is the program's one argument, its mode (see `program.c`); `None` runs it without one,
/// as `recorder/tests/fake_driver.rs::records_a_driver_api_program` does: one 256-byte
/// allocation in the recorder's arena, an upload, a module load, `cuLaunchKernel` of `scale`
/// (factor 2.5) and `cuLaunchKernelEx`, a synchronous and an async download (hashed in the
/// trace), a free. The recording must succeed and leave the trace, else the test fails.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn record_stand_in(dir: &Path, arg: Option<&str>) -> PathBuf {
    let (libdir, prog) = build_stand_in(dir);
    let trace = dir.join("t.gl");
    let out = Command::new(&prog)
        .args(arg)
        .env("LD_LIBRARY_PATH", &libdir)
        .env("LD_PRELOAD", common::recorder_lib())
        .env("GPULESS_TRACE", &trace)
        .env_remove("FAKE_CUDA_SCALE_BIAS")
        .output()
        .expect("run the stand-in program");
    assert!(out.status.success(), "recording the stand-in program failed: {out:?}");
    assert!(trace.is_file(), "the recording left no trace at {}: {out:?}", trace.display());
    trace
}

/// `gpuless analyze --json TRACE`'s report of the `gpuless` synchronization policy (panics when
/// the analysis fails or lacks it).
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn gpuless_policy(trace: &Path) -> serde_json::Value {
    let an = Command::new(env!("CARGO_BIN_EXE_gpuless")).args(["analyze", "--json"]).arg(trace).output().unwrap();
    assert!(an.status.success(), "{an:?}");
    let report: serde_json::Value = serde_json::from_slice(&an.stdout).unwrap();
    report["sync"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["policy"] == "gpuless"))
        .cloned()
        .unwrap_or_else(|| panic!("no gpuless policy in {report}"))
}

/// Writes `dir/tenants`, a tenants file of two tenants (`alice` with token `token-a`, `bob`
/// with `token-b`), for `gpuless serve --tenants-file`; returns its path as a string.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn two_tenants(dir: &Path) -> String {
    let f = dir.join("tenants");
    std::fs::write(&f, "# who may use this server\nalice token-a\nbob token-b\n").unwrap();
    f.display().to_string()
}

/// Runs `prog` on the stand-in in `libdir` under the recorder, writing `trace`, with `env`
/// set; asserts it succeeded and returns its stdout.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn record(prog: &Path, libdir: &Path, trace: &Path, env: &[(&str, &str)]) -> String {
    let out = Command::new(prog)
        .env("LD_LIBRARY_PATH", libdir)
        .env("LD_PRELOAD", common::recorder_lib())
        .env("GPULESS_TRACE", trace)
        .env_remove("FAKE_CUDA_SCALE_BIAS")
        .envs(env.iter().copied())
        .output()
        .expect("run the program under the recorder");
    assert!(out.status.success(), "recording failed: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `gpuless replay TRACE --json` on the stand-in in `libdir`, with `env` added: (exit code, the
/// JSON report, the whole output for messages).
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn replay_json(libdir: &Path, trace: &Path, env: &[(&str, &str)]) -> (i32, serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuless"))
        .arg("replay")
        .arg(trace)
        .arg("--json")
        .env("LD_LIBRARY_PATH", libdir)
        .env_remove("FAKE_CUDA_SCALE_BIAS")
        .env_remove("FAKE_CUDA_DEFER_HOSTFN")
        .envs(env.iter().copied())
        .output()
        .expect("run gpuless replay");
    let shown = format!("{out:?}");
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("no JSON report ({e}): {shown}"));
    (out.status.code().unwrap_or(-1), report, shown)
}
