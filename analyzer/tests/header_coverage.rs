//! The API table against the CUDA toolkit's own declarations: every driver symbol the table
//! models has the parameter types `cuda.h` gives it, and every version of a modeled function that
//! `cuda.h` declares is modeled. `testdata/api/cuda-13.0-driver.txt` lists the header's
//! prototypes (regenerate with `scripts/api-signatures.py CUDA_INCLUDE_DIR`).
//!
//! Why: CUDA 13's `cuGetProcAddress("cuCtxGetDevice")` hands out `cuCtxGetDevice_v2`, a second
//! signature the table lacked; its calls were counted under the wrong function, and every one of
//! them (1,600 per ResNet-50 inference) ended the recorder's stable answers
//! (docs/benchmarks/recorder-overhead-history.md, session 7). This test finds such gaps from the header alone.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use gpuless_analyzer::api::{self, ApiLevel};

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
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/api/cuda-13.0-driver.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let (name, types) = line.split_once('\t').unwrap_or((line, ""));
        let types = types.split(", ").filter(|t| !t.is_empty()).map(normal).collect();
        out.insert(name.to_string(), types);
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
fn every_declared_version_of_a_modeled_function_is_modeled() {
    let header = header();
    let modeled: BTreeSet<&str> =
        api::functions().iter().filter(|f| f.level == ApiLevel::Driver).map(|f| f.name).collect();
    let missing: Vec<&String> = header
        .keys()
        .filter(|s| modeled.contains(base(s)) && api::lookup_symbol(s).is_none() && !accepted(s))
        .collect();
    assert!(
        missing.is_empty(),
        "{} versions of modeled functions are declared in cuda.h but not in driver.api (add a line with their \
         signature): {missing:?}",
        missing.len()
    );
}

#[test]
fn legacy_32_bit_symbols_are_not_modeled() {
    let header = header();
    for s in LEGACY_V1 {
        assert!(header.contains_key(*s), "{s} is not in the listing");
        assert!(api::lookup_symbol(s).is_none(), "{s} has the 32-bit ABI and must not get a _v2 line");
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
