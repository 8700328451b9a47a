//! `gpuless invoke`: runs a function file (`gpuless compile`) without its program — no Python,
//! no PyTorch — on this machine's GPU (`gpuless_replayer::function::Invoker`). The inputs are
//! checked against the signature before anything runs; the driver starts on a thread while the
//! file is read. With `--remote`, a function deployed on a `gpuless serve` runs there instead
//! ([`crate::invoke_remote`]).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use gpuless_replayer::function::{self, Invoker, Manifest};
use gpuless_replayer::replay::{hot, init_device, since_process_start};
use serde::Serialize;

/// What `gpuless invoke` was asked.
#[derive(Debug, Default)]
pub struct InvokeArgs {
    /// The function file.
    pub function: PathBuf,
    /// Input files: one per input, or one holding every input back to back. None: the
    /// recorded inputs, and the outputs compared with the recording.
    pub inputs: Vec<PathBuf>,
    /// Where the outputs go, back to back.
    pub output: Option<PathBuf>,
    /// Timed invocations after the first.
    pub iterations: u32,
    /// One JSON line instead of text.
    pub json: bool,
    /// Invoke the function deployed under the name `function` on this server instead.
    pub remote: Option<Target>,
}

/// What one `gpuless invoke` did (`--json`).
#[derive(Debug, Serialize)]
pub(crate) struct Summary {
    pub(crate) function: String,
    /// Seconds from process start to the first invocation's outputs.
    pub(crate) first_result_s: f64,
    /// Seconds the set-up and the body's capture took (after the driver started).
    pub(crate) prepare_s: f64,
    /// Seconds reading and checking the function file, and starting the driver (at once, on
    /// two threads); `None` remotely (the server holds the file, its driver runs).
    pub(crate) read_s: Option<f64>,
    /// See `read_s`.
    pub(crate) init_s: Option<f64>,
    /// The set-up's slowest functions (name, calls, seconds) and the body's capture seconds
    /// (local only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) setup_top: Vec<(String, u64, f64)>,
    pub(crate) capture_s: Option<f64>,
    /// The body runs as one CUDA graph.
    pub(crate) graph: bool,
    /// Why it does not, if it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) eager_because: Option<String>,
    pub(crate) iterations: u32,
    /// Wall-clock milliseconds per timed invocation (inputs written, launch, outputs ready).
    pub(crate) hot_ms_median: Option<f64>,
    pub(crate) hot_ms_min: Option<f64>,
    /// Outputs of the signature (`None`: not known, remotely).
    pub(crate) outputs: Option<usize>,
    pub(crate) output_bytes: u64,
    /// Outputs compared with the recording (recorded inputs only) and equal; those that differ.
    pub(crate) verified: u64,
    pub(crate) mismatches: usize,
}

/// Checks the input files against `m`'s inputs: (file, offset in it, bytes) per input.
fn plan_inputs(m: &Manifest, files: &[PathBuf]) -> anyhow::Result<Vec<(PathBuf, u64, u64)>> {
    let want: Vec<u64> = m.inputs.iter().map(|p| p.bytes).collect();
    let sizes = files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).with_context(|| format!("input {}", f.display())))
        .collect::<anyhow::Result<Vec<u64>>>()?;
    let total: u64 = want.iter().sum();
    if want.is_empty() {
        anyhow::bail!(
            "{}: the function takes no input (its recording uploaded nothing the program computed per call; \
             record it with two different inputs to make them inputs); nothing was run",
            files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", ")
        );
    }
    let list =
        || m.inputs.iter().enumerate().map(|(n, p)| format!("input {n}: {} B", p.bytes)).collect::<Vec<_>>().join(", ");
    if let ([f], [size]) = (files, sizes.as_slice()) {
        if *size == total {
            let mut at = 0;
            return Ok(want
                .iter()
                .map(|&w| {
                    at += w;
                    (f.clone(), at - w, w)
                })
                .collect());
        }
        if want.len() == 1 || *size != want.first().copied().unwrap_or(0) {
            anyhow::bail!(
                "{}: {size} bytes, but the function takes {total} bytes of input ({}); nothing was run",
                f.display(),
                list()
            );
        }
    }
    if files.len() != want.len() {
        anyhow::bail!(
            "{} input files given; the function takes {} inputs ({}), one file each or one file of {total} bytes; \
             nothing was run",
            files.len(),
            want.len(),
            list()
        );
    }
    for (n, ((f, size), w)) in files.iter().zip(&sizes).zip(&want).enumerate() {
        if size != w {
            anyhow::bail!("{}: {size} bytes, but input {n} takes {w} bytes ({}); nothing was run", f.display(), list());
        }
    }
    Ok(files.iter().cloned().zip(want).map(|(f, w)| (f, 0, w)).collect())
}

/// Reads each input into the invoker's buffer for it.
fn fill_inputs(inv: &mut Invoker, plan: &[(PathBuf, u64, u64)]) -> anyhow::Result<()> {
    for (n, (f, at, len)) in plan.iter().enumerate() {
        let buf = inv.input_mut(n).context("the function has fewer inputs than its manifest")?;
        let mut file = std::fs::File::open(f).with_context(|| format!("input {}", f.display()))?;
        std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(*at))?;
        file.read_exact(&mut buf[..*len as usize]).with_context(|| format!("reading input {}", f.display()))?;
    }
    Ok(())
}

/// Writes every output, back to back.
fn write_outputs(inv: &Invoker, path: &Path) -> anyhow::Result<u64> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).with_context(|| path.display().to_string())?);
    let mut n = 0u64;
    for k in 0..inv.manifest().outputs.len() {
        let b = inv.output(k).unwrap_or_default();
        out.write_all(b)?;
        n += b.len() as u64;
    }
    out.flush()?;
    Ok(n)
}

/// The driver's number of hardware work queues for this process, unless the user chose one:
/// a local invocation runs its body as one graph on one stream, and the driver creates a
/// context with one queue in half the time (H200, driver 580: 58 ms against 120 ms;
/// `scripts/probe-driver-start.py`), which is most of what a cold invocation waits for. A
/// function whose graph has parallel branches may run them one after another this way:
/// `CUDA_DEVICE_MAX_CONNECTIONS=8` (the driver's default) restores concurrency.
fn one_connection() {
    const VAR: &str = "CUDA_DEVICE_MAX_CONNECTIONS";
    if std::env::var_os(VAR).is_none() {
        // No thread has started and the driver is not loaded yet: cuInit reads the variable.
        std::env::set_var(VAR, "1");
    }
}

/// Where a function is invoked.
#[derive(Debug, Clone, Default)]
pub struct Target {
    /// The server.
    pub addr: String,
    /// Its token (else `GPULESS_TOKEN`).
    pub token: Option<String>,
    /// The CA file for a `tls://` server.
    pub tls_ca: Option<PathBuf>,
    /// The partition to ask for (`whole` by default).
    pub partition: Option<String>,
}

/// `gpuless invoke FUNCTION`: exit 0, or 3 when an output differs from the recording.
pub fn run(a: &InvokeArgs) -> anyhow::Result<ExitCode> {
    let t0 = Instant::now();
    one_connection();
    let device = std::thread::spawn(move || (init_device(), t0.elapsed().as_secs_f64()));
    let opened = (|| -> anyhow::Result<_> {
        let f = function::open(&a.function)?;
        let read_s = t0.elapsed().as_secs_f64();
        let plan = if a.inputs.is_empty() { None } else { Some(plan_inputs(&f.manifest, &a.inputs)?) };
        Ok((f, read_s, plan))
    })();
    // Joined before any error returns: a process that exits while another thread is inside
    // cuInit can crash in the driver's teardown (a refused input exited 139 on the H200).
    let (device, init_s) = device.join().map_err(|_| anyhow::anyhow!("driver initialization panicked"))?;
    let (f, read_s, plan) = opened?;
    let device = device?;
    let mut inv = Invoker::prepare(device, f).with_context(|| a.function.display().to_string())?;
    let recorded = plan.is_none();
    if let Some(p) = &plan {
        fill_inputs(&mut inv, p)?;
    }
    inv.invoke(recorded)?;
    let first_result_s = since_process_start();
    let output_bytes = match &a.output {
        Some(p) => write_outputs(&inv, p)?,
        None => (0..inv.manifest().outputs.len()).map(|k| inv.output(k).map_or(0, |b| b.len() as u64)).sum(),
    };
    let mut wall = Vec::with_capacity(a.iterations as usize);
    for k in 0..a.iterations {
        let t = Instant::now();
        inv.invoke(recorded && k + 1 == a.iterations)?;
        wall.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let min = wall.iter().copied().reduce(f64::min);
    let (verified, mismatches) = inv.verified();
    let s = Summary {
        function: a.function.display().to_string(),
        first_result_s,
        prepare_s: inv.setup_s(),
        read_s: Some(read_s),
        init_s: Some(init_s),
        setup_top: inv.setup_profile().0.to_vec(),
        capture_s: Some(inv.setup_profile().1),
        graph: inv.mode() == function::Mode::Graph,
        eager_because: inv.refused().map(str::to_string),
        iterations: a.iterations,
        hot_ms_median: (!wall.is_empty()).then(|| hot::median(&mut wall)),
        hot_ms_min: min,
        outputs: Some(inv.manifest().outputs.len()),
        output_bytes,
        verified,
        mismatches: mismatches.len(),
    };
    for w in inv.warnings() {
        eprintln!("gpuless: warning: {w}");
    }
    for m in mismatches {
        eprintln!("gpuless: {}: {m}", a.function.display());
    }
    if a.json {
        println!("{}", serde_json::to_string(&s)?);
    } else {
        print(&s, recorded);
    }
    Ok(if s.mismatches > 0 { ExitCode::from(3) } else { ExitCode::SUCCESS })
}

/// Prints `s` in words; `recorded`: the recorded inputs ran (their outputs were verified).
pub(crate) fn print(s: &Summary, recorded: bool) {
    let how = match &s.eager_because {
        None => "as one CUDA graph".to_string(),
        Some(why) => format!("eagerly ({why})"),
    };
    println!("function     {} ({how})", s.function);
    match (s.read_s, s.init_s) {
        (Some(read), Some(init)) => println!(
            "first result {:.3} s from process start (file read {read:.3} s and driver started {init:.3} s at once; \
             set-up and capture {:.3} s)",
            s.first_result_s, s.prepare_s
        ),
        _ => println!(
            "first result {:.3} s from process start (set-up and capture on the server {:.3} s)",
            s.first_result_s, s.prepare_s
        ),
    }
    if let (Some(med), Some(min)) = (s.hot_ms_median, s.hot_ms_min) {
        println!("hot          {med:.3} ms median, {min:.3} ms min over {} invocations", s.iterations);
    }
    match s.outputs {
        Some(n) => println!("outputs      {n} ({} bytes)", s.output_bytes),
        None => println!("outputs      {} bytes", s.output_bytes),
    }
    if recorded {
        println!("verified     {} outputs equal to the recording, {} differ", s.verified, s.mismatches);
    }
}
