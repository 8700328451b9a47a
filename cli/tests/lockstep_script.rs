//! `scripts/lockstep.py`, the GPU suite's way of comparing hot latency through the client with
//! native (two runs of a workload taking turns), driven here with the suite's real harness
//! (`testdata/workloads/_common.py`) over a stand-in `torch` module whose "inference" sleeps:
//! the turns happen, every inference is timed, the ratio is the runs' ratio, and a run that dies
//! before its hot loop makes the script fail and say which.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// A stand-in `torch` (what `_common.run` touches) and a workload whose inference sleeps
/// `DELAY_MS` milliseconds, in `dir`.
fn workload(dir: &Path) -> PathBuf {
    std::fs::write(
        dir.join("torch.py"),
        r#"import contextlib
def manual_seed(s): pass
@contextlib.contextmanager
def no_grad(): yield
class cuda:
    @staticmethod
    def synchronize(): pass
class T:
    def __init__(self, v): self.v = v
    def float(self): return self
    def cpu(self): return self
    def double(self): return self
    def abs(self): return self
    def sum(self): return self.v
def is_tensor(x): return isinstance(x, T)
"#,
    )
    .unwrap();
    let script = dir.join("sleepy.py");
    std::fs::write(
        &script,
        format!(
            r#"import os, sys, time
sys.path.insert(0, {common:?})
from _common import run
import torch
class Model:
    def eval(self): return self
    def cuda(self): return self
    def __call__(self, x):
        time.sleep(float(os.environ["DELAY_MS"]) / 1e3)
        return torch.T(7.0)
run("sleepy", Model, lambda: 1)
"#,
            common = root().join("testdata/workloads").display().to_string()
        ),
    )
    .unwrap();
    script
}

fn lockstep(dir: &Path, iters: u32, a: &str, b: &str) -> (bool, serde_json::Value) {
    let out = Command::new("python3")
        .arg(root().join("scripts/lockstep.py"))
        .arg(iters.to_string())
        .arg(dir.join("ls"))
        .args([a, b])
        .env("PYTHONPATH", dir)
        .env("LOCKSTEP_READY_S", "60")
        .output()
        .expect("python3 runs scripts/lockstep.py");
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    let v =
        serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {text} {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.success(), v)
}

#[test]
fn two_runs_take_turns_and_their_ratio_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let w = workload(dir.path());
    let (ok, v) = lockstep(
        dir.path(),
        30,
        &format!("DELAY_MS=2 python3 {}", w.display()),
        &format!("DELAY_MS=5 python3 {}", w.display()),
    );
    assert!(ok, "{v}");
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["iters"], 30);
    assert_eq!(v["checksum_a"], v["checksum_b"]);
    let ratio = v["ratio"].as_f64().unwrap();
    assert!((1.6..3.5).contains(&ratio), "5 ms against 2 ms inferences: {v}");
    // Each run timed every inference, in turns: A's output holds 30 times.
    let a: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(dir.path().join("ls.a.out")).unwrap().lines().last().unwrap())
            .unwrap();
    assert_eq!(a["hot_ms"].as_array().map(|t| t.len()), Some(30), "{a}");
}

#[test]
fn a_run_that_dies_before_its_hot_loop_fails_the_comparison_and_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let w = workload(dir.path());
    let (ok, v) = lockstep(dir.path(), 10, &format!("DELAY_MS=1 python3 {}", w.display()), "exit 3");
    assert!(!ok);
    assert_eq!(v["ok"], false);
    let why = v["why"].as_str().unwrap_or_default();
    assert!(why.contains("run b exited with 3"), "{v}");
}
