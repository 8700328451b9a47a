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

/// What `gpuless record` was asked for besides the command.
#[derive(Debug, Clone, Default)]
pub struct RecordOptions {
    /// Store device-to-host results in full.
    pub capture_outputs: bool,
    /// `device` or `all`.
    pub code: String,
    /// `on`, `off` or a hex base.
    pub arena: String,
    /// Levels counted besides the driver.
    pub levels: String,
    /// Trace size limit.
    pub max_size: Option<String>,
    /// Compression threads (`GPULESS_COMPRESS_THREADS`); `None`: the writer's default.
    pub compress_threads: Option<usize>,
    /// Print the recorder's time per function at exit (`GPULESS_DIAG=selftime`).
    pub self_time: bool,
}

/// `12345`, `64K`, `512M`, `2G` (powers of 1024) as bytes.
pub fn parse_size(s: &str) -> anyhow::Result<u64> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => bail!("--max-size {s}: unknown suffix `{c}` (use K, M, G or T)"),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    let n: u64 = num.trim().parse().with_context(|| format!("--max-size {s}: expected a number of bytes like 512M"))?;
    n.checked_mul(mult).filter(|&b| b > 0).ok_or_else(|| anyhow::anyhow!("--max-size {s}: out of range"))
}

/// Pid of the program being recorded, for forwarding SIGTERM.
static CHILD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let pid = CHILD.load(std::sync::atomic::Ordering::Relaxed);
    if pid > 0 && sig == libc::SIGTERM {
        // SAFETY: kill(2) is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    }
}

/// Runs `cmd` under the recorder, writing `out`; returns the program's own exit status.
pub fn run(out: &Path, opts: &RecordOptions, cmd: &[String]) -> anyhow::Result<ExitCode> {
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
    if opts.capture_outputs {
        child.env("GPULESS_CAPTURE_OUTPUTS", "1");
    }
    if opts.code == "all" {
        child.env("GPULESS_CODE", "all");
    }
    match opts.arena.as_str() {
        "" | "on" => {}
        "off" => {
            child.env("GPULESS_ARENA", "off");
        }
        base => {
            let hex = base.trim_start_matches("0x");
            let b = u64::from_str_radix(hex, 16)
                .with_context(|| format!("--arena {base}: expected on, off or a hex base like 0x640000000000"))?;
            if b % (2 << 20) != 0 {
                bail!("--arena {base}: the base must be a multiple of 2 MiB");
            }
            child.env("GPULESS_ARENA", format!("{b:#x}"));
        }
    }
    if !opts.levels.is_empty() && opts.levels != "all" {
        use gpuless_analyzer::api::ApiLevel;
        let known: Vec<&str> = ApiLevel::ALL.iter().filter(|&&l| l != ApiLevel::Driver).map(|l| l.name()).collect();
        for l in opts.levels.split(',') {
            if !known.contains(&l.trim()) {
                bail!("--levels {}: unknown level `{l}` (choose from {})", opts.levels, known.join(", "));
            }
        }
        child.env("GPULESS_LEVELS", &opts.levels);
    }
    if opts.self_time {
        child.env("GPULESS_DIAG", "selftime");
    }
    if let Some(m) = &opts.max_size {
        child.env("GPULESS_MAX_SIZE", parse_size(m)?.to_string());
    }
    if let Some(n) = opts.compress_threads {
        child.env("GPULESS_COMPRESS_THREADS", n.to_string());
    }
    let mut running = child.spawn().with_context(|| format!("cannot start {program}"))?;
    forward_signals_to(&running);
    let status = running.wait().with_context(|| format!("waiting for {program}"))?;
    if out.is_file() {
        let size = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
        eprintln!("gpuless: recorded {} ({size} bytes)", out.display());
    } else {
        eprintln!("gpuless: {program} made no CUDA driver call; no trace written");
    }
    Ok(exit_code(status))
}

/// Makes this process wait for `child` instead of dying first: Ctrl-C reaches the program from
/// the terminal, SIGINT is ignored here, and SIGTERM is passed on to the program.
pub fn forward_signals_to(child: &std::process::Child) {
    CHILD.store(child.id() as i32, std::sync::atomic::Ordering::Relaxed);
    // SAFETY: installing a plain extern "C" handler.
    unsafe {
        libc::signal(libc::SIGINT, forward as extern "C" fn(libc::c_int) as libc::sighandler_t);
        libc::signal(libc::SIGTERM, forward as extern "C" fn(libc::c_int) as libc::sighandler_t);
    }
}

/// The program's exit status as ours: its code, or 128 + the signal that killed it.
pub fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return ExitCode::from(128u8.wrapping_add(sig as u8));
        }
    }
    ExitCode::from(status.code().unwrap_or(1) as u8)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64K").unwrap(), 64 << 10);
        assert_eq!(parse_size("512m").unwrap(), 512 << 20);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert!(parse_size("0").is_err());
        assert!(parse_size("12Q").unwrap_err().to_string().contains("unknown suffix"));
        assert!(parse_size("lots").is_err());
    }
}
