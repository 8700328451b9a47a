//! The server's same-host and scheduling paths end to end without a GPU (the real server, its
//! executor processes on the stand-in driver, real clients): blobs through sealed memfds and
//! the refusal of bad ones, state queries answered by the server, stream priority by session
//! class, and the priority gate between latency-critical and best-effort sessions.

use std::io::Write;
use std::process::Command;
use std::time::Duration;

use gpuless_traces::protocol::message::code;
use gpuless_traces::protocol::{self, Message};

mod serve_harness;
mod support;

use serve_harness::*;

#[test]
fn same_host_blobs_travel_through_shared_memory_and_reach_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    // The stand-in program's 1.5 MiB upload and download (mode -10).
    let trace = support::record_stand_in(dir.path(), Some("-10"));
    // A same-host client reads the large blob straight into a sealed memfd, byte for byte.
    let heap = gpuless_replayer::replay::load(&trace).unwrap();
    let shared = gpuless_replayer::replay::load_shared(&trace, 64 << 10).unwrap();
    assert_eq!(heap.blobs.len(), shared.blobs.len());
    let mut in_memfd = 0;
    for (h, b) in &shared.blobs {
        assert_eq!(**b, *heap.blobs[h], "blob {h}");
        if b.len() >= 64 << 10 {
            assert!(b.memfd().is_some(), "blob {h} of {} bytes not in shared memory", b.len());
            in_memfd += 1;
        }
    }
    assert!(in_memfd >= 1);
    let s = Server::start(dir.path(), dir.path(), &[], &[]);
    let unix = format!("unix:{}", s.socket.display());
    let (rc, r, err) = remote_replay(&unix, &trace, &[]);
    assert_eq!(rc, 0, "{r} {err}");
    let t = &r["traffic"];
    assert!(t["shm_bytes"].as_u64().unwrap() >= 3 << 19, "the upload went through the socket: {t}");
    // Only the frame naming the blobs went through the socket.
    assert!(t["bytes_up"].as_u64().unwrap() < 1 << 20, "{t}");
    // The 1.5 MiB download came back equal to the recording.
    assert!(r["results_verified"].as_u64().unwrap() >= 3, "{r}");
    // The executor copied the blobs into the cache: a session over TCP sends no blob bytes.
    wait_until(|| s.metric("gpuless_cache_bytes{kind=\"memory\"}") >= (3 << 19) as f64, "the blob cached");
    let (rc, r2, err) = remote_replay(&s.tcp, &trace, &[]);
    assert_eq!(rc, 0, "{r2} {err}");
    assert_eq!(r2["traffic"]["blob_bytes"], 0, "{r2}");
    // Without shared memory (GPULESS_SHM=0) the same upload goes through the socket.
    std::fs::create_dir_all(dir.path().join("other")).unwrap();
    let s2 = Server::start(&dir.path().join("other"), dir.path(), &[], &[]);
    let out = Command::new(GL)
        .args(["replay", "--remote", &format!("unix:{}", s2.socket.display()), "--json"])
        .arg(&trace)
        .env("GPULESS_SHM", "0")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert!(out.status.success(), "{v} {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(v["traffic"]["shm_bytes"], 0, "{v}");
    assert!(v["traffic"]["blob_bytes"].as_u64().unwrap() >= 3 << 19, "{v}");
}

#[test]
fn state_queries_are_answered_by_the_server_and_streams_get_the_session_priority() {
    let dir = tempfile::tempdir().unwrap();
    // The stand-in program's event timing, event and stream queries and cuMemGetInfo (mode -11).
    let trace = support::record_stand_in(dir.path(), Some("-11"));
    // The stand-in driver's log, written by the confined executor (an unprivileged user that
    // sees only its view): a directory it may write, named in the configuration.
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    std::fs::set_permissions(&logs, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let config = dir.path().join("gpuless.toml");
    std::fs::write(&config, format!("[confine]\nread_write = [{:?}]\n", logs.to_str().unwrap())).unwrap();
    let log = logs.join("driver.log");
    let s = Server::start(
        dir.path(),
        dir.path(),
        &["--config", config.to_str().unwrap()],
        &[("FAKE_CUDA_LOG", log.to_str().unwrap())],
    );
    let (rc, r, err) = remote_replay(&s.tcp, &trace, &[]);
    assert_eq!(rc, 0, "{r} {err}");
    assert_eq!(r["queries_answered"], 5, "{r}");
    assert_eq!(r["queries_as_recorded"], 5, "{r}");
    assert_eq!(r["queries_unanswered"].as_array().unwrap().len(), 0, "{r}");
    // The stand-in driver's timing, measured on the server, not copied from the recording.
    assert_eq!(r["event_ms"], serde_json::json!([1.25]), "{r}");
    // A latency-critical session's streams get the device's greatest priority (-5 on the
    // stand-in), a best-effort session's its least (0).
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(logged.trim(), "stream priority -5", "{logged}");
    std::fs::remove_file(&log).unwrap();
    let (rc, r, err) = remote_replay(&s.tcp, &trace, &["--best-effort"]);
    assert_eq!(rc, 0, "{r} {err}");
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(logged.trim(), "stream priority 0", "{logged}");
}

#[test]
fn best_effort_segments_wait_while_a_latency_critical_session_has_work_in_flight() {
    let (dir, trace) = stand_in();
    let s = Server::start(dir.path(), dir.path(), &[], &[]);
    // A latency-critical session with a segment in flight (sent without asking for an answer).
    let (mut lc, _) = latency_critical_in_flight(&s, &trace);
    std::thread::sleep(Duration::from_millis(200));
    // A best-effort session meanwhile: it finishes, verified, its segments held on the way.
    let (rc, r, err) = remote_replay(&s.tcp, &trace, &["--best-effort"]);
    assert_eq!(rc, 0, "{r} {err}");
    wait_until(|| s.metric("gpuless_best_effort_hold_seconds_count") >= 1.0, "a best-effort segment held");
    // Its latency is counted for its class.
    let be_answers = "gpuless_answer_seconds_by_class_count{kind=\"best-effort\"}";
    wait_until(|| s.metric(be_answers) >= 1.0, "best-effort answers counted by class");
    // Held for the bound at most (20 ms each), not until the other session ends.
    let segments = r["segments"].as_f64().unwrap();
    assert!(s.metric("gpuless_best_effort_hold_seconds_sum") <= segments * 0.05, "{}", s.metrics());
    // Once the latency-critical session answered, best-effort work is not held.
    lc.close().unwrap();
    let before = s.metric("gpuless_best_effort_hold_seconds_count");
    std::thread::sleep(Duration::from_millis(100));
    let (rc, r, err) = remote_replay(&s.tcp, &trace, &["--best-effort"]);
    assert_eq!(rc, 0, "{r} {err}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(s.metric("gpuless_best_effort_hold_seconds_count"), before, "{}", s.metrics());
}

#[test]
fn a_latency_critical_executor_killed_inside_a_segment_does_not_hold_best_effort_work() {
    let (dir, trace) = stand_in();
    let s = Server::start(dir.path(), dir.path(), &[], &[]);
    // A latency-critical session with a segment in flight, whose executor is then killed.
    let (lc, welcome) = latency_critical_in_flight(&s, &trace);
    std::thread::sleep(Duration::from_millis(200));
    let pid = welcome.executor_pid as libc::pid_t;
    assert!(pid > 0, "{welcome:?}");
    // SAFETY: the executor process of our own session on our own server.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    std::thread::sleep(Duration::from_millis(100));
    // A best-effort session right after: nothing holds it (the dead executor's lock is gone),
    // within the second a counter of sessions in flight would have kept holding it.
    let before = s.metric("gpuless_best_effort_hold_seconds_count");
    let (rc, r, err) = remote_replay(&s.tcp, &trace, &["--best-effort"]);
    assert_eq!(rc, 0, "{r} {err}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(s.metric("gpuless_best_effort_hold_seconds_count"), before, "{}", s.metrics());
    drop(lc);
}

#[test]
fn a_best_effort_segment_stops_before_each_kernel_while_latency_critical_work_is_in_flight() {
    let (dir, trace) = stand_in();
    let (libdir, bench) = support::build_program(dir.path(), "bench", &["-ldl"]);
    // Every stand-in kernel takes 1 ms: a best-effort inference of 220 launches runs ~0.2 s.
    let s = Server::start(dir.path(), &libdir, &[], &[("FAKE_CUDA_LAUNCH_US", "1000")]);
    let before = s.metric("gpuless_best_effort_hold_seconds_count");
    // A best-effort client running 10 inferences, each a segment of 220 launches.
    let be = Command::new(GL)
        .args(["run", "--remote", &s.tcp, "--best-effort", "--"])
        .arg(&bench)
        .arg("10")
        .env("GPULESS_RECORDER", support::common::recorder_lib())
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("LD_PRELOAD")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // Latency-critical work arrives while it runs and stays in flight for a second.
    let (mut lc, _) = latency_critical_in_flight(&s, &trace);
    std::thread::sleep(Duration::from_secs(1));
    lc.close().unwrap();
    let out = be.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    // Held before kernels inside its segments, not only where segments start (a second holds
    // a few segment starts of 0.2 s each; of 20 ms holds before kernels, dozens).
    wait_until(|| s.metric("gpuless_best_effort_hold_seconds_count") >= before + 20.0, "holds inside the segments");
}

/// Bounded best-effort work in flight (`serve --best-effort-inflight`, `--best-effort-budget-us`,
/// `executor/inflight.rs`):
/// on the stand-in waiting for an event takes 200 µs (work still running), so a best-effort
/// session with a window of 2 waits before nearly every kernel after its second; with no bound
/// (0) it never does, and a latency-critical session never does.
#[test]
fn best_effort_kernels_in_flight_are_bounded_by_the_window() {
    let (dir, _) = stand_in();
    let (libdir, bench) = support::build_program(dir.path(), "bench", &["-ldl"]);
    let run = |s: &Server, class: &[&str]| run_bench(s, &bench, class, "2");
    let waits = "gpuless_best_effort_window_seconds_count";
    let env = [("FAKE_CUDA_EVENT_US", "200")];
    let s = Server::start(dir.path(), &libdir, &["--best-effort-inflight", "2"], &env);
    run(&s, &[]);
    assert_eq!(s.metric(waits), 0.0, "a latency-critical session has no window");
    run(&s, &["--best-effort"]);
    // Two inferences of 220 launches: every launch after the first two waited.
    wait_until(|| s.metric(waits) >= 400.0, "waits for the oldest kernel in flight");
    drop(s);
    let s = Server::start(dir.path(), &libdir, &["--best-effort-inflight", "0"], &env);
    run(&s, &["--best-effort"]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(s.metric(waits), 0.0, "no bound: no waits");
    drop(s);
    // A budget of predicted GPU time instead: the stand-in's kernels measure 1.25 ms each (its
    // elapsed time between two events), more than the 1 ms budget, so once measured each runs
    // alone: every launch waits, as with a window of one.
    let budget = ["--best-effort-inflight", "0", "--best-effort-budget-us", "1000"];
    let s = Server::start(dir.path(), &libdir, &budget, &env);
    run(&s, &["--best-effort"]);
    wait_until(|| s.metric(waits) >= 400.0, "waits for the predicted GPU time in flight");
}

#[test]
fn with_the_priority_policy_off_best_effort_work_is_never_held() {
    let (dir, trace) = stand_in();
    let s = Server::start(dir.path(), dir.path(), &["--priority-policy", "off"], &[]);
    let (mut lc, _) = latency_critical_in_flight(&s, &trace);
    std::thread::sleep(Duration::from_millis(200));
    let (rc, r, err) = remote_replay(&s.tcp, &trace, &["--best-effort"]);
    assert_eq!(rc, 0, "{r} {err}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(s.metric("gpuless_best_effort_hold_seconds_count"), 0.0, "{}", s.metrics());
    lc.close().unwrap();
}

/// Preemption stamps (`serve --measure-preemption`, `executor/stamps.rs`): a latency-critical
/// session's segments get a stamp ahead of their first kernel, each a latency from the segment's
/// arrival to the stamp, the GPU timer related to the host's clock by the executor's calibration
/// (the stand-in's timer runs 7 s ahead of CLOCK_REALTIME: a latency of seconds means the
/// relation was not applied); a busy stream is not stamped; a best-effort session never is; a
/// server without the setting takes none.
#[test]
fn latency_critical_segments_are_stamped_where_the_server_measures_preemption() {
    let (dir, _) = stand_in();
    let (libdir, bench) = support::build_program(dir.path(), "bench", &["-ldl"]);
    let run = |s: &Server, class: &[&str]| run_bench(s, &bench, class, "3");
    let count = "gpuless_preemption_seconds_count";
    let s = Server::start(dir.path(), &libdir, &["--measure-preemption"], &[]);
    run(&s, &[]);
    wait_until(|| s.metric(count) >= 1.0, "stamped segments");
    let (n, sum) = (s.metric(count), s.metric("gpuless_preemption_seconds_sum"));
    assert!(sum / n < 0.5, "a mean latency of {} s: the clock relation was not applied; {}", sum / n, s.metrics());
    // The calibration's uncertainty is reported with them, and it is small on the stand-in.
    assert!(s.metric("gpuless_preemption_clock_uncertainty_seconds_count") >= 1.0, "{}", s.metrics());
    assert!(s.metric("gpuless_preemption_clock_uncertainty_seconds_sum") < 0.01, "{}", s.metrics());
    // A best-effort session takes none.
    run(&s, &["--best-effort"]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(s.metric(count), n, "a best-effort session was stamped");
    drop(s);
    // Every stream busy with the session's own work: nothing to measure.
    let s = Server::start(dir.path(), &libdir, &["--measure-preemption"], &[("FAKE_CUDA_STREAM_BUSY", "1")]);
    run(&s, &[]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(s.metric(count), 0.0, "a busy stream was stamped");
    drop(s);
    // Off by default.
    let s = Server::start(dir.path(), &libdir, &[], &[]);
    run(&s, &[]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(s.metric(count), 0.0, "stamps without --measure-preemption");
}

/// An operator's MPS server serving the GPU (the stand-in's `CU_DEVICE_ATTRIBUTE_MPS_ENABLED`
/// with FAKE_CUDA_MPS): the executors say so, the server reports it as a gauge and a line; 0
/// without it.
#[test]
fn mps_serving_the_gpu_is_detected_and_reported() {
    let (dir, _) = stand_in();
    let s = Server::start(dir.path(), dir.path(), &[], &[("FAKE_CUDA_MPS", "1")]);
    wait_until(|| s.metric("gpuless_gpu_mps{gpu=\"0\"}") == 1.0, "MPS reported");
    drop(s);
    let s = Server::start(dir.path(), dir.path(), &[], &[]);
    wait_until(|| s.metrics().contains("gpuless_gpu_mps{gpu=\"0\"} 0"), "no MPS reported");
}

/// The stand-in's `bench` program through `gpuless run --remote` of `s` (`class`: its flags),
/// running `inferences`; it must succeed.
fn run_bench(s: &Server, bench: &std::path::Path, class: &[&str], inferences: &str) {
    let out = Command::new(GL)
        .args(["run", "--remote", &s.tcp])
        .args(class)
        .arg("--")
        .arg(bench)
        .arg(inferences)
        .env("GPULESS_RECORDER", support::common::recorder_lib())
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// A latency-critical session with a segment in flight (sent without asking for an answer):
/// it stays in the priority gate until it closes.
fn latency_critical_in_flight(
    s: &Server,
    trace: &std::path::Path,
) -> (protocol::Connection, gpuless_traces::protocol::message::Welcome) {
    let mut lc = connect(s);
    let welcome = lc.handshake(&hello("")).unwrap();
    let init = records(trace).into_iter().find(|r| r.function.name() == "cuInit").unwrap();
    lc.send_segment(&[init], false).unwrap();
    lc.flush().unwrap();
    (lc, welcome)
}

/// A session over the Unix socket opened by hand, for frames a `Connection` would not send.
fn raw_unix_session(s: &Server) -> std::os::unix::net::UnixStream {
    let mut u = std::os::unix::net::UnixStream::connect(&s.socket).unwrap();
    u.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let m = Message::Hello(hello(""));
    protocol::write_frame(&mut u, m.kind(), 0, &m.encode()).unwrap();
    let mut p = Vec::new();
    let h = protocol::read_frame(&mut u, &mut p).unwrap();
    assert!(matches!(Message::decode(h.kind, h.flags, &p), Ok(Message::Welcome(_))));
    u
}

fn raw_error(u: &mut std::os::unix::net::UnixStream) -> (u16, String) {
    let mut p = Vec::new();
    let h = protocol::read_frame(u, &mut p).unwrap();
    match Message::decode(h.kind, h.flags, &p) {
        Ok(Message::Error { code, message }) => (code, message),
        other => panic!("expected an Error, got {other:?}"),
    }
}

#[test]
fn bad_shared_memory_is_refused_with_a_clear_error() {
    use gpuless_traces::protocol::shm;
    use std::os::fd::AsRawFd;
    let (dir, trace) = stand_in();
    let s = Server::start(dir.path(), dir.path(), &[], &[]);
    let frame = |entries: Vec<(gpuless_traces::Hash128, u64, u64)>| {
        let m = Message::BlobShm(entries);
        let mut f = Vec::new();
        protocol::write_frame(&mut f, m.kind(), 0, &m.encode()).unwrap();
        f
    };
    let bytes = vec![9u8; 1 << 16];
    let h = gpuless_traces::Hash128::of(&bytes);
    // Over TCP: no descriptor can come with the frame.
    let mut c = connect(&s);
    c.handshake(&hello("")).unwrap();
    c.send(&Message::BlobShm(vec![(h, 0, 10)])).unwrap();
    let (code, m) = session_error(&mut c);
    assert_eq!(code, code::BAD_MESSAGE, "{m}");
    assert!(m.contains("without a descriptor"), "{m}");
    // An unsealed memfd: its bytes could change after the hash check.
    let mut u = raw_unix_session(&s);
    // SAFETY: a NUL-terminated name.
    let raw = unsafe { libc::memfd_create(c"t".as_ptr(), 0) };
    assert!(raw >= 0);
    // SAFETY: just created, ours.
    let mut f = std::fs::File::from(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) });
    f.write_all(&bytes).unwrap();
    shm::send_with_fd(u.as_raw_fd(), &frame(vec![(h, 0, bytes.len() as u64)]), f.as_raw_fd()).unwrap();
    let (code, m) = raw_error(&mut u);
    assert_eq!(code, code::BAD_MESSAGE, "{m}");
    assert!(m.contains("sealed"), "{m}");
    // A sealed memfd too short for its entry: refused at once.
    let mut u = raw_unix_session(&s);
    let (fd, _) = shm::pack(&[(h, &bytes)], 2).unwrap();
    shm::send_with_fd(u.as_raw_fd(), &frame(vec![(h, 0, 1 << 30)]), fd.as_raw_fd()).unwrap();
    let (code, m) = raw_error(&mut u);
    assert_eq!(code, code::BAD_MESSAGE, "{m}");
    assert!(m.contains("outside"), "{m}");
    // A sealed memfd whose bytes do not hash to the name given: taken at once (the bytes serve
    // only this session), checked in the background, the session's error at its next answer.
    let mut u = raw_unix_session(&s);
    let (fd, _) = shm::pack(&[(h, &bytes)], 2).unwrap();
    let liar = gpuless_traces::Hash128(5);
    shm::send_with_fd(u.as_raw_fd(), &frame(vec![(liar, 0, 100)]), fd.as_raw_fd()).unwrap();
    let mut p = Vec::new();
    let f = protocol::read_frame(&mut u, &mut p).unwrap();
    assert!(matches!(Message::decode(f.kind, f.flags, &p), Ok(Message::BlobHave(v)) if v == [true]));
    let close = Message::Close;
    protocol::write_frame(&mut u, close.kind(), 0, &close.encode()).unwrap();
    let (code, m) = raw_error(&mut u);
    assert_eq!(code, code::BAD_MESSAGE, "{m}");
    assert!(m.contains("do not hash") && m.contains(&liar.to_string()), "{m}");
    // Not in the cache: a later session asking for it misses.
    let mut c = connect(&s);
    c.handshake(&hello("")).unwrap();
    assert_eq!(c.query_blobs(&[liar]).unwrap(), vec![false]);
    // The server still serves.
    let (rc, r, err) = remote_replay(&s.tcp, &trace, &[]);
    assert_eq!(rc, 0, "{r} {err}");
}
