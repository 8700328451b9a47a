//! `gpuless serve` end to end without a GPU: the real server, its real executor processes and
//! real clients over loopback TCP and a Unix socket, with the executors on the recorder's
//! stand-in driver (a tiny device in host memory; `cli/tests/support`). What the GPU does is
//! proven by scripts/gpu-suite-server.sh on the device machine; this proves the server's own
//! behaviour: handshake, segments, answers, the cache across sessions and restarts, refusals,
//! timeouts, disconnects, crashes, admission, metrics, the drain, and many sessions at once.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gpuless_traces::protocol::message::code;
use gpuless_traces::protocol::{self, Endpoint, Hello, Message, PartitionRequest, ProtocolError};

mod serve_harness;
mod support;

use serve_harness::*;

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
