//! `gpuless`: record, analyze, replay and serve CUDA traces.
//!
//! This crate is the command-line edge: argument parsing, output formatting, progress bars
//! and exit codes. The work itself lives in the library crates (`gpuless-fatbin`,
//! `gpuless-analyzer`, `gpuless-traces`).
//!
//! Exit codes: 0 success, 2 bad input or failure (the message names the file and offset),
//! 3 verification mismatch.

mod analyze_binary;
mod driver_check;
mod progress;

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
    /// Report the GPU code in a host ELF (.so, executable), fatbin or cubin: entries, kernels,
    /// and each kernel's parameter layout read from the cubin (no GPU, no cuobjdump).
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
        /// Compare every layout with what the local GPU's driver reports (needs a GPU).
        #[arg(long)]
        check_driver: bool,
        /// Never draw a progress bar.
        #[arg(long)]
        no_progress: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gpuless: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Analyze { paths, arch, json, check_driver, no_progress } => {
            if let Some(a) = &arch {
                if gpuless_fatbin::parse_arch(a).is_none() {
                    anyhow::bail!("--arch {a}: expected a name like sm_90, sm_90a, sm_100f or compute_90");
                }
            }
            if check_driver {
                let s = driver_check::run(&paths, arch.as_deref())?;
                println!("{}", serde_json::to_string_pretty(&s)?);
                eprintln!(
                    "checked {} kernels ({} parameters) in {} cubins on sm_{}: {} layout mismatches, {} attribute differences, {} cubins skipped",
                    s.kernels, s.params, s.cubins, s.device_sm, s.mismatches.len(), s.attribute_mismatches.len(), s.cubins_skipped
                );
                return Ok(if s.mismatches.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(3) });
            }
            for p in &paths {
                analyze_binary::run(p, arch.as_deref(), json, !no_progress)?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
