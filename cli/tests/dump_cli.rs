//! End-to-end tests of `gpuless dump` on the committed traces.

mod support;
use support::gpuless;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn trace(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/traces").join(name).to_string_lossy().into_owned()
}

fn json_lines(out: &str) -> Vec<serde_json::Value> {
    out.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

#[test]
fn text_shows_decoded_calls_of_vecadd() {
    // testdata/traces/vecadd.gl: `gpuless record -- ./vecadd 4096` on an H200.
    let (code, out, err) = gpuless(&["dump", &trace("vecadd.gl")]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].contains("index") && lines[0].contains("call"), "{}", lines[0]);
    assert_eq!(lines.len(), 1 + 143);
    let find = |needle: &str| lines.iter().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("{needle}:\n{out}"));
    let launch = find("cuLaunchKernel(");
    for part in [
        "f=func#1",
        "grid=16x1x1",
        "block=256x1x1",
        "sharedMemBytes=0",
        "hStream=stream#0",
        "kernelParams=<4 params, 28 B>",
        "= CUDA_SUCCESS",
        "kernel _Z10vector_addPKfS0_Pfi",
    ] {
        assert!(launch.contains(part), "{part}: {launch}");
    }
    assert!(find("cuLibraryGetKernel(").contains("name=\"_Z10vector_addPKfS0_Pfi\") -> pKernel=kernel#1"));
    assert!(find("cuMemAlloc_v2(").contains("cuMemAlloc_v2(bytesize=16384) -> dptr=0x7f46e5e00000 = CUDA_SUCCESS"));
    assert!(find("cuMemcpyHtoD_v2(").contains("srcHost=<blob 5637d074, 16384 B>, ByteCount=16384"));
    assert!(find("cuMemcpyDtoH_v2(").contains("-> dstHost=<digest 3e7a18af, 16384 B>"));
    assert!(find("cuDevicePrimaryCtxRetain(").contains("(dev=dev0) -> pctx=ctx#1"));
    // The recorder's end-of-recording count, on thread 0, with no status.
    assert!(lines.last().is_some_and(|l| l.ends_with("cuCtxGetDevice(calls=1)")), "{:?}", lines.last());
}

#[test]
fn json_lines_have_the_fields() {
    let (code, out, err) = gpuless(&["dump", "--json", &trace("tiny_pytorch.gl")]);
    assert_eq!(code, 0, "{err}");
    let recs = json_lines(&out);
    assert_eq!(recs.len(), 541);
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r["index"], i as u64);
        for k in ["seq", "thread", "ts_ns", "repeat", "status"] {
            assert!(r[k].is_u64() || r[k].is_i64(), "{k}: {r}");
        }
        for k in ["level", "function"] {
            assert!(r[k].is_string(), "{k}: {r}");
        }
        for k in ["args", "results"] {
            assert!(r[k].is_object(), "{k}: {r}");
        }
        for k in ["dur_ns", "parent", "status_name", "kernel"] {
            assert!(r.get(k).is_some(), "{k}: {r}");
        }
        assert!(r["modeled"].is_boolean() && r["summary"].is_boolean(), "{r}");
    }
    let failed: Vec<&serde_json::Value> = recs.iter().filter(|r| r["status"] != 0).collect();
    assert_eq!(failed.len(), 9);
    assert!(failed.iter().all(|r| r["status_name"] == "CUDA_ERROR_DEINITIALIZED"), "{failed:?}");
    let launches: Vec<&serde_json::Value> =
        recs.iter().filter(|r| r["function"].as_str().is_some_and(|f| f.starts_with("cuLaunchKernel"))).collect();
    assert_eq!(launches.len(), 24);
    assert!(launches.iter().all(|l| l["kernel"].is_string()), "{launches:?}");
    let ex = launches.iter().find(|l| l["function"] == "cuLaunchKernelEx").expect("cuLaunchKernelEx");
    assert_eq!(ex["args"]["config"]["grid"], serde_json::json!([1, 32, 1]));
    assert_eq!(ex["args"]["config"]["shared_mem"], 6528);
    let plain = launches.iter().find(|l| l["function"] == "cuLaunchKernel").expect("cuLaunchKernel");
    assert!(plain["args"]["grid"].is_array() && plain["args"]["block"].is_array(), "{plain}");
    assert_eq!(plain["args"]["kernelParams"]["params"], 19);
    let upload = recs.iter().find(|r| r["function"] == "cuMemcpyHtoDAsync_v2").expect("an upload");
    assert_eq!(upload["args"]["srcHost"]["bytes"], 864);
    assert!(upload["args"]["srcHost"]["blob"].as_str().is_some_and(|h| h.len() == 32));
    let summaries: Vec<&serde_json::Value> = recs.iter().filter(|r| r["summary"] == true).collect();
    assert_eq!(summaries.len(), 14);
    assert!(summaries.iter().all(|r| r["thread"] == 0 && r["args"]["calls"].is_u64() && r["status_name"].is_null()));
}

#[test]
fn range_and_thread_filters() {
    let t = trace("vecadd.gl");
    let (code, out, err) = gpuless(&["dump", "--json", "--from", "130", "--to", "135", &t]);
    assert_eq!(code, 0, "{err}");
    let idx: Vec<u64> = json_lines(&out).iter().map(|r| r["index"].as_u64().unwrap()).collect();
    assert_eq!(idx, [130, 131, 132, 133, 134]);
    // Handles are numbered over the whole file, not the range.
    let (_, out, _) = gpuless(&["dump", "--from", "137", "--to", "138", &t]);
    assert!(out.contains("f=func#1,"), "{out}");
    // An empty range is no error.
    let (code, out, err) = gpuless(&["dump", "--json", "--from", "5", "--to", "5", &t]);
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    let (code, out, _) = gpuless(&["dump", "--json", "--from", "140", &t]);
    assert_eq!(code, 0);
    assert_eq!(json_lines(&out).len(), 3);
    let (code, out, _) = gpuless(&["dump", "--json", "--thread", "495", &t]);
    assert_eq!(code, 0);
    let recs = json_lines(&out);
    assert_eq!(recs.len(), 142);
    assert!(recs.iter().all(|r| r["thread"] == 495));
    let (code, out, _) = gpuless(&["dump", "--json", "--thread", "0", "--to", "50", &t]);
    assert_eq!((code, out.as_str()), (0, ""));
    let (code, out, _) = gpuless(&["dump", "--json", "--thread", "100", "--from", "5", &trace("synthetic-threads.gl")]);
    assert_eq!(code, 0);
    let idx: Vec<u64> = json_lines(&out).iter().map(|r| r["index"].as_u64().unwrap()).collect();
    assert_eq!(idx, [5, 6, 7, 8, 9]);
}

fn assert_bad(args: &[&str], needles: &[&str]) {
    let (code, _, err) = gpuless(args);
    assert_eq!(code, 2, "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: {n:?} not in {err}");
    }
}

#[test]
fn bad_input_exits_2_with_a_message() {
    let t = trace("vecadd.gl");
    assert_bad(&["dump", "--from", "10", "--to", "5", &t], &["vecadd.gl", "--from 10 is after --to 5"]);
    assert_bad(&["dump", "--thread", "12345", &t], &["vecadd.gl", "no records of thread 12345", "0, 495"]);
    assert_bad(&["dump", "--from", "500", &t], &["vecadd.gl", "--from 500 is past the last record", "143 records"]);
    assert_bad(&["dump", "--from", "x", &t], &["--from"]);
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.gl");
    assert_bad(&["dump", missing.to_str().unwrap()], &["missing.gl"]);
    let bytes = std::fs::read(&t).unwrap();
    let garbage = dir.path().join("garbage.gl");
    std::fs::write(&garbage, b"not a trace at all").unwrap();
    assert_bad(&["dump", garbage.to_str().unwrap()], &["garbage.gl", "not a gpuless trace"]);
    // Cut inside the blob chunk after the first call chunk (which ends at byte 16,694).
    let cut = dir.path().join("cut.gl");
    std::fs::write(&cut, &bytes[..20_000]).unwrap();
    assert_bad(&["dump", cut.to_str().unwrap()], &["cut.gl", "could not be read", "truncated"]);
    // A flipped byte in the second call chunk's payload (28,266 to 29,312).
    let mut flipped = bytes.clone();
    let at = 28_500;
    flipped[at] ^= 0xff;
    let bad = dir.path().join("flipped.gl");
    std::fs::write(&bad, &flipped).unwrap();
    assert_bad(&["dump", "--json", bad.to_str().unwrap()], &["flipped.gl", "checksum"]);
    // What precedes the damage is printed.
    let (_, out, _) = gpuless(&["dump", "--json", cut.to_str().unwrap()]);
    let recs = json_lines(&out);
    assert!(!recs.is_empty() && recs.len() < 143, "{}", recs.len());
}

#[test]
fn a_closed_pipe_ends_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpuless"))
        .args(["dump", "--json", &trace("synthetic-resnet-like.gl")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gpuless");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut first = [0u8; 100];
    stdout.read_exact(&mut first).expect("some output");
    drop(stdout);
    let out = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "{err}");
}

/// Real traces of the GPU suite's fidelity programs (recorded on an H100): managed and mapped
/// host memory mirrored by the recorder's own records, graph queries whose node handles the
/// program built on.
#[test]
fn fidelity_traces_show_mirrored_memory_and_graph_queries() {
    let dump = |name: &str| {
        let (code, out, err) = gpuless(&["dump", &trace(name)]);
        assert_eq!(code, 0, "{err}");
        out
    };
    let out = dump("managed.gl");
    let host_memory = out.lines().filter(|l| l.contains("gpulessHostMemory(")).count();
    let host_view = out.lines().filter(|l| l.contains("gpulessHostView(") && l.contains("<digest")).count();
    // Three regions, written by the host before kernels (managed twice), read after syncs.
    assert!(host_memory >= 4, "{host_memory} host-memory records:\n{out}");
    assert!(host_view >= 4, "{host_view} host-view records:\n{out}");
    assert!(out.contains("cuMemAllocManaged(") && out.contains("Flags=0x2"), "{out}");
    let out = dump("graph_query.gl");
    for f in ["cuGraphGetRootNodes", "cuGraphGetEdges", "cuGraphNodeGetDependencies", "cuGraphNodeGetDependentNodes"] {
        assert!(out.contains(f), "{f} missing:\n{out}");
    }
    assert!(out.contains("cuGraphNodeFindInClone(") && out.contains("phNode=node#"), "{out}");
}
