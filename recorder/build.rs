//! Generates one hook per exported driver symbol of the API table (`$OUT_DIR/hooks.rs`).
//!
//! A hook has the symbol's C ABI and only packs its arguments into raw 64-bit words; all
//! interpretation (what to read, what to store) is done at run time from the same table, so
//! adding a function to `analyzer/src/api/driver.api` is all it takes to record it.

use std::fmt::Write as _;

use gpuless_analyzer::api::{functions, ApiArg, ApiLevel, ArgKind, CScalar, Return};

/// A generated wrapper's pieces: its parameter list, the parameter types, the parameter names,
/// and the parameters as raw words.
struct Signature {
    sig: String,
    tys: String,
    names: String,
    raws: String,
}

fn signature(f: &gpuless_analyzer::api::ApiFunction) -> Signature {
    let params: Vec<(String, String)> =
        f.args.iter().enumerate().map(|(i, a)| (format!("a{i}"), abi_type(a, f.name))).collect();
    let join = |it: &mut dyn Iterator<Item = String>| it.collect::<Vec<_>>().join(", ");
    Signature {
        sig: join(&mut params.iter().map(|(n, t)| format!("{n}: {t}"))),
        tys: join(&mut params.iter().map(|(_, t)| t.clone())),
        names: join(&mut params.iter().map(|(n, _)| n.clone())),
        raws: join(&mut params.iter().map(|(n, t)| to_raw(t, n))),
    }
}

/// The Rust type a by-value C argument is passed as (ABI-equivalent; pointers are opaque).
fn abi_type(a: &ApiArg, fname: &str) -> String {
    let t = a.c_type.trim();
    if t.contains('*') || t.contains('[') {
        return if t.starts_with("const") { "*const c_void" } else { "*mut c_void" }.into();
    }
    if let ArgKind::Struct(ty) = a.kind {
        // A struct passed by value keeps cudarc's type so the ABI matches.
        return format!("sys::{ty}");
    }
    abi_scalar(a, t, fname).into()
}

/// The Rust type of a by-value C argument: its C type as the API table gives it
/// ([`ApiArg::value_type`]), so the hook takes exactly the bytes the recorder records.
fn abi_scalar(a: &ApiArg, t: &str, fname: &str) -> &'static str {
    match a.value_type() {
        Some(CScalar::I8) => "i8",
        Some(CScalar::U8) => "u8",
        Some(CScalar::I16) => "i16",
        Some(CScalar::U16) => "u16",
        Some(CScalar::I32) => "i32",
        // C enums are int-sized; taking them as u32 keeps unknown values defined.
        Some(CScalar::U32) => "u32",
        Some(CScalar::I64) => "i64",
        Some(CScalar::U64) => "u64",
        Some(CScalar::F32) => "f32",
        Some(CScalar::F64) => "f64",
        Some(CScalar::Ptr) => "*mut c_void",
        None => panic!("{fname}: no ABI type for by-value argument `{}: {t}`", a.name),
    }
}

fn to_raw(ty: &str, name: &str) -> String {
    if ty.starts_with("sys::") {
        // The capture code reads the struct's bytes through this address.
        return format!("&{name} as *const {ty} as usize as u64");
    }
    match ty {
        "f32" => format!("{name}.to_bits() as u64"),
        "f64" => format!("{name}.to_bits()"),
        "*const c_void" | "*mut c_void" => format!("{name} as usize as u64"),
        "i32" | "i16" | "i8" | "i64" => format!("{name} as i64 as u64"),
        _ => format!("{name} as u64"),
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let mut hooks = String::new();
    let mut table = String::new();
    let mut exports = String::new();
    let mut structs = std::collections::BTreeSet::new();
    let mut slot = 0usize;
    for f in functions() {
        if f.level != gpuless_analyzer::api::ApiLevel::Driver {
            continue;
        }
        for a in f.args {
            match a.kind {
                ArgKind::Struct(t) | ArgKind::Structs { ty: t, .. } => {
                    structs.insert(t);
                }
                _ => {}
            }
        }
        let Signature { sig, tys, names, raws } = signature(f);
        for s in f.symbols {
            writeln!(
                hooks,
                "unsafe extern \"C\" fn hook_{slot}({sig}) -> u32 {{\n    \
                 unsafe {{ crate::dispatch::call({slot}, &[{raws}], |p| {{ let real = core::mem::transmute::<*mut c_void, unsafe extern \"C\" fn({tys}) -> u32>(p); real({names}) }}) }}\n}}"
            )
            .unwrap();
            writeln!(
                table,
                "    Hook {{ symbol: {:?}, cname: {:?}, func: ApiId({}), variant: Variant {{ version: {}, per_thread: {} }}, hook: crate::hooks::Addr(hook_{slot} as *const ()) }},",
                s.name,
                format!("{}\0", s.name),
                f.id.0,
                s.variant.version,
                s.variant.per_thread
            )
            .unwrap();
            if s.name != "cuGetProcAddress" && s.name != "cuGetProcAddress_v2" {
                writeln!(
                    exports,
                    "#[unsafe(no_mangle)]\npub unsafe extern \"C\" fn {}({sig}) -> u32 {{ unsafe {{ hook_{slot}({names}) }} }}",
                    s.name
                )
                .unwrap();
            }
            slot += 1;
        }
    }
    let mut sizes = String::new();
    for t in &structs {
        let rust = match *t {
            "void*" => "*mut c_void".to_string(),
            "size_t" => "usize".to_string(),
            "int" => "i32".to_string(),
            "unsigned int" => "u32".to_string(),
            "C_STRUCT" => continue,
            _ => format!("sys::{t}"),
        };
        writeln!(sizes, "        {t:?} => Some(core::mem::size_of::<{rust}>()),").unwrap();
    }
    let out = format!(
        "// GENERATED by recorder/build.rs from analyzer/src/api/driver.api. Do not edit.\n\
         #[allow(unused_imports)]\nuse core::ffi::c_void;\nuse gpuless_analyzer::api::{{ApiId, Variant}};\nuse cudarc::driver::sys;\nuse crate::hooks::Hook;\n\n\
         /// Number of hook slots.\npub const SLOTS: usize = {slot};\n\n\
         /// Number of pass-through trampolines for unmodeled functions.\npub const TRAMPOLINES: usize = {TRAMPOLINES};\n\n\
         /// One entry per exported driver symbol of the API table.\npub static HOOKS: [Hook; SLOTS] = [\n{table}];\n\n\
         /// Size of a C struct named in the API table (cudarc's definition).\npub fn struct_size(name: &str) -> Option<usize> {{\n    match name {{\n{sizes}        _ => None,\n    }}\n}}\n\n\
         {hooks}\n\
         /// Exported `cu*` symbols, for programs that link libcuda directly.\npub mod exports {{\n    #![allow(non_snake_case, clippy::missing_safety_doc)]\n    use core::ffi::c_void;\n    use super::*;\n{exports}}}\n"
    );
    let dir = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap());
    std::fs::write(dir.join("hooks.rs"), out).unwrap();
    std::fs::write(dir.join("trampolines.s"), trampolines(TRAMPOLINES)).unwrap();
    std::fs::write(dir.join("cudart_exports.rs"), cudart_exports()).unwrap();
}

/// Runtime functions this library exports (`src/cudart.rs`): objects linked against a shared
/// libcudart bind them here first, and each call is forwarded to the libcudart the caller would
/// have bound. Each must be a `@level runtime` entry of the API table.
const RUNTIME_EXPORTS: &[&str] =
    &["__cudaRegisterFatBinary", "__cudaRegisterFatBinaryEnd", "__cudaRegisterFunction", "__cudaRegisterVar"];

/// One exported wrapper per [`RUNTIME_EXPORTS`] entry, with the table's C signature, handing
/// its arguments as raw words to `crate::cudart::call`.
fn cudart_exports() -> String {
    let mut out = String::from(
        "// GENERATED by recorder/build.rs from analyzer/src/api/driver.api. Do not edit.\n\
         use core::ffi::c_void;\nuse gpuless_analyzer::api::ApiId;\n\n",
    );
    for name in RUNTIME_EXPORTS {
        let f = functions()
            .iter()
            .find(|f| f.name == *name && f.level == ApiLevel::Runtime)
            .unwrap_or_else(|| panic!("{name}: not a runtime entry of the API table"));
        let Signature { sig, tys, names, raws } = signature(f);
        // (Rust return type, the call's value as a word, the word back as the return type)
        let (ret, to_word, from_word) = match f.ret {
            Return::Void => ("()", "{ real(NAMES); 0 }", ";"),
            Return::Value { c_type, .. } if c_type.contains('*') => {
                ("*mut c_void", "real(NAMES) as usize as u64", " as usize as *mut c_void")
            }
            _ => panic!("{name}: only `-> void` and pointer returns are generated"),
        };
        let to_word = to_word.replace("NAMES", &names);
        writeln!(
            out,
            "/// `{name}`, forwarded to the libcudart the caller would have bound, and recorded.\n\
             ///\n/// # Safety\n/// The runtime's contract for `{name}`.\n\
             #[unsafe(no_mangle)]\npub unsafe extern \"C\" fn {name}({sig}) -> {ret} {{\n    \
             unsafe {{\n        crate::cudart::call(ApiId({id}), &[{raws}], |p| {{\n            \
             let real = core::mem::transmute::<*mut c_void, unsafe extern \"C\" fn({tys}) -> {ret}>(p);\n            \
             {to_word}\n        }}){from_word}\n    }}\n}}\n",
            id = f.id.0,
        )
        .unwrap();
    }
    out
}

/// Pass-through stubs for driver functions the table does not model: each counts its calls
/// and jumps to the real function with every register untouched (x86-64).
const TRAMPOLINES: usize = 512;

fn trampolines(n: usize) -> String {
    // Two kinds share each counter and target: `tramp` for cuDNN, cuBLAS and runtime entry
    // points, `dtramp` for driver functions the table does not model, which also start a new
    // epoch of stable answers (they might change one; `fold.rs`).
    let mut s = String::from(".pushsection .text.gpuless_trampolines,\"ax\",@progbits\n");
    for i in 0..n {
        // `Tramp` (unmodeled.rs): the counter, then the target, 16 bytes per trampoline.
        let off = i * 16;
        writeln!(
            s,
            ".p2align 4\n.globl gpuless_tramp_{i}\n.hidden gpuless_tramp_{i}\ngpuless_tramp_{i}:\n    \
             lock inc qword ptr [rip + {{tramps}} + {off}]\n    jmp qword ptr [rip + {{tramps}} + {off} + 8]\n\
             .p2align 4\n.globl gpuless_dtramp_{i}\n.hidden gpuless_dtramp_{i}\ngpuless_dtramp_{i}:\n    \
             lock inc qword ptr [rip + {{tramps}} + {off}]\n    lock inc qword ptr [rip + {{hot}} + {{epoch_at}}]\n    \
             jmp qword ptr [rip + {{tramps}} + {off} + 8]"
        )
        .unwrap();
    }
    s.push_str(".popsection\n.pushsection .data.rel.ro.gpuless_trampolines,\"aw\",@progbits\n.p2align 3\n");
    for kind in ["tramp", "dtramp"] {
        writeln!(s, ".globl gpuless_{kind}_table\n.hidden gpuless_{kind}_table\ngpuless_{kind}_table:").unwrap();
        for i in 0..n {
            writeln!(s, "    .quad gpuless_{kind}_{i}").unwrap();
        }
    }
    s.push_str(".popsection\n");
    s
}
