//! A server that owns several GPUs (`gpuless serve --gpus 0,1`), end to end on the stand-in
//! driver: each GPU gets its own executors, started with `CUDA_VISIBLE_DEVICES` naming only it
//! (the stand-in's device name says which), sessions are placed on the GPU with the fewest
//! sessions or on the one they ask for (`--gpu`), a GPU the server does not own is refused with
//! the list it does, and the metrics count sessions per GPU. What two real GPUs do is proven by
//! scripts/gpu-suite-gpus.sh on a two-GPU machine.

mod serve_harness;
mod support;

use gpuless_traces::protocol::Hello;

use serve_harness::*;

/// A stand-in server owning "GPUs" 0 and 1, one warm executor each.
fn two_gpu_server(dir: &std::path::Path, libdir: &std::path::Path) -> Server {
    Server::start(dir, libdir, &["--gpus", "0,1", "--pool", "whole=1"], &[])
}

#[test]
fn sessions_spread_over_the_gpus_and_each_sees_only_its_own() {
    let (dir, _trace) = stand_in();
    let s = two_gpu_server(dir.path(), dir.path());
    // Each GPU's pool is filled: two warm executors.
    wait_until(|| s.metric("gpuless_executors{kind=\"warm\"}") == 2.0, "a warm executor per GPU");
    // Sessions held open at once: the first goes to GPU 0 (a tie, the lower number), the
    // second to GPU 1 (fewer sessions), the third to GPU 0 again.
    let mut held = Vec::new();
    let mut gpus = Vec::new();
    for _ in 0..3 {
        let mut c = connect(&s);
        let w = c.handshake(&hello("")).unwrap();
        assert_eq!(w.device.name, format!("Fake GPU {}", w.gpu), "the executor sees only its GPU");
        assert_eq!(w.device.uuid[15], w.gpu as u8, "{:?}", w.device.uuid);
        gpus.push(w.gpu);
        held.push(c);
    }
    assert_eq!(gpus, [0, 1, 0]);
    wait_until(|| s.metric("gpuless_gpu_sessions{gpu=\"0\"}") == 2.0, "two sessions on GPU 0");
    assert_eq!(s.metric("gpuless_gpu_sessions{gpu=\"1\"}"), 1.0, "{}", s.metrics());
    // Clients that hang up end their sessions: none is left on either GPU.
    drop(held);
    wait_until(
        || s.metric("gpuless_gpu_sessions{gpu=\"0\"}") + s.metric("gpuless_gpu_sessions{gpu=\"1\"}") == 0.0,
        "no session left on either GPU",
    );
}

#[test]
fn a_session_that_names_a_gpu_gets_it_and_one_the_server_lacks_is_refused() {
    let (dir, _trace) = stand_in();
    let s = two_gpu_server(dir.path(), dir.path());
    for want in [1, 1, 0] {
        let mut c = connect(&s);
        let w = c.handshake(&Hello { gpu: Some(want), ..hello("") }).unwrap();
        assert_eq!((w.gpu, w.device.name.as_str()), (want, format!("Fake GPU {want}").as_str()));
    }
    let mut c = connect(&s);
    let e = c.handshake(&Hello { gpu: Some(7), ..hello("") }).unwrap_err().to_string();
    assert!(e.contains("GPU 7 is not one of this server's (it serves GPU 0, 1)"), "{e}");
    // The server goes on serving.
    let mut c = connect(&s);
    assert!(c.handshake(&hello("")).is_ok());
}

#[test]
fn a_program_asks_for_a_gpu_with_run_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "remote", &["-l:libcuda.so.1", "-ldl"]);
    let s = two_gpu_server(dir.path(), &libdir);
    let ran = run_client_at(&s.tcp, &["--gpu", "1"], &prog, &["1"], &[]);
    assert!(ran.ok, "stdout:\n{}\nstderr:\n{}", ran.stdout, ran.stderr);
    ran.has("device Fake GPU 1, compute capability 9.0");
    assert_eq!(ran.stats()["gpu"], 1, "{}", ran.stats());
    let ran = run_client_at(&s.tcp, &["--gpu", "3"], &prog, &["1"], &[]);
    assert!(!ran.ok, "stdout:\n{}", ran.stdout);
    assert!(ran.stderr.contains("GPU 3 is not one of this server's"), "{}", ran.stderr);
}
