//! The probes of an orchestrator (deploy/k8s/30-daemonset.yaml, docs/DEPLOY.md) end to end
//! without a GPU: a real `gpuless serve` on the configuration the Kubernetes manifests ship
//! (deploy/k8s/10-configmap.yaml), its executors on the recorder's stand-in driver, and
//! `GET /healthz` and `GET /readyz` over loopback TCP on its metrics endpoint — ready once an
//! executor has initialized the GPU, not ready while none could, draining after SIGTERM.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod serve_harness;
mod support;

use serve_harness::*;

/// `GET path` on `addr`: (status code, body).
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: probe\r\nUser-Agent: kube-probe/1.34\r\n\r\n");
    s.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// The block scalar `key: |` of manifest `deploy/k8s/NAME` (its lines, indented by four
/// spaces there), written to `dir/key`.
fn manifest_block(dir: &Path, name: &str, key: &str) -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/k8s").join(name);
    let text = std::fs::read_to_string(&manifest).unwrap();
    let mut lines = text.lines().skip_while(|l| l.trim() != format!("{key}: |")).skip(1);
    let block: Vec<&str> = lines.by_ref().take_while(|l| l.is_empty() || l.starts_with("    ")).collect();
    assert!(block.len() > 1, "no {key} block in {}", manifest.display());
    let body: String = block.iter().map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l))).collect();
    let path = dir.join(key);
    std::fs::write(&path, body).unwrap();
    path
}

#[test]
fn the_deployed_configuration_serves_probes_ready_then_draining_after_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, _) = support::build_stand_in(dir.path());
    let config = manifest_block(dir.path(), "10-configmap.yaml", "gpuless.toml");
    // The Secret's placeholders are refused, so a server never runs on them.
    let placeholders = manifest_block(dir.path(), "20-secret.yaml", "tenants");
    let mut refused = std::process::Command::new(GL)
        .args(["serve", "--listen", "127.0.0.1:0", "--config", config.to_str().unwrap(), "--tenants-file"])
        .arg(&placeholders)
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(st) = refused.try_wait().unwrap() {
            break st;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = refused.kill();
            panic!("gpuless serve runs on the Secret's placeholders");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    refused.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("line 2: expected `NAME TOKEN`"), "{err}");
    let tenants = support::two_tenants(dir.path());
    // The harness's --listen, --metrics and --cache-dir stand in for the pod's addresses and
    // volumes, --tenants-file for the Secret; everything else is the ConfigMap's.
    let mut s =
        Server::start(dir.path(), &libdir, &["--config", config.to_str().unwrap(), "--tenants-file", &tenants], &[]);
    assert_eq!(get(&s.metrics, "/healthz"), (200, "ok\n".into()));
    // Ready once the warm executor of the configured pool has initialized the (stand-in) GPU.
    wait_until(|| get(&s.metrics, "/readyz").0 == 200, "/readyz answers 200");
    assert_eq!(get(&s.metrics, "/readyz").1, "ready\n");
    assert_eq!(get(&s.metrics, "/readyz?verbose").0, 200);
    assert_eq!(get(&s.metrics, "/nothing").0, 404);
    assert!(get(&s.metrics, "/metrics").1.contains("gpuless_executors"), "the scrape still answers");
    // A tenant's session holds the drain open.
    let mut c = connect(&s);
    c.handshake(&hello("token-a")).expect("a tenant of the Secret's kind is admitted");
    // SAFETY: a signal to the server this test started.
    unsafe { libc::kill(s.pid() as i32, libc::SIGTERM) };
    wait_until(|| get(&s.metrics, "/readyz").0 == 503, "/readyz answers 503 while draining");
    let (_, why) = get(&s.metrics, "/readyz");
    assert!(why.starts_with("draining"), "{why}");
    assert_eq!(get(&s.metrics, "/healthz"), (200, "ok\n".into()), "alive while draining");
    // The session ends; the server stops, the metrics endpoint with it.
    c.close().unwrap();
    let status = s.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(TcpStream::connect(&s.metrics).is_err(), "the endpoint closes when the server stops");
}

/// A driver without a device (`dir/no-device/libcuda.so.1`, and `libcuda.so`): `cuInit`
/// answers CUDA_ERROR_NO_DEVICE, so no executor initializes; returns its directory.
fn no_device_driver(dir: &Path) -> PathBuf {
    let d = dir.join("no-device");
    std::fs::create_dir_all(&d).unwrap();
    let src = d.join("libcuda.c");
    std::fs::write(&src, "int cuInit(unsigned int flags) { (void)flags; return 100; }\n").unwrap();
    let lib = d.join("libcuda.so.1");
    support::common::cc(&["-shared", "-fPIC", "-o", lib.to_str().unwrap(), src.to_str().unwrap()]);
    std::os::unix::fs::symlink("libcuda.so.1", d.join("libcuda.so")).unwrap();
    d
}

#[test]
fn readyz_waits_for_an_executor_that_initializes_the_gpu_unless_no_pool_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let libdir = no_device_driver(dir.path());
    let s = Server::start(dir.path(), &libdir, &["--pool", "whole=1"], &[]);
    // Alive, never ready, before and after the executors' failures (each /readyz tries the
    // pool again).
    for _ in 0..10 {
        let (code, why) = get(&s.metrics, "/readyz");
        assert_eq!(code, 503, "{why}");
        assert!(why.starts_with("starting: no executor has initialized the GPU"), "{why}");
        assert_eq!(get(&s.metrics, "/healthz").0, 200);
        std::thread::sleep(Duration::from_millis(150));
    }
    let log = std::fs::read_to_string(&s._log).unwrap();
    assert!(log.matches("executor starting").count() >= 2, "the pool is tried again: {log}");
    drop(s);
    // No warm pool: no executor starts before a session, so the server is ready at once.
    let s = Server::start(dir.path(), &libdir, &["--pool", "whole=0"], &[]);
    assert_eq!(get(&s.metrics, "/readyz"), (200, "ready\n".into()));
}
