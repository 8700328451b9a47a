use super::*;

#[test]
fn table_is_consistent() {
    assert!(FUNCTIONS.len() > 250, "{} entries", FUNCTIONS.len());
    for (i, f) in FUNCTIONS.iter().enumerate() {
        assert_eq!(usize::from(f.id.0), i);
        assert!(!f.symbols.is_empty(), "{}", f.name);
        for a in f.args {
            match a.kind {
                ArgKind::HostBuf(BufLen::Arg(j))
                | ArgKind::AnyBuf(BufLen::Arg(j))
                | ArgKind::Structs { count_arg: j, .. } => {
                    assert!(usize::from(j) < f.args.len(), "{}", f.name)
                }
                _ => {}
            }
        }
    }
    assert!(SYMBOLS.windows(2).all(|w| w[0].0 < w[1].0), "symbols sorted and unique");
}

/// `cuMemcpy` and `cuMemcpyAsync` copy between unified addresses: both sides `anybuf` of the byte
/// count, the destination `inout` (a host destination's bytes are its result).
#[test]
fn unified_copies_say_their_sides_may_be_host_memory() {
    for name in ["cuMemcpy", "cuMemcpyAsync"] {
        let f = FUNCTIONS.iter().find(|f| f.name == name).expect(name);
        let kinds: Vec<(Direction, ArgKind)> = f.args.iter().take(2).map(|a| (a.dir, a.kind)).collect();
        let n = BufLen::Arg(2);
        assert_eq!(kinds, [(Direction::InOut, ArgKind::AnyBuf(n)), (Direction::In, ArgKind::AnyBuf(n))], "{name}");
        assert_eq!(f.out_args().count(), 1, "{name}: one result, the destination's");
    }
}

#[test]
fn symbol_lookup() {
    let (f, v) = lookup_symbol("cuMemcpyHtoD_v2_ptds").expect("known");
    assert_eq!(f.name, "cuMemcpyHtoD");
    assert_eq!(f.sync, SyncClass::HostToDevice);
    assert_eq!(v, Variant { version: 2, per_thread: true });
    assert_eq!(f.symbol(v), Some("cuMemcpyHtoD_v2_ptds"));
    let (f, v) = lookup_symbol("cuCtxCreate_v4").expect("known");
    assert_eq!(f.name, "cuCtxCreate");
    assert_eq!(v.version, 4);
    assert!(f.args.iter().any(|a| a.name == "ctxCreateParams"));
    assert!(lookup_symbol("cuNoSuchThing").is_none());
    assert!(lookup_symbol("cuMemAlloc_v9").is_none());
    assert_eq!(by_name("cuLaunchKernelEx").map(|f| f.group), Some(Group::Launch));
    assert_eq!(
        lookup("cuStreamGetCaptureInfo", Variant { version: 3, per_thread: false }).map(|f| f.args.len()),
        Some(7)
    );
    assert!(resolve("cuMemAlloc", Variant { version: 7, per_thread: false }).is_some());
    use super::parse::split_symbol;
    assert_eq!(split_symbol("cuMemcpyHtoDAsync_v2_ptsz"), ("cuMemcpyHtoDAsync", 2, true));
    assert_eq!(split_symbol("cuMemcpy3DBatchAsync_v2"), ("cuMemcpy3DBatchAsync", 2, false));
    assert_eq!(split_symbol("cuStreamBeginCapture_ptsz"), ("cuStreamBeginCapture", 1, true));
    assert_eq!(split_symbol("cuMemAlloc"), ("cuMemAlloc", 1, false));
    assert_eq!(split_symbol("cuGraphAddNode_v2"), ("cuGraphAddNode", 2, false));
    assert_eq!(split_symbol("cudnnGetVersion"), ("cudnnGetVersion", 1, false));
    assert_eq!(newest("cuMemAlloc").map(|(v, f)| (v, f.args.len())), Some((2, 2)));
    // The bare cuMemAlloc is the legacy 32-bit one: another signature, an entry of its own,
    // refused where no GPU is attached (recorded as it is).
    assert_eq!(
        resolve("cuMemAlloc", Variant::BASE).map(|f| f.disposition),
        Some(Disposition::Refused(Refusal::Legacy32))
    );
    assert_eq!(by_name("cuMemAlloc").map(|f| f.disposition), Some(Disposition::Server));
    assert_eq!(resolve("cuMemAlloc", Variant { version: 2, per_thread: false }).map(|f| f.args.len()), Some(2));
    // Variants whose C signatures differ have lines of their own (the hooks' ABI follows them).
    let args = |name: &str, version: u8| -> Vec<&str> {
        lookup(name, Variant { version, per_thread: false }).map(|f| f.args.iter().map(|a| a.name).collect()).unwrap()
    };
    assert!(!args("cuGraphAddNode", 1).contains(&"dependencyData"));
    assert_eq!(args("cuGraphAddNode", 2)[3], "dependencyData");
    assert_eq!(args("cuGraphExecUpdate", 1)[2..], ["hErrorNode_out", "updateResult_out"]);
    assert_eq!(args("cuGraphExecUpdate", 2)[2..], ["resultInfo"]);
}

#[test]
fn covers_the_recorder_issue() {
    let needed = [
        "cuModuleLoad",
        "cuModuleLoadData",
        "cuModuleLoadDataEx",
        "cuModuleLoadFatBinary",
        "cuLibraryLoadData",
        "cuLibraryLoadFromFile",
        "cuModuleGetFunction",
        "cuLibraryGetKernel",
        "cuKernelGetFunction",
        "cuLibraryGetModule",
        "cuModuleGetGlobal",
        "cuLibraryGetGlobal",
        "cuMemAlloc",
        "cuMemAllocAsync",
        "cuMemAllocFromPoolAsync",
        "cuMemAllocPitch",
        "cuMemFree",
        "cuMemFreeAsync",
        "cuMemAllocHost",
        "cuMemHostAlloc",
        "cuMemHostRegister",
        "cuMemAddressReserve",
        "cuMemCreate",
        "cuMemMap",
        "cuMemSetAccess",
        "cuMemUnmap",
        "cuMemRelease",
        "cuMemAddressFree",
        "cuMemcpyHtoD",
        "cuMemcpyDtoH",
        "cuMemcpyDtoD",
        "cuMemcpyHtoDAsync",
        "cuMemcpyDtoHAsync",
        "cuMemcpyAsync",
        "cuMemcpy2D",
        "cuMemcpy3D",
        "cuMemsetD8",
        "cuMemsetD32Async",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuLaunchCooperativeKernel",
        "cuFuncGetParamInfo",
        "cuKernelGetParamInfo",
        "cuStreamCreate",
        "cuStreamSynchronize",
        "cuEventCreate",
        "cuEventRecord",
        "cuStreamWaitEvent",
        "cuEventSynchronize",
        "cuEventQuery",
        "cuCtxSynchronize",
        "cuTexObjectCreate",
        "cuSurfObjectCreate",
        "cuStreamBeginCapture",
        "cuStreamEndCapture",
        "cuGraphInstantiate",
        "cuGraphLaunch",
        "cuDeviceGetAttribute",
        "cuGetProcAddress",
        "cuGetExportTable",
        "cuMemGetAddressRange",
        "cuPointerGetAttribute",
        "cuPointerGetAttributes",
        "cuDevSmResourceSplitByCount",
        "cuGreenCtxCreate",
        "__cudaRegisterFatBinary",
        "__cudaRegisterFunction",
        "__cudaRegisterVar",
    ];
    for n in needed {
        assert!(by_name(n).is_some(), "{n} missing from the table");
    }
}

#[test]
fn parse_errors_are_reported_with_lines() {
    let e = parse::parse_api("\n\ncuFoo Async =server (in bogus x: int)").expect_err("bad kind");
    assert_eq!(e.line, 3);
    let e = parse::parse_api("cuFoo Async =server (in hostbuf(n) x: void *)").expect_err("bad ref");
    assert!(e.message.contains("unknown argument"));
    assert!(parse::parse_api(DRIVER_API_SOURCE).is_ok());
}

#[test]
fn return_clauses_are_parsed_and_checked() {
    let f = parse::parse_api("cuFoo Async =server (in hostbuf(n) x: void *, in size n: size_t) -> hostptr: void **")
        .expect("ok");
    assert_eq!(
        f[0].ret,
        Some(parse::ParsedReturn::Value { kind: "hostptr".into(), kind_params: vec![], c_type: "void **".into() })
    );
    assert_eq!(f[0].args.len(), 2);
    let f = parse::parse_api("cuFoo Async =server () -> void\ncuBar Async =server (in scalar x: int)").expect("ok");
    assert_eq!(f[0].ret, Some(parse::ParsedReturn::Void));
    assert_eq!(f[1].ret, None);
    let e = parse::parse_api("cuFoo Async =server (in scalar x: int) junk").expect_err("tail");
    assert!(e.message.contains("-> RETURN"), "{e}");
    let e = parse::parse_api("cuFoo Async =server (in scalar x: int) -> cstr: const char *").expect_err("kind");
    assert!(e.message.contains("cannot be returned"), "{e}");
    let e = parse::parse_api("cuFoo Async =server (in scalar x: int) -> int").expect_err("no type");
    assert!(e.message.contains("KIND: C_TYPE"), "{e}");
    let e = parse::parse_api("cuFoo Async =server (in hostbuf(n x: int").expect_err("unbalanced");
    assert!(e.message.contains("unbalanced"), "{e}");
}

#[test]
fn registration_returns_no_status() {
    let f = by_name("__cudaRegisterFatBinary").expect("in the table");
    assert_eq!(f.level, ApiLevel::Runtime);
    assert_eq!(f.ret, Return::Value { kind: ArgKind::HostPtr, c_type: "void **" });
    // The fat binary is stored once, by the driver call that loads it: here only its address.
    assert_eq!(f.args[0].kind, ArgKind::HostPtr);
    for n in ["__cudaRegisterFatBinaryEnd", "__cudaRegisterFunction", "__cudaRegisterVar"] {
        assert_eq!(by_name(n).map(|f| f.ret), Some(Return::Void), "{n}");
    }
    assert_eq!(by_name("cuMemAlloc").map(|f| f.ret), Some(Return::Status));
}

/// `stable` may follow the sync class and nothing else may; the table's stable queries are
/// kept valid by every call that may change their answers and by no launch, copy or query.
#[test]
fn stable_queries_and_the_calls_that_may_change_their_answers() {
    let p = parse::parse_api("cuFoo DeviceQuery stable =server (out scalar v: int *)").unwrap();
    assert!(p[0].stable);
    assert!(!parse::parse_api("cuFoo DeviceQuery =server (out scalar v: int *)").unwrap()[0].stable);
    let e = parse::parse_api("cuFoo DeviceQuery steady =server (out scalar v: int *)").expect_err("unknown word");
    assert!(e.message.contains("steady"), "{e}");
    let f = |n: &str| by_name(n).unwrap_or_else(|| panic!("{n}"));
    for n in ["cuDevicePrimaryCtxGetState", "cuKernelGetAttribute", "cuFuncGetAttribute", "cuDeviceGetAttribute"] {
        assert!(f(n).stable && !f(n).may_change_answers(), "{n}");
    }
    // The current context's device: per thread, like the memo that answers it; every call that
    // changes a thread's current context starts a new epoch.
    for v in [Variant::BASE, Variant { version: 2, per_thread: false }] {
        let d = lookup("cuCtxGetDevice", v).unwrap_or_else(|| panic!("cuCtxGetDevice {v:?}"));
        assert!(d.stable && !d.may_change_answers(), "{v:?}");
    }
    for n in [
        "cuDevicePrimaryCtxRetain",
        "cuDevicePrimaryCtxRelease",
        "cuDevicePrimaryCtxSetFlags",
        "cuCtxSetCurrent",
        "cuCtxPushCurrent",
        "cuCtxPopCurrent",
        "cuCtxCreate",
        "cuCtxDestroy",
        "cuFuncSetAttribute",
        "cuKernelSetAttribute",
        "cuLibraryUnload",
        "cuModuleUnload",
        "cuModuleLoadData",
    ] {
        assert!(f(n).may_change_answers(), "{n} must start a new epoch");
    }
    for n in [
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuMemcpyHtoDAsync",
        "cuMemsetD8Async",
        "cuEventRecord",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuCtxGetCurrent",
        "cuStreamIsCapturing",
        "cuGraphLaunch",
    ] {
        assert!(!f(n).may_change_answers(), "{n} changes no stable answer");
    }
}

/// Every plain value the recorder reads behind an `out`/`inout` pointer has a width the table
/// gives, and every by-value argument the hooks take has a type: the recorder reads each at its
/// C type's width (an enum is 4 bytes whatever its name suggests), not as a 64-bit word.
#[test]
fn every_out_value_and_by_value_argument_has_a_width() {
    let plain = |k: ArgKind| {
        matches!(
            k,
            ArgKind::Scalar
                | ArgKind::Flags
                | ArgKind::Enum
                | ArgKind::Count
                | ArgKind::Size
                | ArgKind::DevPtr
                | ArgKind::Handle(_)
        )
    };
    let mut outs = 0;
    for f in FUNCTIONS.iter() {
        for (_, a) in f.out_args() {
            let t = a.pointee_type();
            if plain(a.kind) {
                assert!(t.is_some(), "{}: out {} ({}) has no width", f.name, a.name, a.c_type);
                outs += 1;
            }
            if a.kind == ArgKind::Enum {
                assert_eq!(t, Some(CScalar::U32), "{}: {} is a C enum", f.name, a.name);
            }
            if let ArgKind::Handle(k) = a.kind {
                let want = match k {
                    HandleKind::Device => CScalar::I32,
                    HandleKind::TexObject | HandleKind::SurfObject | HandleKind::MemHandle => CScalar::U64,
                    _ => CScalar::Ptr,
                };
                assert_eq!(t, Some(want), "{}: {}", f.name, a.name);
            }
            if a.kind == ArgKind::HostPtr && a.c_type.ends_with("**") {
                assert_eq!(t, Some(CScalar::Ptr), "{}: {}", f.name, a.name);
            }
            let pointee = a.c_type.trim_end_matches('*').trim();
            match (pointee, t) {
                ("size_t" | "cuuint64_t" | "unsigned long long" | "CUdeviceptr", Some(t)) => {
                    assert_eq!((t.width(), t.is_signed()), (8, false), "{}: {}", f.name, a.name)
                }
                ("int", Some(t)) => assert_eq!(t, CScalar::I32, "{}: {}", f.name, a.name),
                ("unsigned int" | "unsigned", Some(t)) => assert_eq!(t, CScalar::U32, "{}: {}", f.name, a.name),
                _ => {}
            }
        }
        for a in f.args.iter().filter(|a| a.dir == Direction::In && !a.is_pointer()) {
            if !matches!(a.kind, ArgKind::Struct(_)) {
                assert!(a.value_type().is_some(), "{}: in {} ({}) has no type", f.name, a.name, a.c_type);
            }
        }
    }
    assert!(outs > 100, "{outs} plain out values");
    let out = |name: &str, arg: &str| {
        let f = by_name(name).unwrap_or_else(|| panic!("{name}"));
        let a = f.args.iter().find(|a| a.name == arg).unwrap_or_else(|| panic!("{name} {arg}"));
        a.pointee_type().map(CScalar::width)
    };
    assert_eq!(out("cuModuleGetLoadingMode", "mode"), Some(4));
    assert_eq!(out("cuStreamIsCapturing", "captureStatus"), Some(4));
    assert_eq!(out("cuStreamGetCaptureInfo", "id_out"), Some(8));
    assert_eq!(out("cuThreadExchangeStreamCaptureMode", "mode"), Some(4), "inout enum");
    assert_eq!(out("cuDeviceGetAttribute", "pi"), Some(4));
    assert_eq!(out("cuCtxGetDevice", "device"), Some(4), "a CUdevice is an int");
    assert_eq!(out("cuMemGetInfo", "free"), Some(8));
    assert_eq!(out("cuMemAlloc", "dptr"), Some(8));
    assert_eq!(out("cuCtxGetCurrent", "pctx"), Some(8));
    assert_eq!(out("cuEventElapsedTime", "pMilliseconds"), Some(4));
    assert_eq!(out("cuGetErrorString", "pStr"), Some(8));
    // Buffers, structs and strings are not one value.
    assert_eq!(out("cuMemcpyDtoH", "dstHost"), None);
    assert_eq!(out("cuDeviceGetUuid", "uuid"), None);
}

/// Widening keeps a value's bit pattern within its width and fills the rest with its sign for
/// signed integers, zeros otherwise: the bits a register or the memory beside a 4-byte value
/// holds above it are not the value's.
#[test]
fn values_widen_from_their_width() {
    let garbage = 0x4f60_a830_0000_0002u64;
    assert_eq!(CScalar::U32.widen(garbage), 2);
    assert_eq!(CScalar::I32.widen(0x7f7f_7f7f_ffff_fffb), (-5i64) as u64);
    assert_eq!(CScalar::U32.widen(0x7f7f_7f7f_ffff_fffb), 0xffff_fffb);
    assert_eq!(CScalar::U8.widen(0x1ff), 0xff);
    assert_eq!(CScalar::I16.widen(0xffff_8000), (-32768i64) as u64);
    assert_eq!(CScalar::U64.widen(garbage), garbage);
    assert_eq!(CScalar::Ptr.widen(garbage), garbage);
    assert_eq!(CScalar::F32.widen(0xdead_beef_3fa0_0000), 1.25f32.to_bits() as u64);
    assert_eq!(CScalar::of_name("const unsigned int"), Some(CScalar::U32));
    assert_eq!(CScalar::of_name("unsigned short"), Some(CScalar::U16));
    assert_eq!(CScalar::of_name("unsigned char"), Some(CScalar::U8));
    assert_eq!(CScalar::of_name("const void *"), Some(CScalar::Ptr));
    assert_eq!(CScalar::of_name("CUstreamCaptureStatus"), None, "an enum's name alone says nothing");
    assert_eq!(CScalar::of("CUstreamCaptureStatus", ArgKind::Enum), Some(CScalar::U32));
    assert_eq!(CScalar::of("CUmemAllocationGranularity_flags", ArgKind::Flags), Some(CScalar::U32));
    assert_eq!(CScalar::of("CUcontext", ArgKind::Handle(HandleKind::Context)), Some(CScalar::Ptr));
    assert_eq!(CScalar::of("CUDA_MEMCPY2D", ArgKind::Count), None);
    assert_eq!(CScalar::of("void", ArgKind::Enum), None);
}
