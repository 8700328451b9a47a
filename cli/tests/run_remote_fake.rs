//! `gpuless run --remote` (client mode) end to end without a GPU: the stand-in driver program
//! `recorder/tests/fake/remote.c`, linked against libcuda.so.1, runs natively on the stand-in
//! driver and then through `gpuless run` against a real `gpuless serve` whose executors use the
//! stand-in (`serve_harness`); the client itself cannot load the stand-in, so every driver call
//! is the client library's (the recorder library in client mode) or the server's. Also: an
//! unreachable server, usage errors, and the command's environment contract with the library
//! (through a shell standing in for the program).

mod serve_harness;
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serve_harness::{Server, GL};
use support::common;

/// Iterations of the program's stream loop (its argument).
const ITERS: u64 = 3;

/// What the program prints with `ITERS` iterations, natively and remotely alike.
const EXPECTED_OUTPUT: &str = "driver version 13000\ndevices 1\ndevice Fake GPU, compute capability 9.0\n\
sum 65792.0\niteration 0 sum 32896.0\niteration 1 sum 16448.0\niteration 2 sum 8224.0\n\
elapsed 1.25 ms\ndone\n";

/// The client's round trips with `ITERS` iterations: the Welcome, then one per point where the
/// program waits for the server (what remote.c does; the client library decides which calls
/// wait, so this is the one number to adjust if its policy changes):
/// - `cuModuleLoadData`: 1 — the driver checks a code image when it loads it
/// - `cuMemcpyDtoH_v2`, synchronous: 1
/// - `cuStreamSynchronize`, one per iteration: ITERS
/// - `cuEventSynchronize`: 1
/// - `cuEventElapsedTime_v2`, a state query the server answers: 1
/// - `cuCtxSynchronize`: 1 — nothing was sent since the elapsed-time answer, but an answer
///   says the work was submitted, not that the context's work completed
/// - the final wait at exit (the `cuMemFree` sent after it, the last answer, the close): 1
const EXPECTED_ROUND_TRIPS: u64 = 1 + (1 + 1 + ITERS + 1 + 1 + 1 + 1);

/// Builds the stand-in libcuda (`support::build_stand_in`) and remote.c linked against it in
/// `dir`; returns (the stand-in's directory, the program).
fn build(dir: &Path) -> (PathBuf, PathBuf) {
    support::build_program(dir, "remote", &["-l:libcuda.so.1", "-ldl"])
}

/// What a bounded run gave: exit code (None: killed by a signal), stdout, stderr, time taken.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// Runs `cmd` with stdout and stderr in files of `dir`, killing it after `limit`.
fn run_within(mut cmd: Command, dir: &Path, limit: Duration) -> Ran {
    let (out, err) = (dir.join("run.out"), dir.join("run.err"));
    cmd.stdin(Stdio::null()).stdout(std::fs::File::create(&out).unwrap()).stderr(std::fs::File::create(&err).unwrap());
    let t = Instant::now();
    let mut child = cmd.spawn().expect("start gpuless run");
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running after {limit:?}; stderr:\n{}", std::fs::read_to_string(&err).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ran {
        code: status.code(),
        stdout: std::fs::read_to_string(&out).unwrap(),
        stderr: std::fs::read_to_string(&err).unwrap(),
        took: t.elapsed(),
    }
}

/// The client's statistics (`gpuless run --json`): the JSON line on stderr.
fn json_stats(ran: &Ran) -> serde_json::Value {
    ran.stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON statistics line on stderr:\n{}", ran.stderr))
}

/// `gpuless run` with `args` (the command included), the real recorder library as the client,
/// and neither the stand-in's directory on the library path nor a preload or token inherited.
fn gpuless_run(args: &[&str]) -> Command {
    let mut cmd = Command::new(GL);
    cmd.arg("run")
        .args(args)
        .env("GPULESS_RECORDER", common::recorder_lib())
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("LD_PRELOAD")
        .env_remove("GPULESS_TOKEN")
        .env_remove("GPULESS_TRACE");
    cmd
}

#[test]
fn a_linked_program_runs_remotely_with_its_native_output_and_few_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = build(dir.path());
    let native = Command::new(&prog).arg(ITERS.to_string()).env("LD_LIBRARY_PATH", &libdir).output().unwrap();
    assert!(native.status.success(), "natively: {native:?}");
    let a = String::from_utf8_lossy(&native.stdout).into_owned();
    assert_eq!(a, EXPECTED_OUTPUT, "the program on the stand-in driver");

    let s = Server::start(dir.path(), &libdir, &[], &[]);
    let p = prog.to_str().unwrap();
    let ran = run_within(
        gpuless_run(&["--remote", &s.tcp, "--json", "--", p, &ITERS.to_string()]),
        dir.path(),
        Duration::from_secs(60),
    );
    assert_eq!(ran.code, Some(0), "gpuless run failed; stderr:\n{}", ran.stderr);
    assert_eq!(ran.stdout, a, "remote output differs from native; stderr:\n{}", ran.stderr);
    let stats = json_stats(&ran);
    let n = |k: &str| stats[k].as_u64().unwrap_or_else(|| panic!("no number {k} in {stats}"));
    assert!(stats["failed"].is_null(), "{stats}");
    assert_eq!(stats["endpoint"], s.tcp.as_str(), "{stats}");
    assert_eq!(stats["device"], "Fake GPU", "{stats}");
    assert!(n("executor_pid") > 0, "{stats}");
    assert_eq!(n("round_trips"), EXPECTED_ROUND_TRIPS, "one per wait and the Welcome: {stats}");
    assert!(n("round_trips") <= n("calls") / 2, "{stats}");
    assert!(n("sent") < n("calls"), "device queries are answered locally: {stats}");
    assert!(n("local") > 0 && n("segments") > 0 && n("bytes_up") > 0 && n("bytes_down") > 0, "{stats}");
    // The download came back: at least the 1 KiB buffer once per synchronous or async copy.
    assert!(n("bytes_down") >= (1 + ITERS) * 1024, "{stats}");

    // The analyzer's `gpuless` policy models this client: on a local recording of the same
    // program, its synchronization points are the client's waits.
    let trace = dir.path().join("t.gl");
    let rec = Command::new(GL)
        .args(["record", "-o"])
        .arg(&trace)
        .args(["--", p, &ITERS.to_string()])
        .env("GPULESS_RECORDER", common::recorder_lib())
        .env("LD_LIBRARY_PATH", &libdir)
        .env_remove("GPULESS_REMOTE")
        .output()
        .unwrap();
    assert!(rec.status.success(), "{rec:?}");
    let policy = support::gpuless_policy(&trace);
    assert_eq!(
        policy["syncs"].as_u64(),
        Some(n("waits")),
        "the policy's synchronizations, the client's waits: {policy} {stats}"
    );

    // `gpuless record --remote`: the same output, and a trace with the calls a local recording has.
    let remote_trace = dir.path().join("remote.gl");
    let mut cmd = Command::new(GL);
    cmd.args(["record", "--remote", &s.tcp, "-o"])
        .arg(&remote_trace)
        .args(["--", p, &ITERS.to_string()])
        .env("GPULESS_RECORDER", common::recorder_lib())
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("LD_PRELOAD");
    let ran = run_within(cmd, dir.path(), Duration::from_secs(60));
    assert_eq!(ran.code, Some(0), "record --remote failed; stderr:\n{}", ran.stderr);
    assert_eq!(ran.stdout, a, "record --remote changed the program's output");
    let calls = |t: &Path| -> Vec<(String, i32)> {
        serve_harness::records(t)
            .iter()
            .filter(|r| !r.is_summary())
            .flat_map(|r| std::iter::repeat_n((r.function.name().to_string(), r.status), r.repeat as usize + 1))
            .collect()
    };
    let (local, remote) = (calls(&trace), calls(&remote_trace));
    assert_eq!(remote, local, "the calls recorded remotely are the calls recorded locally");
    let an = Command::new(GL).args(["analyze", "--json"]).arg(&remote_trace).output().unwrap();
    let meta: serde_json::Value = serde_json::from_slice(&an.stdout).unwrap();
    assert_eq!(meta["meta"]["gpu_name"], "Fake GPU", "the session's device describes the trace: {}", meta["meta"]);

    // Replayed on the stand-in, every result of the remote trace is verified, as the local
    // one's: the async copies' bytes were hashed at the synchronizations that covered them.
    let replay = |t: &Path| -> serde_json::Value {
        let out = Command::new(GL)
            .args(["replay", "--json"])
            .arg(t)
            .env("LD_LIBRARY_PATH", &libdir)
            .env_remove("FAKE_CUDA_SCALE_BIAS")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let (l, r) = (replay(&trace), replay(&remote_trace));
    assert_eq!(r["mismatches"], serde_json::json!([]), "{r}");
    assert_eq!(r["results_unverified"], 0, "{r}");
    assert!(l["results_verified"].as_u64().unwrap_or(0) > 1, "{l}");
    assert_eq!(r["results_verified"], l["results_verified"], "local {l}\nremote {r}");
}

/// Over the Unix socket the client offers shared-memory rings and every later frame goes
/// through them (one round trip more: the offer); `GPULESS_RING=0` keeps frames on the socket.
/// Either way the program's output is the native one.
#[test]
fn over_the_unix_socket_frames_go_through_shared_memory_rings() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = build(dir.path());
    let native = Command::new(&prog).arg(ITERS.to_string()).env("LD_LIBRARY_PATH", &libdir).output().unwrap();
    let a = String::from_utf8_lossy(&native.stdout).into_owned();
    let s = Server::start(dir.path(), &libdir, &[], &[]);
    let unix = format!("unix:{}", s.socket.display());
    let p = prog.to_str().unwrap();
    for (ring, extra_trips) in [("1", 1), ("0", 0)] {
        let mut cmd = gpuless_run(&["--remote", &unix, "--json", "--", p, &ITERS.to_string()]);
        cmd.env("GPULESS_RING", ring);
        let ran = run_within(cmd, dir.path(), Duration::from_secs(60));
        assert_eq!(ran.code, Some(0), "GPULESS_RING={ring}; stderr:\n{}", ran.stderr);
        assert_eq!(ran.stdout, a, "GPULESS_RING={ring}: output differs from native; stderr:\n{}", ran.stderr);
        let stats = json_stats(&ran);
        assert_eq!(stats["rings"], ring == "1", "{stats}");
        assert!(stats["failed"].is_null(), "{stats}");
        assert_eq!(stats["round_trips"].as_u64(), Some(EXPECTED_ROUND_TRIPS + extra_trips), "{stats}");
    }
}

#[test]
fn a_lost_connection_fails_every_later_call_and_says_so_once() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = build(dir.path());
    let s = Server::start(dir.path(), &libdir, &[], &[]);
    let p = prog.to_str().unwrap();
    // Many iterations: the session is still running when its executor is killed.
    let mut cmd = gpuless_run(&["--remote", &s.tcp, "--", p, "200000"]);
    let (out, err) = (dir.path().join("lost.out"), dir.path().join("lost.err"));
    cmd.stdout(std::fs::File::create(&out).unwrap()).stderr(std::fs::File::create(&err).unwrap());
    let mut child = cmd.spawn().unwrap();
    let t = Instant::now();
    // Wait until a session is running (its executor serves it), then kill every executor.
    while s.metric("gpuless_sessions{kind=\"latency-critical\"}") < 1.0 {
        assert!(t.elapsed() < Duration::from_secs(30), "no session started");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    for pid in s.children() {
        // SAFETY: signalling a child process of the test's server.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "the program hangs after its session was lost");
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert!(!status.success(), "the program must see its calls fail: {stderr}");
    let said = stderr.lines().filter(|l| l.starts_with("gpuless: the session with the GPU server")).count();
    assert_eq!(said, 1, "one line says the session ended:\n{stderr}");
    assert!(stderr.contains("FAILED"), "the program's own error handling reports the failed call:\n{stderr}");
}

#[test]
fn nothing_listening_fails_fast_and_names_the_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let (_, prog) = build(dir.path());
    let ran = run_within(
        gpuless_run(&["--remote", "127.0.0.1:1", "--", prog.to_str().unwrap(), "1"]),
        dir.path(),
        Duration::from_secs(30),
    );
    assert!(ran.took < Duration::from_secs(10), "took {:?}; stderr:\n{}", ran.took, ran.stderr);
    // A failure the program sees (a call's error: remote.c exits with 1), not a crash (128 + N).
    assert!(ran.code.is_some_and(|c| c != 0 && c < 128), "exit {:?}; stderr:\n{}", ran.code, ran.stderr);
    let said: Vec<&str> = ran.stderr.lines().filter(|l| l.starts_with("gpuless:")).collect();
    assert_eq!(said.len(), 1, "one `gpuless:` line says why:\n{}", ran.stderr);
    assert!(said[0].contains("127.0.0.1:1") && said[0].contains("no CUDA device"), "{}", ran.stderr);
}

#[test]
fn without_a_server_or_a_command_it_is_a_usage_error() {
    for args in [&["run", "--", "/bin/true"][..], &["run", "--remote", "127.0.0.1:7011"], &["run"]] {
        let (code, _, err) = support::gpuless(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("Usage"), "{args:?}: {err}");
    }
    let (code, _, err) = support::gpuless(&["run", "--remote", "no-port", "--", "/bin/true"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("gpuless: error: --remote no-port"), "{err}");
}

/// A program in `sh`: what `gpuless run` hands it, with an empty library as the "recorder".
fn shell_run(dir: &Path, args: &[&str], script: &str) -> Ran {
    let lib = dir.join("libgpuless_recorder.so");
    let empty = dir.join("empty.c");
    std::fs::write(&empty, "int gpuless_stand_in_recorder;\n").unwrap();
    common::cc(&["-shared", "-fPIC", "-o", lib.to_str().unwrap(), empty.to_str().unwrap()]);
    let mut cmd = Command::new(GL);
    cmd.arg("run")
        .args(args)
        .args(["--", "sh", "-c", script])
        .env("GPULESS_RECORDER", &lib)
        .env("LD_LIBRARY_PATH", "/inherited/lib")
        .env("LD_PRELOAD", &lib)
        .env("GPULESS_TOKEN", "inherited")
        .env("GPULESS_TRACE", dir.join("t.gl"))
        .env("GPULESS_REMOTE_PRIORITY", "best-effort");
    run_within(cmd, dir, Duration::from_secs(30))
}

#[test]
fn the_program_gets_the_library_and_the_environment_the_library_reads() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"first=${LD_LIBRARY_PATH%%:*}
echo "lib=$(readlink "$first/libcuda.so.1") alias=$(readlink "$first/libcuda.so")"
echo "nvml=$(readlink "$first/libnvidia-ml.so.1") alias=$(readlink "$first/libnvidia-ml.so")"
echo "path=${LD_LIBRARY_PATH#*:} preload=$LD_PRELOAD"
echo "remote=$GPULESS_REMOTE token=$GPULESS_TOKEN partition=$GPULESS_REMOTE_PARTITION"
echo "priority=${GPULESS_REMOTE_PRIORITY-absent} trace=${GPULESS_TRACE-absent}"
echo "stats=$(dirname "$GPULESS_REMOTE_STATS")=$first"
exit 7"#;
    let ran = shell_run(dir.path(), &["--remote", "unix:/x.sock", "--token", "T", "--mig", "sms:8"], script);
    let lib = dir.path().join("libgpuless_recorder.so").canonicalize().unwrap();
    let l = lib.display();
    let lines: Vec<&str> = ran.stdout.lines().collect();
    assert_eq!(ran.code, Some(7), "the program's exit status; stderr:\n{}", ran.stderr);
    assert_eq!(lines[0], format!("lib={l} alias={l}"), "{}", ran.stdout);
    assert_eq!(lines[1], format!("nvml={l} alias={l}"), "the library answers NVML too");
    let given = dir.path().join("libgpuless_recorder.so");
    assert_eq!(lines[2], format!("path=/inherited/lib preload={l}:{}", given.display()));
    assert_eq!(lines[3], "remote=unix:/x.sock token=T partition=sms:8");
    assert_eq!(lines[4], "priority=absent trace=absent");
    assert!(lines[5].starts_with("stats=/") && lines[5].split('=').nth(1) == lines[5].split('=').nth(2));
    // A failed program without statistics: one line naming the endpoint.
    assert!(ran.stderr.lines().any(|l| l.starts_with("gpuless: no statistics") && l.contains("unix:/x.sock")));
    // The token inherited, the whole GPU, best-effort; the private directory is gone afterwards.
    let ran = shell_run(dir.path(), &["--remote", "h:1", "--best-effort"], script);
    let lines: Vec<&str> = ran.stdout.lines().collect();
    assert_eq!(lines[3], "remote=h:1 token=inherited partition=whole");
    assert_eq!(lines[4], "priority=best-effort trace=absent");
    let private = lines[5].split('=').nth(1).unwrap();
    assert!(!Path::new(private).exists(), "{private} left behind");
}

#[test]
fn statistics_in_words_and_as_one_json_line_and_signals_as_128_plus_n() {
    let dir = tempfile::tempdir().unwrap();
    let stats = r#"{"endpoint":"h:1","session":5,"executor_pid":42,"device":"Fake GPU","calls":40,"sent":25,"local":15,"round_trips":9,"segments":9,"bytes_up":1000,"bytes_down":3000,"blob_bytes":1024,"blob_hits":2,"blob_misses":1,"waits":8,"failed":null}"#;
    let script = format!("printf '%s' '{stats}' > \"$GPULESS_REMOTE_STATS\"; echo out");
    let ran = shell_run(dir.path(), &["--remote", "h:1", "--stats", "--json"], &script);
    assert_eq!((ran.code, ran.stdout.as_str()), (Some(0), "out\n"), "{}", ran.stderr);
    let json: Vec<&str> = ran.stderr.lines().filter(|l| l.starts_with('{')).collect();
    assert_eq!(json.len(), 1, "{}", ran.stderr);
    assert_eq!(serde_json::from_str::<serde_json::Value>(json[0]).unwrap()["round_trips"], 9);
    for want in [
        "gpuless: session 5 at h:1, executor pid 42",
        "gpuless: device Fake GPU",
        "gpuless: calls 40: sent 25, answered locally 15",
        "gpuless: round trips 9 (22.5% of calls), waits 8, segments 9",
        "gpuless: bytes up 1000, down 3000",
        "gpuless: blob bytes 1024, hits 2, misses 1",
        "gpuless: failed: no",
    ] {
        assert!(ran.stderr.lines().any(|l| l == want), "no {want:?} in:\n{}", ran.stderr);
    }
    // A failed session is said without --stats; a program killed by SIGTERM exits 128 + 15.
    let failed = r#"{"endpoint":"h:1","calls":1,"failed":"connection refused"}"#;
    let ran = shell_run(
        dir.path(),
        &["--remote", "h:1"],
        &format!("printf '%s' '{failed}' > \"$GPULESS_REMOTE_STATS\"; kill -TERM $$"),
    );
    assert_eq!(ran.code, Some(128 + 15), "{}", ran.stderr);
    assert_eq!(ran.stderr.trim(), "gpuless: the session at h:1 failed: connection refused");
    // A failure the library already said is not said again.
    let said = r#"{"endpoint":"h:1","calls":1,"failed":"connection refused","failure_said":true}"#;
    let ran = shell_run(
        dir.path(),
        &["--remote", "h:1"],
        &format!("printf '%s' '{said}' > \"$GPULESS_REMOTE_STATS\"; exit 1"),
    );
    assert_eq!((ran.code, ran.stderr.trim()), (Some(1), ""), "{}", ran.stderr);
}

#[test]
fn executors_load_the_code_images_recent_sessions_loaded_before_their_session_asks() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "pieces", &["-lcuda"]);
    let native = Command::new(&prog).env("LD_LIBRARY_PATH", &libdir).output().unwrap();
    let srv = serve_harness::Server::start(dir.path(), &libdir, &[], &[]);
    // The first session's executor knows no image; executors started after it ended load
    // the program's image while they wait, and the session takes that load.
    let mut lines = Vec::new();
    for _ in 0..4 {
        let ran = serve_harness::run_client(&srv, &prog);
        assert_eq!(ran.stdout, String::from_utf8_lossy(&native.stdout), "stderr:\n{}", ran.stderr);
        let log = std::fs::read_to_string(&srv._log).unwrap_or_default();
        lines = log.lines().filter(|l| l.contains("code images were loaded before")).map(str::to_string).collect();
        if lines.iter().any(|l| l.contains(": 1 of 1 code images")) {
            break;
        }
    }
    assert!(lines.first().is_some_and(|l| l.contains(": 0 of 1 code images")), "{lines:?}");
    assert!(lines.iter().any(|l| l.contains(": 1 of 1 code images")), "a later session took the warm load: {lines:?}");
    let kept = std::fs::read_to_string(dir.path().join("cache/disk/warm-images")).unwrap();
    assert_eq!(kept.lines().count(), 1, "{kept}");
    assert!(kept.ends_with(" module\n"), "{kept}");
}

/// Driver calls made at exit, after the main thread's thread-local variables were destroyed (as
/// C++ static destructors make them: PyTorch's cuFFT plan cache) answer as they do in `main`:
/// natively on the stand-in, recorded (and the recording keeps them), and through the client,
/// where they once aborted the program (a thread-local read after its destruction).
#[test]
fn calls_at_exit_after_thread_locals_are_destroyed() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "exit_calls", &["-l:libcuda.so.1"]);
    let want = "main 1\nat_exit 0 1 0 0 0 0\n";

    let native = Command::new(&prog).env("LD_LIBRARY_PATH", &libdir).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&native.stdout), want, "{native:?}");

    let trace = dir.path().join("exit.gl");
    let rec = Command::new(GL)
        .args(["record", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&prog)
        .env("LD_LIBRARY_PATH", &libdir)
        .env("GPULESS_RECORDER", common::recorder_lib())
        .output()
        .unwrap();
    assert!(rec.status.success(), "{rec:?}");
    assert_eq!(String::from_utf8_lossy(&rec.stdout), want);
    let calls: Vec<String> = serve_harness::records(&trace).iter().map(|r| r.function.name().to_string()).collect();
    let unload = calls.iter().position(|c| c == "cuModuleUnload").expect("the unload at exit is recorded");
    assert!(calls[unload..].iter().any(|c| c.starts_with("cuMemFree")), "{calls:?}");

    let srv = Server::start(dir.path(), &libdir, &[], &[]);
    let ran = serve_harness::run_client(&srv, &prog);
    assert!(ran.ok, "stdout:\n{}\nstderr:\n{}", ran.stdout, ran.stderr);
    assert_eq!(ran.stdout, want, "{}", ran.stderr);
}

/// A program that crashes in client mode (a fault, `abort()`) dies of its signal as natively,
/// and its session still ends as at exit: the work it sent ahead reaches the server (one last
/// wait), the session is closed and the counts are written (`--json`).
#[test]
fn a_crash_in_client_mode_ends_the_session_with_its_counts() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "crash", &["-l:libcuda.so.1"]);
    let native = Command::new(&prog).env("LD_LIBRARY_PATH", &libdir).output().unwrap();
    assert_eq!(native.status.signal(), Some(libc::SIGSEGV), "{native:?}");

    let srv = Server::start(dir.path(), &libdir, &[], &[]);
    for (arg, sig) in [(None, libc::SIGSEGV), (Some("abort"), libc::SIGABRT)] {
        let out = Command::new(GL)
            .args(["run", "--remote", &srv.tcp, "--json", "--"])
            .arg(&prog)
            .args(arg)
            .env("GPULESS_RECORDER", common::recorder_lib())
            .env_remove("LD_LIBRARY_PATH")
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(128 + sig), "{stderr}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "crashing\n");
        let json = stderr.lines().find(|l| l.starts_with('{')).unwrap_or_else(|| panic!("no counts: {stderr}"));
        let s: serde_json::Value = serde_json::from_str(json).unwrap();
        assert!(s["calls"].as_u64().unwrap() >= 10, "{s}");
        assert!(s["sent"].as_u64().unwrap() >= 6, "the allocation and the memsets were sent: {s}");
        assert!(s["waits"].as_u64().unwrap() >= 1, "the last wait, as at exit: {s}");
        assert!(s["failed"].is_null(), "{s}");
    }
}

/// A child forked without exec from a client-mode process shares the parent's session: its
/// CUDA calls fail (`CUDA_ERROR_NOT_INITIALIZED`, said once, as the driver treats a child it
/// cannot serve) and its exit leaves the session alone, so the parent's work goes on — it reads
/// back what it wrote, through the same session.
#[test]
fn a_forked_child_never_touches_the_parents_session() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "fork_child", &["-l:libcuda.so.1"]);
    let srv = Server::start(dir.path(), &libdir, &[], &[]);
    let ran = serve_harness::run_client(&srv, &prog);
    assert!(ran.ok, "stdout:\n{}\nstderr:\n{}", ran.stdout, ran.stderr);
    assert_eq!(ran.stdout, "child 3\nparent 0 7\n", "{}", ran.stderr);
    assert_eq!(ran.stderr.matches("was forked from a client-mode process without exec").count(), 1, "{}", ran.stderr);
    assert!(ran.stderr.contains("(first: cuMemsetD8"), "{}", ran.stderr);
}

/// What kernels print (device `printf`, here the stand-in's: a line per launch, written to stdout
/// at every synchronization) reaches the program's stdout through the client, at the same
/// synchronizations, in order with what the program printed itself.
#[test]
fn device_printf_reaches_the_programs_stdout_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = build(dir.path());
    let native = Command::new(&prog)
        .arg(ITERS.to_string())
        .env("LD_LIBRARY_PATH", &libdir)
        .env("FAKE_CUDA_PRINTF", "1")
        .output()
        .unwrap();
    assert!(native.status.success(), "natively: {native:?}");
    let a = String::from_utf8_lossy(&native.stdout).into_owned();
    assert!(a.matches("device printf: launch").count() >= 2, "the stand-in prints: {a}");
    assert_ne!(a, EXPECTED_OUTPUT);
    let s = Server::start(dir.path(), &libdir, &[], &[("FAKE_CUDA_PRINTF", "1")]);
    let ran = run_within(
        gpuless_run(&["--remote", &s.tcp, "--", prog.to_str().unwrap(), &ITERS.to_string()]),
        dir.path(),
        Duration::from_secs(60),
    );
    assert_eq!(ran.code, Some(0), "stderr:\n{}", ran.stderr);
    assert_eq!(ran.stdout, a, "stderr:\n{}", ran.stderr);
}
