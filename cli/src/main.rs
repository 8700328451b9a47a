//! `gpuless`: record, analyze, replay and serve CUDA traces.
//!
//! This crate is the command-line edge: argument parsing, output formatting, progress bars
//! and exit codes. The work itself lives in the library crates (`gpuless-fatbin`,
//! `gpuless-analyzer`, `gpuless-traces`).
//!
//! Exit codes: 0 success, 2 bad input or failure (the message names the file and offset, or the
//! call), 3 verification mismatch.

/// The server's executors decode and drop segments of records all the time, and replay and
/// analysis allocate per record: mimalloc keeps freed memory for reuse where the C library's
/// allocator gave pages back and faulted them in again.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod analyze_binary;
mod analyze_pieces;
mod analyze_resident;
mod analyze_trace;
mod compile;
mod deploy;
mod devices;
mod driver_check;
mod dump;
mod invoke;
mod invoke_remote;
mod partition;
mod progress;
mod record;
mod remote;
mod replay;
mod run;
mod serve;
mod session;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "gpuless", version, about = "Record, analyze, replay and serve CUDA traces")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a program with every CUDA driver call recorded into a trace file.
    Record {
        /// Trace file to write.
        #[arg(short, long, default_value = "trace.gl")]
        output: PathBuf,
        /// Store device-to-host results in full (default: their hash).
        #[arg(long)]
        capture_outputs: bool,
        /// GPU code stored for each loaded fatbin: `device` keeps what the recording GPU runs
        /// (its SASS, else the PTX it JITs), `all` every architecture (for replay on other GPUs).
        #[arg(long, value_name = "WHAT", default_value = "device", value_parser = ["device", "all"])]
        code: String,
        /// Device-memory arena: `on` (fixed base, exact addresses at replay), `off` (the driver
        /// places allocations; replay translates pointers), or a hex base address.
        #[arg(long, value_name = "on|off|BASE", default_value = "on")]
        arena: String,
        /// API levels counted besides the driver (always recorded): comma-separated from
        /// runtime, cublas, cublaslt, cudnn, nvrtc, other; or `all`.
        #[arg(long, value_name = "LEVELS", default_value = "all")]
        levels: String,
        /// Stop recording when the trace reaches this size (bytes, or with a K/M/G suffix); the
        /// trace is finished normally and a message says at which call it stopped.
        #[arg(long, value_name = "SIZE")]
        max_size: Option<String>,
        /// Threads compressing the trace beside the program, at the lowest CPU priority
        /// (default: a quarter of the CPUs, 1 to 4; 0 compresses on the writer thread).
        #[arg(long, value_name = "N")]
        compress_threads: Option<usize>,
        /// At exit, print how long the recorder spent in each intercepted driver function
        /// (outside the driver), with call counts: what recording costs this program. Each call
        /// is timed, so recording is slightly slower.
        #[arg(long)]
        self_time: bool,
        /// Record while running remotely: the program's driver calls are executed by the
        /// `gpuless serve` at ADDR (client mode, as `gpuless run --remote`) and recorded here.
        #[arg(long, value_name = "ADDR")]
        remote: Option<String>,
        /// With --remote: the server's token (default: $GPULESS_TOKEN).
        #[arg(long, requires = "remote")]
        token: Option<String>,
        /// With a tls:// server: PEM file of the CAs to trust (default: $GPULESS_TLS_CA).
        #[arg(long, value_name = "FILE", requires = "remote")]
        tls_ca: Option<PathBuf>,
        /// The program and its arguments (after `--`).
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Run an unmodified CUDA program here, without a GPU: its driver calls are executed by a
    /// `gpuless serve` at ADDR (client mode). The client library is libgpuless_recorder.so,
    /// loaded as the program's libcuda.so.1. Exits with the program's status (128 + N when
    /// signal N killed it); the session's statistics go to stderr, stdout is the program's.
    Run {
        /// The server: `HOST:PORT`, `tcp://HOST:PORT`, `tls://HOST:PORT` or `unix:PATH` (as
        /// `replay --remote`); or several, separated by commas (`a:7000,b:7000`): the program
        /// sees every server's devices in order, a server that refuses is skipped with a line
        /// (docs/PROTOCOL.md, "A session across several servers").
        #[arg(long, value_name = "ADDR")]
        remote: String,
        /// With a tls:// server: PEM file of the CAs to trust (default: $GPULESS_TLS_CA).
        #[arg(long, value_name = "FILE")]
        tls_ca: Option<PathBuf>,
        /// The partition to ask for: a MIG profile (`3g.71gb`), `sms:N` or `whole` (the default).
        #[arg(long, value_name = "PROFILE")]
        mig: Option<String>,
        /// The server's GPU to run on (its index, as `gpuless devices` numbers them), or GPUs
        /// (`1,0`: the program's device 0 is GPU 1, device 1 GPU 0); default: wherever the
        /// server places the session (docs/SERVING.md, placement). One server only.
        #[arg(long, value_name = "INDEX", value_delimiter = ',')]
        gpu: Vec<u32>,
        /// How many GPUs the program sees (devices 0..N, whole GPUs of one server; default 1,
        /// or as many as --gpu names); with several servers, how many from each.
        #[arg(long, value_name = "N")]
        gpus: Option<u32>,
        /// The server's token (default: $GPULESS_TOKEN).
        #[arg(long)]
        token: Option<String>,
        /// Ask for the best-effort priority class (default: latency-critical).
        #[arg(long)]
        best_effort: bool,
        /// At exit, print the session in words to stderr: calls sent and answered locally, round
        /// trips, waits, segments, bytes each way, blobs.
        #[arg(long)]
        stats: bool,
        /// At exit, print the session's statistics to stderr as one JSON object on one line.
        #[arg(long)]
        json: bool,
        /// The program and its arguments (after `--`).
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// List GPUs with their MIG mode, GPU-instance profiles, legal placements and instances
    /// (read-only NVML queries).
    Devices {
        /// Print JSON instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Re-execute a trace on this machine's GPU and verify every result against the recording.
    Replay {
        /// The trace to replay.
        trace: PathBuf,
        /// Do not compare device-to-host results.
        #[arg(long)]
        no_verify: bool,
        /// No GPU: check the trace against a model of device memory and handles and report
        /// every call a replay could not execute faithfully.
        #[arg(long)]
        dry_run: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Replay a damaged or truncated trace up to its first damaged chunk (a recording killed
        /// while writing) instead of refusing it; what was lost is reported.
        #[arg(long)]
        partial: bool,
        /// Hot replay: set-up once (code, allocations, uploads before the first launch), then
        /// the rest of the trace once to warm up and N more times, each timed.
        #[arg(long, value_name = "N", default_value_t = 0, conflicts_with = "dry_run")]
        iterations: u32,
        /// With --iterations: replay the body a few more times with CUDA events around every
        /// launch and report the GPU time of each launch and of each kernel.
        #[arg(long, requires = "iterations")]
        profile: bool,
        // ---- partitions (issue 6; cli/src/partition.rs) ----
        /// Run on a MIG slice of GPU 0: a profile this GPU offers (`3g.71gb`, or a profile id) or
        /// a MIG device UUID (`MIG-…`). Uses an existing MIG instance unless --create or --emulate.
        #[arg(long, value_name = "PROFILE", conflicts_with = "dry_run")]
        mig: Option<String>,
        /// With --mig PROFILE: create a GPU instance and compute instance of the profile (MIG mode
        /// on, root), replay on it, and destroy both afterwards, also when the replay fails.
        #[arg(long, requires = "mig", conflicts_with = "emulate")]
        create: bool,
        /// With --mig PROFILE on a GPU with MIG off: a soft partition, a green context holding the
        /// profile's SMs with its memory size as an allocation limit. No memory or bandwidth
        /// isolation.
        #[arg(long, requires = "mig")]
        emulate: bool,
        /// With --emulate: ask for the profile's exact SM count (60 for 3g.71gb) with a fine split
        /// instead of the default co-scheduled one (60 -> 64 on an H200). Kernels that use
        /// thread-block clusters (cuDNN on sm_90) may then fail.
        #[arg(long, requires = "emulate")]
        exact_sms: bool,
        /// Set by the parent process of a --create run.
        #[arg(long, hide = true, requires = "mig")]
        mig_created: bool,
        /// Replay on a `gpuless serve` at ADDR (`HOST:PORT`, `tls://HOST:PORT` or `unix:PATH`)
        /// instead of this machine's GPU; --mig then names the partition to ask for (a profile,
        /// `sms:N`, `whole`).
        #[arg(long, value_name = "ADDR", conflicts_with_all = ["dry_run", "create", "emulate", "profile", "partial"])]
        remote: Option<String>,
        /// With --remote: the server's token (default: $GPULESS_TOKEN).
        #[arg(long, requires = "remote")]
        token: Option<String>,
        /// With --remote: ask for the best-effort priority class (default: latency-critical).
        #[arg(long, requires = "remote")]
        best_effort: bool,
        /// With --remote: the server's GPU to replay on (its index); default: wherever the
        /// server places the session.
        #[arg(long, value_name = "INDEX", requires = "remote")]
        gpu: Option<u32>,
        /// With --remote tls://HOST:PORT: PEM file of the CA certificates that may sign the
        /// server's certificate (or the server's self-signed certificate itself). Default:
        /// $GPULESS_TLS_CA.
        #[arg(long, value_name = "FILE", requires = "remote")]
        tls_ca: Option<PathBuf>,
    },
    /// Serve GPUs to remote clients: sessions on partitions, one executor process each, a
    /// content cache, Prometheus metrics (docs/PROTOCOL.md). Runs until SIGTERM, then drains.
    Serve(Box<serve::ServeArgs>),
    /// One session's executor process (started by `gpuless serve`).
    #[command(name = "__executor", hide = true)]
    Executor {
        /// The partition spec.
        #[arg(long)]
        partition: String,
        /// Create a MIG instance of the profile where none exists (the server's `mig_create`).
        #[arg(long)]
        create_mig: bool,
        /// Confined by the server: not dumpable, and (with --seccomp) the allow-list installed
        /// once the GPU is initialized.
        #[arg(long)]
        confined: bool,
        /// Install the seccomp allow-list once the GPU is initialized.
        #[arg(long)]
        seccomp: bool,
    },
    /// Report the GPU code in a host ELF (.so, executable), fatbin or cubin: entries, kernels,
    /// and each kernel's parameter layout read from the cubin (no GPU, no cuobjdump).
    /// On a trace (.gl): call statistics and synchronization points under each policy.
    Analyze {
        /// Files to analyze.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Only entries of this architecture (sm_90, sm_90a, compute_90, ...).
        #[arg(long)]
        arch: Option<String>,
        /// Print JSON (one object per file) instead of tables.
        #[arg(long)]
        json: bool,
        /// For traces: write SVG and PNG figures (sync timeline, segment-size ECDF) into DIR.
        #[arg(long, value_name = "DIR")]
        plot: Option<PathBuf>,
        /// Compare every layout with what the local GPU's driver reports (needs a GPU).
        #[arg(long)]
        check_driver: bool,
        /// For one trace: also write its timeline in the Chrome trace-event format (JSON) to
        /// FILE, for Perfetto (ui.perfetto.dev) or chrome://tracing: a track per thread with its
        /// calls (nested calls under their parents), a device-memory counter.
        #[arg(long, value_name = "FILE")]
        perfetto: Option<PathBuf>,
        /// For traces: what `gpuless serve --cached-execution on` would make of this program —
        /// the records a client would send cut into pieces and run through the executor's
        /// policy: pieces and records run as graphs, piece lengths, and the calls that end
        /// pieces.
        #[arg(long)]
        pieces: bool,
        /// For traces: what warm constants (`gpuless serve --program-keep-alive`) would do for
        /// this program — its uploads, those a session would leave resident at most, and those
        /// the next session of it would not copy again.
        #[arg(long)]
        resident: bool,
        /// Never draw a progress bar.
        #[arg(long)]
        no_progress: bool,
    },
    /// Make a function file (`.gfn`) of a recording of one inference: its set-up and body,
    /// the blobs they use, and its signature — inputs (the body's host-to-device copies) and
    /// outputs (its device-to-host copies). With more recordings (other inputs), refused with
    /// the first difference unless every body is the same but for its input bytes.
    Compile {
        /// The recording(s): the first is compiled, the others compared with it.
        #[arg(required_unless_present = "show")]
        traces: Vec<PathBuf>,
        /// The function file to write.
        #[arg(short, long, default_value = "function.gfn")]
        output: PathBuf,
        /// Print a function file's signature (after checking the file is whole) instead.
        #[arg(long, value_name = "FILE", conflicts_with = "traces")]
        show: Option<PathBuf>,
    },
    /// Run a function file without its program (no Python, no PyTorch): set-up once, the
    /// body as one CUDA graph, the outputs back. Without --input the recorded inputs run and
    /// the outputs are compared with the recording (exit code 3 if they differ). Exit code 2:
    /// a damaged function file, code for another GPU, inputs of the wrong size (nothing runs).
    /// With --remote ADDR: the function deployed under the name FUNCTION (`gpuless deploy`)
    /// runs on that `gpuless serve`; exit code 2 also for the server's refusals and errors.
    Invoke {
        /// The function file (`gpuless compile`), or with --remote the name it was deployed under.
        function: PathBuf,
        /// Input bytes: one file per input in order, or one file holding them all back to back.
        #[arg(short, long = "input", value_name = "FILE")]
        inputs: Vec<PathBuf>,
        /// Write the outputs here, back to back.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Invoke this many more times after the first and time each (hot).
        #[arg(long, default_value_t = 0)]
        iterations: u32,
        /// Print one JSON line.
        #[arg(long)]
        json: bool,
        /// Invoke on the `gpuless serve` at ADDR (`HOST:PORT`, `tls://HOST:PORT` or `unix:PATH`)
        /// the function deployed there under the name FUNCTION.
        #[arg(long, value_name = "ADDR")]
        remote: Option<String>,
        /// With --remote: the server's token (default: $GPULESS_TOKEN).
        #[arg(long, requires = "remote")]
        token: Option<String>,
        /// With --remote: the partition to ask for, a MIG profile (`3g.71gb`), `sms:N` or `whole`.
        #[arg(long, value_name = "PROFILE", requires = "remote")]
        mig: Option<String>,
        /// With --remote tls://HOST:PORT: PEM file of the CA certificates that may sign the
        /// server's certificate (default: $GPULESS_TLS_CA).
        #[arg(long, value_name = "FILE", requires = "remote")]
        tls_ca: Option<PathBuf>,
    },
    /// Register a function file (`gpuless compile`) on a `gpuless serve` under a name, for
    /// `gpuless invoke NAME --remote ADDR`. The file is checked here and again by the server;
    /// its bytes travel only when the server's cache lacks them. A later deploy of the same name
    /// replaces it. Exit code 2: a bad name or file, the server's refusal.
    Deploy {
        /// The function file.
        function: PathBuf,
        /// The server: `HOST:PORT`, `tls://HOST:PORT` or `unix:PATH`.
        #[arg(long, value_name = "ADDR")]
        remote: String,
        /// The name to invoke it by: 1 to 64 of the characters A-Z a-z 0-9 . _ -.
        #[arg(long)]
        name: String,
        /// The server's token (default: $GPULESS_TOKEN).
        #[arg(long)]
        token: Option<String>,
        /// With a tls://HOST:PORT server: PEM file of the CA certificates that may sign its
        /// certificate (default: $GPULESS_TLS_CA).
        #[arg(long, value_name = "FILE")]
        tls_ca: Option<PathBuf>,
    },
    /// Print a trace's records, one line each: index (position in the file), seq, thread,
    /// time, duration, the call with its arguments decoded by the API table (handles as
    /// `stream#N`, addresses in hex, sizes, blobs, launch geometry), results, status name and
    /// the kernel a launch runs.
    Dump {
        /// The trace.
        trace: PathBuf,
        /// First record printed: its index, counted from 0 in file order (inclusive).
        #[arg(long, value_name = "N")]
        from: Option<u64>,
        /// End of the range: the first index not printed (exclusive).
        #[arg(long, value_name = "M")]
        to: Option<u64>,
        /// Only the records of this OS thread id (as printed in the thread column).
        #[arg(long, value_name = "T")]
        thread: Option<u64>,
        /// One JSON object per record and line (JSON Lines), with the same fields.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        // A closed pipe (`gpuless analyze ... | head`) is the reader's choice, not an error.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpuless: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Whether `path` starts with the trace file magic (unreadable files are left to the
/// binary analyzer, whose error names them).
fn is_trace_file(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut prefix = [0u8; 16];
    let n = std::fs::File::open(path).and_then(|mut f| f.read(&mut prefix)).unwrap_or(0);
    gpuless_traces::is_trace(&prefix[..n])
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Record {
            output,
            capture_outputs,
            code,
            arena,
            levels,
            max_size,
            compress_threads,
            self_time,
            remote,
            token,
            tls_ca,
            command,
        } => {
            if let Some(remote) = remote {
                let args = run::RunArgs {
                    remote,
                    token,
                    tls_ca,
                    trace: Some(std::path::absolute(&output)?),
                    capture_outputs,
                    ..run::RunArgs::default()
                };
                return run::run(&args, &command);
            }
            let opts =
                record::RecordOptions { capture_outputs, code, arena, levels, max_size, compress_threads, self_time };
            record::run(&output, &opts, &command)
        }
        Command::Replay {
            trace,
            no_verify,
            dry_run,
            json,
            partial,
            iterations,
            profile,
            mig,
            create,
            emulate,
            exact_sms,
            mig_created,
            remote,
            token,
            best_effort,
            gpu,
            tls_ca,
        } => {
            if let Some(addr) = remote {
                let args = remote::RemoteArgs {
                    addr,
                    partition: mig,
                    gpu,
                    token,
                    best_effort,
                    iterations,
                    json,
                    no_verify,
                    tls_ca,
                };
                return remote::run(&trace, &args);
            }
            if dry_run {
                replay::dry_run(&trace, json, partial)
            } else {
                let part = partition::PartitionArgs { mig, create, emulate, exact_sms, created: mig_created };
                let opts = replay::RunOptions { no_verify, iterations, json, partial, profile };
                replay::run(&trace, &opts, &part)
            }
        }
        Command::Run { remote, tls_ca, mig, gpu, gpus, token, best_effort, stats, json, command } => {
            let args = run::RunArgs {
                remote,
                tls_ca,
                partition: mig,
                gpu,
                gpus,
                token,
                best_effort,
                stats,
                json,
                ..run::RunArgs::default()
            };
            run::run(&args, &command)
        }
        Command::Serve(args) => serve::run(&args),
        Command::Executor { partition, create_mig, confined, seccomp } => {
            serve::executor(&partition, create_mig, confined, seccomp)
        }
        Command::Devices { json } => devices::run(json).map(|()| ExitCode::SUCCESS),
        Command::Compile { traces, output, show } => match show {
            Some(f) => compile::show(&f).map(|()| ExitCode::SUCCESS),
            None => compile::run(&traces, &output).map(|()| ExitCode::SUCCESS),
        },
        Command::Invoke { function, inputs, output, iterations, json, remote, token, mig, tls_ca } => {
            let remote = remote.map(|addr| invoke::Target { addr, token, tls_ca, partition: mig });
            let a = invoke::InvokeArgs { function, inputs, output, iterations, json, remote };
            match &a.remote {
                Some(t) => invoke_remote::run(&a, t),
                None => invoke::run(&a),
            }
        }
        Command::Deploy { function, remote, name, token, tls_ca } => {
            deploy::run(&deploy::DeployArgs { function, addr: remote, name, token, tls_ca })
        }
        Command::Dump { trace, from, to, thread, json } => {
            dump::run(&trace, &dump::DumpOptions { from, to, thread, json }).map(|()| ExitCode::SUCCESS)
        }
        Command::Analyze { paths, arch, json, plot, perfetto, check_driver, pieces, resident, no_progress } => {
            if let Some(a) = &arch {
                if gpuless_fatbin::parse_arch(a).is_none() {
                    anyhow::bail!("--arch {a}: expected a name like sm_90, sm_90a, sm_100f or compute_90");
                }
            }
            if check_driver {
                let s = driver_check::run(&paths, arch.as_deref())?;
                println!("{}", serde_json::to_string_pretty(&s)?);
                eprintln!(
                    "checked {} kernels ({} parameters) in {} cubins on sm_{}: {} layout mismatches, {} attribute differences, {} cubins skipped; {} occupancy answers and {} kernels' attributes computed, {} differ from the driver",
                    s.kernels, s.params, s.cubins, s.device_sm, s.mismatches.len(), s.attribute_mismatches.len(), s.cubins_skipped,
                    s.occupancy_checked, s.function_attributes_checked, s.occupancy_mismatch_count
                );
                return Ok(if s.mismatches.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(3) });
            }
            if let Some(out) = &perfetto {
                match paths.as_slice() {
                    [p] if is_trace_file(p) => {}
                    [p] => anyhow::bail!("{}: --perfetto applies to traces only", p.display()),
                    _ => anyhow::bail!("--perfetto {}: give exactly one trace", out.display()),
                }
            }
            for p in &paths {
                if is_trace_file(p) {
                    let opts = analyze_trace::TraceAnalyzeOpts {
                        json,
                        plot_dir: plot.clone(),
                        perfetto: perfetto.clone(),
                        pieces,
                        resident,
                        progress: !no_progress,
                    };
                    analyze_trace::analyze_trace(p, &opts)?;
                } else {
                    if plot.is_some() {
                        anyhow::bail!("{}: --plot applies to traces only", p.display());
                    }
                    analyze_binary::run(p, arch.as_deref(), json, !no_progress)?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
