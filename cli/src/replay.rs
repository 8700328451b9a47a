//! `gpuless replay trace.gl`: re-executes a trace on the local GPU, verifies every result and
//! reports how long it took.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use gpuless_replayer::replay::dryrun::dry_run as check_trace;
use gpuless_replayer::replay::{init_device, load, replay_on, Options};

/// Replays `path`; exit code 3 when a device-to-host result differs from the recording.
pub fn run(path: &Path, no_verify: bool, json: bool) -> anyhow::Result<ExitCode> {
    // Driver initialization and trace reading are independent: do them at the same time.
    let device = std::thread::spawn(init_device);
    let trace = load(path)?;
    let device = device.join().map_err(|_| anyhow::anyhow!("driver initialization panicked"))??;
    let r =
        replay_on(device, &trace, Options { no_verify }).with_context(|| format!("replaying {}", path.display()))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "replayed   {} ({} records, {} executed, {} launches)",
            path.display(),
            r.calls,
            r.executed,
            r.launches
        );
        println!(
            "memory     {} allocations at their recorded address, {} translated ({} parameter words rewritten)",
            r.allocations_exact, r.allocations_translated, r.params_translated
        );
        println!(
            "verified   {} results equal, {} differ, {} not verifiable (async copies)",
            r.results_verified,
            r.mismatches.len(),
            r.results_unverified
        );
        for m in &r.mismatches {
            println!("  MISMATCH {m}");
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

/// `--dry-run`: checks `path` without a GPU; exit code 2 when a call could not be replayed.
pub fn dry_run(path: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let trace = load(path)?;
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
