//! `gpuless invoke NAME --remote ADDR`: invokes a function deployed on a `gpuless serve`
//! (`gpuless deploy`). One session without an arena of its own (the executor reserves the
//! function's); each invocation is one `Invoke` carrying the inputs back to back and one
//! `Outputs` back. The executor sets the function up at the first invocation and keeps it for
//! the session's others (the hot path). The signature is the server's: inputs of the wrong size
//! are refused there, before anything runs.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use gpuless_replayer::replay::{hot, since_process_start};
use gpuless_replayer::server::functions::check_name;
use gpuless_traces::protocol::{Outputs, MAX_FRAME};
use serde::Serialize;

use crate::invoke::{print, InvokeArgs, Summary, Target};
use crate::session;

/// What a remote invocation did (`--json`): the local invocation's keys and the traffic.
#[derive(Debug, Serialize)]
struct RemoteSummary {
    #[serde(flatten)]
    base: Summary,
    remote: bool,
    /// The session's id on the server.
    session: u64,
    /// Seconds connecting and opening the session (to its `Welcome`).
    session_s: f64,
    /// Bytes sent and received, frames and headers included.
    bytes_up: u64,
    bytes_down: u64,
    /// The server's own milliseconds per timed invocation (without the network).
    run_ms_median: Option<f64>,
}

/// Every input file, back to back (one file per input in order, or one holding them all: the
/// server checks the total against the signature).
fn read_inputs(files: &[PathBuf]) -> anyhow::Result<Vec<u8>> {
    let mut all = Vec::new();
    for f in files {
        let mut file = std::fs::File::open(f).with_context(|| format!("input {}", f.display()))?;
        std::io::Read::read_to_end(&mut file, &mut all).with_context(|| format!("reading input {}", f.display()))?;
        // Headroom for the Invoke's name and flag.
        if all.len() > MAX_FRAME - 128 {
            anyhow::bail!(
                "{}: the inputs add up to more than one message holds ({} bytes); nothing was sent",
                f.display(),
                MAX_FRAME - 128
            );
        }
    }
    Ok(all)
}

/// Writes the outputs (back to back, as received).
fn write_outputs(path: &Path, o: &Outputs) -> anyhow::Result<()> {
    let mut f = std::fs::File::create(path).with_context(|| path.display().to_string())?;
    f.write_all(&o.outputs).with_context(|| path.display().to_string())?;
    Ok(())
}

/// `gpuless invoke NAME --remote ADDR`: exit 0, 2 on any error (the server's message), 3 when an
/// output differs from the recording.
pub fn run(a: &InvokeArgs, t: &Target) -> anyhow::Result<ExitCode> {
    let name = a.function.to_string_lossy().into_owned();
    check_name(&name).map_err(anyhow::Error::msg)?;
    let inputs = read_inputs(&a.inputs)?;
    let recorded = a.inputs.is_empty();
    let t_open = Instant::now();
    let (mut conn, w, endpoint) = session::open(&session::SessionSpec {
        addr: &t.addr,
        token: t.token.as_deref(),
        tls_ca: t.tls_ca.as_deref(),
        partition: t.partition.as_deref(),
        // `function:NAME` announces the one function the session invokes: the server may hand
        // it an executor that kept NAME set up after an earlier session (a warm function).
        program: format!("{}{name}", gpuless_replayer::server::warm::PROGRAM_PREFIX),
        whole_segments: false,
        gpu: None,
        ..session::SessionSpec::default()
    })?;
    let session_s = t_open.elapsed().as_secs_f64();
    let what = || format!("invoking `{name}` on {endpoint}");
    let first = conn.invoke(&name, recorded, &inputs).with_context(what)?;
    let first_result_s = since_process_start();
    if let Some(p) = &a.output {
        write_outputs(p, &first)?;
    }
    let (mut verified, mut mismatches) = (first.verified, first.mismatches.clone());
    let mut wall = Vec::with_capacity(a.iterations as usize);
    let mut run = Vec::with_capacity(a.iterations as usize);
    for k in 0..a.iterations {
        let t0 = Instant::now();
        let o = conn.invoke(&name, recorded && k + 1 == a.iterations, &inputs).with_context(what)?;
        wall.push(t0.elapsed().as_secs_f64() * 1e3);
        run.push(o.run_us as f64 / 1e3);
        verified += o.verified;
        mismatches.extend(o.mismatches);
    }
    conn.close().with_context(|| format!("closing the session on {endpoint}"))?;
    let min = wall.iter().copied().reduce(f64::min);
    let s = RemoteSummary {
        base: Summary {
            function: name.clone(),
            first_result_s,
            prepare_s: first.prepare_us as f64 / 1e6,
            read_s: None,
            init_s: None,
            setup_top: Vec::new(),
            capture_s: None,
            graph: first.graph,
            eager_because: None,
            iterations: a.iterations,
            hot_ms_median: (!wall.is_empty()).then(|| hot::median(&mut wall)),
            hot_ms_min: min,
            outputs: None,
            output_bytes: first.outputs.len() as u64,
            verified,
            mismatches: mismatches.len(),
        },
        remote: true,
        session: w.session,
        session_s,
        bytes_up: conn.traffic.bytes_up,
        bytes_down: conn.traffic.bytes_down,
        run_ms_median: (!run.is_empty()).then(|| hot::median(&mut run)),
    };
    for m in &mismatches {
        eprintln!("gpuless: {name}: {m}");
    }
    if a.json {
        println!("{}", serde_json::to_string(&s)?);
    } else {
        print(&s.base, recorded);
        println!(
            "remote       {endpoint}, session {} on {} {}; {} bytes up, {} bytes down{}",
            s.session,
            w.partition.kind,
            w.partition.profile,
            s.bytes_up,
            s.bytes_down,
            s.run_ms_median.map(|m| format!("; {m:.3} ms median on the server")).unwrap_or_default()
        );
    }
    Ok(if s.base.mismatches > 0 { ExitCode::from(3) } else { ExitCode::SUCCESS })
}
