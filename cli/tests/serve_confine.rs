//! Executors confined for untrusted tenants (issue 37, docs/SECURITY.md), on the stand-in
//! driver: a warm executor's process is seen from outside — its user, seccomp filter,
//! no_new_privs, namespaces and the file system it sees — and sessions run in it; the server
//! refuses to run executors as root unless told to. (The hostile-session test needs a GPU's
//! per-context address spaces: scripts/gpu-suite-confine.sh.)

use std::process::Command;
use std::time::{Duration, Instant};

mod serve_harness;
mod support;

use serve_harness::*;

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn status_field(pid: u32, key: &str) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines().find_map(|l| l.strip_prefix(key)).map(|v| v.trim().to_string()).unwrap_or_default()
}

/// The warm executor of `s` (the one child that is not a zombie), once it is ready.
fn executor(s: &Server) -> u32 {
    let start = Instant::now();
    loop {
        let live: Vec<u32> = s.children().into_iter().filter(|p| status_field(*p, "State:").starts_with('S')).collect();
        if let Some(p) = live.first() {
            if s.metric("gpuless_executors{kind=\"warm\"}") >= 1.0 {
                return *p;
            }
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no ready executor under the server");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_warm_executor_is_confined_and_serves_sessions() {
    let (dir, trace) = stand_in();
    let s = Server::start(dir.path(), dir.path(), &[], &[]);
    let pid = executor(&s);
    assert_eq!(status_field(pid, "Seccomp:"), "2", "the executor's seccomp filter");
    assert_eq!(status_field(pid, "NoNewPrivs:"), "1");
    let ns = |p: &str, kind: &str| std::fs::read_link(format!("/proc/{p}/ns/{kind}")).unwrap();
    let me = std::process::id().to_string();
    for kind in ["net", "mnt", "ipc", "uts"] {
        assert_ne!(ns(&pid.to_string(), kind), ns(&me, kind), "its own {kind} namespace");
    }
    // Its root: the view, without the host's home directories or this checkout.
    let view: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/root/"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    for absent in ["home", "root", "srv", "var"] {
        assert!(!view.iter().any(|v| v == absent), "/{absent} in the executor's view: {view:?}");
    }
    // The binary's directory is in view, the sources beside it are not.
    let sources = format!("/proc/{pid}/root{}/Cargo.toml", env!("CARGO_MANIFEST_DIR"));
    assert!(std::fs::metadata(&sources).is_err(), "{sources} is in the executor's view");
    for present in ["usr", "etc", "dev", "tmp", "proc"] {
        assert!(view.iter().any(|v| v == present), "/{present} missing from the view: {view:?}");
    }
    if root() {
        let uid = status_field(pid, "Uid:");
        assert!(!uid.starts_with("0\t") && !uid.starts_with("0 "), "the executor runs as root: {uid}");
        // Not dumpable: its /proc files are the root's, not its own user's.
        use std::os::unix::fs::MetadataExt;
        assert_eq!(std::fs::metadata(format!("/proc/{pid}/mem")).unwrap().uid(), 0);
    }
    // The cache is in its view read-only: the server writes it.
    let memory = std::fs::canonicalize(dir.path().join("cache/memory")).unwrap();
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    // The innermost mount holding it (the stand-in's directory, a parent, may be bound already).
    let cache_mount = mounts
        .lines()
        .filter(|l| l.split(' ').nth(4).is_some_and(|at| memory.starts_with(at)))
        .max_by_key(|l| l.split(' ').nth(4).map_or(0, str::len))
        .unwrap_or_else(|| panic!("no mount of {} in the executor's view:\n{mounts}", memory.display()));
    let options = cache_mount.split(' ').nth(5).unwrap_or("");
    assert!(options.split(',').any(|o| o == "ro"), "the cache is writable in the view: {cache_mount}");
    // And it serves: a remote replay verifies.
    let (rc, r, err) = remote_replay(&s.tcp, &trace, &[]);
    assert_eq!(rc, 0, "{r} {err}");
    let log = std::fs::read_to_string(&s._log).unwrap_or_default();
    assert!(log.contains("namespaces on") && log.contains("seccomp on"), "{log}");
    assert!(!log.contains("refused by the executor's seccomp filter"), "{log}");
    // What the session uploaded is in the cache, written by the server (as root, the files
    // are root's, not the executors' user's), and a second session finds it there.
    use std::os::unix::fs::MetadataExt;
    let blobs: Vec<std::fs::Metadata> = std::fs::read_dir(&memory)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().len() == 32)
        .map(|e| e.metadata().unwrap())
        .collect();
    assert!(!blobs.is_empty(), "no blob in {}", memory.display());
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    assert!(blobs.iter().all(|m| m.uid() == me), "cache files not written by the server");
    let (rc, again, err) = remote_replay(&s.tcp, &trace, &[]);
    assert_eq!(rc, 0, "{again} {err}");
    assert_eq!(again["traffic"]["blob_bytes"], 0, "the second session sent blobs again: {again}");
}

#[test]
fn executors_as_root_only_when_allowed() {
    if !root() {
        eprintln!("skipped: the server must run as root to refuse root executors");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(GL)
        .args(["serve", "--listen", "127.0.0.1:0", "--confine-off", "all", "--cache-dir"])
        .arg(dir.path().join("c"))
        .env_remove("GPULESS_ALLOW_ROOT_EXECUTORS")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("executors would run as root"), "{err}");
    let out = Command::new(GL)
        .args(["serve", "--listen", "127.0.0.1:0", "--executor-user", "root", "--cache-dir"])
        .arg(dir.path().join("c"))
        .env_remove("GPULESS_ALLOW_ROOT_EXECUTORS")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("confine.user is root"), "{err}");
    // Allowed: the server starts (and is ended here).
    let (dir2, _) = stand_in();
    let s = Server::start(dir2.path(), dir2.path(), &["--confine-off", "all", "--allow-root-executors"], &[]);
    let pid = executor(&s);
    assert_eq!(status_field(pid, "Seccomp:"), "0");
}
