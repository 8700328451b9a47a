//! The context stack and destroyed handles in client mode, end to end on the stand-in driver:
//! `recorder/tests/fake/context_stack.c` runs through `gpuless run --remote` against a real
//! server and makes the calls of `testdata/cuda/suite/driver_answers.c` where the client's
//! answers once differed from the driver's — `cuCtxCreate` pushes onto the thread's stack,
//! `cuCtxPopCurrent` and `cuCtxSetCurrent(NULL)` make the context below current, a destroyed
//! context's queries and a destroyed event's query are refused as the driver refuses them. The
//! lines asserted are the ones driver 580 printed natively on an H100 (the stand-in does not
//! model contexts: every answer here is the client's).

mod serve_harness;
mod support;

use serve_harness::{run_client, Server};

#[test]
fn the_context_stack_and_destroyed_handles_are_answered_as_the_driver_answers() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "context_stack", &["-ldl"]);

    let srv = Server::start(dir.path(), &libdir, &[], &[]);
    let ran = run_client(&srv, &prog);
    let (out, err) = (&ran.stdout, &ran.stderr);
    assert!(ran.ok, "stdout:\n{out}\nstderr:\n{err}");
    // driver_answers.c's lines, as driver 580 answered them natively.
    for line in [
        "cuCtxCreate(c1): CUDA_SUCCESS",
        "current == c1: yes",
        "c1 == primary: no",
        "cuCtxCreate(c2): CUDA_SUCCESS",
        "current == c2: yes",
        "cuCtxPopCurrent: CUDA_SUCCESS popped == c2: yes",
        "current == c1 after the pop: yes",
        "cuCtxPushCurrent(c2): CUDA_SUCCESS",
        "current == c2 after the push: yes",
        "cuCtxPopCurrent again: CUDA_SUCCESS popped == c2: yes",
        "cuCtxGetId(c1), cuCtxGetId(c2): CUDA_SUCCESS ids differ: yes",
        "cuCtxGetDevice in c1: CUDA_SUCCESS == device: yes",
        "cuCtxGetFlags in c1: CUDA_SUCCESS 0x0",
        "cuCtxSetCurrent(NULL): CUDA_SUCCESS",
        "cuCtxGetCurrent after setting NULL: CUDA_SUCCESS == primary: yes, NULL: no",
        "cuCtxPopCurrent: CUDA_SUCCESS popped == primary: yes",
        "cuCtxGetCurrent with an empty stack: CUDA_SUCCESS NULL: yes",
        "cuCtxPopCurrent with an empty stack: CUDA_ERROR_INVALID_CONTEXT",
        "cuCtxDestroy(c2): CUDA_SUCCESS",
        "cuCtxGetApiVersion(destroyed c2): CUDA_ERROR_INVALID_CONTEXT",
        "cuCtxDestroy(c1, not current): CUDA_SUCCESS",
        "cuCtxSetCurrent(primary): CUDA_SUCCESS",
        "current == primary: yes",
        "cuEventCreate: CUDA_SUCCESS",
        "cuEventDestroy: CUDA_SUCCESS",
        "cuEventQuery(destroyed event): CUDA_ERROR_CONTEXT_IS_DESTROYED",
    ] {
        ran.has(line);
    }
    // The same rules for the rest of their kind: any context argument naming a destroyed
    // context, an event synchronization as its query.
    ran.has("cuCtxGetId(destroyed c2): CUDA_ERROR_INVALID_CONTEXT");
    ran.has("cuEventSynchronize(destroyed event): CUDA_ERROR_CONTEXT_IS_DESTROYED");
    // Nothing refused went to the server: the session ends clean.
    ran.has("cuCtxSynchronize: CUDA_SUCCESS");
    ran.has("context_stack: done");
    assert!(!err.contains("not supported"), "{err}");
}
