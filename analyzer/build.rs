//! Turns `src/api/*.api` into a static Rust table (`$OUT_DIR/api_table.rs`).

#[path = "src/api/parse.rs"]
#[allow(dead_code)]
mod parse;

use std::collections::BTreeMap;
use std::fmt::Write as _;

const FILES: &[&str] = &["src/api/driver.api"];

/// Every driver symbol cuda.h declares (`scripts/api-signatures.py`): each gets an entry.
const LISTING: &str = "src/api/cuda-13.0-driver.txt";

const LOCAL_RULES: &[(&str, &str)] = &[
    ("errors", "Errors"),
    ("entry", "Entry"),
    ("device", "Device"),
    ("context", "Context"),
    ("kernel", "Kernel"),
    ("host", "Host"),
    ("address", "Address"),
    ("capture", "Capture"),
    ("handle", "Handle"),
    ("runtime", "Runtime"),
    ("link", "Link"),
    ("share", "Share"),
];

const REFUSALS: &[(&str, &str)] = &[
    ("legacy32", "Legacy32"),
    ("texref", "TexRef"),
    ("graphics", "Graphics"),
    ("external", "External"),
    ("ipc", "Ipc"),
    ("multicast", "Multicast"),
    ("checkpoint", "Checkpoint"),
    ("logs", "Logs"),
    ("managed", "Managed"),
    ("vmm", "Vmm"),
    ("pool", "Pool"),
    ("multigpu", "MultiGpu"),
    ("green", "Green"),
    ("graphnode", "GraphNode"),
    ("notyet", "NotYet"),
];

/// The argument kind of a by-value parameter of a function known only from the listing; the
/// build fails on a type not named here, so a new cuda.h cannot slip in a wrong width.
const VALUE_KINDS: &[(&str, &str)] = &[
    ("CUarray", "Handle(HandleKind::Array)"),
    ("CUcontext", "Handle(HandleKind::Context)"),
    ("CUevent", "Handle(HandleKind::Event)"),
    ("CUfunction", "Handle(HandleKind::Function)"),
    ("CUgraph", "Handle(HandleKind::Graph)"),
    ("CUgraphExec", "Handle(HandleKind::GraphExec)"),
    ("CUgraphNode", "Handle(HandleKind::GraphNode)"),
    ("CUgreenCtx", "Handle(HandleKind::GreenCtx)"),
    ("CUmemoryPool", "Handle(HandleKind::MemPool)"),
    ("CUmipmappedArray", "Handle(HandleKind::MipmappedArray)"),
    ("CUmodule", "Handle(HandleKind::Module)"),
    ("CUstream", "Handle(HandleKind::Stream)"),
    ("CUmemGenericAllocationHandle", "Handle(HandleKind::MemHandle)"),
    ("CUdevice", "Handle(HandleKind::Device)"),
    ("CUasyncCallbackHandle", "Handle(HandleKind::Other)"),
    ("CUexternalMemory", "Handle(HandleKind::Other)"),
    ("CUexternalSemaphore", "Handle(HandleKind::Other)"),
    ("CUgraphicsResource", "Handle(HandleKind::Other)"),
    ("CUlogsCallbackHandle", "Handle(HandleKind::Other)"),
    ("CUsurfref", "Handle(HandleKind::Other)"),
    ("CUtexref", "Handle(HandleKind::Other)"),
    ("CUuserObject", "Handle(HandleKind::Other)"),
    ("CUasyncCallback", "FnPtr"),
    ("CUhostFn", "FnPtr"),
    ("CUlogsCallback", "FnPtr"),
    ("CUoccupancyB2DSize", "FnPtr"),
    ("CUdeviceptr", "DevPtr"),
    ("CUdeviceptr_v1", "Scalar"),
    // Graphics interop (cudaGL.h, cudaEGL.h, cudaVDPAU.h): the graphics APIs' own handles.
    ("GLuint", "Scalar"),
    ("GLenum", "Scalar"),
    ("EGLImageKHR", "Handle(HandleKind::Other)"),
    ("EGLStreamKHR", "Handle(HandleKind::Other)"),
    ("EGLSyncKHR", "Handle(HandleKind::Other)"),
    ("EGLint", "Scalar"),
    ("VdpDevice", "Scalar"),
    ("VdpVideoSurface", "Scalar"),
    ("VdpOutputSurface", "Scalar"),
    ("CUGLDeviceList", "Enum"),
    // A 100-byte struct passed by value that cudarc does not declare: the refusing export takes
    // it as an int (its bytes are on the caller's stack, never read: the call is refused).
    ("CUeglFrame", "Scalar"),
    ("CUipcEventHandle", "Struct(\"CUipcEventHandle\")"),
    ("CUipcMemHandle", "Struct(\"CUipcMemHandle\")"),
    ("size_t", "Size"),
    ("int", "Scalar"),
    ("unsigned int", "Scalar"),
    ("unsigned char", "Scalar"),
    ("unsigned short", "Scalar"),
    ("unsigned long long", "Scalar"),
    ("cuuint32_t", "Scalar"),
    ("float", "Scalar"),
    ("CUaddress_mode", "Enum"),
    ("CUarray_format", "Enum"),
    ("CUcoredumpSettings", "Enum"),
    ("CUdevResourceType", "Enum"),
    ("CUfilter_mode", "Enum"),
    ("CUflushGPUDirectRDMAWritesScope", "Enum"),
    ("CUflushGPUDirectRDMAWritesTarget", "Enum"),
    ("CUgraphMem_attribute", "Enum"),
    ("CUkernelNodeAttrID", "Enum"),
    ("CUmemAllocationHandleType", "Enum"),
    ("CUmemAllocationType", "Enum"),
    ("CUmemRangeHandleType", "Enum"),
    ("CUmulticastGranularity_flags", "Enum"),
    ("CUsharedconfig", "Enum"),
    ("CUtensorMapDataType", "Enum"),
    ("CUtensorMapFloatOOBfill", "Enum"),
    ("CUtensorMapIm2ColWideMode", "Enum"),
    ("CUtensorMapInterleave", "Enum"),
    ("CUtensorMapL2promotion", "Enum"),
    ("CUtensorMapSwizzle", "Enum"),
];

/// The group of a function known only from the listing, by name.
fn listing_group(base: &str) -> &'static str {
    const PREFIXES: &[(&str, &str)] = &[
        ("cuGraph", "Graph"),
        ("cuUserObject", "Graph"),
        ("cuMemcpy", "Copy"),
        ("cuMemset", "Set"),
        ("cuMem", "Memory"),
        ("cuArray", "Memory"),
        ("cuMipmapped", "Memory"),
        ("cuTexRef", "Texture"),
        ("cuSurfRef", "Texture"),
        ("cuCtx", "Context"),
        ("cuDevice", "Device"),
        ("cuStream", "Stream"),
        ("cuGreen", "Green"),
        ("cuLaunch", "Launch"),
        ("cuParam", "Launch"),
        ("cuFunc", "Function"),
        ("cuOccupancy", "Function"),
        ("cuModule", "Module"),
    ];
    PREFIXES.iter().find(|(p, _)| base.starts_with(p)).map_or("Other", |(_, g)| g)
}

/// The Rust expression of a parsed disposition.
fn disposition(d: &(String, String), file: &str, line: usize) -> String {
    match d.0.as_str() {
        "server" => "Disposition::Server".into(),
        "local" => format!("Disposition::Local(LocalRule::{})", lookup(LOCAL_RULES, &d.1, "local rule", file, line)),
        _ => format!("Disposition::Refused(Refusal::{})", lookup(REFUSALS, &d.1, "refusal", file, line)),
    }
}

const LEVELS: &[(&str, &str)] = &[
    ("driver", "Driver"),
    ("runtime", "Runtime"),
    ("cublas", "Cublas"),
    ("cublaslt", "CublasLt"),
    ("cudnn", "Cudnn"),
    ("nvrtc", "Nvrtc"),
    ("nvml", "Nvml"),
    ("other", "Other"),
];

const GROUPS: &[(&str, &str)] = &[
    ("init", "Init"),
    ("device", "Device"),
    ("context", "Context"),
    ("module", "Module"),
    ("library", "Library"),
    ("function", "Function"),
    ("memory", "Memory"),
    ("vmm", "Vmm"),
    ("pool", "Pool"),
    ("copy", "Copy"),
    ("set", "Set"),
    ("launch", "Launch"),
    ("stream", "Stream"),
    ("event", "Event"),
    ("graph", "Graph"),
    ("texture", "Texture"),
    ("green", "Green"),
    ("registration", "Registration"),
    ("other", "Other"),
];

const SYNC: &[&str] = &[
    "Local",
    "Async",
    "HostToDevice",
    "CopyAnyDirection",
    "CopyAnyDirectionAsync",
    "DeviceToHost",
    "DeviceToHostAsync",
    "AllocatesDevice",
    "FreesDevice",
    "HostMemory",
    "CreatesHandle",
    "DestroysHandle",
    "AddressLookup",
    "DeviceQuery",
    "StateQuery",
    "StreamSync",
    "EventSync",
    "CtxSync",
];

const HANDLES: &[(&str, &str)] = &[
    ("device", "Device"),
    ("context", "Context"),
    ("module", "Module"),
    ("function", "Function"),
    ("library", "Library"),
    ("kernel", "Kernel"),
    ("stream", "Stream"),
    ("event", "Event"),
    ("graph", "Graph"),
    ("graphnode", "GraphNode"),
    ("graphexec", "GraphExec"),
    ("texobject", "TexObject"),
    ("surfobject", "SurfObject"),
    ("array", "Array"),
    ("mipmappedarray", "MipmappedArray"),
    ("mempool", "MemPool"),
    ("memhandle", "MemHandle"),
    ("linkstate", "LinkState"),
    ("greenctx", "GreenCtx"),
    ("other", "Other"),
];

/// Kinds a `-> KIND: C_TYPE` clause may name (`parse::RETURN_KINDS`), as `ArgKind` variants.
const RETURN_KINDS: &[(&str, &str)] = &[
    ("scalar", "Scalar"),
    ("flags", "Flags"),
    ("enum", "Enum"),
    ("count", "Count"),
    ("size", "Size"),
    ("devptr", "DevPtr"),
    ("hostptr", "HostPtr"),
    ("fnptr", "FnPtr"),
];

/// Entries for the cuda.h symbols no table line models: one per base name and signature, each
/// refused for the reason of the `@refuse` line that names it (the build fails for a symbol no
/// line names, and for a pattern that names nothing).
fn synthesize(
    listing: &[parse::HeaderSymbol],
    refusals: &[parse::Refusals],
    symbols: &mut BTreeMap<String, (usize, u8, bool)>,
    functions: &mut String,
    id: &mut usize,
) {
    let mut used = vec![false; refusals.iter().map(|r| r.patterns.len()).sum()];
    // (base, signature) -> (reason, [(symbol, version, per_thread, since)], params)
    type Group<'a> = (String, Vec<(&'a str, u8, bool, u32)>, &'a [(String, String)]);
    let mut groups: BTreeMap<(String, String), Group<'_>> = BTreeMap::new();
    let mut missing = Vec::new();
    for h in listing.iter().filter(|h| !symbols.contains_key(&h.name)) {
        let mut k = 0;
        let mut reason = None;
        for r in refusals {
            for p in &r.patterns {
                let m = match p.strip_suffix('*') {
                    Some(prefix) => h.name.starts_with(prefix),
                    None => *p == h.name,
                };
                if m {
                    used[k] = true;
                    reason = reason.or(Some((r.reason.clone(), r.line)));
                }
                k += 1;
            }
        }
        let Some((reason, line)) = reason else {
            missing.push(h.name.as_str());
            continue;
        };
        let reason = lookup(REFUSALS, &reason, "refusal", FILES[0], line).to_string();
        let (base, version, per_thread) = parse::split_symbol(&h.name);
        let sig: Vec<&str> = h.params.iter().map(|(t, _)| t.as_str()).collect();
        let g = groups.entry((base.to_string(), sig.join(","))).or_insert_with(|| (reason, Vec::new(), &h.params));
        g.1.push((&h.name, version, per_thread, h.since));
    }
    if !missing.is_empty() {
        panic!(
            "{LISTING}: {} symbols have no disposition: model each in {} or refuse it with an `@refuse REASON SYMBOL` \
             line: {}",
            missing.len(),
            FILES[0],
            missing.join(" ")
        );
    }
    let mut k = 0;
    for r in refusals {
        for p in &r.patterns {
            if !used[k] {
                panic!("{}:{}: `@refuse {} {p}` names no symbol the table lacks", FILES[0], r.line, r.reason);
            }
            k += 1;
        }
    }
    for ((base, _), (reason, syms, params)) in groups {
        let mut sym_list = String::new();
        for (name, version, per_thread, since) in &syms {
            symbols.insert(name.to_string(), (*id, *version, *per_thread));
            let _ = write!(
                sym_list,
                "Symbol {{ name: {name:?}, variant: Variant {{ version: {version}, per_thread: {per_thread} }}, since: {since} }}, "
            );
        }
        let mut args = String::new();
        for (t, n) in params {
            let kind = if t.contains('*') || t.contains('[') {
                "HostPtr".to_string()
            } else {
                lookup(VALUE_KINDS, t.trim_start_matches("const "), "by-value type", LISTING, 0).to_string()
            };
            let _ =
                write!(args, "ApiArg {{ name: {n:?}, c_type: {t:?}, dir: Direction::In, kind: ArgKind::{kind} }}, ");
        }
        let sync = if base.contains("Get") { "DeviceQuery" } else { "Async" };
        let _ = writeln!(
            functions,
            "    ApiFunction {{ id: ApiId({id}), name: {base:?}, level: ApiLevel::Driver, group: Group::{}, sync: SyncClass::{sync}, stable: false, gpu_answers: false, capturable: false, checked: false, symbols: &[{sym_list}], args: &[{args}], ret: Return::Status, disposition: Disposition::Refused(Refusal::{reason}), modeled: false }},",
            listing_group(&base)
        );
        *id += 1;
    }
}

fn lookup<'a>(table: &'a [(&str, &str)], key: &str, what: &str, file: &str, line: usize) -> &'a str {
    match table.iter().find(|(k, _)| *k == key) {
        Some((_, v)) => v,
        None => panic!("{file}:{line}: unknown {what} {key:?}"),
    }
}

fn main() {
    let mut out = String::new();
    let mut functions = String::new();
    let mut symbols: BTreeMap<String, (usize, u8, bool)> = BTreeMap::new();
    let mut id = 0usize;
    println!("cargo:rerun-if-changed={LISTING}");
    let listing_src = std::fs::read_to_string(LISTING).unwrap_or_else(|e| panic!("{LISTING}: {e}"));
    let listing = parse::parse_listing(&listing_src).unwrap_or_else(|e| panic!("{LISTING}: {e}"));
    let since: BTreeMap<&str, u32> = listing.iter().map(|h| (h.name.as_str(), h.since)).collect();
    let mut refusals = Vec::new();
    for file in FILES {
        println!("cargo:rerun-if-changed={file}");
        let src = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file}: {e}"));
        let parsed = parse::parse_api(&src).unwrap_or_else(|e| panic!("{file}: {e}"));
        refusals.extend(parse::parse_refusals(&src).unwrap_or_else(|e| panic!("{file}: {e}")));
        for f in parsed {
            let line = f.line;
            let level = lookup(LEVELS, &f.level, "level", file, line);
            let group = lookup(GROUPS, &f.group, "group", file, line);
            if !SYNC.contains(&f.sync.as_str()) {
                panic!("{file}:{line}: unknown sync class {:?}", f.sync);
            }
            let mut syms = String::new();
            for s in &f.suffixes {
                let (version, per_thread) =
                    parse::suffix_variant(s).unwrap_or_else(|| panic!("{file}:{line}: bad suffix {s:?}"));
                let full = format!("{}{}", f.name, s);
                if symbols.insert(full.clone(), (id, version, per_thread)).is_some() {
                    panic!("{file}:{line}: symbol {full} listed twice");
                }
                let since = since.get(full.as_str()).copied().unwrap_or(0);
                let _ = write!(
                    syms,
                    "Symbol {{ name: {full:?}, variant: Variant {{ version: {version}, per_thread: {per_thread} }}, since: {since} }}, "
                );
            }
            let mut args = String::new();
            for a in &f.args {
                let dir = match a.dir.as_str() {
                    "in" => "In",
                    "out" => "Out",
                    _ => "InOut",
                };
                let index_of = |name: &str| -> String {
                    if let Ok(n) = name.parse::<u32>() {
                        return format!("Fixed({n})");
                    }
                    let i = f
                        .args
                        .iter()
                        .position(|b| b.name == name)
                        .unwrap_or_else(|| panic!("{file}:{line}: unknown argument {name}"));
                    format!("Arg({i})")
                };
                let p0 = a.kind_params.first().cloned().unwrap_or_default();
                let p1 = a.kind_params.get(1).cloned().unwrap_or_default();
                let kind = match a.kind.as_str() {
                    "scalar" => "Scalar".to_string(),
                    "flags" => "Flags".to_string(),
                    "enum" => "Enum".to_string(),
                    "count" => "Count".to_string(),
                    "size" => "Size".to_string(),
                    "devptr" => "DevPtr".to_string(),
                    "hostptr" => "HostPtr".to_string(),
                    "hostbuf" => format!("HostBuf(BufLen::{})", index_of(&p0)),
                    "anybuf" => format!("AnyBuf(BufLen::{})", index_of(&p0)),
                    "handle" => format!("Handle(HandleKind::{})", lookup(HANDLES, &p0, "handle kind", file, line)),
                    "cstr" => "CStr".to_string(),
                    "image" => "Image".to_string(),
                    "imagefile" => "ImageFile".to_string(),
                    "struct" => format!("Struct({p0:?})"),
                    "structs" => {
                        let i = index_of(&p1);
                        let n = i
                            .strip_prefix("Arg(")
                            .and_then(|s| s.strip_suffix(')'))
                            .unwrap_or_else(|| panic!("{file}:{line}: structs count must be an argument"));
                        format!("Structs {{ ty: {p0:?}, count_arg: {n} }}")
                    }
                    "kparams" => "KernelParams".to_string(),
                    "extra" => "Extra".to_string(),
                    "fnptr" => "FnPtr".to_string(),
                    "userdata" => "UserData".to_string(),
                    "grid" => "Grid".to_string(),
                    "block" => "Block".to_string(),
                    other => panic!("{file}:{line}: unknown kind {other}"),
                };
                let _ = write!(
                    args,
                    "ApiArg {{ name: {:?}, c_type: {:?}, dir: Direction::{dir}, kind: ArgKind::{kind} }}, ",
                    a.name, a.c_type
                );
            }
            let ret = match &f.ret {
                None => "Return::Status".to_string(),
                Some(parse::ParsedReturn::Void) => "Return::Void".to_string(),
                Some(parse::ParsedReturn::Value { kind, kind_params, c_type }) => {
                    let kind = match (kind.as_str(), kind_params.first()) {
                        ("handle", Some(h)) => {
                            format!("Handle(HandleKind::{})", lookup(HANDLES, h, "handle kind", file, line))
                        }
                        (k, _) => lookup(RETURN_KINDS, k, "return kind", file, line).to_string(),
                    };
                    format!("Return::Value {{ kind: ArgKind::{kind}, c_type: {c_type:?} }}")
                }
            };
            let disp = disposition(&f.disposition, file, line);
            let _ = writeln!(
                functions,
                "    ApiFunction {{ id: ApiId({id}), name: {:?}, level: ApiLevel::{level}, group: Group::{group}, sync: SyncClass::{}, stable: {}, gpu_answers: {}, capturable: {}, checked: {}, symbols: &[{syms}], args: &[{args}], ret: {ret}, disposition: {disp}, modeled: true }},",
                f.name, f.sync, f.stable, f.gpu, f.graph, f.checked
            );
            id += 1;
        }
    }
    synthesize(&listing, &refusals, &mut symbols, &mut functions, &mut id);
    assert!(id < u16::MAX as usize, "too many API entries");
    let _ = writeln!(out, "/// Every entry of the API table, in file order; `FUNCTIONS[i].id == ApiId(i)`.");
    let _ = writeln!(out, "pub static FUNCTIONS: [ApiFunction; {id}] = [\n{functions}];");
    let _ = writeln!(out, "/// Every exported symbol, sorted by name: (symbol, entry index).");
    let _ = writeln!(out, "pub static SYMBOLS: [(&str, u16); {}] = [", symbols.len());
    for (name, (fid, _, _)) in &symbols {
        let _ = writeln!(out, "    ({name:?}, {fid}),");
    }
    let _ = writeln!(out, "];");
    let dest = std::path::Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("api_table.rs");
    std::fs::write(&dest, out).unwrap_or_else(|e| panic!("{}: {e}", dest.display()));
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/api/parse.rs");
}
