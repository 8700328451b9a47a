use super::view::Step;
use super::*;

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn binds(p: &Plan) -> Vec<(String, String, bool)> {
    p.view
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Bind(src, dst, ro, _) => {
                Some((src.to_string_lossy().into_owned(), dst.to_string_lossy().into_owned(), *ro))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn root_executors_need_allow_root() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("c");
    let exe = std::env::current_exe().unwrap();
    let off = ConfineConfig { enabled: false, ..Default::default() };
    assert!(matches!(Plan::new(&off, &exe, &[&cache]), Err(ConfineError::Root(_))));
    let as_root = ConfineConfig { user: "root".into(), ..Default::default() };
    assert!(matches!(Plan::new(&as_root, &exe, &[&cache]), Err(ConfineError::Root(_))));
    let allowed = ConfineConfig { user: "root".into(), allow_root: true, ..Default::default() };
    assert!(Plan::new(&allowed, &exe, &[&cache]).unwrap().switch.is_none());
    let missing = ConfineConfig { user: "no-such-user-gpuless".into(), ..Default::default() };
    assert!(matches!(Plan::new(&missing, &exe, &[&cache]), Err(ConfineError::NoUser(_))));
}

#[test]
fn the_view_holds_the_cache_and_the_binary_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache/memory");
    let exe = std::env::current_exe().unwrap();
    let p = Plan::new(&ConfineConfig::default(), &exe, &[&cache]).unwrap();
    let base = p.view.base.as_ref().unwrap().to_string_lossy().into_owned();
    let b = binds(&p);
    let exe_s = exe.to_string_lossy().into_owned();
    // The binary, itself or a directory above it (LD_LIBRARY_PATH may name one), read-only.
    assert!(b.iter().any(|(s, d, ro)| exe_s.starts_with(s.as_str()) && d.ends_with(s.as_str()) && *ro), "{b:?}");
    let cache_s = std::fs::canonicalize(&cache).unwrap().to_string_lossy().into_owned();
    // The server writes the cache; executors only read it.
    assert!(b.iter().any(|(s, d, ro)| *s == cache_s && d.starts_with(&base) && *ro), "{b:?}");
    // Every destination is under the view's root, and nothing of the host's home is in view.
    assert!(b.iter().all(|(_, d, _)| d.starts_with(&base)));
    assert!(!b.iter().any(|(s, _, _)| s == "/root" || s == "/home" || s == "/"));
    // The private /tmp comes before the cache bound on top of it.
    let tmp = p.view.steps.iter().position(|s| matches!(s, Step::Tmpfs(d, _) if d.to_string_lossy().ends_with("/tmp")));
    let at = p.view.steps.iter().position(|s| matches!(s, Step::Bind(src, ..) if src.to_string_lossy() == cache_s));
    assert!(tmp.unwrap() < at.unwrap());
    if root() {
        // The cache stays the server's: executors cannot write it.
        use std::os::unix::fs::MetadataExt;
        assert_eq!(std::fs::metadata(&cache).unwrap().uid(), 0);
    }
}

#[test]
fn the_environment_keeps_only_the_drivers_and_gpulesss_variables() {
    let env = kept_env(&["MY_VAR".to_string()]);
    for (k, _) in &env {
        let k = k.to_string_lossy();
        assert!(
            KEPT_NAMES.contains(&k.as_ref()) || KEPT_PREFIXES.iter().any(|p| k.starts_with(p)) || k == "MY_VAR",
            "{k}"
        );
    }
    assert!(!env.iter().any(|(k, _)| k == "HOME"));
}

/// In a child process of its own (the filter cannot be removed): threads still start; a new
/// process, an exec, an internet socket and a signal to another process are refused with EPERM,
/// each said on stderr; a signal to itself is allowed.
#[cfg(target_arch = "x86_64")]
#[test]
fn the_filter_refuses_what_it_does_not_list_and_keeps_threads() {
    let errno = || std::io::Error::last_os_error().raw_os_error();
    if std::env::var_os("GPULESS_SECCOMP_CHILD").is_some() {
        let n = seccomp::install().expect("install the filter");
        assert_eq!(std::thread::spawn(|| 7).join().unwrap(), 7);
        // SAFETY: plain system calls; fork's child (were it made) exits at once.
        unsafe {
            let pid = libc::fork();
            if pid == 0 {
                libc::_exit(0);
            }
            assert!(pid < 0 && errno() == Some(libc::EPERM), "fork: {pid}");
            let argv = [c"/bin/true".as_ptr(), std::ptr::null()];
            assert_eq!(libc::execv(c"/bin/true".as_ptr(), argv.as_ptr()), -1);
            assert_eq!(errno(), Some(libc::EPERM));
            assert!(libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) < 0 && errno() == Some(libc::EPERM));
            assert!(libc::kill(1, 0) != 0 && errno() == Some(libc::EPERM));
            assert_eq!(libc::kill(libc::getpid(), 0), 0);
        }
        println!("CHILD-OK {n}");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "server::confine::tests::the_filter_refuses_what_it_does_not_list_and_keeps_threads",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("GPULESS_SECCOMP_CHILD", "1")
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && stdout.contains("CHILD-OK"), "stdout:\n{stdout}\nstderr:\n{stderr}");
    for nr in [libc::SYS_clone, libc::SYS_execve, libc::SYS_socket, libc::SYS_kill] {
        assert!(
            stderr.contains(&format!("system call {nr} refused by the executor's seccomp filter")),
            "{nr} not said: {stderr}"
        );
    }
    // Each is said once, however often it is refused.
    assert_eq!(stderr.matches(&format!("system call {} refused", libc::SYS_kill)).count(), 1);
}
