//! `gpuless record -o trace.gl -- CMD ARGS...`: runs CMD with the recorder preloaded.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context};

/// File name of the recorder library, looked for next to the `gpuless` binary.
pub const RECORDER_LIB: &str = "libgpuless_recorder.so";

/// Finds the recorder: `$GPULESS_RECORDER`, else next to this executable.
pub fn recorder_path() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("GPULESS_RECORDER") {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        bail!("GPULESS_RECORDER={} is not a file", p.display());
    }
    let exe = std::env::current_exe().context("locating the gpuless executable")?;
    let candidate = exe.with_file_name(RECORDER_LIB);
    if candidate.is_file() {
        return Ok(candidate);
    }
    bail!(
        "{RECORDER_LIB} not found next to {} (build it with `cargo build --release -p gpuless-recorder`, \
         or set GPULESS_RECORDER to its path)",
        exe.display()
    )
}

/// Runs `cmd` under the recorder, writing `out`; returns the program's own exit status.
pub fn run(out: &Path, capture_outputs: bool, cmd: &[String]) -> anyhow::Result<ExitCode> {
    let Some((program, args)) = cmd.split_first() else {
        bail!("no command given: gpuless record -o trace.gl -- CMD ARGS...")
    };
    let lib = recorder_path()?.canonicalize()?;
    let out = std::path::absolute(out)?;
    match std::fs::remove_file(&out) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("{}: cannot replace the old trace", out.display())),
    }
    let preload = match std::env::var_os("LD_PRELOAD") {
        Some(p) if !p.is_empty() => {
            let mut s = lib.clone().into_os_string();
            s.push(":");
            s.push(p);
            s
        }
        _ => lib.into_os_string(),
    };
    let mut child = Command::new(program);
    child.args(args).env("LD_PRELOAD", preload).env("GPULESS_TRACE", &out);
    if capture_outputs {
        child.env("GPULESS_CAPTURE_OUTPUTS", "1");
    }
    let status = child.status().with_context(|| format!("cannot start {program}"))?;
    if out.is_file() {
        let size = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
        eprintln!("gpuless: recorded {} ({size} bytes)", out.display());
    } else {
        eprintln!("gpuless: {program} made no CUDA driver call; no trace written");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return Ok(ExitCode::from(128u8.wrapping_add(sig as u8)));
        }
    }
    Ok(ExitCode::from(status.code().unwrap_or(1) as u8))
}
