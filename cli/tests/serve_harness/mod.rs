//! The harness of the server's end-to-end tests: a real `gpuless serve` on the stand-in driver
//! (`crate::support`), clients (protocol connections, remote replays, programs under
//! `gpuless run --remote`), and what the tests read back. Shared by the `serve_*` and
//! `run_remote_*` tests.
#![allow(dead_code)] // each test binary uses part of it

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gpuless_traces::protocol::{self, Endpoint, Hello, Message, PartitionRequest, Priority};
use gpuless_traces::{ChunkBody, ReaderOptions, TraceReader};

use crate::support;

pub const GL: &str = env!("CARGO_BIN_EXE_gpuless");

/// A running `gpuless serve` on the stand-in driver; killed when dropped.
pub struct Server {
    pub child: Child,
    pub tcp: String,
    pub metrics: String,
    pub socket: PathBuf,
    pub _log: PathBuf,
}

impl Server {
    /// Starts a server whose executors load the stand-in driver from `libdir`, with its cache
    /// in `dir/cache`, and `extra` flags; `env` goes to the server and its executors.
    pub fn start(dir: &Path, libdir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
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

    pub fn metrics(&self) -> String {
        let mut s = TcpStream::connect(&self.metrics).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        body
    }

    /// The value of metric line `name` (with labels), or 0.
    pub fn metric(&self, name: &str) -> f64 {
        self.metrics().lines().find_map(|l| l.strip_prefix(name).and_then(|r| r.trim().parse().ok())).unwrap_or(0.0)
    }

    /// Executor processes the server has (children of its pid).
    pub fn children(&self) -> Vec<u32> {
        children_of(self.child.id())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn children_of(pid: u32) -> Vec<u32> {
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

pub fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(Instant::now().elapsed().as_nanos() as u64);
    h.finish()
}

pub fn hello(token: &str) -> Hello {
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
        whole_segments: false,
        gpu: None,
        devices: 0,
        more_gpus: Vec::new(),
    }
}

pub fn connect(s: &Server) -> protocol::Connection {
    let c = protocol::connect(&Endpoint::parse(&s.tcp), Duration::from_secs(5)).unwrap();
    c.set_timeout(Some(Duration::from_secs(20))).unwrap();
    c
}

/// `gpuless replay --remote ADDR --json trace` (+ args): exit code and the JSON report.
pub fn remote_replay(addr: &str, trace: &Path, args: &[&str]) -> (i32, serde_json::Value, String) {
    remote_replay_env(addr, trace, args, &[])
}

/// [`remote_replay`] with `env` set for the client.
pub fn remote_replay_env(
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

/// A self-signed certificate for `localhost` and `127.0.0.1` (rcgen): `dir/NAME.pem` and its
/// key `dir/NAME.key`.
pub fn self_signed(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    self_signed_for(dir, name, &["localhost", "127.0.0.1"])
}

/// A self-signed certificate for `names` (rcgen): `dir/NAME.pem` and its key `dir/NAME.key`.
pub fn self_signed_for(dir: &Path, name: &str, names: &[&str]) -> (PathBuf, PathBuf) {
    let c = rcgen::generate_simple_self_signed(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    let (cert, key) = (dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")));
    std::fs::write(&cert, c.cert.pem()).unwrap();
    std::fs::write(&key, c.signing_key.serialize_pem()).unwrap();
    (cert, key)
}

pub fn stand_in() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let trace = support::record_stand_in(dir.path(), None);
    (dir, trace)
}

/// The stand-in trace's records, in order.
pub fn records(trace: &Path) -> Vec<gpuless_traces::CallRecord> {
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
pub fn blob_store(trace: &Path) -> std::collections::HashMap<gpuless_traces::Hash128, Vec<u8>> {
    gpuless_replayer::replay::load(trace).unwrap().blobs.into_iter().map(|(h, b)| (h, b.to_vec())).collect()
}

pub fn session_error(c: &mut protocol::Connection) -> (u16, String) {
    match c.recv() {
        Ok(Message::Error { code, message }) => (code, message),
        other => panic!("expected an Error, got {other:?}"),
    }
}

pub fn wait_until(mut f: impl FnMut() -> bool, what: &str) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(20), "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What a client program printed under `gpuless run --remote`: exit success, stdout, stderr.
pub struct ClientRun {
    pub ok: bool,
    /// The exit code (None: a signal ended it).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl ClientRun {
    /// The words after `key` on the first stdout line that starts with it (panics when absent).
    pub fn line(&self, key: &str) -> Vec<String> {
        let l = self.stdout.lines().find(|l| l.split(' ').next() == Some(key));
        let l = l.unwrap_or_else(|| panic!("no `{key}` line in:\n{}\nstderr:\n{}", self.stdout, self.stderr));
        l.split(' ').skip(1).map(str::to_string).collect()
    }

    /// Asserts that stdout has `line` as one of its lines.
    pub fn has(&self, line: &str) {
        assert!(self.stdout.lines().any(|l| l == line), "no `{line}` in:\n{}\n{}", self.stdout, self.stderr);
    }

    /// The session's statistics: the `--json` line on stderr (panics when absent).
    pub fn stats(&self) -> serde_json::Value {
        let mut lines = self.stderr.lines().filter(|l| l.starts_with('{'));
        lines
            .find_map(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("no statistics on stderr:\n{}", self.stderr))
    }
}

/// Builds the stand-in test program `name` (`recorder/tests/fake/NAME.c`, linked against
/// `libcuda.so.1`), runs it through `gpuless run --remote` against a server of its own on the
/// stand-in driver, and asserts that it succeeded and that nothing it called was refused.
pub fn run_program(name: &str) -> ClientRun {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), name, &["-l:libcuda.so.1"]);
    let srv = Server::start(dir.path(), &libdir, &[], &[]);
    let ran = run_client(&srv, &prog);
    assert!(ran.ok, "stdout:\n{}\nstderr:\n{}", ran.stdout, ran.stderr);
    assert!(!ran.stderr.contains("not supported"), "{}", ran.stderr);
    ran
}

/// Runs `prog` through `gpuless run --remote` against `s` (`--json` statistics on stderr), with
/// the real recorder library as the client and nothing of the caller's environment that would
/// redirect it.
pub fn run_client(s: &Server, prog: &Path) -> ClientRun {
    run_client_env(s, prog, &[])
}

/// [`run_client`] with `env` set for the program.
pub fn run_client_env(s: &Server, prog: &Path, env: &[(&str, &str)]) -> ClientRun {
    run_client_at(&s.tcp, &[], prog, &[], env)
}

/// `gpuless run --remote ADDR --json FLAGS -- PROG ARGS` with `env` set for the program (and
/// no `GPULESS_TLS_CA` unless `env` sets it), the real recorder library as the client.
pub fn run_client_at(addr: &str, flags: &[&str], prog: &Path, args: &[&str], env: &[(&str, &str)]) -> ClientRun {
    let out = Command::new(GL)
        .args(["run", "--remote", addr, "--json"])
        .args(flags)
        .arg("--")
        .arg(prog)
        .args(args)
        .env_remove("GPULESS_TLS_CA")
        .envs(env.iter().copied())
        .env("GPULESS_RECORDER", support::common::recorder_lib())
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("LD_PRELOAD")
        .env_remove("GPULESS_TRACE")
        .output()
        .expect("run gpuless run");
    ClientRun {
        ok: out.status.success(),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
