//! `gpuless record` options that the recorder acts on, end to end: the stand-in driver and
//! program of the recorder's tests (`recorder/tests/fake/`), recorded through the CLI with the
//! real preload library.

#[allow(dead_code)]
#[path = "../../recorder/tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::Command;

/// Builds the stand-in libcuda and program in `dir`; returns the program.
fn stand_in(dir: &Path) -> std::path::PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../recorder/tests/fake");
    let lib = dir.join("libcuda.so.1");
    common::cc(&["-O2", "-shared", "-fPIC", "-o", lib.to_str().unwrap(), src.join("libcuda.c").to_str().unwrap()]);
    let prog = dir.join("program");
    common::cc(&["-O2", "-o", prog.to_str().unwrap(), src.join("program.c").to_str().unwrap(), "-ldl"]);
    prog
}

fn record(dir: &Path, extra: &[&str]) -> std::process::Output {
    record_mode(dir, extra, "20")
}

/// [`record`] with the stand-in program's argument (its mode).
fn record_mode(dir: &Path, extra: &[&str], mode: &str) -> std::process::Output {
    let prog = stand_in(dir);
    Command::new(env!("CARGO_BIN_EXE_gpuless"))
        .arg("record")
        .args(extra)
        .arg("-o")
        .arg(dir.join("t.gl"))
        .arg("--")
        .arg(&prog)
        .arg(mode)
        .env("GPULESS_RECORDER", common::recorder_lib())
        .env("LD_LIBRARY_PATH", dir)
        .output()
        .unwrap()
}

#[test]
fn self_time_prints_the_recorders_time_per_function() {
    let dir = tempfile::tempdir().unwrap();
    let out = record(dir.path(), &["--self-time"]);
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.lines()
            .any(|l| l.starts_with("gpuless selftime:") && l.contains(" 21 calls") && l.ends_with("cuLaunchKernel")),
        "no cuLaunchKernel row with its 21 calls in:\n{err}"
    );
    assert!(dir.path().join("t.gl").is_file(), "the trace is still written");
}

#[test]
fn without_self_time_nothing_extra_is_printed() {
    let dir = tempfile::tempdir().unwrap();
    let out = record(dir.path(), &[]);
    assert!(out.status.success(), "{out:?}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("selftime"), "{out:?}");
}

/// The calls of a trace, in order: function, status and the blobs its arguments hold (host
/// addresses and handles differ between processes).
fn calls(trace: &Path) -> Vec<String> {
    use gpuless_traces::{ChunkBody, ReaderOptions, TraceReader};
    let mut out = Vec::new();
    for c in TraceReader::open(trace, ReaderOptions::default()).unwrap() {
        if let ChunkBody::Calls(cs) = c.unwrap().body {
            out.extend(cs.into_iter().map(|r| {
                let blobs: Vec<_> = r.args.iter().filter(|a| matches!(a, gpuless_traces::Value::Blob(_))).collect();
                format!("{} {:?} {} {blobs:?}", r.seq, r.function, r.status)
            }));
        }
    }
    out
}

#[test]
fn compress_threads_reach_the_recorder_and_keep_the_trace_the_same() {
    let inline = tempfile::tempdir().unwrap();
    let out = record(inline.path(), &["--compress-threads", "0"]);
    assert!(out.status.success(), "{out:?}");
    let threaded = tempfile::tempdir().unwrap();
    let out = record(threaded.path(), &["--compress-threads", "3"]);
    assert!(out.status.success(), "{out:?}");
    let (a, b) = (calls(&inline.path().join("t.gl")), calls(&threaded.path().join("t.gl")));
    assert!(a.len() > 20, "{} calls", a.len());
    assert_eq!(a, b, "compressed on the writer thread or by three threads, the same calls");
    // The option reaches the recorder: the program counts the compression threads beside it.
    for (n, want) in [("0", "compression_threads=0"), ("3", "compression_threads=3")] {
        let dir = tempfile::tempdir().unwrap();
        let out = record_mode(dir.path(), &["--compress-threads", n], "-8");
        assert!(out.status.success(), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains(want), "--compress-threads {n}: {out:?}");
    }
    let bad = record(inline.path(), &["--compress-threads", "many"]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("--compress-threads"), "{bad:?}");
}
