//! Helpers shared by the CLI's end-to-end tests.

use std::process::Command;

/// Runs the `gpuless` binary with `args`: (exit code, stdout, stderr).
pub fn gpuless(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuless")).args(args).output().expect("run gpuless");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
