//! Function compilation on synthetic recordings: an input uploaded before the first launch is
//! found by comparing two recordings, and a body that depends on its input is refused.

use gpuless_analyzer::api::HandleKind;
use gpuless_traces::synthetic::{launch_args, synthetic_meta, Recorder, Rng};
use gpuless_traces::writer::{TraceWriter, WriterOptions};
use gpuless_traces::{BlobKind, BlobRef, Hash128, KernelParams, Value};

use super::compile;
use crate::replay::{load, LoadedTrace};

/// A vector-add recording: inputs of `n` floats drawn with `seed`, uploaded before the launch.
fn recording(dir: &std::path::Path, name: &str, seed: u64, n: u32) -> LoadedTrace {
    recording_at(dir, name, seed, n, 0, 0x5600_0000)
}

/// [`recording`] in a process whose module and function handles are `shift` higher and whose
/// result buffer is at `host` (each process has its own).
fn recording_at(dir: &std::path::Path, name: &str, seed: u64, n: u32, shift: u64, host: u64) -> LoadedTrace {
    let path = dir.join(name);
    let w = TraceWriter::create(&path, &synthetic_meta(name), WriterOptions::default()).unwrap();
    let mut rng = Rng::new(seed);
    let mut r = Recorder::new(&w);
    let image = r.blob(BlobKind::CodeImage, b"not a real cubin, never loaded").unwrap();
    let (module, func) = (0x10 + shift, 0x20 + shift);
    r.call("cuModuleLoadData", vec![Value::Null, Value::Blob(image)], vec![Value::Handle(HandleKind::Module, module)])
        .unwrap();
    r.call(
        "cuModuleGetFunction",
        vec![Value::Null, Value::Handle(HandleKind::Module, module), Value::Str("vecAdd".into())],
        vec![Value::Handle(HandleKind::Function, func)],
    )
    .unwrap();
    let bytes = u64::from(n) * 4;
    let ptrs = [0x7e00_0000_0000u64, 0x7e00_0020_0000, 0x7e00_0040_0000];
    for p in ptrs {
        r.call("cuMemAlloc_v2", vec![Value::Null, Value::Size(bytes)], vec![Value::DevPtr(p)]).unwrap();
    }
    for p in &ptrs[..2] {
        let data = r.blob(BlobKind::HostToDevice, &rng.tensor_bytes(bytes as usize)).unwrap();
        r.call("cuMemcpyHtoD_v2", vec![Value::DevPtr(*p), Value::Blob(data), Value::Size(bytes)], vec![]).unwrap();
    }
    let mut p = Vec::new();
    for x in ptrs {
        p.extend_from_slice(&x.to_le_bytes());
    }
    p.extend_from_slice(&n.to_le_bytes());
    let params = Value::KernelParams(KernelParams { bytes: p, layout: vec![(0, 8), (8, 8), (16, 8), (24, 4)] });
    let f = Value::Handle(HandleKind::Function, func);
    r.call("cuLaunchKernel", launch_args(f, u64::from(n.div_ceil(256)), 256, 0, params), vec![]).unwrap();
    let out = rng.tensor_bytes(bytes as usize);
    r.call(
        "cuMemcpyDtoH_v2",
        vec![Value::HostPtr(host), Value::DevPtr(ptrs[2]), Value::Size(bytes)],
        vec![Value::Digest(BlobRef { hash: Hash128::of(&out), len: bytes })],
    )
    .unwrap();
    w.finish().unwrap();
    load(&path).unwrap()
}

#[test]
fn inputs_uploaded_before_the_first_launch_are_found_by_comparing_recordings() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (recording(dir.path(), "a.gl", 1, 1000), recording(dir.path(), "b.gl", 2, 1000));
    // One recording: the uploads are set-up (before the first launch), the body has no input.
    let (_, m) = compile(&a, &[]).unwrap();
    assert!(m.inputs.is_empty());
    assert_eq!(m.outputs.len(), 1);
    assert_eq!((m.outputs[0].address, m.outputs[0].bytes), (0x7e00_0040_0000, 4000));
    assert_eq!(m.kernels, ["vecAdd"]);
    // Two recordings with other data: the two uploads whose bytes differ are the inputs.
    let (keep, m) = compile(&a, &[&b]).unwrap();
    let inputs: Vec<(u64, u64)> = m.inputs.iter().map(|p| (p.address, p.bytes)).collect();
    assert_eq!(inputs, [(0x7e00_0000_0000, 4000), (0x7e00_0020_0000, 4000)]);
    assert_eq!(m.recordings_compared, 2);
    assert_eq!(keep.len(), m.setup_records + m.body_records);
}

/// Two processes hand out other handles and host buffers: the bodies are still the same
/// function; a launch of another kernel is not.
#[test]
fn handles_and_host_buffers_of_another_process_correspond() {
    let dir = tempfile::tempdir().unwrap();
    let a = recording(dir.path(), "a.gl", 1, 1000);
    let b = recording_at(dir.path(), "b.gl", 2, 1000, 0x1000, 0x7777_0000);
    let (_, m) = compile(&a, &[&b]).unwrap();
    assert_eq!(m.inputs.len(), 2);
    // The launch names a function no record of the second recording created in that place.
    let mut c = recording_at(dir.path(), "c.gl", 2, 1000, 0x1000, 0x7777_0000);
    let launch = c.calls.iter_mut().find(|r| r.function.name() == "cuLaunchKernel").unwrap();
    launch.args[0] = Value::Handle(HandleKind::Function, 0x999);
    let e = compile(&a, &[&c]).unwrap_err();
    assert!(e.contains("argument `f`"), "{e}");
    // A parameter word outside the arena (a host pointer) is the process's own: kept, counted.
    let mut d = recording_at(dir.path(), "d.gl", 2, 1000, 0x1000, 0x7777_0000);
    let at = params_of(&mut d);
    at.bytes[24..28].copy_from_slice(&0x1047_f560u32.to_le_bytes());
    let mut a2 = recording(dir.path(), "a2.gl", 1, 1000);
    params_of(&mut a2).bytes[24..28].copy_from_slice(&0x428c_9280u32.to_le_bytes());
    let (_, m) = compile(&a2, &[&d]).unwrap();
    assert_eq!(m.host_words, 1);
    // An int beside padding that held a stale pointer in one process only: kept too.
    params_of(&mut d).bytes[24..28].copy_from_slice(&4u32.to_le_bytes());
    params_of(&mut a2).bytes[24..28].copy_from_slice(&4u32.to_le_bytes());
    let (_, m) = compile(&a2, &[&d]).unwrap();
    assert_eq!(m.host_words, 0, "an equal int is no difference");
    // A pointer into the arena that differs: the body uses other memory.
    let mut e2 = recording_at(dir.path(), "e.gl", 2, 1000, 0x1000, 0x7777_0000);
    params_of(&mut e2).bytes[0..8].copy_from_slice(&0x7e00_0060_0000u64.to_le_bytes());
    let e = compile(&a, &[&e2]).unwrap_err();
    assert!(e.contains("kernel parameter 0 (byte 0) is 0x7e0000600000"), "{e}");
}

/// The launch's parameters in `t`.
fn params_of(t: &mut LoadedTrace) -> &mut KernelParams {
    let launch = t.calls.iter_mut().find(|r| r.function.name() == "cuLaunchKernel").unwrap();
    launch.args.iter_mut().find_map(|v| if let Value::KernelParams(p) = v { Some(p) } else { None }).unwrap()
}

#[test]
fn a_body_that_depends_on_its_input_is_refused_with_the_first_difference() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (recording(dir.path(), "a.gl", 1, 1000), recording(dir.path(), "b.gl", 1, 3000));
    let e = compile(&a, &[&b]).unwrap_err();
    assert!(e.starts_with("recording 2 differs from the first: body record 0 (cuLaunchKernel"), "{e}");
    assert!(e.contains("gridDimX"), "names the argument: {e}");
}

/// A recording with two modules: `used` launched, `unused` only looked up and asked about (and,
/// with `set`, an attribute of its function set).
fn two_modules(dir: &std::path::Path, set: bool) -> LoadedTrace {
    let path = dir.join(if set { "set.gl" } else { "two.gl" });
    let w = TraceWriter::create(&path, &synthetic_meta("two"), WriterOptions::default()).unwrap();
    let mut r = Recorder::new(&w);
    for (m, f, name) in [(0x10u64, 0x20u64, "used"), (0x11, 0x21, "unused")] {
        let image = r.blob(BlobKind::CodeImage, name.as_bytes()).unwrap();
        r.call("cuModuleLoadData", vec![Value::Null, Value::Blob(image)], vec![Value::Handle(HandleKind::Module, m)])
            .unwrap();
        r.call(
            "cuModuleGetFunction",
            vec![Value::Null, Value::Handle(HandleKind::Module, m), Value::Str(name.into())],
            vec![Value::Handle(HandleKind::Function, f)],
        )
        .unwrap();
    }
    // A query about the unused function (cuDNN asks about every kernel it has).
    r.call(
        "cuFuncGetAttribute",
        vec![Value::Null, Value::U64(4), Value::Handle(HandleKind::Function, 0x21)],
        vec![Value::U64(32)],
    )
    .unwrap();
    if set {
        r.call(
            "cuFuncSetAttribute",
            vec![Value::Handle(HandleKind::Function, 0x21), Value::U64(8), Value::U64(65536)],
            vec![],
        )
        .unwrap();
    }
    let params = Value::KernelParams(KernelParams { bytes: vec![0; 8], layout: vec![(0, 8)] });
    r.call("cuLaunchKernel", launch_args(Value::Handle(HandleKind::Function, 0x20), 1, 32, 0, params), vec![]).unwrap();
    w.finish().unwrap();
    load(&path).unwrap()
}

#[test]
fn code_none_of_whose_kernels_runs_is_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let t = two_modules(dir.path(), false);
    let (keep, m) = compile(&t, &[]).unwrap();
    assert_eq!((m.images, m.images_left_out), (1, 1));
    let names: Vec<String> = keep.iter().map(|&i| t.calls[i].function.name().to_string()).collect();
    assert_eq!(
        names,
        ["cuModuleLoadData", "cuModuleGetFunction", "cuLaunchKernel"],
        "the unused module, its look-up and the query about it are gone"
    );
    // A call that changes the unused function's state keeps its module.
    let t = two_modules(dir.path(), true);
    let (_, m) = compile(&t, &[]).unwrap();
    assert_eq!((m.images, m.images_left_out), (2, 0));
}

#[test]
fn a_function_file_reads_the_same_from_its_bytes_as_from_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let a = recording(dir.path(), "a.gl", 1, 1000);
    let (_, m) = compile(&a, &[]).unwrap();
    let f = dir.path().join("f.gfn");
    super::write(&f, &m, &dir.path().join("a.gl")).unwrap();
    let bytes = std::fs::read(&f).unwrap();
    let (by_path, by_bytes) = (super::open(&f).unwrap(), super::open_bytes("deployed `f`", &bytes).unwrap());
    assert_eq!(by_path.manifest, by_bytes.manifest);
    assert_eq!(by_path.trace.calls.len(), by_bytes.trace.calls.len());
    // Damaged bytes are refused, named by the label.
    let e = super::open_bytes("deployed `f`", &bytes[..bytes.len() - 10]).err().unwrap().to_string();
    assert!(e.starts_with("deployed `f`: "), "{e}");
    let e = super::open_bytes("blob 1", b"not a function").err().unwrap().to_string();
    assert!(e.contains("not a gpuless function file"), "{e}");
}
