//! Cached-trace execution (issue 20) end to end on the stand-in driver: a real `gpuless serve
//! --cached-execution on`, its executor and a program under `gpuless run --remote`.
//! `recorder/tests/fake/pieces.c` repeats an upload, four launches and a download with new
//! bytes at every inference, changes the factor every 6 inferences and the buffer every 4, and
//! takes a data-dependent branch: its output must be the native one, with repeated shapes of
//! pieces launched as graphs whose nodes take each inference's addresses and parameters (the
//! stand-in's graphs run copy and kernel nodes, so a graph that dropped the new bytes, kept an
//! old address or factor, or returned an old result would change the output), new ones eager,
//! and a second session of the same program capturing at first sight what the first saw
//! repeat. Pieces exactly equal to the captured one go from the client by reference (a key and
//! the upload), not as records; pieces the executor has not seen repeat run as their records
//! arrive.

mod serve_harness;
mod support;

use std::process::Command;

use serve_harness::{run_client, wait_until, Server};

fn count(stats: &serde_json::Value, key: &str) -> u64 {
    stats[key].as_u64().unwrap_or_else(|| panic!("no {key} in {stats}"))
}

/// What the executor's rule makes of `pieces.c`'s output (its lines name each inference's
/// buffer and factor, and its branches): the pieces of each shape in order, as (exact identity),
/// the main one (upload, four launches, download) and the branch (five launches, download).
fn shapes(out: &str) -> [Vec<String>; 2] {
    let (mut main, mut branch) = (Vec::new(), Vec::new());
    for l in out.lines().filter(|l| l.starts_with("inference ")) {
        let w: Vec<&str> = l.split_whitespace().collect();
        main.push(format!("{} {}", w[3], w[5]));
        if l.contains(" branch ") {
            branch.push(w[3].to_string());
        }
    }
    [main, branch]
}

/// The counts a session should report for pieces of two shapes, each a list of exact
/// identities in order: `captured_at` is the appearance captured (2 in a first session: seen
/// twice first; 0 when an earlier session kept the shape). Graph launches are the appearances
/// after it; those exactly equal to the captured one go by reference.
fn expected(shapes: &[Vec<String>; 2], captured_at: usize) -> (u64, u64, u64, u64) {
    let (mut eager, mut captured, mut graph, mut refs) = (0, 0, 0, 0);
    for s in shapes {
        eager += s.len().min(captured_at) as u64;
        if let Some(c) = s.get(captured_at) {
            captured += 1;
            graph += (s.len() - captured_at - 1) as u64;
            refs += s[captured_at + 1..].iter().filter(|x| *x == c).count() as u64;
        }
    }
    (eager, captured, graph, refs)
}

#[test]
fn repeated_pieces_run_as_graphs_with_the_native_output() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "pieces", &["-lcuda"]);
    let native = Command::new(&prog).env("LD_LIBRARY_PATH", &libdir).output().unwrap();
    assert!(native.status.success(), "natively: {native:?}");
    let want = String::from_utf8_lossy(&native.stdout).into_owned();
    let branches: u64 = want.lines().find_map(|l| l.strip_prefix("branches ")).unwrap().parse().unwrap();
    assert!((3..24).contains(&branches), "the branch runs in some inferences, not all:\n{want}");
    let pieces = 24 + branches;
    let shapes = shapes(&want);

    let srv = Server::start(dir.path(), &libdir, &["--cached-execution", "on", "--cached-hold", "always"], &[]);
    let first = run_client(&srv, &prog);
    assert!(first.ok, "stderr:\n{}\nserver: {}", first.stderr, std::fs::read_to_string(&srv._log).unwrap_or_default());
    assert_eq!(first.stdout, want, "remote output differs from native; stderr:\n{}", first.stderr);
    let s = first.stats();
    // Two shapes of 6 records: the main piece (whatever its buffer and factor) and the
    // branch's. Each runs as it comes the first two times (the second makes it a template), is
    // held and captured the third time, then relaunched, its nodes given each inference's
    // addresses and factor: the output would differ if a node kept an old one.
    let (eager, captured, graph, refs) = expected(&shapes, 2);
    assert_eq!((eager, captured, graph), (4, 2, pieces - 6));
    assert_eq!(count(&s, "pieces_captured"), captured, "{s}");
    let log = || std::fs::read_to_string(&srv._log).unwrap_or_default();
    assert_eq!(count(&s, "pieces_eager"), eager, "{s}\nserver: {}", log());
    assert_eq!(count(&s, "pieces_graph"), graph, "{s}");
    assert_eq!(count(&s, "records_graph"), 6 * (pieces - 4), "{s}");
    // Once the executor said it holds a piece, the client sends the repetitions exactly equal
    // to it by reference (a key and the inference's upload); the others go as records.
    assert!(refs > 0 && refs < graph, "{refs} of {graph}");
    assert_eq!(count(&s, "pieces_by_reference"), refs, "{s}");
    assert_eq!(count(&s, "records_by_reference"), 6 * refs, "{s}");
    wait_until(
        || srv.metric("gpuless_piece_runs_total{run=\"graph\"}") == graph as f64,
        "the graph runs reach the metrics",
    );
    assert_eq!(srv.metric("gpuless_piece_runs_total{run=\"capture\"}"), 2.0);
    assert_eq!(srv.metric("gpuless_piece_runs_total{run=\"eager\"}"), 4.0);

    // The same program again: the server kept the shapes that repeated, so the second session
    // holds and captures each the first time it sees it.
    let second = run_client(&srv, &prog);
    assert!(second.ok, "stderr:\n{}", second.stderr);
    assert_eq!(second.stdout, want);
    let s2 = second.stats();
    let (_, _, graph2, refs2) = expected(&shapes, 0);
    assert_eq!((count(&s2, "pieces_eager"), count(&s2, "pieces_captured")), (0, 2), "{s2}");
    assert_eq!(count(&s2, "pieces_graph"), graph2, "{s2}");
    assert_eq!(count(&s2, "pieces_by_reference"), refs2, "{s2}");
    // A flusher that sends 1 µs after a record never cuts a piece the client is building: the
    // client's pieces stay the executor's (their keys once differed when it did).
    let third = serve_harness::run_client_env(&srv, &prog, &[("GPULESS_REMOTE_FLUSH_US", "1")]);
    assert_eq!(third.stdout, want, "stderr:\n{}", third.stderr);
    let s3 = third.stats();
    assert_eq!((count(&s3, "pieces_eager"), count(&s3, "pieces_by_reference")), (0, refs2), "{s3}");
    assert!(
        count(&s2, "bytes_up") < count(&s, "bytes_up"),
        "fewer bytes up when pieces go by reference from their second appearance: {s2} vs {s}"
    );
}

#[test]
fn holding_only_where_no_idle_gpu_waits_for_the_piece() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "pieces", &["-lcuda"]);
    let native = Command::new(&prog).env("LD_LIBRARY_PATH", &libdir).output().unwrap();
    let want = String::from_utf8_lossy(&native.stdout).into_owned();
    let branches: u64 = want.lines().find_map(|l| l.strip_prefix("branches ")).unwrap().parse().unwrap();
    let pieces = 24 + branches;
    // The stand-in's streams are idle (its work is done when a call returns). `busy`, the
    // default, holds a piece only when the records that complete it came in the same segment
    // (the executor cuts a whole segment before any of it runs, so holding delays nothing).
    // A client that sends its records only with its waits (no flusher) hands every piece over
    // whole: held as `always` holds them.
    let srv = Server::start(dir.path(), &libdir, &["--cached-execution", "on"], &[]);
    let whole = serve_harness::run_client_env(&srv, &prog, &[("GPULESS_REMOTE_FLUSH_US", "0")]);
    assert_eq!(whole.stdout, want, "stderr:\n{}", whole.stderr);
    let s = whole.stats();
    assert_eq!((count(&s, "pieces_captured"), count(&s, "pieces_eager")), (2, 4), "{s}");
    assert_eq!(count(&s, "pieces_graph"), pieces - 6, "{s}");
    drop(srv);
    // A client that sends each record as it comes: no piece arrives whole, none is held, so
    // nothing is captured and everything runs as it comes.
    let srv = Server::start(dir.path(), &libdir, &["--cached-execution", "on"], &[]);
    let trickle = serve_harness::run_client_env(&srv, &prog, &[("GPULESS_REMOTE_FLUSH_US", "1")]);
    assert_eq!(trickle.stdout, want, "stderr:\n{}", trickle.stderr);
    let s = trickle.stats();
    let (graph, captured, eager) = (count(&s, "pieces_graph"), count(&s, "pieces_captured"), count(&s, "pieces_eager"));
    assert!(captured <= 2 && graph + captured + eager == pieces, "{s}");
    drop(srv);
    // A stand-in whose streams stay busy: `busy` holds as `always` does.
    let busy = tempfile::tempdir().unwrap();
    let srv = Server::start(busy.path(), &libdir, &["--cached-execution", "on"], &[("FAKE_CUDA_STREAM_BUSY", "1")]);
    let ran = run_client(&srv, &prog);
    assert_eq!(ran.stdout, want, "stderr:\n{}", ran.stderr);
    let s = ran.stats();
    assert_eq!((count(&s, "pieces_captured"), count(&s, "pieces_eager")), (2, 4), "{s}");
    assert_eq!(count(&s, "pieces_graph"), pieces - 6, "{s}");
}

#[test]
fn without_cached_execution_every_piece_runs_eagerly() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "pieces", &["-lcuda"]);
    let native = Command::new(&prog).env("LD_LIBRARY_PATH", &libdir).output().unwrap();
    let srv = Server::start(dir.path(), &libdir, &[], &[]);
    let ran = run_client(&srv, &prog);
    assert!(ran.ok, "stderr:\n{}", ran.stderr);
    assert_eq!(ran.stdout, String::from_utf8_lossy(&native.stdout));
    let s = ran.stats();
    for k in ["pieces_graph", "pieces_captured", "pieces_eager", "records_graph", "pieces_by_reference"] {
        assert_eq!(count(&s, k), 0, "{k}: {s}");
    }
}

#[test]
fn a_piece_by_reference_the_session_does_not_hold_ends_that_session_only() {
    use gpuless_traces::protocol::message::code;
    use gpuless_traces::protocol::piece::PieceRef;
    use gpuless_traces::protocol::Message;
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "pieces", &["-lcuda"]);
    for flags in [&["--cached-execution", "on"][..], &[]] {
        let srv = Server::start(dir.path(), &libdir, flags, &[]);
        let mut c = serve_harness::connect(&srv);
        c.handshake(&serve_harness::hello("")).unwrap();
        let r = PieceRef { key: gpuless_traces::Hash128(42), first_seq: 1, records: 6, payloads: Vec::new() };
        c.send(&Message::Piece(r)).unwrap();
        c.flush().unwrap();
        let (code, message) = serve_harness::session_error(&mut c);
        assert_eq!(code, code::BAD_MESSAGE, "{message}");
        assert!(message.contains("by reference"), "{message}");
        // The server goes on serving.
        let ran = run_client(&srv, &prog);
        assert!(ran.ok, "stderr:\n{}", ran.stderr);
    }
}

/// `pieces.c` built in `dir` and recorded on the stand-in: (the stand-in's directory, the trace,
/// what the program printed).
fn recorded(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let (libdir, prog) = support::build_program(dir, "pieces", &["-lcuda"]);
    let trace = dir.join("pieces.gl");
    let rec = Command::new(&prog)
        .env("LD_LIBRARY_PATH", &libdir)
        .env("LD_PRELOAD", support::common::recorder_lib())
        .env("GPULESS_TRACE", &trace)
        .output()
        .unwrap();
    assert!(rec.status.success() && trace.is_file(), "recording: {rec:?}");
    (libdir, trace, String::from_utf8_lossy(&rec.stdout).into_owned())
}

#[test]
fn a_recording_replayed_remotely_with_cached_execution_verifies_every_result() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, trace, _) = recorded(dir.path());
    let srv = Server::start(dir.path(), &libdir, &["--cached-execution", "on", "--cached-hold", "always"], &[]);
    // Every download of the 24 inferences (and 7 branches) is compared with the recording's
    // hash, those the graphs returned included; the second session captures at first sight.
    for (session, captured_first) in [(1, false), (2, true)] {
        let (code, v, err) = serve_harness::remote_replay(&srv.tcp, &trace, &[]);
        assert_eq!(code, 0, "session {session}: {v}\n{err}");
        assert_eq!(v["mismatches"].as_array().map(Vec::len), Some(0), "{v}");
        assert_eq!(v["results_verified"].as_u64(), Some(31), "{v}");
        let p = &v["pieces"];
        assert!(p["graph"].as_u64() > Some(20), "session {session}: {v}");
        assert_eq!(p["eager"].as_u64() == Some(0), captured_first, "session {session}: {v}");
    }
}

/// A server's default (`cached_execution = "auto"`) runs the repeated pieces of a client that
/// sends whole segments (`replay --remote`) as graphs, and a live program's record by record, as
/// without cached execution; `off` runs none.
#[test]
fn by_default_a_replay_runs_repeated_pieces_as_graphs_and_a_live_program_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, trace, _) = recorded(dir.path());
    let prog = dir.path().join("pieces");
    let srv = Server::start(dir.path(), &libdir, &[], &[]);
    let (code, v, err) = serve_harness::remote_replay(&srv.tcp, &trace, &[]);
    assert_eq!(code, 0, "{v}\n{err}");
    assert_eq!((v["results_verified"].as_u64(), v["mismatches"].as_array().map(Vec::len)), (Some(31), Some(0)), "{v}");
    assert!(v["pieces"]["graph"].as_u64() > Some(20), "{v}");
    let live = run_client(&srv, &prog);
    assert!(live.ok, "stderr:\n{}", live.stderr);
    let s = live.stats();
    for k in ["pieces_graph", "pieces_captured", "pieces_eager", "pieces_by_reference"] {
        assert_eq!(count(&s, k), 0, "{k}: {s}");
    }
    drop(srv);
    let off = tempfile::tempdir().unwrap();
    let srv = Server::start(off.path(), &libdir, &["--cached-execution", "off"], &[]);
    let (code, v, err) = serve_harness::remote_replay(&srv.tcp, &trace, &[]);
    assert_eq!(code, 0, "{v}\n{err}");
    assert_eq!(v["pieces"]["graph"].as_u64(), Some(0), "{v}");
    assert_eq!(v["results_verified"].as_u64(), Some(31), "{v}");
}

#[test]
fn analyze_pieces_of_a_recording_predicts_what_the_server_runs_as_graphs() {
    let dir = tempfile::tempdir().unwrap();
    let (_, trace, want) = recorded(dir.path());
    let branches: u64 = want.lines().find_map(|l| l.strip_prefix("branches ")).unwrap().parse().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gpuless"))
        .args(["analyze", "--pieces", "--json", "--no-progress"])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &v["pieces"];
    let n = |k: &str| p[k].as_u64().unwrap_or_else(|| panic!("no {k} in {p}"));
    // The main piece at 4 buffer-and-factor combinations, the branch at 2 buffers: 2 shapes.
    assert_eq!((n("shapes"), n("pieces_long_enough")), (2, 24 + branches), "{p}");
    assert!(n("keys") > 2, "{p}");
    let c = &p["counts"];
    assert_eq!(c["captured"].as_u64(), Some(2), "{p}");
    assert_eq!(c["graph"].as_u64(), Some(24 + branches - 6), "{p}");
    assert_eq!(p["ended_by"][0][0].as_str(), Some("cuStreamSynchronize"), "{p}");
    // The table says the same.
    let text = Command::new(env!("CARGO_BIN_EXE_gpuless")).args(["analyze", "--pieces"]).arg(&trace).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(&format!("{} by graph, 2 captured", 24 + branches - 6)), "{text}");
}

/// What cached execution learned of a program is the tenant's: another tenant's first session
/// of the same program starts from nothing (its repeated pieces run eagerly twice before they
/// are captured), while the first tenant's next session captures each the first time.
#[test]
fn what_one_tenant_taught_the_server_is_not_another_tenants() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "pieces", &["-lcuda"]);
    let native = Command::new(&prog).env("LD_LIBRARY_PATH", &libdir).output().unwrap();
    let want = String::from_utf8_lossy(&native.stdout).into_owned();
    let tenants = support::two_tenants(dir.path());
    let srv = Server::start(
        dir.path(),
        &libdir,
        &["--cached-execution", "on", "--cached-hold", "always", "--tenants-file", &tenants],
        &[],
    );
    let run_as = |token: &str| {
        let ran = serve_harness::run_client_env(&srv, &prog, &[("GPULESS_TOKEN", token)]);
        assert!(ran.ok && ran.stdout == want, "stderr:\n{}", ran.stderr);
        ran.stats()
    };
    let first = run_as("token-a");
    assert_eq!(count(&first, "pieces_eager"), 4, "{first}");
    let other = run_as("token-b");
    assert_eq!(count(&other, "pieces_eager"), 4, "bob starts from nothing: {other}");
    let again = run_as("token-a");
    assert_eq!((count(&again, "pieces_eager"), count(&again, "pieces_captured")), (0, 2), "{again}");
}
