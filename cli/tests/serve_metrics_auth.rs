//! The metrics endpoint behind a bearer token (`gpuless serve --metrics-token-file FILE`,
//! `metrics_token_file`; docs/DEPLOY.md, "Metrics"), end to end on the stand-in driver: a scrape
//! without the token or with a wrong one is refused (401, `WWW-Authenticate: Bearer`) and
//! counted, one with it is answered; the orchestrator's probes stay open; a metrics endpoint off
//! loopback without a token is warned of once at start.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

mod serve_harness;
mod support;

use serve_harness::*;

/// An answer over HTTP: status code, headers (lines), body.
struct Reply {
    code: u16,
    head: String,
    body: String,
}

/// `GET path` on `addr` with the extra header lines `headers` (each ending in CRLF), written in
/// one piece, or the request line first and the rest 200 ms later where `split`.
fn get(addr: &str, path: &str, headers: &str, split: bool) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let line = format!("GET {path} HTTP/1.1\r\n");
    let rest = format!("Host: scrape\r\nUser-Agent: Prometheus/3.5.0\r\n{headers}\r\n");
    if split {
        s.write_all(line.as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        s.write_all(rest.as_bytes()).unwrap();
    } else {
        s.write_all(format!("{line}{rest}").as_bytes()).unwrap();
    }
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Reply { code, head: head.to_string(), body: body.to_string() }
}

/// Whether `reply` is the refusal of a scrape: 401, asking for a bearer token, one line of why,
/// no metric in it.
fn refused(reply: &Reply) -> bool {
    reply.code == 401
        && reply.head.lines().any(|l| l.eq_ignore_ascii_case("WWW-Authenticate: Bearer"))
        && reply.body.ends_with('\n')
        && reply.body.lines().count() == 1
        && !reply.body.contains("gpuless_")
}

const WARNING: &str = "the metrics endpoint is not on loopback and has no token";

#[test]
fn with_a_token_file_metrics_needs_the_token_and_the_probes_stay_open() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, _) = support::build_stand_in(dir.path());
    let token = "m-3f9a1c77e0b24d5e";
    let file = dir.path().join("metrics-token");
    std::fs::write(&file, format!("{token}\n")).unwrap();
    let s =
        Server::start(dir.path(), &libdir, &["--metrics-token-file", file.to_str().unwrap(), "--pool", "whole=1"], &[]);
    // The probes carry no token (the kubelet's do not).
    let health = get(&s.metrics, "/healthz", "", false);
    assert_eq!((health.code, health.body.as_str()), (200, "ok\n"));
    wait_until(|| get(&s.metrics, "/readyz", "", false).code == 200, "/readyz answers 200 without a token");
    assert_eq!(get(&s.metrics, "/readyz", "", false).body, "ready\n");
    assert_eq!(get(&s.metrics, "/nothing", "", false).code, 404);

    // No token, a wrong one, another scheme: refused, the same way.
    let none = get(&s.metrics, "/metrics", "", false);
    assert!(refused(&none), "{} {}", none.head, none.body);
    let wrong = get(&s.metrics, "/metrics", "Authorization: Bearer m-3f9a1c77e0b24d5f\r\n", false);
    assert!(refused(&wrong), "{} {}", wrong.head, wrong.body);
    assert_eq!(wrong.body, none.body, "a wrong token is told nothing more than a missing one");
    let prefix = get(&s.metrics, "/metrics", &format!("Authorization: Bearer {}\r\n", &token[..8]), false);
    assert!(refused(&prefix), "{}", prefix.body);
    let basic = get(&s.metrics, "/metrics", &format!("Authorization: Basic {token}\r\n"), false);
    assert!(refused(&basic), "{}", basic.body);
    assert!(refused(&get(&s.metrics, "/metrics?x=1", "", false)), "a query string changes nothing");
    // The harness's own scrape carries no token.
    assert!(!s.metrics().contains("gpuless_executors"));

    // The right one: the metrics, the refusals above counted among them.
    let ok = get(&s.metrics, "/metrics", &format!("Authorization: Bearer {token}\r\n"), false);
    assert_eq!(ok.code, 200, "{} {}", ok.head, ok.body);
    assert!(ok.body.contains("gpuless_executors"), "{}", ok.body);
    assert!(!ok.head.to_ascii_lowercase().contains("www-authenticate"), "{}", ok.head);
    let count = |body: &str| {
        body.lines()
            .find_map(|l| l.strip_prefix("gpuless_metrics_unauthorized_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    assert_eq!(count(&ok.body), Some(6.0), "{}", ok.body);
    // Whatever the scheme's case and the spaces, and however the request's writes arrive.
    let loose = get(&s.metrics, "/metrics", &format!("authorization:  bearer   {token}  \r\n"), true);
    assert_eq!(loose.code, 200, "{}", loose.body);
    assert_eq!(count(&loose.body), Some(6.0));

    let log = std::fs::read_to_string(&s._log).unwrap();
    assert!(!log.contains(WARNING), "a loopback endpoint is not warned of: {log}");
}

/// Starts `gpuless serve` with `flags` and no warm pool, waits for it to serve, stops it;
/// returns its log.
fn started_log(dir: &Path, flags: &[&str]) -> String {
    let log = dir.join(format!("serve-{}.log", rand_u64() % 100000));
    let mut child = Command::new(GL)
        .args(["serve", "--listen", "127.0.0.1:0", "--pool", "whole=0", "--cache-dir"])
        .arg(dir.join("cache"))
        .args(flags)
        .env("LD_LIBRARY_PATH", dir)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(line.contains("metrics="), "{line:?}; log: {text}");
    text
}

#[test]
fn an_open_metrics_endpoint_without_a_token_is_warned_of_once() {
    let dir = tempfile::tempdir().unwrap();
    support::build_stand_in(dir.path());
    let open = started_log(dir.path(), &["--metrics", "0.0.0.0:0"]);
    assert_eq!(open.matches(WARNING).count(), 1, "{open}");
    let file = dir.path().join("metrics-token");
    std::fs::write(&file, "t0k3n\n").unwrap();
    let guarded = started_log(dir.path(), &["--metrics", "0.0.0.0:0", "--metrics-token-file", file.to_str().unwrap()]);
    assert!(!guarded.contains(WARNING), "{guarded}");
    // A token file whose first line is empty stops the server, naming the key.
    std::fs::write(&file, "\n").unwrap();
    let out = Command::new(GL)
        .args(["serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--metrics-token-file"])
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("metrics_token_file") && err.contains("first line is empty"), "{err}");
}
