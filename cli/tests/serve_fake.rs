//! `gpuless serve` end to end without a GPU: the real server, its real executor processes and
//! real clients over loopback TCP and a Unix socket, with the executors on the recorder's
//! stand-in driver (a tiny device in host memory; `cli/tests/support`). What the GPU does is
//! proven by scripts/gpu-suite-server.sh on the device machine; this proves the server's own
//! behaviour: handshake, segments, answers, the cache across sessions and restarts, refusals,
//! timeouts, disconnects, crashes, admission, metrics, the drain, and many sessions at once.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gpuless_traces::protocol::message::code;
use gpuless_traces::protocol::{self, Endpoint, Hello, Message, PartitionRequest, Priority, ProtocolError};
use gpuless_traces::{ChunkBody, ReaderOptions, TraceReader};

mod support;

const GL: &str = env!("CARGO_BIN_EXE_gpuless");

/// A running `gpuless serve` on the stand-in driver; killed when dropped.
struct Server {
    child: Child,
    tcp: String,
    metrics: String,
    socket: PathBuf,
    _log: PathBuf,
}

impl Server {
    /// Starts a server whose executors load the stand-in driver from `libdir`, with its cache
    /// in `dir/cache`, and `extra` flags; `env` goes to the server and its executors.
    fn start(dir: &Path, libdir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let socket = dir.join(format!("s{}.sock", rand_u64() % 100000));
        let log = dir.join(format!("serve-{}.log", rand_u64() % 100000));
        let mut cmd = Command::new(GL);
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--socket"])
            .arg(&socket)
            .arg("--cache-dir")
            .arg(dir.join("cache"))
            .args(extra)
            .env("LD_LIBRARY_PATH", libdir)
            .env("GPULESS_LOG", "debug")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start gpuless serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let field = |k: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(k))
                .unwrap_or_else(|| {
                    panic!("no {k} in {line:?}; log: {}", std::fs::read_to_string(&log).unwrap_or_default())
                })
                .to_string()
        };
        let (tcp, metrics) = (field("tcp="), field("metrics="));
        Server { child, tcp, metrics, socket, _log: log }
    }

    fn metrics(&self) -> String {
        let mut s = TcpStream::connect(&self.metrics).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        body
    }

    /// The value of metric line `name` (with labels), or 0.
    fn metric(&self, name: &str) -> f64 {
        self.metrics().lines().find_map(|l| l.strip_prefix(name).and_then(|r| r.trim().parse().ok())).unwrap_or(0.0)
    }

    /// Executor processes the server has (children of its pid).
    fn children(&self) -> Vec<u32> {
        children_of(self.child.id())
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) {
            let after = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
            let f: Vec<&str> = after.split_whitespace().collect();
            // state is f[0]; zombies are not live executors but must not stay either.
            if f.get(1).and_then(|pp| pp.parse::<u32>().ok()) == Some(pid) {
                out.push(p);
            }
        }
    }
    out
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(Instant::now().elapsed().as_nanos() as u64);
    h.finish()
}

fn hello(token: &str) -> Hello {
    Hello {
        protocol: protocol::PROTOCOL_VERSION,
        tool: "test".into(),
        token: token.into(),
        partition: PartitionRequest::Whole,
        priority: Priority::LatencyCritical,
        arena_base: 0x6400_0000_0000,
        arena_size: 1 << 40,
        recorded_sm: 90,
        program: "test".into(),
    }
}

fn connect(s: &Server) -> protocol::Connection {
    let c = protocol::connect(&Endpoint::parse(&s.tcp), Duration::from_secs(5)).unwrap();
    c.set_timeout(Some(Duration::from_secs(20))).unwrap();
    c
}

/// `gpuless replay --remote ADDR --json trace` (+ args): exit code and the JSON report.
fn remote_replay(addr: &str, trace: &Path, args: &[&str]) -> (i32, serde_json::Value, String) {
    remote_replay_env(addr, trace, args, &[])
}

/// [`remote_replay`] with `env` set for the client.
fn remote_replay_env(
    addr: &str,
    trace: &Path,
    args: &[&str],
    env: &[(&str, &Path)],
) -> (i32, serde_json::Value, String) {
    let mut cmd = Command::new(GL);
    cmd.args(["replay", "--remote", addr, "--json"]).args(args).arg(trace).env_remove("GPULESS_TLS_CA");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let v = serde_json::from_str(&stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), v, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn stand_in() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let trace = support::record_stand_in(dir.path(), None);
    (dir, trace)
}

#[test]
fn remote_replay_verifies_and_later_sessions_find_the_blobs_cached() {
    let (dir, trace) = stand_in();
    let s = Server::start(dir.path(), dir.path(), &[], &[]);
    let (rc, first, err) = remote_replay(&s.tcp, &trace, &[]);
    assert_eq!(rc, 0, "{first} {err}");
    assert_eq!(first["results_verified"], 2, "{first}");
    assert_eq!(first["launches"], 2, "{first}");
    let t = &first["traffic"];
    assert!(t["blob_misses"].as_u64().unwrap() >= 2 && t["blob_bytes"].as_u64().unwrap() >= 256, "{t}");
    // Device queries are answered by the client: fewer records sent than the trace holds.
    assert!(first["sent"].as_u64().unwrap() < first["calls"].as_u64().unwrap(), "{first}");
    // A second session, over the Unix socket: every blob is a cache hit, no blob bytes sent.
    let unix = format!("unix:{}", s.socket.display());
    let (rc, second, err) = remote_replay(&unix, &trace, &[]);
    assert_eq!(rc, 0, "{second} {err}");
    assert_eq!(second["traffic"]["blob_bytes"], 0, "{second}");
    assert_eq!(second["traffic"]["blob_hits"], t["blob_misses"], "{second}");
    assert!(second["traffic"]["bytes_up"].as_u64() < t["bytes_up"].as_u64(), "{second}");
    // Hot: the body again and again, each verified.
    // (The stand-in's body scales its buffer in place, so only the warm-up pass gives the
    // recorded results; hot replay's verification is proven on ResNet-50 on the GPU.)
    let (rc, hot, err) = remote_replay(&s.tcp, &trace, &["--iterations", "5"]);
    assert!(rc == 0 || rc == 3, "{hot} {err}");
    assert_eq!(hot["hot"]["iterations"], 5, "{hot}");
    assert_eq!(
        hot["results_verified"].as_u64().unwrap() + hot["mismatches"].as_array().unwrap().len() as u64,
        2 * 6,
        "{hot}"
    );
    // The executor reports the session's end to the server just after the client's Closed.
    wait_until(|| s.metric("gpuless_sessions_ended_total{kind=\"closed\"}") == 3.0, "three sessions ended");
    let m = s.metrics();
    assert!(s.metric("gpuless_cache_bytes{kind=\"memory\"}") >= 256.0, "{m}");
    assert!(m.contains("gpuless_segment_seconds_count"), "{m}");
    drop(s);
    // A new server on the same cache directory still holds the blobs.
    let s = Server::start(dir.path(), dir.path(), &[], &[]);
    let (rc, third, err) = remote_replay(&s.tcp, &trace, &[]);
    assert_eq!(rc, 0, "{third} {err}");
    assert_eq!(third["traffic"]["blob_bytes"], 0, "{third}");
}

#[test]
fn a_device_with_other_results_is_a_mismatch_at_the_client() {
    let (dir, trace) = stand_in();
    let s = Server::start(dir.path(), dir.path(), &[], &[("FAKE_CUDA_SCALE_BIAS", "1")]);
    let (rc, r, err) = remote_replay(&s.tcp, &trace, &[]);
    assert_eq!(rc, 3, "{r} {err}");
    assert_eq!(r["mismatches"].as_array().unwrap().len(), 2, "{r}");
}

#[test]
fn wrong_tokens_versions_and_garbage_are_refused_and_the_server_keeps_serving() {
    let (dir, trace) = stand_in();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let s = Server::start(dir.path(), dir.path(), &["--token-file", token.to_str().unwrap()], &[]);
    // Wrong token.
    let (rc, _, err) = remote_replay(&s.tcp, &trace, &["--token", "nope"]);
    assert_eq!(rc, 2);
    assert!(err.contains("wrong or missing token") && err.contains("code 2"), "{err}");
    // Another protocol version.
    let mut c = connect(&s);
    let e = c.handshake(&Hello { protocol: 99, ..hello("s3cret") }).unwrap_err().to_string();
    assert!(e.contains("protocol version 99") && e.contains("code 1"), "{e}");
    // Garbage instead of a Hello, and an absurd frame length.
    for bytes in
        [&b"GET / HTTP/1.1\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"[..], &[0xff, 0xff, 0xff, 0x7f, 1, 0, 0, 0][..]]
    {
        let mut t = TcpStream::connect(&s.tcp).unwrap();
        t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        t.write_all(bytes).unwrap();
        let mut payload = Vec::new();
        let h = protocol::read_frame(&mut t, &mut payload).unwrap();
        match Message::decode(h.kind, h.flags, &payload).unwrap() {
            Message::Refused { code, message } => assert_eq!(code, code::BAD_MESSAGE, "{message}"),
            m => panic!("{m:?}"),
        }
    }
    // A profile the server does not know.
    let mut c = connect(&s);
    let e = c
        .handshake(&Hello { partition: PartitionRequest::Profile("9g.999gb".into()), ..hello("s3cret") })
        .unwrap_err()
        .to_string();
    assert!(e.contains("9g.999gb") && e.contains("code 3"), "{e}");
    // Still serving.
    let (rc, r, err) = remote_replay(&s.tcp, &trace, &["--token", "s3cret"]);
    assert_eq!(rc, 0, "{r} {err}");
    assert!(s.metric("gpuless_sessions_ended_total{kind=\"refused-auth\"}") >= 1.0);
}

/// The stand-in trace's records, in order.
fn records(trace: &Path) -> Vec<gpuless_traces::CallRecord> {
    let mut v: Vec<_> = TraceReader::open(trace, ReaderOptions::default())
        .unwrap()
        .flat_map(|c| match c.unwrap().body {
            ChunkBody::Calls(c) => c,
            _ => Vec::new(),
        })
        .collect();
    v.sort_by_key(|r| r.seq);
    v
}

/// The trace's blobs by hash.
fn blob_store(trace: &Path) -> std::collections::HashMap<gpuless_traces::Hash128, Vec<u8>> {
    gpuless_replayer::replay::load(trace).unwrap().blobs.into_iter().map(|(h, b)| (h, b.to_vec())).collect()
}

fn session_error(c: &mut protocol::Connection) -> (u16, String) {
    match c.recv() {
        Ok(Message::Error { code, message }) => (code, message),
        other => panic!("expected an Error, got {other:?}"),
    }
}

#[test]
fn bad_input_inside_a_session_ends_that_session_with_a_clear_error() {
    let (dir, trace) = stand_in();
    let s = Server::start(dir.path(), dir.path(), &[], &[]);
    let recs = records(&trace);
    // A segment that is not a call batch.
    let mut c = connect(&s);
    c.handshake(&hello("")).unwrap();
    c.send(&Message::Segment { want_answer: true, zstd: false, records: vec![7; 100] }).unwrap();
    let (code, m) = session_error(&mut c);
    assert_eq!(code, code::BAD_MESSAGE, "{m}");
    assert!(m.contains("segment 0"), "{m}");
    // A function handle the session never created.
    let mut c = connect(&s);
    c.handshake(&hello("")).unwrap();
    let get = recs.iter().find(|r| r.function.name() == "cuModuleGetFunction").unwrap().clone();
    c.send_segment(&[get], true).unwrap();
    let (code, m) = session_error(&mut c);
    assert_eq!(code, code::BAD_RECORD, "{m}");
    assert!(m.contains("unknown module"), "{m}");
    // A download larger than the device's memory (the stand-in reports none: 1 TiB is the bound).
    let mut c = connect(&s);
    c.handshake(&hello("")).unwrap();
    let mut copy = recs.iter().find(|r| r.function.name() == "cuMemcpyDtoH").unwrap().clone();
    let at = copy.function.api().unwrap().args.iter().position(|a| a.name == "ByteCount").unwrap();
    copy.args[at] = gpuless_traces::Value::Size(1 << 50);
    c.send_segment(&[copy], true).unwrap();
    let (code, m) = session_error(&mut c);
    assert_eq!(code, code::BAD_RECORD, "{m}");
    assert!(m.contains("cuMemcpyDtoH") && m.contains("1125899906842624 bytes"), "{m}");
    // A blob whose bytes do not hash to its name.
    let mut c = connect(&s);
    c.handshake(&hello("")).unwrap();
    c.send(&Message::BlobData { hash: gpuless_traces::Hash128(42), total: 3, offset: 0, bytes: vec![1, 2, 3] })
        .unwrap();
    c.send(&Message::Close).unwrap();
    let (code, m) = session_error(&mut c);
    assert_eq!(code, code::BAD_MESSAGE, "{m}");
    assert!(m.contains("do not hash"), "{m}");
    // A Hello inside a session.
    let mut c = connect(&s);
    c.handshake(&hello("")).unwrap();
    c.send(&Message::Hello(hello(""))).unwrap();
    assert_eq!(session_error(&mut c).0, code::BAD_MESSAGE);
    // The server still serves.
    let (rc, r, err) = remote_replay(&s.tcp, &trace, &[]);
    assert_eq!(rc, 0, "{r} {err}");
}

#[test]
fn same_host_blobs_travel_through_shared_memory_and_reach_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    // The stand-in program's 1.5 MiB upload and download (mode -10).
    let trace = support::record_stand_in(dir.path(), Some("-10"));
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
    let log = dir.path().join("driver.log");
    let s = Server::start(dir.path(), dir.path(), &[], &[("FAKE_CUDA_LOG", log.to_str().unwrap())]);
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
    let mut lc = connect(&s);
    lc.handshake(&hello("")).unwrap();
    let init = records(&trace).into_iter().find(|r| r.function.name() == "cuInit").unwrap();
    lc.send_segment(&[init], false).unwrap();
    lc.flush().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // A best-effort session meanwhile: it finishes, verified, its segments held on the way.
    let (rc, r, err) = remote_replay(&s.tcp, &trace, &["--best-effort"]);
    assert_eq!(rc, 0, "{r} {err}");
    wait_until(|| s.metric("gpuless_best_effort_hold_seconds_count") >= 1.0, "a best-effort segment held");
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

#[test]
fn a_session_that_cannot_start_says_why() {
    let (dir, _) = stand_in();
    let s = Server::start(dir.path(), dir.path(), &[], &[("FAKE_CUDA_SET_CURRENT_FAILS", "1")]);
    let mut c = connect(&s);
    let e = c.handshake(&hello("")).unwrap_err().to_string();
    assert!(e.contains("code 7") && e.contains("could not start") && e.contains("cuCtxSetCurrent"), "{e}");
}

#[test]
fn idle_sessions_end_and_their_executor_goes() {
    let (dir, _) = stand_in();
    let s = Server::start(dir.path(), dir.path(), &["--idle-timeout", "0.5", "--pool", "whole=0"], &[]);
    let mut c = connect(&s);
    let w = c.handshake(&hello("")).unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    let (code, m) = session_error(&mut c);
    assert_eq!(code, code::IDLE, "{m}");
    wait_until(|| !s.children().contains(&w.executor_pid), "the idle session's executor exits");
}

fn wait_until(mut f: impl FnMut() -> bool, what: &str) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(20), "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_crashed_executor_ends_only_its_session() {
    let (dir, trace) = stand_in();
    let s = Server::start(dir.path(), dir.path(), &[], &[]);
    let mut c = connect(&s);
    let w = c.handshake(&hello("")).unwrap();
    // SAFETY: a signal to the executor process this test's server started.
    unsafe { libc::kill(w.executor_pid as i32, libc::SIGKILL) };
    let e = c.query_blobs(&[gpuless_traces::Hash128(1)]).unwrap_err();
    assert!(matches!(e, ProtocolError::Io(_)), "{e}");
    wait_until(|| s.metric("gpuless_executor_crashes_total") >= 1.0, "the crash is counted");
    let (rc, r, err) = remote_replay(&s.tcp, &trace, &[]);
    assert_eq!(rc, 0, "{r} {err}");
    // A client that disconnects mid-session: its executor ends too.
    let mut c = connect(&s);
    let w = c.handshake(&hello("")).unwrap();
    drop(c);
    wait_until(|| !s.children().contains(&w.executor_pid), "the abandoned session's executor exits");
}

#[test]
fn admission_queues_then_refuses_and_admits_when_a_session_ends() {
    let (dir, _) = stand_in();
    let cfg = dir.path().join("gpuless.toml");
    std::fs::write(&cfg, "max_sessions = 1\nqueue = 1\nqueue_timeout_s = 1.0\n[pool]\nwhole = 1\n").unwrap();
    let s = Server::start(dir.path(), dir.path(), &["--config", cfg.to_str().unwrap()], &[]);
    let mut a = connect(&s);
    a.handshake(&hello("")).unwrap();
    // B waits in the queue; C finds the queue full.
    let tcp = s.tcp.clone();
    let b = std::thread::spawn(move || {
        let mut b = protocol::connect(&Endpoint::parse(&tcp), Duration::from_secs(5)).unwrap();
        let t = Instant::now();
        let r = b.handshake(&hello("")).map(|_| ());
        (r.map_err(|e| e.to_string()), t.elapsed())
    });
    wait_until(|| s.metric("gpuless_queue_waiting") >= 1.0, "B waits");
    let mut c = connect(&s);
    let e = c.handshake(&hello("")).unwrap_err().to_string();
    assert!(e.contains("code 4") && e.contains("already waiting"), "{e}");
    let (rb, waited) = b.join().unwrap();
    let e = rb.unwrap_err();
    assert!(e.contains("code 4") && e.contains("within 1 s"), "{e}");
    assert!(waited >= Duration::from_millis(900), "{waited:?}");
    // A ends; D is admitted.
    a.close().unwrap();
    let mut d = connect(&s);
    d.handshake(&hello("")).unwrap();
    d.close().unwrap();
}

#[test]
fn sigterm_drains_running_sessions_and_ends_every_executor() {
    let (dir, trace) = stand_in();
    let mut s = Server::start(dir.path(), dir.path(), &["--pool", "whole=2"], &[]);
    wait_until(|| s.children().len() == 2, "two warm executors");
    let recs = records(&trace);
    let mut c = connect(&s);
    c.handshake(&hello("")).unwrap();
    let blobs: Vec<_> = recs.iter().flat_map(|r| r.blob_refs()).collect();
    let have = c.query_blobs(&blobs.iter().map(|b| b.hash).collect::<Vec<_>>()).unwrap();
    assert_eq!(have, vec![false; blobs.len()]);
    let store = blob_store(&trace);
    for b in &blobs {
        c.send_blob(b.hash, &store[&b.hash]).unwrap();
    }
    // SAFETY: a signal to the server this test started.
    unsafe { libc::kill(s.pid() as i32, libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(300));
    // New sessions are refused (the listeners are closed) ...
    assert!(protocol::connect(&Endpoint::parse(&s.tcp), Duration::from_secs(2))
        .and_then(|mut n| n.handshake(&hello("")).map(|_| ()))
        .is_err());
    // ... the running one finishes its work.
    let sent: Vec<_> = recs.into_iter().filter(|r| r.function.name() != "cuDeviceGetAttribute").collect();
    c.send_segment(&sent, true).unwrap();
    let a = c.answer().unwrap();
    assert!(a.errors.is_empty(), "{a:?}");
    c.close().unwrap();
    let status = s.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(children_of(s.pid()).is_empty());
}

#[test]
fn a_thousand_sessions_64_at_a_time_with_clients_killed_at_random_points() {
    let (dir, trace) = stand_in();
    let cfg = dir.path().join("gpuless.toml");
    std::fs::write(&cfg, "max_sessions = 64\nqueue = 1000\nqueue_timeout_s = 60.0\n[pool]\nwhole = 8\n").unwrap();
    let s = Server::start(dir.path(), dir.path(), &["--config", cfg.to_str().unwrap()], &[]);
    let total = 1000usize;
    let (mut ok, mut killed) = (0usize, 0usize);
    let mut running: Vec<(Child, Option<Instant>, usize)> = Vec::new();
    let mut started = 0usize;
    let t0 = Instant::now();
    let mut seed = rand_u64() | 1;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    while started < total || !running.is_empty() {
        while started < total && running.len() < 64 {
            let child = Command::new(GL)
                .args(["replay", "--remote", &s.tcp])
                .arg(&trace)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.path().join(format!("client-{started}.err"))).unwrap())
                .spawn()
                .unwrap();
            // Every third client is killed after 0-30 ms: before, during or after its session.
            let kill_at = (next() % 3 == 0).then(|| Instant::now() + Duration::from_millis(next() % 30));
            running.push((child, kill_at, started));
            started += 1;
        }
        running.retain_mut(|(c, kill_at, i)| {
            if kill_at.is_some_and(|k| Instant::now() >= k) {
                let _ = c.kill();
                let _ = c.wait();
                killed += 1;
                return false;
            }
            match c.try_wait().unwrap() {
                Some(st) => {
                    if st.success() {
                        ok += 1;
                    } else if kill_at.is_none() {
                        let err =
                            std::fs::read_to_string(dir.path().join(format!("client-{i}.err"))).unwrap_or_default();
                        panic!("client {i}, not killed, failed: {st:?}: {err}");
                    }
                    false
                }
                None => true,
            }
        });
        std::thread::sleep(Duration::from_millis(2));
        assert!(t0.elapsed() < Duration::from_secs(600), "1000 sessions took over 10 minutes");
    }
    assert_eq!(ok + killed, total);
    assert!(ok >= total / 2, "{ok} of {total} sessions succeeded");
    // Every session ended; only the warm pool is left; the server still serves.
    wait_until(|| s.metric("gpuless_sessions{kind=\"latency-critical\"}") == 0.0, "no session is left");
    let t = Instant::now();
    while s.children().len() > 8 && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        s.children().len() <= 8,
        "executors left: {:?}; log: {}",
        s.children(),
        std::fs::read_to_string(&s._log).unwrap_or_default().lines().rev().take(30).collect::<Vec<_>>().join("\n")
    );
    let (rc, r, err) = remote_replay(&s.tcp, &trace, &[]);
    assert_eq!(rc, 0, "{r} {err}");
    eprintln!("1000 sessions: {ok} completed, {killed} killed, {:.1} s", t0.elapsed().as_secs_f64());
}

/// A self-signed certificate for `localhost` and `127.0.0.1` (rcgen): `dir/NAME.pem` and its
/// key `dir/NAME.key`.
fn self_signed(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let c = rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    let (cert, key) = (dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")));
    std::fs::write(&cert, c.cert.pem()).unwrap();
    std::fs::write(&key, c.signing_key.serialize_pem()).unwrap();
    (cert, key)
}

/// A server whose TCP listener speaks TLS with a new self-signed certificate: the server and
/// the certificate file (its own CA).
fn tls_server(dir: &Path, extra: &[&str]) -> (Server, PathBuf) {
    let (cert, key) = self_signed(dir, "server");
    let mut flags = vec!["--tls-cert", cert.to_str().unwrap(), "--tls-key", key.to_str().unwrap()];
    flags.extend_from_slice(extra);
    (Server::start(dir, dir, &flags, &[]), cert)
}

#[test]
fn tls_remote_replay_verifies_and_later_sessions_find_the_blobs_cached() {
    let (dir, trace) = stand_in();
    let (s, ca) = tls_server(dir.path(), &[]);
    let addr = format!("tls://{}", s.tcp);
    let (rc, first, err) = remote_replay(&addr, &trace, &["--tls-ca", ca.to_str().unwrap()]);
    assert_eq!(rc, 0, "{first} {err}");
    assert_eq!(first["results_verified"], 2, "{first}");
    assert_eq!(first["launches"], 2, "{first}");
    assert!(first["mismatches"].as_array().unwrap().is_empty() && first["errors"].as_array().unwrap().is_empty());
    let t = &first["traffic"];
    assert!(t["blob_misses"].as_u64().unwrap() >= 2 && t["blob_bytes"].as_u64().unwrap() >= 256, "{t}");
    // A second session, trusting the CA through the environment: every blob is a cache hit.
    let (rc, second, err) = remote_replay_env(&addr, &trace, &[], &[("GPULESS_TLS_CA", &ca)]);
    assert_eq!(rc, 0, "{second} {err}");
    assert_eq!(second["results_verified"], 2, "{second}");
    assert_eq!(second["traffic"]["blob_bytes"], 0, "{second}");
    assert_eq!(second["traffic"]["blob_hits"], t["blob_misses"], "{second}");
    // Hot: the same answers, segment after segment, through the server's proxy.
    let (rc, hot, err) = remote_replay(&addr, &trace, &["--tls-ca", ca.to_str().unwrap(), "--iterations", "20"]);
    assert!(rc == 0 || rc == 3, "{hot} {err}");
    assert_eq!(hot["hot"]["iterations"], 20, "{hot}");
    assert_eq!(
        hot["results_verified"].as_u64().unwrap() + hot["mismatches"].as_array().unwrap().len() as u64,
        2 * 21,
        "{hot}"
    );
    assert_eq!(s.metric("gpuless_tls_sessions_total"), 3.0);
    // Each proxied session ends: the executor reports it, the server frees it.
    wait_until(|| s.metric("gpuless_sessions_ended_total{kind=\"closed\"}") == 3.0, "three TLS sessions ended");
    wait_until(|| s.metric("gpuless_sessions{kind=\"latency-critical\"}") == 0.0, "no session is left");
    eprintln!("TLS hot iteration: median {} ms, min {} ms", hot["hot"]["wall_ms_median"], hot["hot"]["wall_ms_min"]);
    // The Unix socket stays plain.
    let (rc, r, err) = remote_replay(&format!("unix:{}", s.socket.display()), &trace, &[]);
    assert_eq!(rc, 0, "{r} {err}");
}

#[test]
fn tls_clients_without_the_right_ca_fail_clearly_and_plain_clients_are_refused() {
    let (dir, trace) = stand_in();
    let (s, ca) = tls_server(dir.path(), &[]);
    let addr = format!("tls://{}", s.tcp);
    // No CA at all.
    let (rc, _, err) = remote_replay(&addr, &trace, &[]);
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("no CA certificate") && err.contains("--tls-ca") && err.contains("GPULESS_TLS_CA"), "{err}");
    // A CA that did not sign the server's certificate.
    let (other, _) = self_signed(dir.path(), "other");
    let (rc, _, err) = remote_replay(&addr, &trace, &["--tls-ca", other.to_str().unwrap()]);
    assert_eq!(rc, 2, "{err}");
    assert!(
        err.contains("certificate is not trusted") && err.contains("other.pem") && err.contains("--tls-ca"),
        "{err}"
    );
    wait_until(|| s.metric("gpuless_tls_handshake_failures_total{kind=\"failed\"}") >= 1.0, "the failure is counted");
    // A CA file that is not there, and one that holds no certificate.
    let missing = dir.path().join("missing-ca.pem");
    let (rc, _, err) = remote_replay(&addr, &trace, &["--tls-ca", missing.to_str().unwrap()]);
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("missing-ca.pem"), "{err}");
    let (rc, _, err) = remote_replay(&addr, &trace, &["--tls-ca", dir.path().join("server.key").to_str().unwrap()]);
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("server.key") && err.contains("no certificate"), "{err}");
    // A plain client on the TLS port is refused, in words it can read.
    let (rc, _, err) = remote_replay(&s.tcp, &trace, &[]);
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("speaks TLS only") && err.contains("tls://"), "{err}");
    assert!(s.metric("gpuless_sessions_ended_total{kind=\"refused-not-tls\"}") >= 1.0);
    // Garbage that starts like a TLS record, and a client that never speaks.
    let mut t = TcpStream::connect(&s.tcp).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    t.write_all(&[0x16, 0x03, 0x01, 0x00, 0x04, 0xde, 0xad, 0xbe, 0xef]).unwrap();
    let mut rest = Vec::new();
    let _ = t.read_to_end(&mut rest); // an alert at most, then the end
    let _silent = TcpStream::connect(&s.tcp).unwrap();
    // --tls-ca names a TLS server.
    let (rc, _, err) = remote_replay(&s.tcp, &trace, &["--tls-ca", ca.to_str().unwrap()]);
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("tls://HOST:PORT"), "{err}");
    // The server still serves TLS clients.
    let (rc, r, err) = remote_replay(&addr, &trace, &["--tls-ca", ca.to_str().unwrap()]);
    assert_eq!(rc, 0, "{r} {err}");
    assert_eq!(r["results_verified"], 2, "{r}");
    assert!(s.metric("gpuless_tls_handshake_failures_total{kind=\"failed\"}") >= 2.0);
}

#[test]
fn a_tls_client_of_a_plain_server_fails_without_hanging() {
    let (dir, trace) = stand_in();
    let s = Server::start(dir.path(), dir.path(), &[], &[]);
    let (ca, _) = self_signed(dir.path(), "ca");
    let t = Instant::now();
    let (rc, _, err) = remote_replay(&format!("tls://{}", s.tcp), &trace, &["--tls-ca", ca.to_str().unwrap()]);
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("TLS handshake") && err.contains("speak TLS"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    let (rc, r, err) = remote_replay(&s.tcp, &trace, &[]);
    assert_eq!(rc, 0, "{r} {err}");
}

#[test]
fn tls_needs_both_a_certificate_and_a_key_and_both_must_be_readable() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(GL).args(["serve", "--tls-cert", "c.pem"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tls-key"), "{}", String::from_utf8_lossy(&out.stderr));
    let cfg = dir.path().join("gpuless.toml");
    std::fs::write(&cfg, "tls_key = \"k.pem\"\n").unwrap();
    let out = Command::new(GL).args(["serve", "--config", cfg.to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("`tls_key` is set but `tls_cert` is not"), "{err}");
    let missing = dir.path().join("nope.pem");
    let out = Command::new(GL)
        .args(["serve", "--listen", "127.0.0.1:0", "--pool", "whole=0", "--tls-cert", missing.to_str().unwrap()])
        .args(["--tls-key", missing.to_str().unwrap()])
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("tls_cert") && err.contains("nope.pem"), "{err}");
}
