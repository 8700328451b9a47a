//! The API table against the CUDA toolkit's own declarations: every driver symbol `cuda.h`
//! declares is in the table with exactly one disposition, every symbol the table models has the
//! parameter types `cuda.h` gives it, and no function the client answers itself changes device
//! state. `analyzer/src/api/cuda-13.0-driver.txt` lists the header's prototypes (regenerate with
//! `scripts/api-signatures.py CUDA_INCLUDE_DIR`).
//!
//! Why: CUDA 13's `cuGetProcAddress("cuCtxGetDevice")` hands out `cuCtxGetDevice_v2`, a second
//! signature the table lacked; its calls were counted under the wrong function, and every one of
//! them (1,600 per ResNet-50 inference) ended the recorder's stable answers
//! (docs/benchmarks/recorder-overhead-history.md, session 7). This test finds such gaps from the header alone.

use std::collections::BTreeMap;
use std::path::Path;

use gpuless_analyzer::api::{self, ApiLevel, Disposition, LocalRule, Refusal, SyncClass};

/// The legacy (before CUDA 3.2) bare symbols with a 32-bit ABI (`unsigned int` sizes,
/// `CUdeviceptr_v1`, the `_v1` descriptor structs): deliberately not modeled. Their calls are
/// counted as unmodeled and passed through untouched (the arena cannot serve a 64-bit address
/// into a 32-bit one). Programs built with cuda.h 3.2 or later, and `cuGetProcAddress`, use `_v2`.
const LEGACY_V1: &[&str] = &[
    "cuDeviceTotalMem",
    "cuModuleGetGlobal",
    "cuMemGetInfo",
    "cuMemAlloc",
    "cuMemAllocPitch",
    "cuMemFree",
    "cuMemGetAddressRange",
    "cuMemAllocHost",
    "cuMemHostGetDevicePointer",
    "cuArrayCreate",
    "cuArray3DCreate",
    "cuArrayGetDescriptor",
    "cuArray3DGetDescriptor",
    "cuMemcpyHtoD",
    "cuMemcpyDtoH",
    "cuMemcpyDtoD",
    "cuMemcpyHtoDAsync",
    "cuMemcpyDtoHAsync",
    "cuMemcpyDtoDAsync",
    "cuMemcpyDtoA",
    "cuMemcpyAtoD",
    "cuMemcpyHtoA",
    "cuMemcpyAtoH",
    "cuMemcpyAtoA",
    "cuMemcpyHtoAAsync",
    "cuMemcpyAtoHAsync",
    "cuMemcpy2D",
    "cuMemcpy2DUnaligned",
    "cuMemcpy2DAsync",
    "cuMemcpy3D",
    "cuMemcpy3DAsync",
    "cuMemsetD8",
    "cuMemsetD16",
    "cuMemsetD32",
    "cuMemsetD2D8",
    "cuMemsetD2D16",
    "cuMemsetD2D32",
];

/// Known differences, each with the reason it is accepted.
const ACCEPTED: &[(&str, &str)] = &[
    // `cuGetProcAddress` (v11030) took no `symbolStatus`; the table's line is the CUDA 12 form
    // (`_v2`), and the recorder answers both itself (REFERENCE.md §3).
    ("cuGetProcAddress", "the recorder serves both versions itself"),
];

/// `SYMBOL -> [TYPE, ...]` from the reference listing.
fn header() -> BTreeMap<String, Vec<String>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/api/cuda-13.0-driver.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = BTreeMap::new();
    for h in api::parse::parse_listing(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())) {
        out.insert(h.name, h.params.iter().map(|(t, _)| normal(t)).collect());
    }
    assert!(out.len() > 500, "{}: only {} symbols", path.display(), out.len());
    out
}

/// A C type with spaces normalised as the listing writes them (`const CUdeviceptr*`).
fn normal(t: &str) -> String {
    t.replace('*', " * ").split_whitespace().collect::<Vec<_>>().join(" ").replace(" *", "*")
}

/// The base name of a symbol: without `_vN`, `_ptsz`, `_ptds`.
fn base(symbol: &str) -> &str {
    api::parse::split_symbol(symbol).0
}

fn accepted(symbol: &str) -> bool {
    ACCEPTED.iter().any(|(s, _)| *s == symbol) || LEGACY_V1.contains(&symbol)
}

#[test]
fn modeled_driver_symbols_have_the_headers_parameter_types() {
    let header = header();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for f in api::functions().iter().filter(|f| f.level == ApiLevel::Driver) {
        let table: Vec<String> = f.args.iter().map(|a| normal(a.c_type)).collect();
        for s in f.symbols {
            let Some(h) = header.get(s.name) else { continue };
            checked += 1;
            if *h != table && !accepted(s.name) {
                wrong.push(format!("{}: table ({}) header ({})", s.name, table.join(", "), h.join(", ")));
            }
        }
    }
    assert!(checked > 380, "only {checked} modeled symbols found in the header listing");
    assert!(wrong.is_empty(), "{} symbols differ from cuda.h:\n{}", wrong.len(), wrong.join("\n"));
}

#[test]
fn every_symbol_of_cuda_h_is_in_the_table() {
    let header = header();
    let missing: Vec<&String> = header.keys().filter(|s| api::lookup_symbol(s).is_none()).collect();
    assert!(missing.is_empty(), "{} cuda.h symbols are not in the table: {missing:?}", missing.len());
    assert_eq!(header.len(), 672, "cuda.h's 634, cudaProfiler.h's 3 and the interop headers' 35");
}

#[test]
fn every_function_has_one_disposition_and_local_answers_change_no_device_state() {
    for f in api::functions() {
        if let Disposition::Local(rule) = f.disposition {
            // A local answer of success for a call that changes device state would be a silent
            // success: only queries, host memory the client owns, what the arena keeps of its
            // allocations (their pointer attributes), the client's view of the session's one
            // context, the JIT linker (a host-side tool: its product reaches the device only
            // through a later module load) and shared memory handles (an import takes its
            // reference on the server through its own record) may be answered locally.
            let harmless = f.is_query()
                || f.sync == SyncClass::HostMemory
                || matches!(
                    rule,
                    LocalRule::Context | LocalRule::Runtime | LocalRule::Address | LocalRule::Link | LocalRule::Share
                );
            assert!(harmless, "{} ({:?}) is answered locally by {rule:?} but changes device state", f.name, f.sync);
        }
        if f.level == ApiLevel::Driver {
            assert_eq!(f.sent_by_client(), f.disposition == Disposition::Server, "{}", f.name);
        }
    }
    // The behaviours a third party's programs found silently wrong are no longer silent.
    let d = |n: &str| api::by_name(n).unwrap_or_else(|| panic!("{n}")).disposition;
    // The program's own virtual memory runs on the server (issue 35).
    for n in ["cuMemAddressReserve", "cuMemCreate", "cuMemMap", "cuMemSetAccess", "cuMemUnmap", "cuMemRelease"] {
        assert_eq!(d(n), Disposition::Server, "{n}");
    }
    // Host functions run on the client, in stream order on the server (issue 35).
    for n in [
        "cuStreamWaitValue32",
        "cuStreamWriteValue64",
        "cuStreamBatchMemOp",
        "cuStreamSetAttribute",
        "cuMemcpyPeer",
        "cuLaunchHostFunc",
        "cuStreamAddCallback",
        "cuGraphAddHostNode",
        "cuMemAllocManaged",
    ] {
        assert_eq!(d(n), Disposition::Server, "{n}");
    }
    // The JIT linker: the client keeps the link's handle and options, the server its driver's
    // link state (issue 34).
    for n in ["cuLinkCreate", "cuLinkAddData", "cuLinkAddFile", "cuLinkComplete", "cuLinkDestroy"] {
        assert_eq!(d(n), Disposition::Local(LocalRule::Link), "{n}");
    }
}

#[test]
fn legacy_32_bit_symbols_are_refused() {
    let header = header();
    for s in LEGACY_V1 {
        assert!(header.contains_key(*s), "{s} is not in the listing");
        let (f, _) = api::lookup_symbol(s).unwrap_or_else(|| panic!("{s} is not in the table"));
        assert_eq!(f.disposition, Disposition::Refused(Refusal::Legacy32), "{s}");
        assert!(
            f.args.iter().all(|a| !a.is_pointer() || a.kind == api::ArgKind::HostPtr),
            "{s}: pointers as addresses"
        );
    }
}

#[test]
fn symbols_carry_the_version_cu_get_proc_address_hands_them_out_from() {
    let since = |s: &str| {
        let (f, v) = api::lookup_symbol(s).unwrap_or_else(|| panic!("{s}"));
        f.symbols.iter().find(|x| x.variant == v).map(|x| x.since).unwrap_or_default()
    };
    assert_eq!(since("cuCtxCreate"), 2000);
    assert_eq!(since("cuCtxCreate_v2"), 3020);
    assert_eq!(since("cuCtxCreate_v4"), 12050);
    assert_eq!(since("cuMemAlloc_v2"), 3020);
    assert_eq!(since("cuMemcpyHtoD_v2_ptds"), 7000);
    assert_eq!(since("cuStreamGetCaptureInfo_v3"), 12030);
    assert_eq!(since("cuEventElapsedTime_v2"), 12080);
    for f in api::functions().iter().filter(|f| f.level == ApiLevel::Driver) {
        for s in f.symbols {
            assert!(s.since >= 2000, "{}: no version", s.name);
        }
    }
}

#[test]
fn the_reference_listing_is_read_as_written() {
    let header = header();
    assert_eq!(header["cuCtxGetDevice_v2"], ["CUdevice*", "CUcontext"]);
    assert_eq!(header["cuStreamBeginCapture"], ["CUstream"]);
    assert_eq!(base("cuMemcpyHtoDAsync_v2_ptsz"), "cuMemcpyHtoDAsync");
    assert_eq!(base("cuMemcpy3DBatchAsync_v2"), "cuMemcpy3DBatchAsync");
    assert_eq!(base("cuGraphAddNode_v2"), "cuGraphAddNode");
    assert_eq!(base("cuCtxCreate_v4"), "cuCtxCreate");
}
