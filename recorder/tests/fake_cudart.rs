//! The runtime's registration calls (`__cudaRegisterFatBinary`, `...End`,
//! `__cudaRegisterFunction`, `__cudaRegisterVar`), which the recorder exports: each must reach
//! the libcudart the program would have used without the recorder, in every way a program can
//! bind it, and be recorded as an annotation where that libcudart is certain. A stand-in
//! runtime (tests/fake/libcudart.c, built twice under two sonames) keeps what it is told and
//! aborts on a handle it did not give out; the programs (tests/fake/cudart_main.c) print what
//! their runtime answers, so a call sent to the wrong runtime changes the output.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpuless_analyzer::api::ApiLevel;
use gpuless_traces::{CallRecord, ChunkBody, ReaderOptions, TraceReader, Value};

mod common;
use common::{cc, recorder_lib};

struct Built {
    dir: tempfile::TempDir,
}

impl Built {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn build() -> Built {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap().to_string();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake");
    let s = |n: &str| src.join(n).to_str().unwrap().to_string();
    let o = |n: &str| format!("{d}/{n}");
    let rpath = format!("-Wl,-rpath,{d}");
    let lib = |out: &str, extra: &[&str]| {
        let mut a = vec!["-O2", "-shared", "-fPIC", "-o"];
        let out = o(out);
        a.push(&out);
        a.extend_from_slice(extra);
        cc(&a);
    };
    lib("libcuda.so.1", &[&s("libcuda.c")]);
    lib("libcudart.so", &["-Wl,-soname,libcudart.so", &s("libcudart.c"), "-ldl"]);
    lib("libcudart2.so", &["-Wl,-soname,libcudart2.so", "-DCUDART_ID=\"B\"", &s("libcudart.c"), "-ldl"]);
    let link = ["-L", d.as_str(), "-Wl,--no-as-needed", rpath.as_str()];
    for (name, tag, runtime) in
        [("libdep.so", "dep", "-lcudart"), ("libloc.so", "loc", "-lcudart"), ("libother.so", "other", "-lcudart2")]
    {
        let t = format!("-DTAG={tag}");
        let mut a = vec![t.as_str(), s("kernels.c").leak() as &str];
        a.extend_from_slice(&link);
        a.push(runtime);
        lib(name, &a);
    }
    let (main, kernels, cudart) = (s("cudart_main.c"), s("kernels.c"), s("libcudart.c"));
    let (global, local, stat) = (o("global"), o("local"), o("static"));
    let mut a = vec!["-O2", "-DTAG=prog", "-o", &global, &main, &kernels];
    a.extend_from_slice(&link);
    a.extend_from_slice(&["-lcudart", "-ldep", "-ldl"]);
    cc(&a);
    cc(&["-O2", "-DLOCAL_ONLY", "-o", &local, &main, "-L", &d, &rpath, "-ldl"]);
    cc(&["-O2", "-DTAG=stat", "-DSTATIC_RUNTIME", "-o", &stat, &main, &kernels, &cudart, "-ldl"]);
    Built { dir }
}

/// Runs `prog` natively and recorded (trace `t.gl` next to it); both outputs.
fn run(b: &Built, prog: &str, args: &[&str], env: &[(&str, &str)]) -> (Output, Output, PathBuf) {
    let trace = b.path(&format!("{prog}-{}.gl", args.join("-")));
    let cmd = |preload: bool| {
        let mut c = Command::new(b.path(prog));
        c.args(args).env("LD_LIBRARY_PATH", b.dir.path());
        for (k, v) in env {
            c.env(k, v);
        }
        if preload {
            c.env("LD_PRELOAD", recorder_lib()).env("GPULESS_TRACE", &trace);
        }
        c.output().unwrap()
    };
    (cmd(false), cmd(true), trace)
}

fn calls(trace: &Path) -> Vec<CallRecord> {
    let mut calls: Vec<CallRecord> = TraceReader::open(trace, ReaderOptions::default())
        .unwrap()
        .flat_map(|c| match c.unwrap().body {
            ChunkBody::Calls(c) => c,
            _ => Vec::new(),
        })
        .collect();
    calls.sort_by_key(|c| c.seq);
    calls
}

fn named<'a>(calls: &'a [CallRecord], name: &str) -> Vec<&'a CallRecord> {
    calls.iter().filter(|c| c.function.name() == name).collect()
}

fn string(v: &Value) -> &str {
    match v {
        Value::Str(s) => s,
        other => panic!("not a string: {other:?}"),
    }
}

fn same(native: &Output, recorded: &Output) {
    assert_eq!(native.status.code(), recorded.status.code(), "exit code: {recorded:?}");
    assert_eq!(
        String::from_utf8_lossy(&native.stdout),
        String::from_utf8_lossy(&recorded.stdout),
        "the recorder must not change the program's output; stderr: {}",
        String::from_utf8_lossy(&recorded.stderr)
    );
}

#[test]
fn registrations_through_the_global_scope_are_forwarded_and_recorded() {
    let b = build();
    let (native, recorded, trace) = run(&b, "global", &[], &[]);
    same(&native, &recorded);
    assert_eq!(native.status.code(), Some(3));
    assert_eq!(
        String::from_utf8_lossy(&native.stdout),
        "prog: scale other_prog 24 (cudart A)\ndep: scale other_dep 24 (cudart A)\n\
         other: scale other_other 24 (cudart A)\nfat binaries ended in the global runtime: 3\n",
        "the loader binds even libother.so's registrations to the global runtime"
    );
    assert!(recorded.stderr.is_empty(), "{}", String::from_utf8_lossy(&recorded.stderr));

    let calls = calls(&trace);
    let fatbins = named(&calls, "__cudaRegisterFatBinary");
    assert_eq!(fatbins.len(), 3);
    assert!(fatbins.iter().all(|c| c.level == ApiLevel::Runtime && c.status == 0));
    let handles: Vec<&Value> = fatbins.iter().map(|c| &c.results[0]).collect();
    assert!(handles.iter().all(|h| matches!(h, Value::HostPtr(p) if *p != 0)), "{handles:?}");
    assert!(matches!(fatbins[0].args[0], Value::HostPtr(p) if p != 0), "the wrapper's address, not its bytes");

    let functions = named(&calls, "__cudaRegisterFunction");
    let mut names: Vec<&str> = functions.iter().map(|c| string(&c.args[3])).collect();
    names.sort_unstable();
    assert_eq!(names, ["other_dep", "other_other", "other_prog", "scale", "scale", "scale"]);
    for f in &functions {
        assert!(handles.contains(&&f.args[0]), "a handle a registration returned: {f:?}");
        assert!(matches!(f.args[1], Value::HostPtr(p) if p != 0), "the host stub: {f:?}");
    }
    let vars = named(&calls, "__cudaRegisterVar");
    let mut vars: Vec<(&str, &Value)> = vars.iter().map(|c| (string(&c.args[3]), &c.args[5])).collect();
    vars.sort_by_key(|v| v.0);
    assert_eq!(
        vars,
        [("counter_dep", &Value::Size(24)), ("counter_other", &Value::Size(24)), ("counter_prog", &Value::Size(24))]
    );

    // The driver calls cudart makes inside a registration name it as their parent.
    let ends = named(&calls, "__cudaRegisterFatBinaryEnd");
    assert_eq!(ends.len(), 3);
    let loads = named(&calls, "cuModuleLoadData");
    assert_eq!(loads.len(), 3);
    for (end, load) in ends.iter().zip(&loads) {
        assert_eq!(load.parent, Some(end.seq), "{load:?}");
        assert!(handles.contains(&&end.args[0]));
    }
    assert_eq!(named(&calls, "cuInit")[0].parent, Some(ends[0].seq));
}

#[test]
fn a_runtime_only_in_a_local_scope_is_found() {
    let b = build();
    let (native, recorded, trace) = run(&b, "local", &[], &[]);
    same(&native, &recorded);
    assert_eq!(String::from_utf8_lossy(&native.stdout), "loc: scale other_loc 24 (cudart A)\n");
    assert!(recorded.stderr.is_empty(), "{}", String::from_utf8_lossy(&recorded.stderr));
    let calls = calls(&trace);
    let functions = named(&calls, "__cudaRegisterFunction");
    let names: Vec<&str> = functions.iter().map(|c| string(&c.args[3])).collect();
    assert_eq!(names, ["scale", "other_loc"]);
    assert_eq!(functions[0].args[0], named(&calls, "__cudaRegisterFatBinary")[0].results[0]);
    assert_eq!(named(&calls, "__cudaRegisterVar").len(), 1);
}

/// Two runtimes outside the global scope: which one the loader binds depends on the dlopen
/// root of the caller's scope, which no interface tells. The call goes to the caller's own
/// dependency (right here) and is not recorded; stderr says so once.
#[test]
fn two_runtimes_in_local_scopes_are_forwarded_but_not_recorded() {
    let b = build();
    let (native, recorded, trace) = run(&b, "local", &["two"], &[]);
    same(&native, &recorded);
    assert_eq!(
        String::from_utf8_lossy(&native.stdout),
        "loc: scale other_loc 24 (cudart A)\nother: scale other_other 24 (cudart B)\n"
    );
    let err = String::from_utf8_lossy(&recorded.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("gpuless: 2 loaded libraries outside the global scope define __cudaRegisterFatBinary"),
        "{err}"
    );
    assert!(err.contains("libother.so") && err.contains("libcudart2.so"), "{err}");
    let calls = calls(&trace);
    let names: Vec<&str> = named(&calls, "__cudaRegisterFunction").iter().map(|c| string(&c.args[3])).collect();
    assert_eq!(names, ["scale", "other_loc"], "libother.so's registrations are not recorded");
    assert_eq!(named(&calls, "__cudaRegisterFatBinary").len(), 1);
    // Its fat binary's driver load is recorded all the same.
    assert_eq!(named(&calls, "cuModuleLoadData").len(), 2);
}

#[test]
fn a_static_runtime_is_not_interposed() {
    let b = build();
    let (native, recorded, trace) = run(&b, "static", &[], &[]);
    same(&native, &recorded);
    assert_eq!(String::from_utf8_lossy(&native.stdout), "stat: scale other_stat 24 (cudart A)\n");
    let calls = calls(&trace);
    assert!(!named(&calls, "cuModuleLoadData").is_empty(), "the driver calls are recorded");
    assert!(calls.iter().all(|c| c.level != ApiLevel::Runtime), "the program's own runtime is not ours to see");
}

/// A process that registers kernels and never calls the driver leaves no trace, as one that
/// makes no CUDA call at all; without a trace to write, calls are still forwarded.
#[test]
fn registrations_alone_leave_no_trace() {
    let b = build();
    let (native, recorded, trace) = run(&b, "global", &[], &[("FAKE_CUDART_LAZY", "1")]);
    same(&native, &recorded);
    assert!(String::from_utf8_lossy(&native.stdout).contains("ended in the global runtime: 3"));
    assert!(!trace.exists());
    let off = Command::new(b.path("global"))
        .env("LD_LIBRARY_PATH", b.dir.path())
        .env("LD_PRELOAD", recorder_lib())
        .output()
        .unwrap();
    same(&native, &off);
}
