//! Warm constants (issue 20) end to end without a GPU: `gpuless serve --program-keep-alive`
//! keeps a live client's executor after its session with the uploads that still hold their
//! blob resident, and the next session of the same program does not copy them again — only
//! while nothing has written the memory since it was taken over. The stand-in program
//! (`recorder/tests/fake/weights.c`) uploads 256 KiB of weights, runs three inferences and reads
//! the weights back: its output must be the native one whether the upload was skipped or not.

mod serve_harness;
mod support;

use std::process::Command;

/// The executor log lines that say what a session found resident.
fn resident_lines(log: &std::path::Path) -> Vec<String> {
    let log = std::fs::read_to_string(log).unwrap_or_default();
    log.lines().filter(|l| l.contains("were resident from the last session")).map(str::to_string).collect()
}

#[test]
fn the_next_session_of_a_program_finds_its_uploads_resident_and_never_a_wrong_byte() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "weights", &["-lcuda"]);
    let native_env = |first: &str, floats: &str| {
        let out = Command::new(&prog)
            .env("LD_LIBRARY_PATH", &libdir)
            .env("WEIGHTS_WRITE_FIRST", first)
            .env("WEIGHTS_FLOATS", floats)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let native = |first: &str| native_env(first, "0");
    let (plain, written, big) = (native("0"), native("1"), native_env("0", "400000"));
    assert!(plain.contains("weights ") && plain == written, "native:\n{plain}\n{written}");
    let srv = serve_harness::Server::start(
        dir.path(),
        &libdir,
        &["--program-keep-alive", "60", "--warm-programs-max", "1"],
        // Code images loaded ahead too: the kept executor loads fresh ones for the next session.
        &[],
    );
    let run_env = |first: &str, floats: &str| {
        let env = [("WEIGHTS_WRITE_FIRST", first), ("WEIGHTS_FLOATS", floats)];
        let ran = serve_harness::run_client_env(&srv, &prog, &env);
        assert!(ran.ok, "stderr:\n{}", ran.stderr);
        ran.stdout
    };
    let run = |first: &str| run_env(first, "0");
    // The first session copies everything and keeps the weights for the next.
    assert_eq!(run("0"), plain);
    let log = std::fs::read_to_string(&srv._log).unwrap_or_default();
    assert!(log.contains("every client is one tenant"), "without tenants the server warns at start:\n{log}");
    let lines = wait_for(&srv._log, 1);
    assert!(lines[0].contains(": 0 uploads (0 bytes) were resident"), "{lines:?}");
    assert!(lines[0].contains("262144 bytes stay resident"), "{lines:?}");
    wait_metric(&srv, "gpuless_warm_programs", 1.0);
    wait_metric(&srv, "gpuless_warm_resident_bytes", 262144.0);
    // The second session of the program is served by that executor: the upload is skipped,
    // and the weights it reads back are the uploaded ones.
    assert_eq!(run("0"), plain);
    let lines = wait_for(&srv._log, 2);
    assert!(lines[1].contains(": 1 uploads (262144 bytes) were resident"), "{lines:?}");
    wait_metric(&srv, "gpuless_resident_skipped_bytes_total", 262144.0);
    // The kept executor loaded the program's code image again while it waited, fresh (the last
    // session's was unloaded), and this session took that load.
    let log = std::fs::read_to_string(&srv._log).unwrap_or_default();
    let images: Vec<&str> = log.lines().filter(|l| l.contains("code images were loaded before")).collect();
    assert!(images.get(1).is_some_and(|l| l.contains(": 1 of 1 code images")), "{images:?}");
    assert_eq!(srv.metric("gpuless_program_sessions_total{kind=\"warm\"}"), 1.0);
    // A session that writes the memory before it uploads: the upload is not skipped, and its
    // output is still the native one (a skipped upload would leave scaled weights).
    assert_eq!(run("1"), written);
    let lines = wait_for(&srv._log, 3);
    wait_metric(&srv, "gpuless_warm_programs", 1.0);
    assert!(lines[2].contains(": 0 uploads (0 bytes) were resident"), "{lines:?}");
    assert!(lines[2].contains("262144 bytes stay resident"), "{lines:?}");
    // Weights of another size at the same address: an allocation with its own backing where
    // the kept one had a shared chunk (the stand-in, like the driver, refuses to map memory
    // twice): the kept memory is let go first, the upload copied; then the default size again,
    // over the kept large allocation.
    assert_eq!(run_env("0", "400000"), big);
    let lines = wait_for(&srv._log, 4);
    assert!(lines[3].contains(": 0 uploads (0 bytes) were resident"), "{lines:?}");
    assert!(lines[3].contains("1600000 bytes stay resident"), "{lines:?}");
    assert_eq!(run("0"), plain);
    let lines = wait_for(&srv._log, 5);
    assert!(lines[4].contains(": 0 uploads (0 bytes) were resident"), "{lines:?}");
    // Another program is not served by the kept executor.
    let (_, other) = support::build_program(dir.path(), "pieces", &["-lcuda"]);
    let ran = serve_harness::run_client(&srv, &other);
    assert!(ran.ok, "{}", ran.stderr);
    assert_eq!(srv.metric("gpuless_program_sessions_total{kind=\"cold\"}"), 2.0, "the first and the other program");
}

/// Waits (up to 20 s) until the server's log has `n` resident lines; returns them.
fn wait_for(log: &std::path::Path, n: usize) -> Vec<String> {
    let t = std::time::Instant::now();
    loop {
        let lines = resident_lines(log);
        if lines.len() >= n || t.elapsed() > std::time::Duration::from_secs(20) {
            assert!(lines.len() >= n, "{n} resident lines expected: {lines:?}");
            return lines;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Waits (up to 20 s) until metric `name` reads `want`.
fn wait_metric(srv: &serve_harness::Server, name: &str, want: f64) {
    let t = std::time::Instant::now();
    while srv.metric(name) != want {
        assert!(t.elapsed() < std::time::Duration::from_secs(20), "{name} is {}, not {want}", srv.metric(name));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Records `weights.c` (with `WEIGHTS_WRITE_FIRST=first`) into `dir/NAME.gl`; returns the
/// stand-in's directory and the trace.
fn record_weights(dir: &std::path::Path, first: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let (libdir, prog) = support::build_program(dir, "weights", &["-lcuda"]);
    let trace = dir.join(format!("w{first}.gl"));
    let out = Command::new(serve_harness::GL)
        .args(["record", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&prog)
        .env("LD_LIBRARY_PATH", &libdir)
        .env("WEIGHTS_WRITE_FIRST", first)
        .env("GPULESS_RECORDER", support::common::recorder_lib())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (libdir, trace)
}

#[test]
fn analyze_says_what_warm_constants_would_keep_and_skip() {
    let dir = tempfile::tempdir().unwrap();
    let survey = |first: &str| {
        let (_, trace) = record_weights(dir.path(), first);
        let out =
            Command::new(serve_harness::GL).args(["analyze", "--resident", "--json"]).arg(&trace).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["resident"].clone()
    };
    // The weights (256 KiB) and three small inputs; the weights would stay and be skipped.
    let s = survey("0");
    assert_eq!(s["uploads"], serde_json::json!([4, 262144 + 3 * 64]), "{s}");
    assert_eq!(s["large_uploads"], serde_json::json!([1, 262144]), "{s}");
    assert_eq!(s["kept"], serde_json::json!([1, 262144]), "{s}");
    assert_eq!(s["skipped"], serde_json::json!([1, 262144]), "{s}");
    assert_eq!(s["first_write"][1], "cuLaunchKernel", "{s}");
    // A launch before the upload: kept, but never skipped.
    let s = survey("1");
    assert_eq!(s["kept"], serde_json::json!([1, 262144]), "{s}");
    assert_eq!(s["skipped"], serde_json::json!([0, 0]), "{s}");
    // In words too.
    let (_, trace) = record_weights(dir.path(), "0");
    let out = Command::new(serve_harness::GL).args(["analyze", "--resident"]).arg(&trace).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("next session      1 uploads not copied (0.3 MB"), "{text}");
}

#[test]
fn replays_of_a_recording_find_its_uploads_resident_and_verify_every_result() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, trace) = record_weights(dir.path(), "0");
    let srv = serve_harness::Server::start(
        dir.path(),
        &libdir,
        &["--program-keep-alive", "60"],
        &[("GPULESS_WARM_IMAGES", "off")],
    );
    for n in 1..=3 {
        let (code, v, err) = serve_harness::remote_replay(&srv.tcp, &trace, &[]);
        assert_eq!(code, 0, "replay {n}: {err}");
        // Every download, the weights read back included, is compared with the recording.
        assert_eq!(v["results_verified"], 4, "replay {n}: {v}");
        assert_eq!(v["mismatches"].as_array().map_or(0, Vec::len), 0, "replay {n}: {v}");
        let lines = wait_for(&srv._log, n);
        let want = if n == 1 { ": 0 uploads (0 bytes)" } else { ": 1 uploads (262144 bytes)" };
        assert!(lines[n - 1].contains(want), "replay {n}: {lines:?}");
    }
}

/// With tenants (`--tenants-file`: each its own token), what one tenant's session leaves on the
/// GPU goes only to that tenant's next session of the program: another tenant's session of the
/// same program copies its uploads itself, and a token that is no tenant's is refused.
#[test]
fn a_program_kept_for_one_tenant_is_not_handed_to_another() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "weights", &["-lcuda"]);
    let out = Command::new(&prog).env("LD_LIBRARY_PATH", &libdir).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let plain = String::from_utf8_lossy(&out.stdout).into_owned();
    let tenants = support::two_tenants(dir.path());
    let srv = serve_harness::Server::start(
        dir.path(),
        &libdir,
        &["--program-keep-alive", "60", "--warm-programs-max", "2", "--tenants-file", &tenants],
        &[],
    );
    let run_as = |token: &str| serve_harness::run_client_env(&srv, &prog, &[("GPULESS_TOKEN", token)]);
    let ran = run_as("token-a");
    assert!(ran.ok && ran.stdout == plain, "stdout:\n{}\nstderr:\n{}", ran.stdout, ran.stderr);
    assert!(wait_for(&srv._log, 1)[0].contains(": 0 uploads (0 bytes) were resident"));
    wait_metric(&srv, "gpuless_warm_programs", 1.0);
    // Bob's session of the same program: not alice's executor; it copies the weights itself.
    let ran = run_as("token-b");
    assert!(ran.ok && ran.stdout == plain, "stderr:\n{}", ran.stderr);
    let lines = wait_for(&srv._log, 2);
    assert!(lines[1].contains(": 0 uploads (0 bytes) were resident"), "{lines:?}");
    wait_metric(&srv, "gpuless_warm_programs", 2.0);
    // Alice's next session: her executor, the weights resident.
    let ran = run_as("token-a");
    assert!(ran.ok && ran.stdout == plain, "stderr:\n{}", ran.stderr);
    let lines = wait_for(&srv._log, 3);
    assert!(lines[2].contains(": 1 uploads (262144 bytes) were resident"), "{lines:?}");
    assert_eq!(srv.metric("gpuless_program_sessions_total{kind=\"warm\"}"), 1.0);
    assert_eq!(srv.metric("gpuless_program_sessions_total{kind=\"cold\"}"), 2.0);
    assert_eq!(srv.metric("gpuless_tenant_sessions_total{tenant=\"alice\"}"), 2.0);
    assert_eq!(srv.metric("gpuless_tenant_sessions_total{tenant=\"bob\"}"), 1.0);
    assert!(!std::fs::read_to_string(&srv._log).unwrap_or_default().contains("every client is one tenant"));
    // No tenant's token, or none: refused, saying so.
    for token in ["token-c", ""] {
        let ran = run_as(token);
        assert!(!ran.ok, "{token:?} was let in: {}", ran.stdout);
        assert!(ran.stderr.contains("token"), "{}", ran.stderr);
    }
}

/// On a server with tenants, an executor of the pool that loaded a program's code image ahead
/// (remembered from alice's sessions) does not hand it to bob's session, whose tenant never
/// sent those bytes: bob's session loads the image from the bytes it sends; alice's next
/// session takes the one loaded ahead.
#[test]
fn a_code_image_loaded_ahead_goes_only_to_a_tenant_that_sent_it() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "weights", &["-lcuda"]);
    let out = Command::new(&prog).env("LD_LIBRARY_PATH", &libdir).output().unwrap();
    let plain = String::from_utf8_lossy(&out.stdout).into_owned();
    let tenants = support::two_tenants(dir.path());
    let srv = serve_harness::Server::start(dir.path(), &libdir, &["--tenants-file", &tenants], &[]);
    let images = || -> Vec<String> {
        let log = std::fs::read_to_string(&srv._log).unwrap_or_default();
        log.lines().filter(|l| l.contains("code images were loaded before")).map(str::to_string).collect()
    };
    // Each session's line is written when its executor has remembered its images: the next
    // executor of the pool, started during the next session, loads them ahead.
    let run_as = |token: &str, n: usize| {
        let ran = serve_harness::run_client_env(&srv, &prog, &[("GPULESS_TOKEN", token)]);
        assert!(ran.ok && ran.stdout == plain, "stderr:\n{}", ran.stderr);
        let t = std::time::Instant::now();
        while images().len() < n {
            assert!(t.elapsed() < std::time::Duration::from_secs(20), "{:?}", images());
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        images()[n - 1].clone()
    };
    run_as("token-a", 1);
    run_as("token-a", 2);
    let bob = run_as("token-b", 3);
    assert!(bob.contains(": 0 of 1 code images") && bob.contains("(1 loaded ahead unused)"), "{:?}", images());
    let alice = run_as("token-a", 4);
    assert!(alice.contains(": 1 of 1 code images"), "{:?}", images());
}
