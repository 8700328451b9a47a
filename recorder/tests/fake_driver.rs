//! The recorder's plumbing, end to end, without a GPU: a C program reaches a stand-in libcuda
//! (tests/fake/libcuda.c) the way cudart does — dlopen, dlsym("cuGetProcAddress_v2"), then
//! every entry point through it — with the real recorder preloaded. The trace must hold every
//! call with its arguments, the H2D payload and code image as blobs, the kernel parameters laid
//! out by cuFuncGetParamInfo, the D2H result's hash, and the unmodeled function's call count.
//! Real GPU behaviour is proven by scripts/gpu-suite.sh on the device machine.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpuless_traces::{ChunkBody, Function, Hash128, ReaderOptions, TraceReader, Value};

mod common;
use common::{cc, native_and_recorded, recorder_lib};

fn build(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake");
    let lib = dir.join("libcuda.so.1");
    cc(&["-O2", "-shared", "-fPIC", "-o", lib.to_str().unwrap(), src.join("libcuda.c").to_str().unwrap()]);
    let prog = dir.join("program");
    cc(&["-O2", "-o", prog.to_str().unwrap(), src.join("program.c").to_str().unwrap(), "-ldl"]);
    prog
}

/// Runs the stand-in program with `arg` under the recorder, writing `dir/t.gl`.
fn record_program(dir: &Path, arg: &str) -> std::process::Output {
    let prog = build(dir);
    Command::new(&prog)
        .arg(arg)
        .env("LD_LIBRARY_PATH", dir)
        .env("LD_PRELOAD", recorder_lib())
        .env("GPULESS_TRACE", dir.join("t.gl"))
        .output()
        .unwrap()
}

/// Records the stand-in program with `arg` in a new directory (its trace: `t.gl` there); the
/// program must succeed.
fn record_ok(arg: &str) -> (tempfile::TempDir, std::process::Output) {
    let dir = tempfile::tempdir().unwrap();
    let out = record_program(dir.path(), arg);
    assert!(out.status.success(), "{out:?}");
    (dir, out)
}

/// Records the stand-in program with `arg`, which must succeed; every call record of its trace.
fn recorded_calls(arg: &str) -> Vec<gpuless_traces::CallRecord> {
    let (dir, _) = record_ok(arg);
    calls_of(&dir.path().join("t.gl"))
}

/// How often the stand-in driver answered the stable query itself (the program prints
/// `driver_answered=N`).
fn driver_answered(out: &std::process::Output) -> u32 {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout.trim().strip_prefix("driver_answered=").and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{out:?}"))
}

/// Every call record of a finished trace, in file order.
fn calls_of(trace: &Path) -> Vec<gpuless_traces::CallRecord> {
    TraceReader::open(trace, ReaderOptions::default())
        .unwrap()
        .flat_map(|c| match c.unwrap().body {
            ChunkBody::Calls(c) => c,
            _ => Vec::new(),
        })
        .collect()
}

#[test]
fn records_a_driver_api_program() {
    let lib = recorder_lib();
    assert!(lib.is_file(), "{} missing: build the cdylib", lib.display());
    let dir = tempfile::tempdir().unwrap();
    let prog = build(dir.path());
    let trace = dir.path().join("t.gl");
    let (native, recorded) = native_and_recorded(&prog, dir.path());
    assert_eq!(String::from_utf8_lossy(&native.stdout).trim(), "sum=5040.0");

    let reader = TraceReader::open(&trace, ReaderOptions { blob_data: true, check_blob_refs: true }).unwrap();
    assert_eq!(reader.meta().gpu_name, "Fake GPU");
    assert_eq!(reader.meta().sm, 90);
    assert_eq!(reader.meta().cuda_version, 13000, "the version the program asked cuGetProcAddress for");
    assert_eq!((reader.meta().arena_base, reader.meta().arena_size), (0x6400_0000_0000, 1 << 40));
    let mut calls = Vec::new();
    let mut blobs = Vec::new();
    for chunk in reader {
        match chunk.unwrap().body {
            ChunkBody::Calls(c) => calls.extend(c),
            ChunkBody::Blobs(b) => blobs.extend(b),
            _ => {}
        }
    }
    calls.sort_by_key(|c| c.seq);
    let names: Vec<&str> = calls.iter().map(|c| c.function.name()).collect();
    for want in [
        "cuInit",
        "cuMemAlloc",
        "cuMemcpyHtoD",
        "cuModuleLoadData",
        "cuModuleGetFunction",
        "cuLaunchKernel",
        "cuMemcpyDtoH",
    ] {
        assert!(names.contains(&want), "{want} not recorded: {names:?}");
    }
    let find = |n: &str| calls.iter().find(|c| c.function.name() == n).unwrap();
    // Sequence numbers are unique and follow the program's order.
    assert!(calls.windows(2).all(|w| w[0].seq < w[1].seq));

    let alloc = find("cuMemAlloc");
    assert_eq!(alloc.variant.version, 2, "cuMemAlloc through cuGetProcAddress is cuMemAlloc_v2");
    let Value::DevPtr(ptr) = alloc.results[0] else { panic!("{:?}", alloc.results) };
    // Served by the recorder's arena at its default base, not by the driver's cuMemAlloc.
    assert_eq!(ptr, 0x6400_0000_0000);
    assert_eq!(String::from_utf8_lossy(&recorded.stderr).trim(), "mapped_chunks=1", "one arena chunk mapped");
    assert_eq!(String::from_utf8_lossy(&native.stderr).trim(), "mapped_chunks=0");
    // The arena's own driver calls are not the program's: they are not in the trace.
    assert!(!names.contains(&"cuMemCreate") && !names.contains(&"cuMemMap"), "{names:?}");
    let range = find("cuMemGetAddressRange");
    assert_eq!(range.results, [Value::DevPtr(ptr), Value::Size(256)], "the arena answers for its memory");
    assert_eq!(find("cuMemFree").status, 0);

    let h: Vec<u8> = (0..64).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let htod = find("cuMemcpyHtoD");
    let Value::Blob(b) = &htod.args[1] else { panic!("{:?}", htod.args) };
    assert_eq!(b.hash, Hash128::of(&h));
    assert!(blobs.iter().any(|p| p.hash == b.hash), "H2D payload stored");

    let launch = find("cuLaunchKernel");
    let Value::KernelParams(kp) = &launch.args[9] else { panic!("{:?}", launch.args) };
    assert_eq!(kp.layout, [(0, 8), (8, 4), (12, 4)]);
    assert_eq!(&kp.bytes[0..8], &ptr.to_le_bytes());
    assert_eq!(&kp.bytes[8..12], &2.5f32.to_le_bytes());
    assert_eq!(&kp.bytes[12..16], &64i32.to_le_bytes());
    // A raw call's thread is its batch's: the same as the calls recorded in full around it.
    assert!(launch.thread != 0 && launch.thread == htod.thread, "{} vs {}", launch.thread, htod.thread);

    // cuLaunchKernelEx takes the raw path: its config and parameters are read at the call and
    // turned into values on the writer thread.
    let ex = find("cuLaunchKernelEx");
    let Value::LaunchConfig(cfg) = &ex.args[0] else { panic!("{:?}", ex.args) };
    assert_eq!((cfg.grid.x, cfg.block.x, cfg.shared_mem, cfg.attrs.len()), (2, 64, 16, 1));
    assert_eq!(cfg.attrs[0].id, 4);
    assert_eq!(&cfg.attrs[0].value[..12], [2u32, 1, 1].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>());
    assert!(matches!(&ex.args[1], Value::Handle(..)));
    let Value::KernelParams(kp) = &ex.args[2] else { panic!("{:?}", ex.args) };
    assert_eq!(&kp.bytes[0..8], &ptr.to_le_bytes());
    assert_eq!(ex.args[3], Value::Null);

    let out: Vec<u8> = (0..64).flat_map(|i| (i as f32 * 2.5).to_le_bytes()).collect();
    let dtoh = find("cuMemcpyDtoH");
    let Value::Digest(d) = &dtoh.results[0] else { panic!("{:?}", dtoh.results) };
    assert_eq!((d.hash, d.len), (Hash128::of(&out), 256));

    // The async copy's record is written at the stream synchronization, with the hash of the
    // bytes that reached the host.
    let dtoh_async = find("cuMemcpyDtoHAsync");
    let Value::Digest(d) = &dtoh_async.results[0] else { panic!("{:?}", dtoh_async.results) };
    assert_eq!((d.hash, d.len), (Hash128::of(&out), 256));
    assert!(find("cuStreamSynchronize").seq > dtoh_async.seq);

    let image = find("cuModuleLoadData");
    assert!(matches!(image.args[1], Value::Blob(_)), "PTX image stored: {:?}", image.args);

    let unmodeled = calls.iter().find(|c| matches!(&c.function, Function::Other(n) if n == "cuFakeUnmodeled")).unwrap();
    assert_eq!(unmodeled.args, [Value::U64(2)], "two calls counted through the trampoline");
}

/// `GPULESS_ARENA=off`: allocations pass through to the driver and the header says so.
#[test]
fn arena_can_be_turned_off() {
    let lib = recorder_lib();
    let dir = tempfile::tempdir().unwrap();
    let prog = build(dir.path());
    let trace = dir.path().join("t.gl");
    let out = Command::new(&prog)
        .env("LD_LIBRARY_PATH", dir.path())
        .env("LD_PRELOAD", &lib)
        .env("GPULESS_TRACE", &trace)
        .env("GPULESS_ARENA", "off")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim(), "mapped_chunks=0");
    let reader = TraceReader::open(&trace, ReaderOptions::default()).unwrap();
    assert_eq!(reader.meta().arena_base, 0);
    let alloc = reader
        .flat_map(|c| match c.unwrap().body {
            ChunkBody::Calls(c) => c,
            _ => Vec::new(),
        })
        .find(|c| c.function.name() == "cuMemAlloc")
        .unwrap();
    assert_eq!(alloc.results[0], Value::DevPtr(0x7e00_0000_0100), "the driver's own address");
}

#[test]
fn programs_without_cuda_are_untouched_and_leave_no_trace() {
    let lib = recorder_lib();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.gl");
    let out = Command::new("sh")
        .args(["-c", "echo hello; exit 3"])
        .env("LD_PRELOAD", &lib)
        .env("GPULESS_TRACE", &trace)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(out.stdout, b"hello\n");
    assert!(!trace.exists());
}

/// `dlsym(RTLD_NEXT, name)` must still mean "after the caller" with the recorder preloaded: a
/// library that wraps a function through RTLD_NEXT would otherwise get itself back and recurse.
#[test]
fn rtld_next_is_resolved_relative_to_the_caller() {
    let lib = recorder_lib();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("base.c"), "int value(void) { return 41; }\n").unwrap();
    std::fs::write(
        d.join("wrap.c"),
        "#define _GNU_SOURCE\n#include <dlfcn.h>\n\
         int value(void) { int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, \"value\"); \
         return next ? next() + 1 : -1; }\n",
    )
    .unwrap();
    std::fs::write(
        d.join("main.c"),
        "#include <stdio.h>\nint value(void);\nint main(void) { printf(\"%d\\n\", value()); return 0; }\n",
    )
    .unwrap();
    let p = |n: &str| d.join(n).to_str().unwrap().to_string();
    cc(&["-shared", "-fPIC", "-o", &p("libbase.so"), &p("base.c")]);
    cc(&["-shared", "-fPIC", "-o", &p("libwrap.so"), &p("wrap.c"), "-ldl"]);
    let rpath = format!("-Wl,-rpath,{}", d.display());
    cc(&["-o", &p("main"), &p("main.c"), "-L", d.to_str().unwrap(), "-Wl,--no-as-needed", "-lwrap", "-lbase", &rpath]);
    for preload in [None, Some(&lib)] {
        let mut cmd = Command::new(d.join("main"));
        if let Some(l) = preload {
            cmd.env("LD_PRELOAD", l).env("GPULESS_TRACE", d.join("t.gl"));
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "preload {preload:?}: {out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "42", "preload {preload:?}");
    }
}

/// A query repeated with the same answer is folded into one record that counts the calls
/// (trace format 1.1 `repeat`); launches are never folded.
#[test]
fn repeated_queries_are_folded_and_counted() {
    let calls = recorded_calls("1000");
    let of = |name: &str| calls.iter().filter(|c| c.function.name() == name).collect::<Vec<_>>();
    let queries = of("cuCtxGetCurrent");
    let represented: u64 = queries.iter().map(|c| c.calls_represented()).sum();
    assert_eq!(represented, 1000, "every query counted");
    assert!(queries.len() <= 3, "{} records for 1000 identical queries", queries.len());
    assert!(queries.iter().all(|q| q.results == queries[0].results), "same answer in every record");
    let launches = of("cuLaunchKernel");
    assert_eq!(launches.len(), 1001);
    assert!(launches.iter().all(|l| l.repeat == 0));
}

/// A query the API table marks `stable` is answered by the driver once per state and then by
/// the recorder, until a call that may change the answer (a modeled one, or an unmodeled driver
/// function through its trampoline); every call is still in the trace with its answer.
#[test]
fn stable_queries_are_answered_until_something_may_change_them() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build(dir.path());
    let native = Command::new(&prog).arg("-4").env("LD_LIBRARY_PATH", dir.path()).output().unwrap();
    assert!(native.status.success(), "{native:?}");
    assert_eq!(String::from_utf8_lossy(&native.stdout).trim(), "driver_answered=3000");
    let out = record_program(dir.path(), "-4");
    assert!(out.status.success(), "wrong answer from the recorder (exit code = failed phase): {out:?}");
    let answered = driver_answered(&out);
    assert!(answered <= 6, "the driver answered {answered} of 3000 queries");
    let calls = calls_of(&dir.path().join("t.gl"));
    let queries: Vec<_> = calls.iter().filter(|c| c.function.name() == "cuDevicePrimaryCtxGetState").collect();
    let active = |c: &&gpuless_traces::CallRecord| c.results.get(1).cloned();
    let count = |want: u64| -> u64 {
        queries
            .iter()
            .filter(|c| c.status == 0 && matches!(active(c), Some(Value::I64(a)) if a == want as i64))
            .map(|c| c.calls_represented())
            .sum()
    };
    assert_eq!((count(1), count(0)), (2000, 1000), "{queries:?}");
    assert!(queries.iter().any(|c| c.status == 101), "the failed question is recorded");
    assert_eq!(queries.iter().map(|c| c.calls_represented()).sum::<u64>(), 3002);
}

/// CUDA 13's `cuGetProcAddress` hands out new versions with new signatures under old names
/// (`cuCtxGetDevice` → `cuCtxGetDevice_v2`, called ~1,600 times per PyTorch ResNet-50 inference).
/// A modeled version is hooked and recorded as that variant, and does not end the stable
/// answers; a version the table does not know is counted under its exported symbol's name, not
/// mistaken in the trace for the modeled function of the same base name.
#[test]
fn versions_handed_out_for_old_names_are_recorded_as_themselves() {
    let (dir, out) = record_ok("-6");
    let answered = driver_answered(&out);
    assert!(answered <= 3, "the driver answered {answered} of 1000 stable queries");
    let calls = calls_of(&dir.path().join("t.gl"));
    let dev: Vec<_> = calls.iter().filter(|c| c.function.name() == "cuCtxGetDevice").collect();
    assert!(dev.iter().all(|c| c.variant.version == 2 && c.args.len() == 2), "{dev:?}");
    assert_eq!(dev.iter().map(|c| c.calls_represented()).sum::<u64>(), 1000);
    let flags = calls.iter().find(|c| matches!(&c.function, Function::Other(n) if n == "cuCtxGetFlags_v2"));
    assert_eq!(flags.map(|c| c.args.clone()), Some(vec![Value::U64(5)]), "counted under its own name");
}

/// Out values are read at the width of their C type in the API table: a 4-byte enum or int with
/// other bytes after it is recorded as itself (traces recorded before the recorder did so say
/// `cuModuleGetLoadingMode() -> mode=5719756450872426498` for 2), an `inout` enum as the value
/// passed and the value returned, and an answer from the recorder's memory writes 4 bytes, not
/// 8. A 4-byte argument is recorded without what its register holds above it.
#[test]
fn four_byte_values_are_recorded_at_their_width() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build(dir.path());
    let native = Command::new(&prog).arg("-12").env("LD_LIBRARY_PATH", dir.path()).output().unwrap();
    let want = "mode=2 capturing=1 previous_mode=0 priorities=0,-5 attribute=9,9";
    assert_eq!((native.status.code(), String::from_utf8_lossy(&native.stdout).trim()), (Some(0), want));
    let out = record_program(dir.path(), "-12");
    // Exit code 30: a canary after a 4-byte answer was overwritten.
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), want);
    let calls = calls_of(&dir.path().join("t.gl"));
    let one = |name: &str| {
        let found: Vec<_> = calls.iter().filter(|c| c.function.name() == name).collect();
        assert_eq!(found.len(), 1, "{name}: {found:?}");
        found[0].clone()
    };
    assert_eq!(one("cuModuleGetLoadingMode").results, [Value::U64(2)]);
    let capturing = one("cuStreamIsCapturing");
    assert_eq!(capturing.args[0], Value::Handle(gpuless_analyzer::api::HandleKind::Stream, 5));
    assert_eq!(capturing.results, [Value::U64(1)]);
    let exchange = one("cuThreadExchangeStreamCaptureMode");
    assert_eq!((exchange.args.as_slice(), exchange.results.as_slice()), (&[Value::U64(2)][..], &[Value::U64(0)][..]));
    assert_eq!(one("cuCtxGetStreamPriorityRange").results, [Value::I64(0), Value::I64(-5)], "ints are signed");
    let attribute: Vec<_> = calls.iter().filter(|c| c.function.name() == "cuDeviceGetAttribute").collect();
    assert!(!attribute.is_empty());
    for c in &attribute {
        assert_eq!((c.args[1].clone(), c.results.as_slice()), (Value::U64(75), &[Value::I64(9)][..]), "{c:?}");
    }
    assert_eq!(attribute.iter().map(|c| c.calls_represented()).sum::<u64>(), 2);
}

/// A legacy (before CUDA 3.2) bare symbol has a 32-bit ABI (`cuMemAlloc(unsigned int *, unsigned
/// int)`): the recorder does not treat it as `cuMemAlloc_v2` (whose arena answer writes 64 bits)
/// but passes it through and records it under its own entry (known from cuda.h only, its
/// pointer recorded as an address). The CUDA 10.0 `cuStreamBeginCapture(CUstream)` is recorded
/// with its one argument.
#[test]
fn legacy_32_bit_symbols_pass_through_and_are_counted() {
    let (dir, out) = record_ok("-7");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("legacy=0x1000 canary=0xdeadbeef"), "the driver's 32-bit answer, untouched: {stdout}");
    let calls = calls_of(&dir.path().join("t.gl"));
    let legacy: Vec<_> =
        calls.iter().filter(|c| c.function.api().is_some_and(|f| f.name == "cuMemAlloc" && !f.modeled)).collect();
    // Asked for by name (dlsym) and through cuGetProcAddress with a pre-3.2 version: both
    // recorded under the legacy symbol's own entry, not as the _v2.
    assert_eq!(legacy.len(), 2, "{calls:?}");
    for c in &legacy {
        assert_eq!((c.variant.version, c.args.len(), c.status), (1, 2, 0), "{c:?}");
        assert!(matches!(c.args[0], Value::HostPtr(_) | Value::U64(_)), "the out-pointer as an address: {c:?}");
        assert_eq!(c.args[1], Value::U64(256), "the 32-bit size: {c:?}");
    }
    // The CUDA 10.0 cuStreamBeginCapture has one argument; its line says so.
    let capture: Vec<_> = calls.iter().filter(|c| c.function.name() == "cuStreamBeginCapture").collect();
    assert_eq!(capture.len(), 1, "{capture:?}");
    assert_eq!((capture[0].variant.version, capture[0].args.len(), capture[0].status), (1, 1, 0), "{capture:?}");
    // The program's own allocation, asked for through cuGetProcAddress, is the modeled _v2.
    let modeled: Vec<_> =
        calls.iter().filter(|c| c.function.api().is_some_and(|f| f.name == "cuMemAlloc" && f.modeled)).collect();
    assert!(!modeled.is_empty() && modeled.iter().all(|c| c.variant.version == 2 && c.args.len() == 2), "{modeled:?}");
}

/// `GPULESS_DIAG=pause`: calls made while the program has paused recording through
/// `gpuless_diag_pause` pass through unrecorded, the others are recorded; without the mode the
/// pause does nothing.
#[test]
fn pause_leaves_out_only_the_paused_calls() {
    let launches = |diag: Option<&str>| {
        let dir = tempfile::tempdir().unwrap();
        let prog = build(dir.path());
        let mut cmd = Command::new(&prog);
        cmd.arg("-5")
            .env("LD_LIBRARY_PATH", dir.path())
            .env("LD_PRELOAD", recorder_lib())
            .env("GPULESS_TRACE", dir.path().join("t.gl"));
        if let Some(d) = diag {
            cmd.env("GPULESS_DIAG", d);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        calls_of(&dir.path().join("t.gl")).iter().filter(|c| c.function.name() == "cuLaunchKernel").count()
    };
    // One launch before the three phases of 10.
    assert_eq!(launches(Some("pause")), 21);
    assert_eq!(launches(None), 31);
}

/// An async device-to-host copy completed by an event recorded with `cuEventRecordWithFlags`
/// gets its hash at the event's synchronization.
#[test]
fn event_recorded_with_flags_completes_async_copies() {
    let calls = recorded_calls("-3");
    let copies: Vec<_> = calls.iter().filter(|c| c.function.name() == "cuMemcpyDtoHAsync").collect();
    assert_eq!(copies.len(), 2, "{copies:?}");
    let on_stream = copies.iter().max_by_key(|c| c.seq).unwrap();
    let out: Vec<u8> = (0..64).flat_map(|i| (i as f32 * 2.5).to_le_bytes()).collect();
    let Value::Digest(d) = &on_stream.results[0] else { panic!("not completed: {:?}", on_stream.results) };
    assert_eq!((d.hash, d.len), (Hash128::of(&out), 256));
    let sync = calls.iter().find(|c| c.function.name() == "cuEventSynchronize").unwrap();
    assert!(sync.seq > on_stream.seq);
}

/// `GPULESS_DIAG=selftime` records as usual and says at exit how long each function spent in
/// the recorder, with its call count, and lists the counting trampolines with their calls.
#[test]
fn selftime_lists_each_function_with_its_calls() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build(dir.path());
    let out = Command::new(&prog)
        .arg("50")
        .env("LD_LIBRARY_PATH", dir.path())
        .env("LD_PRELOAD", recorder_lib())
        .env("GPULESS_TRACE", dir.path().join("t.gl"))
        .env("GPULESS_DIAG", "selftime")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let launch = err
        .lines()
        .find(|l| l.starts_with("gpuless selftime:") && !l.contains("look-up") && l.ends_with(" cuLaunchKernel"));
    let launch = launch.unwrap_or_else(|| panic!("no cuLaunchKernel row in:\n{err}"));
    assert!(launch.contains(" 51 calls") && launch.contains(" raw "), "{launch}");
    // The counting trampolines are listed too, with their kind: that is how a hot unmodeled
    // driver function (CUDA 13's cuCtxGetDevice_v2, session 7) shows itself.
    let tramp = err.lines().find(|l| l.contains("trampoline") && l.ends_with(" cuFakeUnmodeled"));
    let tramp = tramp.unwrap_or_else(|| panic!("no trampoline row for cuFakeUnmodeled in:\n{err}"));
    assert!(tramp.contains("dtramp (new epoch)") && tramp.contains(" 2 calls"), "{tramp}");
    let calls = calls_of(&dir.path().join("t.gl"));
    let launches: Vec<_> = calls.iter().filter(|c| c.function.name() == "cuLaunchKernel").collect();
    assert_eq!(launches.len(), 51, "the trace is complete under selftime");
}

/// SIGTERM (default action) ends the program as before, and the trace is finished first.
#[test]
fn sigterm_finishes_the_trace() {
    use std::io::BufRead;
    let lib = recorder_lib();
    let dir = tempfile::tempdir().unwrap();
    let prog = build(dir.path());
    let trace = dir.path().join("t.gl");
    let mut child = Command::new(&prog)
        .arg("-1")
        .env("LD_LIBRARY_PATH", dir.path())
        .env("LD_PRELOAD", &lib)
        .env("GPULESS_TRACE", &trace)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    while let Some(Ok(l)) = lines.next() {
        if l == "ready" {
            break;
        }
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let st = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(st.signal(), Some(libc::SIGTERM), "the program still dies of SIGTERM: {st:?}");
    let f = gpuless_traces::TraceFile::open(&trace).expect("a finished trace (index written)");
    assert!(f.index().calls >= 10, "{:?}", f.index().calls);
}

/// Runs the stand-in program `prog` with argument `mode` under the recorder (the stand-in
/// driver in `dir`), tracing to `dir/NAMEMODE.gl`: its output and the trace's path.
fn traced(
    prog: &std::path::Path,
    dir: &std::path::Path,
    lib: &std::path::Path,
    mode: &str,
    name: &str,
) -> (std::process::Output, std::path::PathBuf) {
    let trace = dir.join(format!("{name}{mode}.gl"));
    let out = Command::new(prog)
        .arg(mode)
        .env("LD_LIBRARY_PATH", dir)
        .env("LD_PRELOAD", lib)
        .env("GPULESS_TRACE", &trace)
        .output()
        .unwrap();
    (out, trace)
}

/// A crash (a fault, or `abort()`) ends the program as it would have, and the trace is
/// finished first, with every call made before the crash: the launches after the last
/// synchronization were still in the thread's batch, which a crash used to lose.
#[test]
fn a_crash_finishes_the_trace_with_every_call_before_it() {
    use std::os::unix::process::ExitStatusExt;
    let lib = recorder_lib();
    let dir = tempfile::tempdir().unwrap();
    let prog = build(dir.path());
    for (mode, sig) in [("-15", libc::SIGSEGV), ("-16", libc::SIGABRT)] {
        let (out, trace) = traced(&prog, dir.path(), &lib, mode, "crash");
        assert_eq!(out.status.signal(), Some(sig), "the program still dies of its signal: {out:?}");
        let f = gpuless_traces::TraceFile::open(&trace).expect("a finished trace (index written)");
        assert!(f.index().calls > 10, "{:?}", f.index().calls);
        let calls = calls_of(&trace);
        let launches = calls.iter().filter(|c| c.function.name() == "cuLaunchKernel").count();
        assert_eq!(launches, 8, "the set-up's launch and the 7 before the crash ({mode})");
    }
}

/// A program that leaves through `_exit` (atexit skipped: Python's `os._exit`) still leaves a
/// finished trace with every call, and its exit status — also when it calls `_exit` inside its
/// own signal handler; a `vfork` child that calls `_exit` (a failed exec) leaves its parent's
/// recording alone.
#[test]
fn underscore_exit_finishes_the_trace_and_a_vfork_child_does_not() {
    let lib = recorder_lib();
    let dir = tempfile::tempdir().unwrap();
    let prog = build(dir.path());
    for (mode, code) in [("-17", 5), ("-18", 0), ("-19", 6)] {
        let (out, trace) = traced(&prog, dir.path(), &lib, mode, "exit");
        assert_eq!(out.status.code(), Some(code), "{out:?}");
        let f = gpuless_traces::TraceFile::open(&trace).expect("a finished trace (index written)");
        assert!(f.index().calls > 10, "{:?}", f.index().calls);
        let launches = calls_of(&trace).iter().filter(|c| c.function.name() == "cuLaunchKernel").count();
        assert_eq!(launches, 8, "the set-up's launch and the 7 after ({mode})");
    }
}

/// A child forked without exec that calls the driver is not recorded, and says so once on
/// stderr (issue 4: "a child that uses CUDA writes its own trace or is clearly reported"); it
/// exits normally (its atexit handlers run: the inherited writer must be left alone), the
/// parent's trace is still written and the exit code is the program's.
#[test]
fn forked_child_is_reported() {
    let (dir, out) = record_ok("-2");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("was forked from a recorded process without exec").count(), 1, "{err}");
    assert!(err.contains("(first: cuCtxGetCurrent)"), "{err}");
    assert!(calls_of(&dir.path().join("t.gl")).len() > 5, "the parent's calls are recorded");
}

/// Recording costs a program little memory: the writer's queue is allocated (and written) when
/// the trace opens, and a queue of a million slots once added 56 MiB to every recorded process.
#[test]
fn recording_adds_little_resident_memory() {
    let peak = |out: std::process::Output| -> i64 {
        assert!(out.status.success(), "{out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        stdout.trim().strip_prefix("peak_kib=").and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{stdout}"))
    };
    let dir = tempfile::tempdir().unwrap();
    let recorded = peak(record_program(dir.path(), "-9"));
    let prog = build(dir.path());
    let native = peak(Command::new(&prog).arg("-9").env("LD_LIBRARY_PATH", dir.path()).output().unwrap());
    assert!(recorded - native < 24 * 1024, "recording added {} KiB (native {native} KiB)", recorded - native);
}

/// `GPULESS_EXPORT_TABLES=count`: every code slot of a private export table is counted in place
/// (the table keeps its address; its read-only page is patched and read-only again) and the
/// trace ends with one summary per slot called. Without it the table is left alone.
#[test]
fn export_table_slots_are_counted_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build(dir.path());
    let run = |count: bool| {
        let mut c = Command::new(&prog);
        c.arg("-13")
            .env("LD_LIBRARY_PATH", dir.path())
            .env("LD_PRELOAD", recorder_lib())
            .env("GPULESS_TRACE", dir.path().join(if count { "c.gl" } else { "n.gl" }));
        if count {
            c.env("GPULESS_EXPORT_TABLES", "count");
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "slot_calls=5", "the program's own result");
    };
    run(true);
    run(false);
    let slots = |name: &str| -> Vec<(String, u64)> {
        calls_of(&dir.path().join(name))
            .into_iter()
            .filter_map(|c| {
                let n = c.function.name().strip_prefix(gpuless_traces::model::EXPORT_TABLE_SLOT)?.to_string();
                match c.args.as_slice() {
                    [Value::U64(k)] => Some((n, *k)),
                    _ => None,
                }
            })
            .collect()
    };
    let mut counted = slots("c.gl");
    counted.sort();
    let uuid = "6bd5fb6c-0102-0304-0506-0708090a0b0c";
    // Slot 2 was wrapped but never called: no record.
    assert_eq!(counted, [(format!("{uuid}:1"), 2), (format!("{uuid}:3"), 1)], "{counted:?}");
    assert!(slots("n.gl").is_empty());
}
