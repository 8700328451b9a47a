//! Turns `src/api/*.api` into a static Rust table (`$OUT_DIR/api_table.rs`).

#[path = "src/api/parse.rs"]
#[allow(dead_code)]
mod parse;

use std::collections::BTreeMap;
use std::fmt::Write as _;

const FILES: &[&str] = &["src/api/driver.api"];

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
    for file in FILES {
        println!("cargo:rerun-if-changed={file}");
        let src = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file}: {e}"));
        let parsed = parse::parse_api(&src).unwrap_or_else(|e| panic!("{file}: {e}"));
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
                let _ = write!(
                    syms,
                    "Symbol {{ name: {full:?}, variant: Variant {{ version: {version}, per_thread: {per_thread} }} }}, "
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
            let _ = writeln!(
                functions,
                "    ApiFunction {{ id: ApiId({id}), name: {:?}, level: ApiLevel::{level}, group: Group::{group}, sync: SyncClass::{}, stable: {}, gpu_answers: {}, capturable: {}, symbols: &[{syms}], args: &[{args}], ret: {ret} }},",
                f.name, f.sync, f.stable, f.gpu, f.graph
            );
            id += 1;
        }
    }
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
