//! `gpuless compile` (issue 20, first part): committed traces made into function files, their
//! signatures printed back by `--show`, recordings that are not the same function refused with
//! the first difference, and damaged function files refused with exit code 2 and a message
//! naming the file and what is wrong.

use std::path::{Path, PathBuf};
use std::process::Command;

const GL: &str = env!("CARGO_BIN_EXE_gpuless");

fn trace(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/traces").join(name)
}

fn gl(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let out = Command::new(GL).args(args).output().expect("run gpuless");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn compile(dir: &Path, traces: &[&str]) -> (PathBuf, (i32, String, String)) {
    let out = dir.join("f.gfn");
    let mut args: Vec<std::ffi::OsString> = vec!["compile".into()];
    args.extend(traces.iter().map(|t| trace(t).into_os_string()));
    args.extend(["-o".into(), out.clone().into_os_string()]);
    let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    (out.clone(), gl(&refs))
}

#[test]
fn a_recording_becomes_a_function_whose_signature_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let (f, (rc, stdout, stderr)) = compile(dir.path(), &["globals.gl"]);
    assert_eq!(rc, 0, "{stdout}\n{stderr}");
    // globals.gl: 148 set-up records, a body of 12 with two uploads and five downloads.
    assert!(stdout.contains("records    148 set-up, 12 body; 3 kernels; 1 recording(s) compared"), "{stdout}");
    assert_eq!(stdout.lines().filter(|l| l.starts_with("input ")).count(), 2, "{stdout}");
    assert_eq!(stdout.lines().filter(|l| l.starts_with("output ")).count(), 5, "{stdout}");
    assert!(stdout.contains("output     40000 B from 0x7e0000009e00 (cuMemcpyDtoH #155)"), "{stdout}");
    let (rc, shown, stderr) = gl(&["compile".as_ref(), "--show".as_ref(), f.as_os_str()]);
    assert_eq!(rc, 0, "{stderr}");
    assert_eq!(shown, stdout, "--show prints what compile printed");
    // Only the function's records and their blobs: smaller than the trace.
    assert!(std::fs::metadata(&f).unwrap().len() < std::fs::metadata(trace("globals.gl")).unwrap().len());
}

#[test]
fn only_the_code_a_function_runs_is_kept() {
    // tiny_pytorch.gl: PyTorch loads 14 code images; the function's 6 kernels come from some.
    let dir = tempfile::tempdir().unwrap();
    let (f, (rc, stdout, stderr)) = compile(dir.path(), &["tiny_pytorch.gl"]);
    assert_eq!(rc, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("code       10 images kept, 4 left out"), "{stdout}");
    let (gfn, gl) = (std::fs::metadata(&f).unwrap().len(), std::fs::metadata(trace("tiny_pytorch.gl")).unwrap().len());
    assert!(gfn * 3 < gl, "{gfn} B of {gl} B");
}

#[test]
fn two_recordings_of_the_same_function_compile_and_different_ones_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_, (rc, stdout, stderr)) = compile(dir.path(), &["globals.gl", "globals.gl"]);
    assert_eq!(rc, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("2 recording(s) compared"), "{stdout}");
    std::fs::remove_file(dir.path().join("f.gfn")).unwrap();
    let (f, (rc, _, stderr)) = compile(dir.path(), &["globals.gl", "streams.gl"]);
    assert_eq!(rc, 2, "{stderr}");
    assert!(stderr.contains("globals.gl: recording 2 differs from the first:"), "{stderr}");
    assert!(!f.exists(), "nothing written");
}

#[test]
fn damaged_function_files_are_refused_with_what_and_where() {
    let dir = tempfile::tempdir().unwrap();
    let (f, (rc, _, stderr)) = compile(dir.path(), &["globals.gl"]);
    assert_eq!(rc, 0, "{stderr}");
    let bytes = std::fs::read(&f).unwrap();
    let show = |bytes: &[u8], name: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        let (rc, _, stderr) = gl(&["compile".as_ref(), "--show".as_ref(), p.as_os_str()]);
        assert_eq!(rc, 2, "{name}: {stderr}");
        assert!(stderr.contains(name), "the file is named: {stderr}");
        stderr
    };
    let e = show(&bytes[..bytes.len() - 100], "cut.gfn");
    assert!(e.contains("bytes follow"), "{e}");
    let e = show(&bytes[..12], "header.gfn");
    assert!(e.contains("truncated"), "{e}");
    let mut flipped = bytes.clone();
    let n = flipped.len();
    for b in &mut flipped[n - 400..n - 300] {
        *b ^= 0x5a;
    }
    let e = show(&flipped, "flipped.gfn");
    assert!(e.contains("damaged") || e.contains("trace"), "{e}");
    let e = show(&std::fs::read(trace("globals.gl")).unwrap(), "a-trace.gfn");
    assert!(e.contains("not a gpuless function file"), "{e}");
    let mut json = bytes.clone();
    json[16] = b'x';
    let e = show(&json, "manifest.gfn");
    assert!(e.contains("manifest"), "{e}");
}

/// A function without inputs (graph.gl's: it uploads nothing per call) refuses `--input` with
/// that said, not as "0 bytes of input".
#[test]
fn invoke_of_a_function_without_inputs_refuses_an_input() {
    let dir = tempfile::tempdir().unwrap();
    let (f, (rc, _, stderr)) = compile(dir.path(), &["graph.gl"]);
    assert_eq!(rc, 0, "{stderr}");
    let x = dir.path().join("x.bin");
    std::fs::write(&x, [0u8; 10]).unwrap();
    let (rc, _, stderr) = gl(&["invoke".as_ref(), f.as_os_str(), "--input".as_ref(), x.as_os_str()]);
    assert_eq!(rc, 2, "{stderr}");
    assert!(stderr.contains("x.bin: the function takes no input") && stderr.contains("nothing was run"), "{stderr}");
}

/// `gpuless invoke` checks inputs against the signature before anything runs (no GPU needed):
/// globals.gl's function takes an 8-byte and a 4-byte input.
#[test]
fn invoke_refuses_inputs_of_the_wrong_size_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (f, (rc, _, stderr)) = compile(dir.path(), &["globals.gl"]);
    assert_eq!(rc, 0, "{stderr}");
    let file = |name: &str, n: usize| {
        let p = dir.path().join(name);
        std::fs::write(&p, vec![0u8; n]).unwrap();
        p
    };
    let out = dir.path().join("y.bin");
    let (one, eight, three) = (file("one.bin", 100), file("eight.bin", 8), file("three.bin", 3));
    let invoke = |inputs: &[&Path]| {
        let mut args: Vec<&std::ffi::OsStr> = vec!["invoke".as_ref(), f.as_os_str()];
        for i in inputs {
            args.extend(["--input".as_ref(), i.as_os_str()]);
        }
        args.extend(["--output".as_ref(), out.as_os_str()]);
        gl(&args)
    };
    // One file: it must hold every input, back to back.
    let (rc, stdout, stderr) = invoke(&[&one]);
    assert_eq!(rc, 2, "{stderr}");
    assert!(stderr.contains("one.bin: 100 bytes, but the function takes 12 bytes of input"), "{stderr}");
    assert!(stderr.contains("input 0: 8 B, input 1: 4 B") && stderr.contains("nothing was run"), "{stderr}");
    // One file per input: each its input's size.
    let (rc, _, stderr) = invoke(&[&eight, &three]);
    assert_eq!(rc, 2, "{stderr}");
    assert!(stderr.contains("three.bin: 3 bytes, but input 1 takes 4 bytes"), "{stderr}");
    // Neither: how many files there are.
    let (rc, _, stderr) = invoke(&[&eight, &eight, &eight]);
    assert_eq!(rc, 2, "{stderr}");
    assert!(stderr.contains("3 input files given; the function takes 2 inputs"), "{stderr}");
    assert!(stdout.is_empty() && !out.exists(), "nothing ran, nothing was written");
}
