//! Client mode over TLS (issue 37, "Clients over TLS") end to end without a GPU: programs on
//! the stand-in driver (`recorder/tests/fake/`) run through `gpuless run --remote
//! tls://localhost:PORT --tls-ca ca.pem` against a real `gpuless serve --tls-cert --tls-key`
//! (a self-signed certificate made by the test, its own CA), with the real client library.
//! They print what they print natively and over plain TCP: the session's segments and
//! answers, blobs asked for and uploaded in parts, a large download, host functions (also one
//! the program waits for without a CUDA call, which only the client's poller can run). A
//! server the client cannot trust (another CA, a certificate for another name), a missing CA
//! and a plain server are one `gpuless:` line each, and the program sees no device.

mod serve_harness;
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serve_harness::{run_client_at, self_signed, self_signed_for, ClientRun, Server};

/// A server on the stand-in in `libdir` whose TCP listener speaks TLS with the certificate
/// `dir/NAME.pem` made now for `names`; the server and the certificate (its own CA).
fn tls_server(dir: &Path, libdir: &Path, name: &str, names: &[&str]) -> (Server, PathBuf) {
    let (cert, key) = self_signed_for(dir, name, names);
    let flags = ["--tls-cert", cert.to_str().unwrap(), "--tls-key", key.to_str().unwrap()];
    (Server::start(dir, libdir, &flags, &[]), cert)
}

/// The server's TCP port.
fn port(s: &Server) -> &str {
    s.tcp.rsplit_once(':').map_or("", |(_, p)| p)
}

/// `prog args` on the stand-in in `libdir`, natively; its stdout (it must succeed).
fn native(prog: &Path, libdir: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let out = Command::new(prog).args(args).envs(env.iter().copied()).env("LD_LIBRARY_PATH", libdir).output().unwrap();
    assert!(out.status.success(), "natively: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The run succeeded with `want` on stdout; its statistics.
fn same_output(ran: &ClientRun, want: &str, what: &str) -> serde_json::Value {
    assert!(ran.ok, "{what} failed; stdout:\n{}\nstderr:\n{}", ran.stdout, ran.stderr);
    assert_eq!(ran.stdout, want, "{what}: the output differs; stderr:\n{}", ran.stderr);
    let stats = ran.stats();
    assert!(stats["failed"].is_null(), "{what}: {stats}");
    stats
}

#[test]
fn a_program_runs_over_tls_as_over_plain_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "remote", &["-l:libcuda.so.1", "-ldl"]);
    let want = native(&prog, &libdir, &["3"], &[]);
    let plain = Server::start(dir.path(), &libdir, &[], &[]);
    let over_tcp = run_client_at(&plain.tcp, &[], &prog, &["3"], &[]);
    let tcp_stats = same_output(&over_tcp, &want, "over plain TCP");

    let (s, ca) = tls_server(dir.path(), &libdir, "server", &["localhost", "127.0.0.1"]);
    let addr = format!("tls://localhost:{}", port(&s));
    let ca_flag = ["--tls-ca", ca.to_str().unwrap()];
    let over_tls = run_client_at(&addr, &ca_flag, &prog, &["3"], &[]);
    let stats = same_output(&over_tls, &want, "over TLS");
    assert_eq!(stats["endpoint"], addr.as_str(), "{stats}");
    assert_eq!(stats["device"], "Fake GPU", "{stats}");
    for k in ["round_trips", "waits", "sent", "calls"] {
        assert_eq!(stats[k], tcp_stats[k], "{k}: TLS {stats}\nTCP {tcp_stats}");
    }
    assert_eq!(s.metric("gpuless_tls_sessions_total"), 1.0);

    // The CA through the environment, as `replay --remote` takes it.
    let ca_env = [("GPULESS_TLS_CA", ca.to_str().unwrap())];
    same_output(&run_client_at(&addr, &[], &prog, &["3"], &ca_env), &want, "GPULESS_TLS_CA");

    // 1.6 MB of weights: a blob asked for first and uploaded in parts, read back whole.
    let (_, weights) = support::build_program(dir.path(), "weights", &["-lcuda"]);
    let big = [("WEIGHTS_FLOATS", "400000")];
    let want = native(&weights, &libdir, &[], &big);
    let stats = same_output(&run_client_at(&addr, &ca_flag, &weights, &[], &big), &want, "weights over TLS");
    let n = |k: &str| stats[k].as_u64().unwrap_or_else(|| panic!("no number {k} in {stats}"));
    assert!(n("blob_misses") >= 1 && n("blob_bytes") >= 1_600_000, "{stats}");
    assert!(n("bytes_up") >= 1_600_000 && n("bytes_down") >= 1_600_000, "{stats}");
    assert_eq!(s.metric("gpuless_tls_sessions_total"), 3.0);
}

#[test]
fn host_functions_run_over_tls_also_while_the_program_waits_without_a_call() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "hostfns", &["-l:libcuda.so.1"]);
    let plain = Server::start(dir.path(), &libdir, &[], &[]);
    let over_tcp = run_client_at(&plain.tcp, &[], &prog, &[], &[]);
    assert!(over_tcp.ok, "over plain TCP; stderr:\n{}", over_tcp.stderr);
    // The poller runs the function the program spins for (at most 5 s without it).
    assert!(over_tcp.stdout.lines().any(|l| l == "spin: 1"), "{}", over_tcp.stdout);

    let (s, ca) = tls_server(dir.path(), &libdir, "server", &["localhost", "127.0.0.1"]);
    let addr = format!("tls://localhost:{}", port(&s));
    let t = Instant::now();
    let over_tls = run_client_at(&addr, &["--tls-ca", ca.to_str().unwrap()], &prog, &[], &[]);
    same_output(&over_tls, &over_tcp.stdout, "host functions over TLS");
    assert!(t.elapsed() < Duration::from_secs(5), "the spin waited for its timeout: {:?}", t.elapsed());
    let said = over_tls.stderr.lines().filter(|l| l.contains("called from a host function")).count();
    assert_eq!(said, 1, "the refused CUDA call is said once:\n{}", over_tls.stderr);
}

/// The program ran without a device: it exited with its own error (not a signal), and one
/// `gpuless:` line said why, naming the endpoint and each of `want`.
fn no_device(ran: &ClientRun, addr: &str, want: &[&str]) {
    assert!(ran.code.is_some_and(|c| c != 0 && c < 128), "exit {:?}; stderr:\n{}", ran.code, ran.stderr);
    let said: Vec<&str> = ran.stderr.lines().filter(|l| l.starts_with("gpuless:")).collect();
    assert_eq!(said.len(), 1, "one `gpuless:` line says why:\n{}", ran.stderr);
    let line = said[0];
    assert!(line.starts_with(&format!("gpuless: cannot use the GPU server at {addr}: ")), "{line}");
    assert!(line.ends_with("the program sees no CUDA device"), "{line}");
    for w in want {
        assert!(line.contains(w), "no {w:?} in {line}");
    }
}

#[test]
fn an_untrusted_or_plain_server_is_one_line_and_no_device() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "remote", &["-l:libcuda.so.1", "-ldl"]);
    let (s, ca) = tls_server(dir.path(), &libdir, "server", &["localhost", "127.0.0.1"]);
    let addr = format!("tls://localhost:{}", port(&s));
    // A CA that did not sign the server's certificate.
    let (other, _) = self_signed(dir.path(), "other");
    let ran = run_client_at(&addr, &["--tls-ca", other.to_str().unwrap()], &prog, &["1"], &[]);
    no_device(&ran, &addr, &["not trusted", "other.pem", "--tls-ca"]);
    // No CA at all.
    let ran = run_client_at(&addr, &[], &prog, &["1"], &[]);
    no_device(&ran, &addr, &["no CA certificate", "--tls-ca", "GPULESS_TLS_CA"]);
    // A certificate for another name.
    let (elsewhere, cert) = tls_server(dir.path(), &libdir, "elsewhere", &["gpu.invalid"]);
    let at = format!("tls://127.0.0.1:{}", port(&elsewhere));
    let ran = run_client_at(&at, &["--tls-ca", cert.to_str().unwrap()], &prog, &["1"], &[]);
    no_device(&ran, &at, &["not valid for `127.0.0.1`"]);
    // The same server as one of several a name stands for (`tls://NAME:PORT#ADDRESS:PORT`, what a
    // name resolving to several addresses expands to): reached at the address, trusted for the
    // name (which resolves nowhere).
    let pinned = format!("tls://gpu.invalid:{0}#127.0.0.1:{0}", port(&elsewhere));
    let ran = run_client_at(&pinned, &["--tls-ca", cert.to_str().unwrap()], &prog, &["1"], &[]);
    assert!(ran.ok, "{pinned}: stderr:\n{}", ran.stderr);
    // A plain server: the handshake fails at once, and the program sees it — never a SIGPIPE
    // for a write to the connection the server closed (a race: several times).
    let plain = Server::start(dir.path(), &libdir, &[], &[]);
    let at = format!("tls://{}", plain.tcp);
    for _ in 0..5 {
        let t = Instant::now();
        let ran = run_client_at(&at, &["--tls-ca", ca.to_str().unwrap()], &prog, &["1"], &[]);
        no_device(&ran, &at, &["TLS handshake", "speak TLS"]);
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    }
    // --tls-ca names a TLS server; the program does not start.
    let (code, _, err) =
        support::gpuless(&["run", "--remote", &plain.tcp, "--tls-ca", ca.to_str().unwrap(), "--", "/bin/true"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--tls-ca applies to TLS servers") && err.contains("tls://HOST:PORT"), "{err}");
    // The TLS server still serves a client that trusts it.
    let ran = run_client_at(&addr, &["--tls-ca", ca.to_str().unwrap()], &prog, &["1"], &[]);
    assert!(ran.ok, "stderr:\n{}", ran.stderr);
}

#[test]
fn the_program_is_told_the_ca_file_by_its_absolute_path() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(serve_harness::GL)
        .args(["run", "--remote", "tls://gpu.invalid:1", "--tls-ca", "ca.pem", "--"])
        .args(["sh", "-c", "cd / && echo \"$GPULESS_REMOTE $GPULESS_TLS_CA\""])
        .current_dir(dir.path())
        .env("GPULESS_RECORDER", support::common::recorder_lib())
        .env("GPULESS_TLS_CA", "/inherited.pem")
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let want = format!("tls://gpu.invalid:1 {}\n", dir.path().join("ca.pem").display());
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
    // Without --tls-ca the inherited one stays.
    let out = Command::new(serve_harness::GL)
        .args(["run", "--remote", "tls://gpu.invalid:1", "--", "sh", "-c", "echo \"$GPULESS_TLS_CA\""])
        .env("GPULESS_RECORDER", support::common::recorder_lib())
        .env("GPULESS_TLS_CA", "/inherited.pem")
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "/inherited.pem\n", "{out:?}");
}
