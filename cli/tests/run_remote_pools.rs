//! Memory pools in client mode (issue 35), through a real `gpuless serve` on the stand-in
//! driver: `recorder/tests/fake/pools.c` allocates from the default pool and from a pool of its
//! own, runs a kernel on pool memory and reads what the pools report. The arena serves the
//! allocations; the client's books (`recorder/src/pools.rs`) answer used and reserved memory as
//! the driver does for memory it hands out itself. `graph_alloc.c` captures a stream-ordered
//! allocation and its free into a graph: the arena serves it too, and the executor keeps the
//! memory for the graph's launches. `graph_mem.c` builds a graph with memory nodes by hand: the
//! client chooses the allocation's address, the executor maps it and adds empty nodes.

mod serve_harness;
mod support;

use serve_harness::{run_client, run_program, Server};

#[test]
fn pools_allocate_and_report_their_memory_as_the_driver_does() {
    let ran = run_program("pools");
    ran.has("default pool used: 8192");
    ran.has("default pool after frees: used 0 reserved 0 high 8192");
    ran.has("threshold: 1048576");
    ran.has("kernel on pool memory: 4 252");
    ran.has("pool used: 256");
    ran.has("pool after free: used 0 reserved 256");
    ran.has("pool after trim: reserved 0");
    ran.has("used high after reset: 0; reset to 1: 1");
    ran.has("current is the created pool: 1");
    ran.has("current pool used: 4096");
    ran.has("done");
}

#[test]
fn stream_ordered_allocation_captured_into_a_graph_runs_at_every_launch() {
    let ran = run_program("graph_alloc");
    ran.has("launch 0: 0 4 60");
    ran.has("launch 1: 0 4 60");
    ran.has("captured nodes: 6, allocation 1, free 1");
    ran.has("allocation node: 64 bytes at the allocation's address 1");
    ran.has("free node frees it: 1");
    ran.has("later allocation elsewhere: 1");
    ran.has("done");
}

#[test]
fn graph_memory_nodes_built_by_hand_run_at_every_launch() {
    let ran = run_program("graph_mem");
    ran.has("allocation address given: 1");
    ran.has("launch 0: 0 3 45");
    ran.has("launch 1: 0 3 45");
    ran.has("later allocation elsewhere: 1");
    ran.has("node parameters: allocation 1, free 1");
    ran.has("used after the launches: nonzero");
    ran.has("allocation after the free reuses the address: 1");
    ran.has("second graph's address differs: 1");
    ran.has("freed outside the graph, launched again, freed async: ok");
    ran.has("after destroy and trim: used 0 reserved 0");
    ran.has("done");
}

#[test]
fn conditional_nodes_and_their_body_graphs_run_on_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "conditional", &["-l:libcuda.so.1"]);
    let srv = Server::start(dir.path(), &libdir, &[], &[]);
    let ran = run_client(&srv, &prog);
    let (stdout, stderr) = (&ran.stdout, &ran.stderr);
    assert!(ran.ok, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let has = |line: &str| assert!(stdout.lines().any(|l| l == line), "no `{line}` in:\n{stdout}\n{stderr}");
    has("bodies given: 1");
    has("if (1) body ran: 5 35");
    has("if (0) body did not: 1 7");
    has("done");
    assert!(!stderr.contains("not supported"), "{stderr}");

    // Recorded on the stand-in (handles and body graphs are the driver's), replayed with every
    // result verified: the bodies map to the replay's, the handles are the recorded ones.
    let trace = dir.path().join("c.gl");
    let rec_out = support::record(&prog, &libdir, &trace, &[]);
    assert!(rec_out.contains("if (1) body ran: 5 35"), "{rec_out}");
    let (code, report, shown) = support::replay_json(&libdir, &trace, &[]);
    assert_eq!(code, 0, "{shown}");
    assert_eq!(report["mismatches"], serde_json::json!([]), "{shown}");
    assert!(report["results_verified"].as_u64().unwrap_or(0) >= 2, "{shown}");
    let dry = std::process::Command::new(env!("CARGO_BIN_EXE_gpuless"))
        .args(["replay", "--dry-run"])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(dry.status.success(), "{dry:?}");
}
