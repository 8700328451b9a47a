//! `gpuless replay --remote ADDR trace.gl`: the first client of `gpuless serve`. It sends a
//! recorded trace as the live client will — only the calls the server must execute (device
//! queries are answered from the session's device description), in a segment per
//! synchronization point of the `gpuless` policy, blobs by hash with their bytes only where the
//! server misses them — verifies every result the server returns against the recording, and
//! reports round trips, bytes and cache hits beside the replay report.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context};
use gpuless_analyzer::api::{ApiLevel, SyncClass};
use gpuless_analyzer::sync::{Policy, SyncAnalyzer};
use gpuless_replayer::replay::{hot, load, load_calls, load_shared, since_process_start, LoadedTrace};
use gpuless_traces::analysis::call_event;
use gpuless_traces::protocol::{self, Connection, Endpoint, Traffic};
use gpuless_traces::{BlobBytes, CallRecord, Hash128, Value};
use serde::Serialize;

use crate::session;

/// What `gpuless replay --remote` was asked for.
#[derive(Debug, Clone, Default)]
pub struct RemoteArgs {
    /// The server.
    pub addr: String,
    /// `--mig`: a profile, `sms:N` or `whole`.
    pub partition: Option<String>,
    /// `--gpu`: the server's GPU to ask for.
    pub gpu: Option<u32>,
    /// `--token` (else `GPULESS_TOKEN`).
    pub token: Option<String>,
    /// `--best-effort`.
    pub best_effort: bool,
    /// Hot iterations.
    pub iterations: u32,
    /// Print JSON.
    pub json: bool,
    /// Skip comparing results.
    pub no_verify: bool,
    /// `--tls-ca`: the CA file for a `tls://` server (else `GPULESS_TLS_CA`).
    pub tls_ca: Option<std::path::PathBuf>,
}

/// The report of a remote replay.
#[derive(Debug, Default, Serialize)]
pub struct RemoteReport {
    /// The server's session id.
    pub session: u64,
    /// The partition granted, in words.
    pub partition: String,
    /// The device as the session sees it.
    pub device: String,
    /// Records in the trace.
    pub calls: u64,
    /// Records sent (the rest were answered locally).
    pub sent: u64,
    /// Records the server executed.
    pub executed: u64,
    /// Kernel launches on the server.
    pub launches: u64,
    /// Segments sent.
    pub segments: u64,
    /// Results equal to the recording.
    pub results_verified: u64,
    /// Results that differ.
    pub mismatches: Vec<String>,
    /// Results the recording holds no hash for.
    pub results_unverified: u64,
    /// Bytes of device-to-host copies captured into a graph, returned again by later launches
    /// of the graph: the recording hashed the first launch's only.
    pub results_repeated: u64,
    /// Calls that failed on the server.
    pub errors: Vec<String>,
    /// State queries the server answered (event timings, stream and event status, free memory).
    pub queries_answered: u64,
    /// Of those, answered with the status the recording holds.
    pub queries_as_recorded: u64,
    /// State queries the server could not answer (their function is not one it answers).
    pub queries_unanswered: Vec<String>,
    /// Event timings the server measured, in milliseconds, in call order.
    pub event_ms: Vec<f32>,
    /// Seconds from process start to the first result.
    pub first_result_s: Option<f64>,
    /// Seconds from connecting to the end of the set-up (with --iterations) or of the trace.
    pub replay_s: f64,
    /// Seconds from process start to the end.
    pub total_s: f64,
    /// Seconds spent loading the trace's records (its blobs load meanwhile on a thread).
    pub load_s: f64,
    /// Seconds the client waited for its blobs' bytes (read into shared memory for a same-host
    /// server) before it could send what the server lacked; 0 when the server held them all.
    pub blob_wait_s: f64,
    /// What went over the wire.
    pub traffic: Traffic,
    /// Hot replay: per-iteration wall time.
    pub hot: Option<RemoteHot>,
    /// How the server ran the session's pieces (cached-trace execution; all 0 where it is off).
    pub pieces: RemotePieces,
}

/// The server's cached-trace execution for the session (its `Closed` totals).
#[derive(Debug, Default, Serialize)]
pub struct RemotePieces {
    /// Pieces launched as a graph captured before.
    pub graph: u64,
    /// Pieces captured (and launched) at that appearance.
    pub captured: u64,
    /// Pieces run record by record.
    pub eager: u64,
    /// Records the graph launches ran.
    pub records_graph: u64,
}

/// Hot remote replay timing.
#[derive(Debug, Default, Serialize)]
pub struct RemoteHot {
    /// Iterations timed.
    pub iterations: u32,
    /// Records per body.
    pub body_calls: u64,
    /// Median wall time per iteration, ms.
    pub wall_ms_median: f64,
    /// Fastest iteration, ms.
    pub wall_ms_min: f64,
    /// Round trips per iteration.
    pub round_trips_per_iteration: f64,
    /// Bytes up per iteration.
    pub bytes_up_per_iteration: f64,
}

/// Whether the server must see `r`: device and driver queries and client-local calls are
/// answered by the client (from the session's device description; here, from the recording).
fn must_send(r: &CallRecord) -> bool {
    // Runtime and library calls (registrations, cuDNN, cuBLAS) are annotations of the driver
    // calls they make: only driver calls travel.
    match r.function.api() {
        Some(f) => r.level == ApiLevel::Driver && !matches!(f.sync, SyncClass::Local | SyncClass::DeviceQuery),
        None => false,
    }
}

/// The recorded device-to-host result of `r` (a digest or the stored bytes).
fn recorded_result(r: &CallRecord) -> Option<(Hash128, u64)> {
    r.results.iter().find_map(|v| match v {
        Value::Digest(d) | Value::Blob(d) => Some((d.hash, d.len)),
        _ => None,
    })
}

/// The blobs' bytes, read on a thread of their own while the session starts: a client whose
/// blobs the server holds (a warm cache) never waits for them.
enum Blobs {
    Loading(std::thread::JoinHandle<Result<LoadedTrace, gpuless_replayer::replay::ReplayError>>),
    Ready(HashMap<Hash128, BlobBytes>),
    Failed(String),
}

impl Blobs {
    fn start(path: &Path, shared: bool) -> Blobs {
        let path = path.to_path_buf();
        let spawned = std::thread::Builder::new().name("gpuless-blobs".into()).spawn(move || {
            if shared {
                load_shared(&path, SHARED_BLOB_MIN)
            } else {
                load(&path)
            }
        });
        match spawned {
            Ok(h) => Blobs::Loading(h),
            Err(e) => Blobs::Failed(format!("starting the blob loader: {e}")),
        }
    }

    /// The blob `h`, waiting for the loader the first time.
    fn get(&mut self, h: &Hash128) -> anyhow::Result<&BlobBytes> {
        if let Blobs::Loading(_) = self {
            let Blobs::Loading(t) = std::mem::replace(self, Blobs::Failed(String::new())) else { unreachable!() };
            *self = match t.join() {
                Ok(Ok(trace)) => Blobs::Ready(trace.blobs),
                Ok(Err(e)) => Blobs::Failed(e.to_string()),
                Err(_) => Blobs::Failed("the blob loader panicked".into()),
            };
        }
        match self {
            Blobs::Ready(b) => b.get(h).with_context(|| format!("blob {h} is not in the trace")),
            Blobs::Failed(e) => bail!("reading the trace's blobs: {e}"),
            Blobs::Loading(_) => bail!("the blob loader did not finish"),
        }
    }
}

struct Client<'t> {
    conn: Connection,
    trace: &'t LoadedTrace,
    blobs: Blobs,
    by_seq: HashMap<u64, usize>,
    /// Device-to-host copies recorded inside a stream capture ([`captured_copies`]), and those
    /// whose first result came back.
    captured: HashSet<u64>,
    returned: HashSet<u64>,
    on_server: HashSet<Hash128>,
    /// Segments already planned, by the exact list of records they carry.
    plans: HashMap<Vec<usize>, std::rc::Rc<Vec<Segment>>>,
    report: RemoteReport,
    verify: bool,
    start: Instant,
    /// Whether blobs may travel through shared memory (a Unix socket; `GPULESS_SHM` not `0`).
    shm: bool,
}

/// Blobs from this size are loaded into shared memory when the server is on this host.
const SHARED_BLOB_MIN: u64 = 64 << 10;

/// `CUDA_ERROR_NOT_SUPPORTED`: the server does not answer this state query.
const NOT_SUPPORTED: i32 = 801;

/// A segment as it is sent: its records (indices into the trace) encoded once.
struct Segment {
    records: Vec<usize>,
    /// The blobs its records refer to, each once (found once, at planning).
    blobs: Vec<Hash128>,
    bytes: Vec<u8>,
    flags: u16,
    want_answer: bool,
}

impl Client<'_> {
    /// The segments of records `idx`: only those the server must see, cut at each
    /// synchronization point of the `gpuless` policy and at the end (answered), and every
    /// 4,096 records (pipelined, not answered). Encoded once per list of records: a hot loop
    /// sends the same bytes again.
    fn plan(&mut self, idx: &[usize]) -> std::rc::Rc<Vec<Segment>> {
        if let Some(p) = self.plans.get(idx) {
            return p.clone();
        }
        let mut policy = SyncAnalyzer::new(&[Policy::Gpuless]);
        let sent: Vec<usize> = idx.iter().copied().filter(|&i| must_send(&self.trace.calls[i])).collect();
        let mut segs = Vec::new();
        let mut cur: Vec<usize> = Vec::new();
        // A recording needs no waits for timing: a synchronization that brings nothing back
        // (no asynchronous download pending since the last answer) is not answered here, where
        // the live client, which runs a program that may time its work, waits.
        let mut downloads = false;
        for (k, &i) in sent.iter().enumerate() {
            cur.push(i);
            let ev = call_event(&self.trace.calls[i]);
            let completion =
                matches!(ev.class, Some(SyncClass::StreamSync | SyncClass::EventSync | SyncClass::CtxSync))
                    || (ev.class == Some(SyncClass::StateQuery) && !ev.answers);
            downloads |= ev.class == Some(SyncClass::DeviceToHostAsync);
            let sync = policy.push_first(&ev) && (!completion || downloads);
            if sync {
                downloads = false;
            }
            if sync || k + 1 == sent.len() || cur.len() >= 4096 {
                let records: Vec<CallRecord> = cur.iter().map(|&j| self.trace.calls[j].clone()).collect();
                let (flags, bytes) = protocol::segment::wire(protocol::segment::encode(&records));
                let want_answer = sync || k + 1 == sent.len();
                let mut blobs: Vec<Hash128> = Vec::new();
                for r in &records {
                    for v in &r.args {
                        v.visit(&mut |v| {
                            if let Value::Blob(b) = v {
                                if !blobs.contains(&b.hash) {
                                    blobs.push(b.hash);
                                }
                            }
                        });
                    }
                }
                segs.push(Segment { records: std::mem::take(&mut cur), blobs, bytes, flags, want_answer });
            }
        }
        let p = std::rc::Rc::new(segs);
        self.plans.insert(idx.to_vec(), p.clone());
        p
    }

    /// Sends records `idx` (indices into the trace) as [`Self::plan`] cuts them, answering at
    /// each synchronization point and once at the end.
    fn send(&mut self, idx: &[usize]) -> anyhow::Result<()> {
        let plan = self.plan(idx);
        for seg in plan.iter() {
            self.upload_blobs(&seg.blobs)?;
            self.report.sent += seg.records.len() as u64;
            self.report.segments += 1;
            self.conn.send_segment_bytes(&seg.bytes, seg.flags, seg.want_answer)?;
            if seg.want_answer {
                let a = self.conn.answer()?;
                self.take(a);
            }
        }
        Ok(())
    }

    /// Makes sure the server holds `blobs`: one query for those not known to be there, then the
    /// bytes of the misses (pipelined with what follows). A repeated segment costs a set lookup
    /// per blob.
    fn upload_blobs(&mut self, blobs: &[Hash128]) -> anyhow::Result<()> {
        let new: Vec<Hash128> = blobs.iter().filter(|h| !self.on_server.contains(h)).copied().collect();
        if new.is_empty() {
            return Ok(());
        }
        let have = self.conn.query_blobs(&new)?;
        let lacking: Vec<Hash128> = new.iter().zip(&have).filter(|(_, &held)| !held).map(|(h, _)| *h).collect();
        self.on_server.extend(new.iter().copied());
        if lacking.is_empty() {
            return Ok(());
        }
        let waited = Instant::now();
        for h in &lacking {
            self.blobs.get(h)?;
        }
        self.report.blob_wait_s += waited.elapsed().as_secs_f64();
        let Blobs::Ready(all) = &self.blobs else { bail!("the trace's blobs are not loaded") };
        let mut missing: Vec<(Hash128, &BlobBytes)> = Vec::new();
        for h in &lacking {
            missing.push((*h, all.get(h).with_context(|| format!("blob {h} is not in the trace"))?));
        }
        // Same host: blobs already in the trace's shared arena go as its descriptor (no copy).
        session::send_blobs(&mut self.conn, missing, self.shm)
    }

    fn take(&mut self, a: protocol::Answer) {
        self.report.executed += a.executed;
        for q in a.queries {
            let rec = self.by_seq.get(&q.seq).map(|&i| &self.trace.calls[i]);
            let name = rec.map_or("?", |r| r.function.name());
            if q.status == NOT_SUPPORTED {
                self.report.queries_unanswered.push(format!("call #{} {name}", q.seq));
                continue;
            }
            self.report.queries_answered += 1;
            if rec.is_some_and(|r| r.status == q.status) {
                self.report.queries_as_recorded += 1;
            }
            if name.starts_with("cuEventElapsedTime") && q.status == 0 {
                if let Some(&bits) = q.values.first() {
                    self.report.event_ms.push(f32::from_bits(bits as u32));
                }
            }
        }
        for e in a.errors {
            self.report.errors.push(format!("call #{} {} failed on the server: {}", e.seq, e.function, e.message));
        }
        for (seq, bytes) in a.outputs {
            if self.report.first_result_s.is_none() {
                self.report.first_result_s = Some(since_process_start());
            }
            if !self.verify {
                continue;
            }
            if self.captured.contains(&seq) && !self.returned.insert(seq) {
                self.report.results_repeated += 1;
                continue;
            }
            let rec = self.by_seq.get(&seq).map(|&i| &self.trace.calls[i]);
            match rec.and_then(recorded_result) {
                Some((h, n)) if n == bytes.len() as u64 && Hash128::of(&bytes) == h => {
                    self.report.results_verified += 1
                }
                Some(_) => self.report.mismatches.push(format!(
                    "call #{seq} {}: {} bytes differ from the recording",
                    rec.map_or("?", |r| r.function.name()),
                    bytes.len()
                )),
                None => self.report.results_unverified += 1,
            }
        }
    }
}

/// Sequence numbers of the asynchronous device-to-host copies recorded while their stream was
/// being captured into a graph. The server returns such a copy's bytes after every launch of
/// the graph; the recording holds the hash of the first.
fn captured_copies(trace: &LoadedTrace) -> HashSet<u64> {
    let word = |v: &Value| match *v {
        Value::U64(x) | Value::Handle(_, x) => Some(x),
        _ => None,
    };
    let (mut capturing, mut copies) = (HashSet::new(), HashSet::new());
    // In call order (a trace holds records in the order threads wrote them).
    let mut calls: Vec<&CallRecord> = trace.calls.iter().collect();
    calls.sort_by_key(|r| r.seq);
    for r in calls {
        let Some(f) = r.function.api() else { continue };
        let stream = f.args.iter().position(|a| a.name == "hStream").and_then(|i| r.args.get(i)).and_then(word);
        let Some(s) = stream else { continue };
        if f.name.starts_with("cuStreamBeginCapture") {
            capturing.insert(s);
        } else if f.name.starts_with("cuStreamEndCapture") {
            capturing.remove(&s);
        } else if f.sync == SyncClass::DeviceToHostAsync && capturing.contains(&s) {
            copies.insert(r.seq);
        }
    }
    copies
}

/// Replays `path` on the server at `args.addr`.
pub fn run(path: &Path, args: &RemoteArgs) -> anyhow::Result<ExitCode> {
    // A client on the server's host reads large blobs straight into shared memory, so that
    // uploading them later copies nothing.
    let t_load = Instant::now();
    let same_host = matches!(Endpoint::parse(&args.addr), Endpoint::Unix(_))
        && std::env::var("GPULESS_SHM").map_or(true, |v| v != "0");
    // The records now; the blobs' bytes on a thread while the session starts (needed only for
    // what the server lacks).
    let blobs = Blobs::start(path, same_host);
    let trace = load_calls(path)?;
    let load_s = t_load.elapsed().as_secs_f64();
    let start = Instant::now();
    let (conn, w, _) = session::open(&session::SessionSpec {
        addr: &args.addr,
        token: args.token.as_deref(),
        tls_ca: args.tls_ca.as_deref(),
        partition: args.partition.as_deref(),
        best_effort: args.best_effort,
        arena: (trace.meta.arena_base, trace.meta.arena_size),
        recorded_sm: trace.meta.sm,
        program: format!("replay {}", path.display()),
        // Each synchronization's records go in one segment (`Client::plan`).
        whole_segments: true,
        gpu: args.gpu,
    })?;
    if w.device.sm() != 0 && trace.meta.sm != 0 && w.device.sm() != trace.meta.sm {
        eprintln!(
            "gpuless: note: the server's GPU is sm_{}, the trace was recorded on sm_{}",
            w.device.sm(),
            trace.meta.sm
        );
    }
    let by_seq = trace.calls.iter().enumerate().map(|(i, c)| (c.seq, i)).collect();
    let conn_shm = session::can_share_memory(&conn);
    let mut c = Client {
        conn,
        trace: &trace,
        blobs,
        by_seq,
        captured: captured_copies(&trace),
        returned: HashSet::new(),
        on_server: HashSet::new(),
        plans: HashMap::new(),
        report: RemoteReport {
            session: w.session,
            partition: format!(
                "{} {} ({} SMs; {})",
                w.partition.kind, w.partition.profile, w.partition.sms, w.partition.isolation
            ),
            device: format!("{} (sm_{}, {} SMs)", w.device.name, w.device.sm(), w.device.sm_count()),
            calls: trace.calls.len() as u64,
            load_s,
            ..RemoteReport::default()
        },
        verify: !args.no_verify,
        start,
        shm: conn_shm,
    };
    if args.iterations == 0 {
        let all: Vec<usize> = (0..trace.calls.len()).collect();
        c.send(&all)?;
        c.report.replay_s = c.start.elapsed().as_secs_f64();
    } else {
        let split = hot::split(&trace.calls);
        c.send(&split.setup)?;
        c.send(&split.body)?; // warm-up, verified
        c.report.replay_s = c.start.elapsed().as_secs_f64();
        let (rt0, up0) = (c.conn.traffic.round_trips, c.conn.traffic.bytes_up);
        let mut wall = Vec::with_capacity(args.iterations as usize);
        for _ in 0..args.iterations {
            let t = Instant::now();
            c.send(&split.body)?;
            wall.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let n = f64::from(args.iterations);
        let min = wall.iter().copied().fold(f64::INFINITY, f64::min);
        c.report.hot = Some(RemoteHot {
            iterations: args.iterations,
            body_calls: split.body.len() as u64,
            wall_ms_median: hot::median(&mut wall),
            wall_ms_min: min,
            round_trips_per_iteration: (c.conn.traffic.round_trips - rt0) as f64 / n,
            bytes_up_per_iteration: (c.conn.traffic.bytes_up - up0) as f64 / n,
        });
    }
    let stats = c.conn.close().context("closing the session")?;
    c.report.launches = stats.launches;
    c.report.pieces = RemotePieces {
        graph: stats.pieces_graph,
        captured: stats.pieces_captured,
        eager: stats.pieces_eager,
        records_graph: stats.records_graph,
    };
    c.report.traffic = c.conn.traffic;
    c.report.total_s = since_process_start();
    let r = c.report;
    print(&r, path, args.json)?;
    if !r.errors.is_empty() {
        bail!("{} calls failed on the server; the first: {}", r.errors.len(), r.errors[0]);
    }
    Ok(if r.mismatches.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(3) })
}

fn print(r: &RemoteReport, path: &Path, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
        return Ok(());
    }
    let t = &r.traffic;
    println!("session    {} on {}", r.session, r.partition);
    println!("device     {}", r.device);
    println!(
        "replayed   {} ({} records, {} sent in {} segments, {} executed, {} launches)",
        path.display(),
        r.calls,
        r.sent,
        r.segments,
        r.executed,
        r.launches
    );
    println!(
        "verified   {} results equal, {} differ, {} not verifiable, {} repeated by graph launches",
        r.results_verified,
        r.mismatches.len(),
        r.results_unverified,
        r.results_repeated
    );
    for m in &r.mismatches {
        println!("MISMATCH   {m}");
    }
    for e in &r.errors {
        println!("ERROR      {e}");
    }
    if r.queries_answered > 0 || !r.queries_unanswered.is_empty() {
        println!(
            "queries    {} state queries answered by the server ({} with the recorded status), {} unanswered; event timings {:?} ms",
            r.queries_answered,
            r.queries_as_recorded,
            r.queries_unanswered.len(),
            r.event_ms
        );
    }
    println!(
        "traffic    {} round trips, {} bytes up, {} bytes down; blobs: {} bytes sent ({} through shared memory), {} cache hits, {} misses",
        t.round_trips, t.bytes_up, t.bytes_down, t.blob_bytes, t.shm_bytes, t.blob_hits, t.blob_misses
    );
    if let Some(f) = r.first_result_s {
        println!(
            "time       first result {f:.3} s after process start; records loaded in {:.3} s; waited {:.3} s for blob bytes; replay {:.3} s; total {:.3} s",
            r.load_s, r.blob_wait_s, r.replay_s, r.total_s
        );
    }
    let p = &r.pieces;
    if p.graph + p.captured + p.eager > 0 {
        println!(
            "pieces     {} graph launches ({} records), {} captured, {} eager (the server's cached execution)",
            p.graph, p.records_graph, p.captured, p.eager
        );
    }
    if let Some(h) = &r.hot {
        println!(
            "hot        {} iterations of {} records: median {:.3} ms, min {:.3} ms; {:.1} round trips and {:.0} bytes up per iteration",
            h.iterations, h.body_calls, h.wall_ms_median, h.wall_ms_min, h.round_trips_per_iteration, h.bytes_up_per_iteration
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_recorded_inside_a_capture_are_found_in_call_order() {
        // graph.gl: a stream capture whose device-to-host copy (seq 158) the trace holds after
        // the capture's end (seq 159) in file order.
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/traces/graph.gl");
        let trace = load_calls(&path).expect("the committed graph trace loads");
        let copies = captured_copies(&trace);
        assert!(copies.contains(&158), "{copies:?}");
        let outside =
            trace.calls.iter().filter(|r| r.function.name().starts_with("cuMemcpyDtoH") && !copies.contains(&r.seq));
        assert!(outside.count() > 0, "copies outside captures are verified every time");
    }
}
