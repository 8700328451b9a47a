//! The manager's bookkeeping of warm functions, on executors that are only their control
//! channels (no process): sessions ended at Done, executors kept after a Warm and taken by
//! function and spec, the cap, the keep-alive, the drain, the metrics.

use super::*;
use gpuless_traces::protocol::message::Hello;
use gpuless_traces::protocol::PartitionRequest;

/// A pid no process has (above the kernel's largest): nothing here may signal it anyway.
const NO_PID: u32 = 9_999_999;

fn manager(dir: &std::path::Path, keep_alive_s: f64, max: usize) -> Arc<Manager> {
    let mut cfg = Config {
        function_keep_alive_s: keep_alive_s,
        warm_functions_max: max,
        pool: Default::default(),
        ..Config::default()
    };
    cfg.cache.memory_dir = dir.join("mem").display().to_string();
    cfg.cache.disk_dir = dir.join("disk").display().to_string();
    Manager::new(cfg, "/nonexistent/gpuless".into(), HashMap::new()).unwrap()
}

/// An executor of `spec` serving a new session; returns (executor, session, its end of the
/// channel).
fn serving(m: &Manager, spec: &str) -> (u64, u64, Channel) {
    let (chan, theirs) = control::pair().unwrap();
    let mut g = m.lock();
    let (exec, session) = (g.next_id, g.next_id + 1);
    g.next_id += 2;
    g.execs.insert(
        exec,
        Exec {
            gpu: 0,
            more: Vec::new(),
            spec: spec.into(),
            pid: NO_PID,
            state: ExecState::Busy(session),
            channel: Arc::new(chan),
            partition: PartitionInfo::default(),
            device: DeviceDescription::default(),
            kept_as: None,
        },
    );
    g.sessions.insert(
        session,
        SessionEntry {
            spec: spec.into(),
            gpu: 0,
            gpu_index: 0,
            more: Vec::new(),
            tenant: None,
            sms: 0,
            priority: Priority::BestEffort,
            exec,
            started: Instant::now(),
        },
    );
    (exec, session, Channel::from_fd(theirs))
}

/// Whether the executor's end hears the server let it go (its channel closed).
fn let_go(c: &Channel) -> bool {
    matches!(c.recv_timeout(Duration::from_millis(100)), Ok(None))
}

/// Whether nothing was sent and the channel is open: the executor waits on.
fn kept(c: &Channel) -> bool {
    // SAFETY: one valid pollfd; a zero timeout.
    let mut p = libc::pollfd { fd: c.raw(), events: libc::POLLIN, revents: 0 };
    unsafe { libc::poll(&mut p, 1, 0) == 0 }
}

fn state(m: &Manager, id: u64) -> String {
    m.lock().execs.get(&id).map(|e| format!("{:?}", e.state)).unwrap_or_default()
}

/// A Hello of `program`, of a live client (an arena of its own) or not.
fn hello(program: &str, live: bool) -> Hello {
    let (arena_base, arena_size) = if live { (0x6400_0000_0000, 1 << 40) } else { (0, 0) };
    Hello {
        protocol: gpuless_traces::protocol::PROTOCOL_VERSION,
        tool: "test".into(),
        token: String::new(),
        partition: PartitionRequest::Whole,
        priority: Priority::BestEffort,
        arena_base,
        arena_size,
        recorded_sm: 90,
        program: program.into(),
        whole_segments: false,
        gpu: None,
        devices: 0,
        more_gpus: Vec::new(),
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

#[test]
fn a_function_executor_is_kept_and_taken_by_function_and_spec() {
    let t = tempfile::tempdir().unwrap();
    let m = manager(t.path(), 60.0, 4);
    let (a, sa, ca) = serving(&m, "whole");
    assert_eq!(m.sessions(), 1);
    assert_eq!(m.finished(a), sa);
    assert_eq!(m.sessions(), 0, "the session ends at Done, before the executor exits");
    assert_eq!(state(&m, a), "Finished");
    m.warm(a, "resnet50");
    // Kept as the tenant "" 's function (its session was admitted without a key).
    let key = crate::server::warm::key("", "resnet50");
    assert_eq!(state(&m, a), format!("Function({key:?})"));
    assert!(kept(&ca));
    m.refresh_metrics();
    let text = m.metrics.render();
    assert!(text.contains("gpuless_warm_functions{function=\"resnet50\"} 1"), "{text}");
    assert!(text.contains("gpuless_executors{kind=\"function\"} 1"), "{text}");

    // Another function, another spec, another tenant: not this executor.
    assert!(m.take_warm("whole", 0, 100, &crate::server::warm::key("", "bert"), false).is_none());
    assert!(m.take_warm("sms:16", 0, 100, &key, false).is_none());
    assert!(m.take_warm("whole", 0, 100, &crate::server::warm::key("bob", "resnet50"), false).is_none());
    // A session of the function, through admission: served warm.
    let g = rt().block_on(m.admit(&admit_request(Some(&key), None))).unwrap();
    assert_eq!(g.exec, a);
    assert_eq!(state(&m, a), format!("Busy({})", g.session));
    assert_eq!(m.lock().sessions.get(&g.session).map(|s| s.exec), Some(a));
    m.refresh_metrics();
    let text = m.metrics.render();
    assert!(text.contains("gpuless_warm_functions{function=\"resnet50\"} 0"), "no longer warm: {text}");
    assert!(text.contains("gpuless_function_sessions_total{function=\"resnet50\",start=\"warm\"} 1"), "{text}");
    // Its second session ends and it is kept again.
    m.finished(a);
    m.warm(a, "resnet50");
    assert_eq!(m.lock().warm.len(), 1);
    assert!(kept(&ca));
    // The executor exits (expired on its own, say): it leaves the warm set with it.
    m.lock().warm.remove(a);
    assert!(m.take_warm("whole", 0, 101, &key, false).is_none());
}

#[test]
fn the_least_recently_used_is_let_go_at_the_cap_and_all_at_the_drain() {
    let t = tempfile::tempdir().unwrap();
    let m = manager(t.path(), 60.0, 2);
    let mut ends = Vec::new();
    for f in ["a", "b", "c"] {
        let (id, _, c) = serving(&m, "whole");
        m.finished(id);
        m.warm(id, f);
        ends.push((id, c));
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(let_go(&ends[0].1), "the least recently used went at the cap");
    assert!(kept(&ends[1].1) && kept(&ends[2].1));
    let (b, c) = (crate::server::warm::key("", "b"), crate::server::warm::key("", "c"));
    assert_eq!(m.lock().warm.counts(), std::collections::BTreeMap::from([(b, 1), (c, 1)]));
    // An executor that says Warm without a finished session is let go, not kept.
    let (busy, _, cb) = serving(&m, "whole");
    m.warm(busy, "d");
    assert!(let_go(&cb));
    assert_eq!(m.lock().warm.len(), 2);
    m.drain();
    assert!(let_go(&ends[1].1) && let_go(&ends[2].1));
    assert!(m.lock().warm.is_empty());
    // Draining, a Warm is let go at once.
    let (late, _, cl) = serving(&m, "whole");
    m.finished(late);
    m.warm(late, "e");
    assert!(let_go(&cl));
}

#[test]
fn unused_executors_expire_and_keep_alive_off_keeps_none() {
    let t = tempfile::tempdir().unwrap();
    let m = manager(t.path(), 0.05, 4);
    assert_eq!(m.keep_alive_ms(&hello("function:f", false)), 50);
    assert_eq!(m.keep_alive_ms(&hello("python train.py", false)), 0, "only a function session's executor stays");
    let (id, _, c) = serving(&m, "whole");
    m.finished(id);
    m.warm(id, "f");
    assert!(kept(&c));
    std::thread::sleep(Duration::from_millis(80));
    assert!(m.take_warm("whole", 0, 100, "f", false).is_none(), "expired: not handed out");
    assert!(let_go(&c), "and let go");
    m.refresh_metrics();
    assert!(m.metrics.render().contains("gpuless_warm_functions{function=\"f\"} 0"));

    let off = manager(t.path(), 0.0, 4);
    assert_eq!(off.keep_alive_ms(&hello("function:f", false)), 0);
    let (id, _, c) = serving(&off, "whole");
    off.finished(id);
    off.warm(id, "f");
    assert!(let_go(&c));
    let none = manager(t.path(), 60.0, 0);
    assert_eq!(none.keep_alive_ms(&hello("function:f", false)), 0, "a cap of 0 turns it off too");
}

#[test]
fn a_program_executor_is_kept_with_its_uploads_and_taken_by_program_and_spec() {
    let t = tempfile::tempdir().unwrap();
    let mut cfg =
        Config { program_keep_alive_s: 60.0, warm_programs_max: 1, pool: Default::default(), ..Config::default() };
    cfg.cache.memory_dir = t.path().join("mem").display().to_string();
    cfg.cache.disk_dir = t.path().join("disk").display().to_string();
    let m = Manager::new(cfg, "/nonexistent/gpuless".into(), HashMap::new()).unwrap();
    // Only a live client's session of a program, and not a function's, keeps its executor.
    let live = hello("python run.py", true);
    assert_eq!(m.warm_program(&live), Some("python run.py"));
    assert_eq!(m.keep_alive_ms(&live), 60_000);
    assert_eq!(m.warm_program(&hello("python run.py", false)), None, "a session without an arena");
    assert_eq!(m.warm_program(&hello("function:f", true)), None);
    assert_eq!(m.keep_alive_ms(&hello("replay", false)), 0);
    let (a, _, ca) = serving(&m, "whole");
    m.finished(a);
    m.keep_program(a, "python run.py", 100 << 20);
    // Kept as the program of the tenant "" (the session had no key: admitted before).
    assert_eq!(state(&m, a), format!("Program({:?}, {})", "\u{1f}python run.py", 100 << 20));
    assert!(kept(&ca));
    m.refresh_metrics();
    let text = m.metrics.render();
    assert!(text.contains("gpuless_warm_programs 1"), "{text}");
    assert!(text.contains(&format!("gpuless_warm_resident_bytes {}", 100 << 20)), "{text}");
    assert!(text.contains("gpuless_executors{kind=\"program\"} 1"), "{text}");
    // Not for another program, nor as a function of the same name.
    assert!(m.take_warm("whole", 0, 100, "python other.py", true).is_none());
    assert!(m.take_warm("whole", 0, 100, "python run.py", false).is_none());
    // Another tenant's session of the program: not served by it.
    assert!(m.take_warm("whole", 0, 100, &m.warm_key(&live, "bob").unwrap(), true).is_none());
    // The next session of the program, through admission: served by it.
    let key = m.warm_key(&live, "").unwrap();
    let g = rt().block_on(m.admit(&admit_request(None, Some(&key)))).unwrap();
    assert_eq!(g.exec, a);
    assert_eq!(m.lock().execs.get(&a).and_then(|e| e.kept_as.clone()), Some(key), "kept as what it was admitted as");
    m.refresh_metrics();
    let text = m.metrics.render();
    assert!(text.contains("gpuless_program_sessions_total{kind=\"warm\"} 1"), "{text}");
    assert!(text.contains("gpuless_warm_programs 0"), "{text}");
    // A second kept executor beyond the cap of 1: the least recently used goes.
    m.finished(a);
    m.keep_program(a, "python run.py", 1);
    let (b, _, cb) = serving(&m, "whole");
    m.finished(b);
    std::thread::sleep(Duration::from_millis(5));
    m.keep_program(b, "python two.py", 2);
    assert!(let_go(&ca) && kept(&cb));
    // One that was not finishing a session is let go; the drain lets every kept one go.
    let (c, _, cc) = serving(&m, "whole");
    m.keep_program(c, "python run.py", 3);
    assert!(let_go(&cc));
    m.drain();
    assert!(let_go(&cb));
}

#[test]
fn kept_executors_beyond_the_memory_bound_go_least_recently_used_first() {
    let t = tempfile::tempdir().unwrap();
    let mut cfg = Config {
        program_keep_alive_s: 60.0,
        warm_programs_max: 8,
        warm_memory_fraction: 0.5,
        pool: Default::default(),
        ..Config::default()
    };
    cfg.cache.memory_dir = t.path().join("mem").display().to_string();
    cfg.cache.disk_dir = t.path().join("disk").display().to_string();
    let m = Manager::new(cfg, "/nonexistent/gpuless".into(), HashMap::new()).unwrap();
    // A GPU of 1,000 bytes: kept executors may hold 500 of them.
    let kept_program = |name: &str, resident: u64| {
        let (id, _, c) = serving(&m, "whole");
        if let Some(e) = m.lock().execs.get_mut(&id) {
            e.device.total_mem = 1000;
        }
        m.finished(id);
        m.keep_program(id, name, resident);
        std::thread::sleep(Duration::from_millis(5));
        (id, c)
    };
    let (_, a) = kept_program("a", 300);
    let (_, b) = kept_program("b", 150);
    assert!(kept(&a) && kept(&b), "450 of 500");
    let (_, c) = kept_program("c", 100);
    assert!(let_go(&a), "550 > 500: the least recently used went");
    assert!(kept(&b) && kept(&c));
    assert_eq!(m.lock().warm_programs.len(), 2);
    // What NVML counts for a process (context and code included) is what it holds: at 450
    // bytes each (every executor here has the same stand-in pid), c (the most recent) stays.
    let pid_b = {
        let g = m.lock();
        g.execs.values().find(|e| matches!(&e.state, ExecState::Program(p, _) if p == "\u{1f}b")).map(|e| e.pid)
    };
    let used = HashMap::from([(pid_b.unwrap(), 450u64)]);
    let mut g = m.lock();
    m.bound_kept_memory(&mut g, &used);
    drop(g);
    assert!(let_go(&b) && kept(&c));
}

/// A request for the whole GPU, latency-critical, announcing `function` or `program`.
fn admit_request<'a>(function: Option<&'a str>, program: Option<&'a str>) -> Request<'a> {
    const WHOLE: &PartitionRequest = &PartitionRequest::Whole;
    Request {
        partition: WHOLE,
        gpu: None,
        devices: 0,
        more_gpus: &[],
        priority: Priority::LatencyCritical,
        function,
        program,
        tenant: None,
    }
}
