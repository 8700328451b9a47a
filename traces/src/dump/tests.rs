use gpuless_analyzer::api::{self, ApiLevel, HandleKind, Variant};

use super::*;
use crate::model::{BlobRef, Dim3, Function, Hash128, KernelParams, LaunchConfig};

fn rec(seq: u64, symbol: &str, args: Vec<Value>, results: Vec<Value>) -> CallRecord {
    let (f, variant) = api::lookup_symbol(symbol).expect("modeled symbol");
    let mut r = CallRecord::new(seq, f.level, Function::Known(f.id));
    r.variant = variant;
    r.thread = 77;
    r.timestamp_ns = 1000 * seq;
    r.duration_ns = 10;
    r.args = args;
    r.results = results;
    r
}

fn h(k: HandleKind, v: u64) -> Value {
    Value::Handle(k, v)
}

fn decode_all(records: &[CallRecord]) -> Vec<DumpRecord> {
    let mut d = Decoder::new();
    records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            d.observe(r);
            d.describe(i as u64, r)
        })
        .collect()
}

#[test]
fn handles_are_numbered_by_kind_and_first_appearance() {
    let recs = [
        rec(0, "cuStreamCreate", vec![Value::Null, Value::U64(1)], vec![h(HandleKind::Stream, 0x5000)]),
        rec(1, "cuStreamCreate", vec![Value::Null, Value::U64(0)], vec![h(HandleKind::Stream, 0x6000)]),
        rec(2, "cuEventCreate", vec![Value::Null, Value::U64(2)], vec![h(HandleKind::Event, 0x5000)]),
        rec(3, "cuStreamSynchronize", vec![h(HandleKind::Stream, 0x6000)], vec![]),
        rec(4, "cuStreamSynchronize", vec![h(HandleKind::Stream, 0)], vec![]),
        rec(5, "cuStreamSynchronize", vec![h(HandleKind::Stream, 2)], vec![]),
        rec(6, "cuDeviceGet", vec![Value::Null, Value::U64(0)], vec![h(HandleKind::Device, 3)]),
    ];
    let d = decode_all(&recs);
    let results: Vec<String> = d.iter().map(|r| r.results.to_string()).collect();
    assert_eq!(results[0], "phStream=stream#1");
    assert_eq!(results[1], "phStream=stream#2");
    // Another kind: its own numbers, whatever the value.
    assert_eq!(results[2], "phEvent=event#1");
    assert_eq!(d[3].args.to_string(), "hStream=stream#2");
    assert_eq!(d[4].args.to_string(), "hStream=stream#0");
    assert_eq!(d[5].args.to_string(), "hStream=stream#per-thread");
    assert_eq!(results[6], "device=dev3");
    // Flags in hex, out-only arguments left out of the arguments.
    assert_eq!(d[0].args.to_string(), "Flags=0x1");
}

#[test]
fn launches_show_geometry_and_the_kernel_name() {
    let kernel = 0xabc0;
    let params = Value::KernelParams(KernelParams { bytes: vec![0; 20], layout: vec![(0, 8), (8, 8), (16, 4)] });
    let launch = vec![
        h(HandleKind::Function, kernel),
        Value::U64(16),
        Value::U64(2),
        Value::U64(1),
        Value::U64(256),
        Value::U64(1),
        Value::U64(1),
        Value::U64(1024),
        h(HandleKind::Stream, 0),
        params.clone(),
        Value::Null,
    ];
    let config = LaunchConfig {
        grid: Dim3 { x: 4, y: 1, z: 1 },
        block: Dim3 { x: 64, y: 2, z: 1 },
        shared_mem: 0,
        stream: 0x7000,
        attrs: Vec::new(),
    };
    let recs = [
        rec(
            0,
            "cuLibraryGetKernel",
            vec![Value::Null, h(HandleKind::Library, 0x10), Value::Str("_Z3addPfi".into())],
            vec![h(HandleKind::Kernel, kernel)],
        ),
        rec(1, "cuLaunchKernel", launch, vec![]),
        rec(2, "cuLaunchKernelEx", vec![Value::LaunchConfig(config), h(HandleKind::Function, 0xdead), params], vec![]),
    ];
    let d = decode_all(&recs);
    assert_eq!(d[0].results.to_string(), "pKernel=kernel#1");
    let l = &d[1];
    assert_eq!(l.kernel.as_deref(), Some("_Z3addPfi"));
    assert_eq!(
        l.args.to_string(),
        "f=func#1, grid=16x2x1, block=256x1x1, sharedMemBytes=1024, hStream=stream#0, \
         kernelParams=<3 params, 20 B>, extra=null"
    );
    assert_eq!(l.status_name.as_deref(), Some("CUDA_SUCCESS"));
    let text = l.to_string();
    assert!(text.contains("cuLaunchKernel(f=func#1, grid=16x2x1") && text.ends_with("kernel _Z3addPfi"), "{text}");
    // An unknown function handle: no name; the configuration's stream is numbered.
    assert_eq!(d[2].kernel, None);
    assert_eq!(
        d[2].args.get("config").map(ToString::to_string).as_deref(),
        Some("{grid 4x1x1, block 64x2x1, shared 0, stream#1, 0 attrs}")
    );
    let json = serde_json::to_value(l).expect("json");
    assert_eq!(json["args"]["grid"], serde_json::json!([16, 2, 1]));
    assert_eq!(json["args"]["kernelParams"], serde_json::json!({"params": 3, "bytes": 20}));
    assert_eq!(json["function"], "cuLaunchKernel");
    assert_eq!(json["kernel"], "_Z3addPfi");
}

#[test]
fn symbols_blobs_statuses_and_summaries() {
    let blob = BlobRef { hash: Hash128(0x1234_5678_9abc_def0_0000_0000_0000_0001), len: 4096 };
    let mut failed = rec(1, "cuMemAlloc_v2", vec![Value::Null, Value::Size(1 << 40)], vec![Value::Null]);
    failed.status = 2;
    let mut summary = CallRecord::new(9, ApiLevel::Cudnn, Function::Other("cudnnCreate".into()));
    summary.args = vec![Value::U64(3)];
    // The recorder's summary of a counted version whose base name the table models.
    let mut counted = rec(10, "cuCtxSynchronize", vec![Value::U64(4)], vec![]);
    counted.thread = 0;
    counted.duration_ns = 0;
    let recs = [
        rec(0, "cuMemcpyHtoD_v2", vec![Value::DevPtr(0x7e00_0000_0000), Value::Blob(blob), Value::Size(4096)], vec![]),
        failed,
        summary,
        counted,
    ];
    let d = decode_all(&recs);
    assert_eq!(d[0].function, "cuMemcpyHtoD_v2");
    assert_eq!(d[0].args.to_string(), "dstDevice=0x7e0000000000, srcHost=<blob 12345678, 4096 B>, ByteCount=4096");
    assert_eq!(d[1].status_name.as_deref(), Some("CUDA_ERROR_OUT_OF_MEMORY"));
    assert!(d[1].to_string().ends_with("= CUDA_ERROR_OUT_OF_MEMORY"), "{}", d[1]);
    for s in &d[2..] {
        assert!(s.summary && s.status_name.is_none(), "{s:?}");
    }
    assert_eq!(d[2].args.to_string(), "calls=3");
    assert_eq!(d[3].args.to_string(), "calls=4");
    assert!(!d[0].summary && !d[1].summary);
    let variant = Variant { version: 2, per_thread: false };
    assert_eq!(recs[0].variant, variant);
}

/// Integers are shown at their C type's width, signed where the type is: traces recorded
/// before the recorder read out values at their width hold the bytes after a 4-byte enum above
/// it (testdata/traces/vecadd.gl: `mode=5719756450872426498` for 2), and by-value `int`s are
/// recorded as their sign-extended bit pattern.
#[test]
fn integers_are_shown_at_their_c_width() {
    let recs = [
        rec(0, "cuModuleGetLoadingMode", vec![Value::HostPtr(0x7ffd_0000)], vec![Value::U64(0x4f60_a830_0000_0002)]),
        rec(
            1,
            "cuStreamIsCapturing",
            vec![h(HandleKind::Stream, 0), Value::HostPtr(0x7ffd_0000)],
            vec![Value::U64(0x249c_b1d0_0000_0000)],
        ),
        rec(
            2,
            "cuStreamCreateWithPriority",
            vec![Value::Null, Value::U64(0), Value::U64(-5i64 as u64)],
            vec![h(HandleKind::Stream, 0x5000)],
        ),
        rec(3, "cuCtxGetStreamPriorityRange", vec![Value::Null, Value::Null], vec![Value::I64(0), Value::I64(-5)]),
        rec(4, "cuMemGetInfo_v2", vec![Value::Null, Value::Null], vec![Value::Size(1 << 33), Value::Size(1 << 34)]),
        rec(
            5,
            "cuDeviceGetAttribute",
            vec![Value::Null, Value::U64(75), h(HandleKind::Device, 0)],
            vec![Value::I64(9)],
        ),
    ];
    let d = decode_all(&recs);
    assert_eq!(d[0].results.to_string(), "mode=2");
    assert_eq!(d[1].results.to_string(), "captureStatus=0");
    assert_eq!(d[2].args.to_string(), "flags=0x0, priority=-5");
    assert_eq!(d[3].results.to_string(), "leastPriority=0, greatestPriority=-5");
    assert_eq!(d[4].results.to_string(), "free=8589934592, total=17179869184", "8-byte values as they are");
    assert_eq!(d[5].args.to_string(), "attrib=75, dev=dev0");
    assert_eq!(d[5].results.to_string(), "pi=9");
}

/// A summary whose name today's table models (written by a recorder that counted the unmodeled
/// `cuCtxGetDevice_v2` under its base name) is shown and counted as the calls it stands for.
#[test]
fn summaries_under_modeled_names_stand_for_their_count() {
    let mut counted = CallRecord::new(40, ApiLevel::Driver, Function::resolve("cuCtxGetDevice", Variant::BASE));
    counted.timestamp_ns = 9_000;
    counted.args = vec![Value::U64(323)];
    assert!(matches!(counted.function, Function::Known(_)));
    let call = rec(3, "cuCtxGetDevice", vec![Value::HostPtr(0x7ffd_0000)], vec![h(HandleKind::Device, 0)]);
    let d = decode_all(&[call.clone(), counted.clone()]);
    assert!(d[1].summary && !d[0].summary);
    assert_eq!(d[1].to_string().split_whitespace().last(), Some("cuCtxGetDevice(calls=323)"));
    assert_eq!((counted.calls_represented(), call.calls_represented()), (323, 1));
}
