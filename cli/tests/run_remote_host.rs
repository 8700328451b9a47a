//! What client mode answers on its own about host memory, pointers and streams: the program
//! `recorder/tests/fake/client_host.c` runs through `gpuless run --remote` against a real
//! server on the stand-in driver and prints what the client answered — pinned and
//! device-mapped host memory, pointer attributes of pinned, pageable and device memory,
//! capture status, launches into device-mapped host memory and plain pinned memory (both
//! mirrored on the server); 2D copies whose host sides are
//! unified addresses, sent as rows and scattered back; and driver facts only the server
//! knows, asked of it once and then remembered.

mod serve_harness;
mod support;

use serve_harness::{run_client, Server};

#[test]
fn host_memory_and_pointer_queries_are_answered_by_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "client_host", &["-ldl"]);

    let srv = Server::start(dir.path(), &libdir, &[], &[]);
    let ran = run_client(&srv, &prog);
    let (stdout, stderr) = (&ran.stdout, &ran.stderr);
    assert!(ran.ok, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let line = |key: &str| ran.line(key);
    assert_eq!(line("priorities"), ["0", "-5", "loading_mode", "2"], "the stand-in driver's answers, from the server");
    assert_eq!(line("mapped_flags"), ["2"], "the flags it was allocated with");
    assert_eq!(line("mapped_devptr_is_host"), ["1"], "unified addressing: the device address is the host address");
    assert_eq!(line("pinned"), ["type", "1", "start_is_base", "1", "size", "8192"], "host memory, its allocation");
    assert_eq!(line("pageable_single"), ["1"], "pageable memory: CUDA_ERROR_INVALID_VALUE, as the driver says");
    assert_eq!(line("pageable_many"), ["0", "0", "0"], "cuPointerGetAttributes: success, values zero");
    assert_eq!(line("device"), ["type", "2"], "arena memory is device memory");
    assert_eq!(line("capture_status"), ["0"], "not capturing");
    assert_eq!(line("launch_mapped"), ["0"], "mapped memory is mirrored on the server");
    assert_eq!(line("launch_pinned"), ["0"], "pinned memory a kernel is given is mirrored from then on");
    assert_eq!(line("launch_device"), ["0"]);
    assert_eq!(line("freed_again"), ["1"], "a second free of the same pinned memory fails");
    assert_eq!(line("copy2d"), ["rows", "1", "gaps", "1"], "2D rows up and back, the gaps untouched");
    assert!(!stderr.contains("not supported"), "{stderr}");
    let stats = ran.stats();
    // The server answered each of the two driver facts once; their repeats came from memory.
    let waited = &stats["waits_by_call"];
    assert_eq!(waited["cuCtxGetStreamPriorityRange"], 1, "{stats}");
    assert_eq!(waited["cuModuleGetLoadingMode"], 1, "{stats}");
    assert!(stats["memo_hits"].as_u64().unwrap_or(0) >= 2, "{stats}");
    // Answered by the client but for those two, the module load's check, the synchronous 2D
    // copy back, the Welcome and the final wait at exit (the mirrored memory's free went last).
    assert!(stats["round_trips"].as_u64().unwrap_or(99) <= 6, "{stats}");
}
