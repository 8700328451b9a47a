//! End-to-end tests of `gpuless analyze` on the committed nvcc 13.0 binaries.

mod support;
use support::gpuless;

use std::path::PathBuf;

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/bin").join(name)
}

#[test]
fn json_has_the_documented_shape() {
    let p = testdata("params.size.fatbin");
    let (code, out, err) = gpuless(&["analyze", "--json", "--arch", "sm_90", p.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["kind"], "fatbin");
    let e = &v["entries"][0];
    assert_eq!(
        (e["kind"].as_str(), e["arch"].as_str(), e["compression"].as_str()),
        (Some("elf"), Some("sm_90"), Some("zstd"))
    );
    assert!(e["stored_bytes"].as_u64().unwrap() < e["bytes"].as_u64().unwrap());
    let mixed = v["kernels"].as_array().unwrap().iter().find(|k| k["name"] == "mixed").unwrap();
    assert_eq!(mixed["demangled"], "mixed");
    assert_eq!(mixed["arch"], "sm_90");
    assert_eq!(mixed["param_bytes"], 41);
    let params: Vec<(u64, u64, u64)> = mixed["params"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["ordinal"].as_u64().unwrap(), p["offset"].as_u64().unwrap(), p["size"].as_u64().unwrap()))
        .collect();
    assert_eq!(params, [(0, 0, 8), (1, 8, 4), (2, 16, 16), (3, 32, 8), (4, 40, 1)]);
}

#[test]
fn table_for_host_binaries() {
    for f in ["vecadd", "libkernels.so", "rdc_app", "params.sm_90.cubin"] {
        let (code, out, err) = gpuless(&["analyze", testdata(f).to_str().unwrap()]);
        assert_eq!(code, 0, "{f}: {err}");
        assert!(out.contains("LAYOUT"), "{f}: {out}");
    }
    let (_, out, _) = gpuless(&["analyze", testdata("vecadd").to_str().unwrap()]);
    assert!(out.contains("vector_add(float const*, float const*, float*, int)"), "{out}");
}

#[test]
fn bad_input_exits_2_naming_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(testdata("params.size.fatbin")).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("truncated.fatbin", bytes[..3000].to_vec(), "truncated"),
        ("garbage.bin", b"this is not a GPU binary at all".to_vec(), "not a host ELF"),
        ("empty.bin", Vec::new(), "not a host ELF"),
        (
            "badsize.fatbin",
            {
                let mut b = bytes.clone();
                b[16 + 8..16 + 16].copy_from_slice(&u64::MAX.to_le_bytes()); // first entry's payload size
                b
            },
            "offset 0x",
        ),
        (
            "lie.fatbin",
            {
                let mut b = bytes.clone();
                b[16 + 0x38..16 + 0x40].copy_from_slice(&1_000_000u64.to_le_bytes()); // uncompressed size lie
                b
            },
            "decompression",
        ),
    ];
    for (name, data, expect) in cases {
        let p = dir.path().join(name);
        std::fs::write(&p, data).unwrap();
        let (code, _, err) = gpuless(&["analyze", p.to_str().unwrap()]);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(err.contains(name) && err.contains(expect), "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
    }
    let (code, _, err) = gpuless(&["analyze", "/nonexistent/file.so"]);
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent/file.so"), "{err}");
    let (code, _, err) = gpuless(&["analyze", "--arch", "banana", testdata("vecadd").to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("sm_90"), "{err}");
}

fn trace(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/traces").join(name)
}

#[test]
fn real_traces_recorded_on_the_gpu_machine() {
    // testdata/traces/vecadd.gl: `gpuless record -- ./vecadd 4096` on an H200 (driver 580).
    let (code, out, err) = gpuless(&["analyze", "--json", trace("vecadd.gl").to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["meta"]["gpu_name"], "NVIDIA H200");
    let s = &v["stats"];
    assert_eq!(s["kernel_launches"], 1);
    assert_eq!(s["unmodeled_calls"], 0);
    assert_eq!(s["h2d"]["count"], 2);
    assert_eq!(s["h2d"]["bytes"], 2 * 4096 * 4);
    assert_eq!(s["d2h"]["count"], 1);
    // The table output works on the rdc trace too, and a closed pipe is not an error.
    let (code, out, err) = gpuless(&["analyze", trace("rdc_app.gl").to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("cuLaunchKernel"), "{out}");
}

#[test]
fn plots_are_written_for_traces() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) =
        gpuless(&["analyze", "--plot", dir.path().to_str().unwrap(), trace("vecadd.gl").to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let files: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(files.iter().any(|f| f.ends_with(".svg")) && files.iter().any(|f| f.ends_with(".png")), "{files:?}");
}

#[test]
fn dry_run_replay_needs_no_gpu() {
    let (code, out, err) = gpuless(&["replay", "--dry-run", trace("vecadd.gl").to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("every replayed call is consistent"), "{out}");
    // Without --dry-run on a machine with no GPU: a clear error, exit 2.
    if !std::path::Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.1").exists() {
        let (code, _, err) = gpuless(&["replay", trace("vecadd.gl").to_str().unwrap()]);
        assert_eq!(code, 2);
        assert!(err.contains("no GPU"), "{err}");
    }
}

/// Every committed trace is consistent under the dry run (a synthetic one whose stream-ordered
/// workspaces overlapped a live allocation was not), and the synthetic ones name their CUDA
/// version in the header (the timeline's synthetic trace holds the program's own VMM calls,
/// for its memory counter, which replay re-creates).
#[test]
fn every_committed_trace_passes_the_dry_run() {
    let dir = trace("vecadd.gl").parent().unwrap().to_path_buf();
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "gl") {
            continue;
        }
        let (code, out, err) = gpuless(&["replay", "--dry-run", p.to_str().unwrap()]);
        assert_eq!(code, 0, "{}: {out}{err}", p.display());
        assert!(out.contains("every replayed call is consistent"), "{}: {out}", p.display());
        n += 1;
    }
    assert!(n >= 10, "only {n} traces in {}", dir.display());
    for name in ["synthetic-vector-add.gl", "synthetic-resnet-like.gl"] {
        let (code, out, err) = gpuless(&["analyze", "--no-progress", trace(name).to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("CUDA 13.0"), "{name}: {out}");
    }
}

/// Runtime registrations (annotations) are counted in the table and listed in the JSON.
#[test]
fn registrations_are_listed() {
    use gpuless_traces::synthetic::{resnet_like, synthetic_meta, ResnetScale};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.gl");
    let w = gpuless_traces::TraceWriter::create(&path, &synthetic_meta("r"), Default::default()).unwrap();
    resnet_like(&w, ResnetScale { iterations: 1, ..ResnetScale::default() }).unwrap();
    w.finish().unwrap();
    let (code, out, err) = gpuless(&["analyze", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
    assert!(rows.contains(&vec!["registered", "fatbins", "18"]), "{out}");
    assert!(rows.contains(&vec!["kernels", "72"]), "{out}");
    let (code, out, err) = gpuless(&["analyze", "--json", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let g = &v["stats"]["registrations"];
    assert_eq!(g["functions"], 72);
    assert_eq!(g["function_list"][0]["name"], "synthetic_kernel_0_0");
    assert_eq!(g["function_list"][0]["host"], 0x40_0000);
}

/// A real format-2.0 trace recorded on the H200 (testdata/cuda/suite/streams.cu, shared cudart):
/// words decoded, the runtime's registrations of its three kernels listed.
#[test]
fn real_format_2_trace_with_registrations() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/traces/streams_v2.gl");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpuless"))
        .args(["analyze", "--json", "--no-progress", path])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["meta"]["format_version"], "2.0");
    let g = &v["stats"]["registrations"];
    let mut names: Vec<&str> =
        g["function_list"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["_Z3mixPiii", "_Z6affinePiiii", "_Z7combinePKiS0_Pii"]);
    assert_eq!(v["stats"]["kernel_launches"], 10);
}

/// The unmodeled functions of a PyTorch trace are listed in one column, however long their
/// names (cuDNN's are longer than the column was).
#[test]
fn unmodeled_functions_are_listed_in_a_column() {
    let (code, out, err) = gpuless(&["analyze", "--no-progress", trace("tiny_pytorch.gl").to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("unmodeled calls"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter(|l| !l.contains("more functions"))
        .collect();
    assert!(lines.iter().any(|l| l.contains("cudnnBackendDestroyDescriptor")), "{out}");
    let ends: std::collections::HashSet<usize> = lines.iter().map(|l| l.trim_end().len()).collect();
    assert_eq!(ends.len(), 1, "counts right-aligned in one column: {lines:#?}");
}
