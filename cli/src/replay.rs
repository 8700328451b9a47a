//! `gpuless replay trace.gl`: re-executes a trace on the local GPU, verifies every result and
//! reports how long it took.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use gpuless_replayer::replay::dryrun::dry_run as check_trace;
use gpuless_replayer::replay::{load, load_partial, replay_on, LoadedTrace, Options};

use crate::partition::{self, PartitionArgs};

pub use crate::partition::RunOptions;

/// Reads the trace: whole, or up to its first damage with `partial`.
fn read(path: &Path, partial: bool) -> anyhow::Result<LoadedTrace> {
    Ok(if partial { load_partial(path)? } else { load(path)? })
}

/// Replays `path` on the whole GPU or the partition `part` asks for; exit code 3 when a
/// device-to-host result differs from the recording.
pub fn run(path: &Path, opts: &RunOptions, part: &PartitionArgs) -> anyhow::Result<ExitCode> {
    let RunOptions { no_verify, iterations, json, partial, profile } = *opts;
    if part.create {
        return partition::run_created(path, opts, part);
    }
    // Before the driver starts: a MIG target sets CUDA_VISIBLE_DEVICES here.
    let prepared = partition::prepare(part)?;
    // Driver initialization and trace reading are independent: do them at the same time.
    let device = std::thread::spawn(move || partition::init(&prepared));
    let trace = read(path, partial);
    // Joined before a refused trace returns: exiting while another thread is inside cuInit can
    // crash in the driver's teardown.
    let started = device.join().map_err(|_| anyhow::anyhow!("driver initialization panicked"))?;
    let trace = trace?;
    let (device, label, memory_limit) = started?;
    let r = replay_on(device, &trace, Options { no_verify, memory_limit, iterations, profile, ..Options::default() })
        .with_context(|| format!("replaying {} ({})", path.display(), label.describe()))?;
    if json {
        let mut v = serde_json::to_value(&r)?;
        v["partition"] = serde_json::to_value(&label)?;
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("partition  {}", label.describe());
        println!(
            "replayed   {} ({} records, {} executed, {} launches)",
            path.display(),
            r.calls,
            r.executed,
            r.launches
        );
        println!(
            "memory     {} allocations at their recorded address ({} in the arena), {} translated ({} parameter \
             words rewritten); peak {:.1} MiB",
            r.allocations_exact,
            r.allocations_in_arena,
            r.allocations_translated,
            r.params_translated,
            r.peak_memory as f64 / (1 << 20) as f64
        );
        if r.shared_memory != (0, 0) {
            println!(
                "shared     {} managed or mapped host buffers as device memory at their address, {} moved",
                r.shared_memory.0, r.shared_memory.1
            );
        }
        for w in &r.warnings {
            println!("WARNING    {w}");
        }
        println!(
            "verified   {} results equal, {} differ, {} not verifiable (async copies)",
            r.results_verified,
            r.mismatches.len(),
            r.results_unverified
        );
        for m in &r.mismatches {
            println!("  MISMATCH {m}");
        }
        if let Some(h) = &r.hot {
            println!(
                "hot        {} iterations of the body ({} records, {} launches; set-up {} records, {:.3} s): \
                 median {:.3} ms wall, {:.3} ms GPU; min {:.3} ms",
                h.iterations,
                h.body_calls,
                h.body_launches,
                h.setup_calls,
                h.setup_s,
                h.wall_ms_median,
                h.gpu_ms_median,
                h.wall_ms_min
            );
            if let Some(g) = &h.graph {
                println!(
                    "graph      the body as one CUDA graph: median {:.3} ms wall, min {:.3} ms; {} results verified, \
                     {} differ",
                    g.wall_ms_median, g.wall_ms_min, g.results_verified, g.mismatches
                );
                for m in &g.moved {
                    let to = match m.to {
                        gpuless_replayer::replay::lower::Side::Branch => "on a side branch",
                        gpuless_replayer::replay::lower::Side::Setup => "moved to the set-up (constants)",
                    };
                    println!(
                        "           {} launches whose inputs the body never writes {to}: median {:.3} ms wall, min \
                         {:.3} ms ({:.1} MiB kept resident); {} results verified",
                        m.launches,
                        m.wall_ms_median,
                        m.wall_ms_min,
                        m.bytes as f64 / (1u64 << 20) as f64,
                        m.results_verified
                    );
                }
                if let Some(note) = &g.moved_note {
                    println!("           {note}");
                }
            } else if let Some(why) = &h.graph_refused {
                println!("graph      not used: {why}");
            }
            if let Some(p) = &h.profile {
                print_profile(p);
            }
        }
        let first = r.first_result_s.map_or("-".into(), |s| format!("{s:.3} s"));
        println!(
            "time       first result {first} from process start; replay {:.3} s; total {:.3} s",
            r.replay_s, r.total_s
        );
        if let Some(lost) = &r.trace_lost {
            println!("trace      damaged tail not replayed: {lost}");
        }
        let skipped: u64 = r.not_replayed.values().sum();
        println!("skipped    {skipped} records that change no device state (queries, attributes, ...)");
    }
    Ok(if r.mismatches.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(3) })
}

/// The `--profile` table: the kernels that take most of the body's GPU time.
fn print_profile(p: &gpuless_replayer::replay::profile::Profile) {
    const SHOWN: usize = 15;
    println!(
        "profile    {} launches per iteration, {:.1} us of GPU time summed over them (median of {} passes)",
        p.launches, p.launch_us, p.passes
    );
    println!("  {:>9} {:>6} {:>8}  kernel", "us/iter", "%", "launches");
    for k in p.kernels.iter().take(SHOWN) {
        println!("  {:>9.1} {:>5.1}% {:>8}  {}", k.total_us, k.percent, k.launches, k.name);
    }
    if p.kernels.len() > SHOWN {
        let rest: f64 = p.kernels[SHOWN..].iter().map(|k| k.total_us).sum();
        println!(
            "  {:>9.1} {:>6} {:>8}  {} more kernels (--json lists every launch)",
            rest,
            "",
            "",
            p.kernels.len() - SHOWN
        );
    }
}

/// `--dry-run`: checks `path` without a GPU; exit code 2 when a call could not be replayed.
pub fn dry_run(path: &Path, json: bool, partial: bool) -> anyhow::Result<ExitCode> {
    let trace = read(path, partial)?;
    let r = check_trace(&trace);
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!("dry run    {} ({} records, {} checked against the model)", path.display(), r.calls, r.checked);
        if let Some(lost) = &trace.lost {
            println!("trace      damaged tail: {lost}");
        }
        if r.violations.is_empty() {
            println!(
                "result     every replayed call is consistent: allocations, copies, kernels, streams, events, blobs"
            );
        } else {
            println!("result     {} violations; the first:", r.violation_count);
            for v in &r.violations {
                println!("  {v}");
            }
        }
    }
    Ok(if r.violation_count == 0 { ExitCode::SUCCESS } else { ExitCode::from(2) })
}
