//! The executor process: one per session. It initializes its partition of the GPU ahead of
//! time (a warm executor), tells the server it is [`Control::Ready`], receives a session with
//! the client's connection, and then serves that client directly — segments executed as they
//! arrive on the replayer's engine ([`crate::replay::stream::Stream`]), answers at
//! synchronization points, blobs through the content cache, functions deployed and invoked
//! ([`super::functions`]) — until the client closes, goes idle or disconnects. Then it reports
//! [`Control::Done`] and exits, so every CUDA resource of the session goes with the process.
//! One exception: after a session that only invoked the function it announced
//! (`function:NAME`), with a keep-alive, the executor reports [`Control::Warm`] and waits for
//! the next session of that function, which finds the function set up (its [`Functions`], and
//! nothing else of the session, carries over). Likewise, with warm constants on, after a live
//! client's session the executor keeps the uploads that still hold their blob resident on the
//! GPU ([`crate::replay::resident`]), reports [`Control::KeptProgram`] and waits for the next
//! session of the same program ([`kept`]).

use std::collections::HashMap;
use std::io::{BufReader, BufWriter, ErrorKind, Read};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpuless_traces::protocol::client::{Polled, Stream as Conn};
use gpuless_traces::protocol::message::{blob_part, code, invoke_request, kind, CallError, WANT_ANSWER};
use gpuless_traces::protocol::{
    read_header, read_payload, segment, shm, write_frame, Answer, Message, PartitionInfo, Priority, ProtocolError,
    SessionStats, Welcome,
};
use gpuless_traces::{BlobBytes, CallRecord, Hash128, TraceMeta};
use std::rc::Rc;

use super::cache::Dirs;
use super::control::{Channel, Control};
use super::functions::Functions;
use super::gate::{Gate, GRACE, MAX_HOLD};
use super::pieces::{Pieces, Ran};
use super::timeline::Timeline;
use crate::replay::devices::describe_device;
use crate::replay::host_calls::{self, HostCalls};
use crate::replay::stream::{Carried, Stream};
use crate::replay::warm_images::WarmImages;
use crate::replay::{Device, Options, ReplayError};
use decoded::Decoded;
use gpuless_traces::protocol::piece::Cut;

mod answer;
mod blobs;
mod decoded;
mod devices;
mod gated;
mod inflight;
mod kept;
mod notes;
mod printed;
mod stamps;
use notes::{ask, keep_templates, Stored};
mod pump;
mod wire;

use wire::{conn_of, take_rings, write_message, Ended, Writer};

use kept::Kept;

/// Most bytes of blobs a session may have in flight (received in part).
const MAX_PARTIAL: u64 = 64 << 30;
/// Bytes of a BlobData payload before the part's bytes: hash, total, offset.
const BLOB_HEAD: usize = 32;
/// Latency samples sent to the server at a time.
const SAMPLES: usize = 256;

/// What the executor process was started with.
pub struct Setup {
    /// The control channel (inherited descriptor).
    pub control: Channel,
    /// The partition's device.
    pub device: Device,
    /// How the partition is reported.
    pub partition: PartitionInfo,
    /// Device memory the session may allocate.
    pub memory_limit: Option<u64>,
    /// The content cache.
    pub cache: Dirs,
    /// The GPU's priority gate, where the server gave one.
    pub gate: Option<Gate>,
    /// Install the seccomp allow-list once the GPU is initialized ([`super::confine::seccomp`]).
    pub seccomp: bool,
}

/// How much longer than its keep-alive an executor kept warm waits for a session before it
/// exits on its own: the server lets it go at the keep-alive, and hands it no session after.
const KEEP_ALIVE_GRACE: Duration = Duration::from_secs(10);

/// Runs the executor until its session ends — or, for a session of one function with a
/// keep-alive, until no session of that function came within it. Returns the process exit
/// code.
pub fn run(mut setup: Setup) -> i32 {
    let mut gate = setup.gate.take();
    let mut device = describe_device(setup.memory_limit);
    // NVML's view for a client's libnvidia-ml; its total only where the session has the whole
    // device's memory (a memory limit is CUDA's total already).
    device.nvml = crate::partition::nvml::facts(&[device.nvml_uuid(false), device.nvml_uuid(true)]);
    if setup.memory_limit.is_some() {
        device.nvml.total_mem = 0;
    }
    // The session's further GPUs, where the server started this executor for several (asked
    // before the filter is installed: NVML opens files the filter does not allow).
    let more = devices::describe(&device, setup.memory_limit);
    // Preemption stamps (`serve --measure-preemption`): the GPU's clock related to the host's
    // now, while this executor alone is starting (a JIT of a few instructions; before the filter).
    let mut calibrated = match std::env::var_os("GPULESS_MEASURE_PREEMPTION") {
        None => None,
        Some(_) => {
            match setup.device.make_current().map_err(|e| e.to_string()).and_then(|()| stamps::calibrate(gate.as_ref()))
            {
                Ok(c) => Some(c),
                Err(e) => {
                    eprintln!("gpuless executor: no preemption stamps: {e}");
                    None
                }
            }
        }
    };
    // The driver is up: from here on the executor reads tenants' input, under its filter.
    if setup.seccomp {
        if let Err(e) = super::confine::seccomp::install() {
            let _ = setup.control.send(&Control::Failed(format!("{e} (turn it off with --confine-off seccomp)")), None);
            return 1;
        }
    }
    let mps = devices::mps_enabled();
    let ready = Control::Ready { partition: setup.partition.clone(), device: device.clone(), more: more.clone(), mps };
    if setup.control.send(&ready, None).is_err() {
        return 1;
    }
    // Code images recent sessions loaded, loaded while this executor waits for its session.
    let cache = &setup.cache;
    let mut warm = WarmImages::start(setup.device, &setup.cache.disk, |h| cache.read(h));
    // The function set up or the program's uploads kept after a session, and how long to
    // wait for the next session of it.
    let mut kept: Option<(Kept, Duration)> = None;
    loop {
        let next = match &kept {
            None => setup.control.recv(),
            Some((_, keep)) => setup.control.recv_timeout(*keep + KEEP_ALIVE_GRACE),
        };
        let (start, fd) = match next {
            Ok(Some((Control::Start(start), Some(fd)))) => (start, fd),
            // The server let this warm executor go (pool shrunk, keep-alive over, server
            // ending), or no session came within the keep-alive.
            Ok(None) => return 0,
            _ => return 1,
        };
        let hello = match Message::decode(kind::HELLO, 0, &start.hello) {
            Ok(Message::Hello(h)) => h,
            _ => return 1,
        };
        let announced = super::warm::announced(&hello.program).map(str::to_string);
        let client_arena = hello.arena_base != 0 && hello.arena_size != 0;
        // A live client's session of a program, with a keep-alive: its uploads may stay.
        let program = (start.keep_alive_ms > 0 && client_arena && announced.is_none()).then(|| hello.program.clone());
        // Only a session of the same function, without an arena of its own, finds the function
        // set up, and only a session of the same program its uploads; anything else starts
        // from nothing (what was kept is let go first).
        let (functions, carried) = kept::take(
            kept.take(),
            announced.as_deref(),
            program.as_deref(),
            client_arena,
            Some((hello.arena_base, hello.arena_size)),
        );
        // (A function kept set up is the same tenant's: the manager hands it to no other.)
        let functions = functions.unwrap_or_else(|| {
            Functions::new(&setup.cache, &start.tenant, setup.device, setup.memory_limit, client_arena)
        });
        let warm_memory = program.is_some().then_some(carried);
        // What cached execution learned of a program is kept per tenant (the shared tenant's
        // under the program's own name).
        let owner = if start.tenant.is_empty() {
            hello.program.clone()
        } else {
            super::warm::key(&start.tenant, &hello.program)
        };
        // Pieces run as graphs on one stream of one device: not in a session of several.
        let pieces =
            start.cached.filter(|_| hello.devices <= 1).map(|hold| Pieces::new(&owner, &setup.cache.disk, hold));
        // On a server with tenants, cached blobs (code images loaded ahead among them) serve
        // only a tenant that has sent their bytes.
        let owner = start.scoped.then(|| start.tenant.clone());
        if let Some(t) = &owner {
            warm.withhold(|h| setup.cache.owns(t, h));
        }
        let (done, functions, ended) = serve_one(
            &setup,
            (&device, &more),
            (&mut gate, start.priority, (start.be_inflight, start.be_budget_us), calibrated.as_mut()),
            (start.session, start.idle_ms, owner),
            hello,
            fd,
            functions,
            pieces,
            &mut warm,
            warm_memory,
        );
        if !warm.loaded.is_empty() {
            // The server remembers them (the executor cannot write the cache), before the line.
            let _ = setup.control.send(&Control::Images(warm.loaded().to_vec()), None);
            let _ = ask(&setup.control, &Control::Barrier);
            // The executor's stderr is the server's log.
            eprintln!(
                "gpuless executor: session {}: {} of {} code images were loaded before the session asked ({} loaded ahead unused)",
                start.session,
                warm.taken,
                warm.loaded.len(),
                warm.pending()
            );
        }
        if ended.is_some() {
            // Kept for the program's next session, which gets fresh loads.
            warm.unload_untaken();
        }
        warm = WarmImages::default();
        if setup.control.send(&done, None).is_err() {
            return 1;
        }
        let keep_alive = Duration::from_millis(start.keep_alive_ms);
        match (functions, announced, program, ended) {
            (Some(f), Some(name), _, _) if start.keep_alive_ms > 0 && f.prepared_name() == Some(name.as_str()) => {
                if setup.control.send(&Control::Warm { function: name }, None).is_err() {
                    return 1;
                }
                kept = Some((Kept::Function(Box::new(f)), keep_alive));
            }
            // The stream is ended (uploads read back and compared) after `Done`: the session's
            // partition is free meanwhile.
            (_, None, Some(program), Some(stream)) => {
                let Some((carried, skipped_bytes)) = kept::keep(stream, start.session) else { return 0 };
                let resident_bytes = carried.resident_bytes;
                let m = Control::KeptProgram { program: program.clone(), resident_bytes, skipped_bytes };
                if setup.control.send(&m, None).is_err() {
                    return 1;
                }
                kept = Some((Kept::Program { program, carried: Box::new(carried) }, keep_alive));
                // Fresh code images for the next session, loaded while this one waits for it.
                warm = WarmImages::start(setup.device, &setup.cache.disk, |h| cache.read(h));
            }
            _ => return 0,
        }
    }
}

/// Serves one session; returns its [`Control::Done`], its functions if the session only
/// invoked, without a failed invocation (then its function may be kept set up), and, with
/// `warm_memory` (a session whose uploads may stay: what the last session of its program left,
/// if anything), its stream when it ended without an error (to keep for the next session of
/// the program: [`kept::keep`]).
#[allow(clippy::too_many_arguments)]
fn serve_one(
    setup: &Setup,
    (device, more): (&gpuless_traces::protocol::DeviceDescription, &gpuless_traces::protocol::MoreDevices),
    (gate, priority, be_inflight, calibrated): (
        &mut Option<Gate>,
        super::config::PriorityPolicy,
        (u32, u32),
        Option<&mut stamps::Calibrated>,
    ),
    (session, idle_ms, owner): (u64, u64, Option<String>),
    hello: gpuless_traces::protocol::message::Hello,
    fd: OwnedFd,
    functions: Functions,
    pieces: Option<Pieces>,
    warm: &mut WarmImages,
    warm_memory: Option<Option<Carried>>,
) -> (Control, Option<Functions>, Option<Stream>) {
    let meta = TraceMeta {
        arena_base: hello.arena_base,
        arena_size: hello.arena_size,
        sm: hello.recorded_sm,
        ..TraceMeta::default()
    };
    // The session's priority class sets its streams' priority (the device's greatest or least):
    // it orders them within the session's own context. Across sessions, which are separate
    // processes and contexts, the priority gate orders them (`super::gate`).
    let stream_priority = Some(match hello.priority {
        Priority::LatencyCritical => i32::MIN,
        Priority::BestEffort => i32::MAX,
    });
    let opts = Options { no_verify: true, memory_limit: setup.memory_limit, stream_priority, ..Options::default() };
    // A latency-critical session's segments are stamped where the server measures preemption.
    let stamps = calibrated
        .filter(|_| hello.priority == Priority::LatencyCritical)
        .map(|c| stamps::Stamps::new(c, gate.as_ref()));
    let mut s = Session {
        stats: SessionStats::default(),
        partial: HashMap::new(),
        partial_bytes: 0,
        errors: Vec::new(),
        executed: 0,
        last_seq: 0,
        exec_us: 0,
        samples: Vec::new(),
        hits: Vec::new(),
        control: &setup.control,
        cache: &setup.cache,
        decoded: Decoded::default(),
        timeline: Timeline::new(),
        writers: Vec::new(),
        small: Vec::new(),
        checks: Vec::new(),
        // Without a policy the session takes no part in the gate (and the executor keeps it).
        gate: if priority == super::config::PriorityPolicy::Off { None } else { gate.take() },
        preempt: priority == super::config::PriorityPolicy::Preempt,
        best_effort: hello.priority == Priority::BestEffort,
        inflight: {
            let bounded = hello.priority == Priority::BestEffort && priority == super::config::PriorityPolicy::Preempt;
            let (window, budget_us) = if bounded { be_inflight } else { (0, 0) };
            inflight::InFlight::new(window, budget_us)
        },
        functions,
        only_invoked: true,
        pieces,
        owner,
        stamps,
        arrived_ns: None,
    };
    let keep = warm_memory.is_some();
    // A session of several GPUs: its devices' contexts, its arena split among them.
    let devices = hello.devices.max(1);
    let new_stream = match warm_memory {
        Some(carried) => Stream::new_warm(setup.device, meta, opts, carried),
        None => Stream::new(setup.device, meta, opts),
    }
    .and_then(|mut s| {
        if devices > 1 {
            s.use_devices(setup.device, devices)?;
        }
        Ok(s)
    });
    let mut ended = None;
    let result = match (conn_of(fd), new_stream) {
        (Ok(conn), Ok(stream)) => {
            let welcome = Welcome {
                session,
                executor_pid: std::process::id(),
                server: format!("gpuless {}", env!("CARGO_PKG_VERSION")),
                partition: setup.partition.clone(),
                device: device.clone(),
                cached_execution: s.pieces.is_some(),
                // The server's number of this executor's GPU (`manager::spawn`).
                gpu: std::env::var("GPULESS_GPU").ok().and_then(|v| v.parse().ok()).unwrap_or(0),
                more: if devices > 1 { more.clone() } else { Default::default() },
                // Frames through shared memory on a Unix socket (`GPULESS_RING=0`: never).
                rings: matches!(conn, Conn::Unix(_)) && std::env::var("GPULESS_RING").map_or(true, |v| v != "0"),
            };
            let mut stream = stream;
            // Code images loaded ahead are device 0's modules: a session of several devices
            // loads its own in the context it names.
            if devices == 1 {
                stream.parts().0.warm_images = std::mem::take(warm);
            }
            let r = s.serve(conn, &mut stream, welcome, Duration::from_millis(idle_ms.max(1)));
            *warm = std::mem::take(&mut stream.parts().0.warm_images);
            if keep && r.is_ok() {
                ended = Some(stream);
            }
            r
        }
        (Err(e), _) => Err(format!("the client's connection: {e}")),
        (Ok(mut conn), Err(e)) => {
            // The client hears why, instead of a closed connection.
            let message = format!("the session could not start on this executor: {e}");
            let m = Message::Error { code: code::EXECUTOR, message: message.clone() };
            let _ = write_frame(&mut conn, m.kind(), m.flags(), &m.encode());
            s.only_invoked = false;
            Err(message)
        }
    };
    s.flush_notes(true);
    s.timeline.write();
    if let Some(p) = s.pieces.as_mut() {
        p.count_into(&mut s.stats);
        keep_templates(s.control, p);
        if let Some(why) = &p.refusal {
            // The executor's stderr is the server's log.
            eprintln!("gpuless executor: session {session}: a repeated piece could not be captured ({why}); it ran record by record");
        }
    }
    if let Some(mut g) = s.gate.take() {
        g.end_session();
        *gate = Some(g);
    }
    let error = result.err().unwrap_or_default();
    let done = Control::Done { stats: s.stats.clone(), error };
    (done, s.only_invoked.then_some(s.functions), ended)
}

struct Session<'a> {
    stats: SessionStats,
    /// Blobs being received: (announced length, bytes so far).
    partial: HashMap<Hash128, (u64, Vec<u8>)>,
    partial_bytes: u64,
    errors: Vec<CallError>,
    executed: u64,
    last_seq: u64,
    exec_us: u64,
    samples: Vec<(u8, u32)>,
    hits: Vec<Hash128>,
    control: &'a Channel,
    cache: &'a Dirs,
    decoded: Decoded,
    /// Where the session's time went (`GPULESS_EXECUTOR_TIMELINE`).
    timeline: Timeline,
    /// Blobs for the cache being checked and packed in the background: each gives a sealed
    /// memfd and where its blobs lie, for the server to write ([`Control::Store`]).
    writers: Vec<std::thread::JoinHandle<Option<Stored>>>,
    /// Small blobs received and not yet handed to a writer: they go to the cache together
    /// ([`Session::blob_part`]).
    small: Vec<(Hash128, BlobBytes)>,
    /// Hash checks of shared-memory blobs not yet waited for ([`Session::verified`]).
    checks: Vec<std::sync::mpsc::Receiver<Option<Hash128>>>,
    /// The GPU's priority gate: a latency-critical session enters it while it has segments in
    /// flight; a best-effort session's segments wait for it.
    gate: Option<Gate>,
    best_effort: bool,
    /// Whether a best-effort session also stops before each kernel (policy `preempt`).
    preempt: bool,
    /// A best-effort session's kernels on the GPU, bounded under `preempt` (`inflight.rs`).
    inflight: inflight::InFlight,
    /// Deployed functions, and the one this session set up.
    functions: Functions,
    /// Whether the session only invoked (no other message, no failed invocation): then its
    /// function may be kept set up for the next session of it.
    only_invoked: bool,
    /// On a server with tenants, the session's tenant: a cached blob serves it only if the
    /// tenant has sent its bytes ([`Dirs::owns`]); what it sends is noted as its.
    owner: Option<String>,
    /// Cached-trace execution, when the server runs it ([`super::pieces`]).
    pieces: Option<Pieces>,
    /// A latency-critical session's preemption stamps (`serve --measure-preemption`).
    stamps: Option<stamps::Stamps>,
    /// When the segment whose first kernel is not yet submitted arrived (`CLOCK_REALTIME`
    /// nanoseconds), while stamps are taken.
    arrived_ns: Option<u64>,
}

/// The first record naming a host buffer larger than the device's memory (`max` bytes): no real
/// copy has one, and the executor would allocate it. Refused before anything runs.
fn oversized(records: &[CallRecord], max: u64) -> Option<String> {
    records.iter().find_map(|r| {
        let n = gpuless_traces::analysis::host_buffer_bytes(r);
        (n > max).then(|| {
            format!(
                "call #{} {}: a host buffer of {n} bytes, more than the device's {max} bytes of memory",
                r.seq,
                r.function.name()
            )
        })
    })
}

/// How a session ends: normally (`Ok`), or with an error for the client and the server.
type End = Result<(), String>;

impl Session<'_> {
    fn serve(&mut self, conn: Conn, stream: &mut Stream, welcome: Welcome, idle: Duration) -> End {
        let max_download = if welcome.device.total_mem > 0 { welcome.device.total_mem } else { 1 << 40 };
        conn.set_read_timeout(Some(idle)).map_err(|e| e.to_string())?;
        let read_half = conn.try_clone().map_err(|e| e.to_string())?;
        // After each message the executor polls for the next one a while before it blocks:
        // a client's next segment usually follows within microseconds.
        let spin = Duration::from_micros(
            std::env::var("GPULESS_EXECUTOR_SPIN_US").ok().and_then(|v| v.parse().ok()).unwrap_or(300),
        );
        let reader: pump::Reader =
            Arc::new(Mutex::new(BufReader::with_capacity(1 << 16, Polled::new(read_half, spin))));
        // Frames read by a pump while the session's host functions were running.
        let kept: pump::Kept = Default::default();
        let w: Writer = Arc::new(Mutex::new(BufWriter::with_capacity(1 << 16, conn)));
        let send = |w: &Writer, m: &Message| -> Result<(), String> { write_message(w, m).map_err(|e| e.to_string()) };
        // The session's host functions report to the client on the same connection.
        let calls = {
            let w = w.clone();
            Arc::new(HostCalls::new(Box::new(move |c| write_message(&w, &Message::HostCall(c)))))
        };
        let _ended = Ended(calls.clone());
        stream.set_host_calls(Some(calls.clone()));
        stream.set_broker(self.control.try_clone().ok().map(|c| Arc::new(notes::ControlBroker(c)) as _));
        // What the session's kernels print goes to the client with each answer.
        let mut printed = match printed::Printed::capture() {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("gpuless executor: device printf output stays in the server's log ({e})");
                None
            }
        };
        send(&w, &Message::Welcome(Box::new(welcome)))?;
        let mut payload = Vec::new();
        let fail = |w: &Writer, code: u16, message: String| -> End {
            let _ = send(w, &Message::Error { code, message: message.clone() });
            Err(message)
        };
        loop {
            // A frame a pump read (whole), else the next from the connection.
            let pumped = pump::lock(&kept).pop_front();
            let from_pump = pumped.is_some();
            let next = match pumped {
                Some((h, p)) => {
                    payload = p;
                    Ok(h)
                }
                None => {
                    let mut reader = pump::lock(&reader);
                    read_header(&mut *reader).and_then(|h| {
                        // Blob bytes go straight into their blob's buffer, not through `payload`.
                        if h.kind != kind::BLOB_DATA {
                            read_payload(&mut *reader, h.len as usize, &mut payload)?;
                        }
                        Ok(h)
                    })
                }
            };
            let h = match next {
                Ok(h) => h,
                Err(ProtocolError::Io(e)) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return fail(
                        &w,
                        code::IDLE,
                        format!("no message for {:.0} s: the session ended", idle.as_secs_f64()),
                    );
                }
                // The client went away: nothing to tell it.
                Err(ProtocolError::Io(e)) => return Err(format!("client disconnected ({e})")),
                Err(e) => return fail(&w, code::BAD_MESSAGE, e.to_string()),
            };
            // Descriptors come only with BlobShm frames, one each.
            if pump::lock(&reader).get_ref().fds.len() > 8 {
                let e = "descriptors sent without BlobShm frames (one descriptor per BlobShm)".to_string();
                return fail(&w, code::BAD_MESSAGE, e);
            }
            if h.kind != kind::INVOKE && h.kind != kind::CLOSE {
                self.only_invoked = false;
            }
            let t0 = Instant::now();
            let arrived = self.stamps.is_some().then(stamps::realtime_ns);
            // While it executes, the client's replies to host calls are read by a pump.
            let _pump = (calls.used() && matches!(h.kind, kind::SEGMENT | kind::PIECE | kind::CLOSE | kind::INVOKE))
                .then(|| pump::Pump::start(&reader, &kept, &calls));
            match h.kind {
                kind::HOST_RETURNED => match Message::decode(h.kind, h.flags, &payload) {
                    Ok(Message::HostReturned { ids, data }) => calls.returned(&ids, data),
                    _ => return fail(&w, code::BAD_MESSAGE, "bad HostReturned".into()),
                },
                kind::SEGMENT => {
                    let records = match self.decoded.get(&payload) {
                        Some(r) => r,
                        None => match segment::unwire(h.flags, &payload)
                            .and_then(|b| segment::decode(&b, self.stats.segments).map_err(|e| e.to_string()))
                        {
                            Ok(r) => {
                                // Checked once per distinct segment, before anything runs.
                                if let Some(e) = oversized(&r, max_download) {
                                    return fail(&w, code::BAD_RECORD, e);
                                }
                                self.decoded.insert(&payload, r)
                            }
                            Err(e) => {
                                return fail(&w, code::BAD_MESSAGE, format!("segment {}: {e}", self.stats.segments))
                            }
                        },
                    };
                    // A segment that registers the session's first host function may also wait
                    // for it: the pump reads the client's reply.
                    let _first = (_pump.is_none() && records.iter().any(host_calls::record_registers))
                        .then(|| pump::Pump::start(&reader, &kept, &calls));
                    self.stats.segments += 1;
                    self.stats.records += records.len() as u64;
                    self.arrived_ns = arrived;
                    self.at_gate();
                    // Execution time, without the decoding above or a hold at the gate.
                    let run0 = Instant::now();
                    let r = match self.pieces.take() {
                        None => records.iter().try_for_each(|rec| self.exec_gated(stream, rec)),
                        Some(mut p) => {
                            let r = self.exec_pieces(&mut p, stream, &records, h.flags & WANT_ANSWER != 0);
                            self.pieces = Some(p);
                            r
                        }
                    };
                    if let Err((c, e)) = r {
                        return fail(&w, c, e);
                    }
                    let ran = Instant::now();
                    let us = ran.duration_since(run0).as_micros() as u64;
                    self.exec_us += us;
                    self.sample(0, us);
                    let mut answered = None;
                    if h.flags & WANT_ANSWER != 0 {
                        if let Err(e) = self.verified() {
                            return fail(&w, code::BAD_MESSAGE, e);
                        }
                        let outputs = stream.take_outputs();
                        self.stats.answers += 1;
                        let a = Answer {
                            through_seq: self.last_seq,
                            executed: std::mem::take(&mut self.executed),
                            outputs,
                            errors: std::mem::take(&mut self.errors),
                            exec_us: std::mem::take(&mut self.exec_us),
                            queries: stream.take_queries(),
                            pieces: self.pieces.as_mut().map(Pieces::take_announced).unwrap_or_default(),
                            printed: printed.as_mut().map(printed::Printed::take).unwrap_or_default(),
                        };
                        self.stats.executed += a.executed;
                        answer::send(&mut *pump::lock(&w), a).map_err(|e| e.to_string())?;
                        // Everything the session sent so far is done: best-effort work may go.
                        if let (Some(g), false) = (self.gate.as_mut(), self.best_effort) {
                            g.leave();
                        }
                        self.sample(1, t0.elapsed().as_micros() as u64);
                        answered = Some(Instant::now());
                        self.take_stamps();
                    }
                    self.timeline.segment(t0, records.len(), run0, ran, answered);
                }
                kind::BLOB_QUERY => {
                    let hashes = match Message::decode(h.kind, h.flags, &payload) {
                        Ok(Message::BlobQuery(hs)) => hs,
                        Ok(_) | Err(_) => return fail(&w, code::BAD_MESSAGE, "bad BlobQuery".into()),
                    };
                    let have = self.find(stream, &hashes);
                    send(&w, &Message::BlobHave(have))?;
                    self.flush_notes(false);
                }
                kind::BLOB_DATA => {
                    let mut head = [0u8; BLOB_HEAD];
                    if (h.len as usize) < BLOB_HEAD {
                        return fail(&w, code::BAD_MESSAGE, format!("a BlobData of {} bytes", h.len));
                    }
                    // The part's bytes: kept whole by a pump, else still on the connection.
                    let mut guard = (!from_pump).then(|| pump::lock(&reader));
                    let mut whole = std::io::Cursor::new(std::mem::take(&mut payload));
                    let src: &mut dyn Read = match guard.as_mut() {
                        Some(r) => &mut **r,
                        None => &mut whole,
                    };
                    if let Err(e) = src.read_exact(&mut head) {
                        return Err(format!("client disconnected ({e})"));
                    }
                    let n = h.len as usize - BLOB_HEAD;
                    let r = blob_part(&head).map_err(|e| e.to_string()).and_then(|(hash, total, offset, _)| {
                        self.blob_part(stream, hash, total, offset, n, |buf| {
                            let got = src.take(n as u64).read_to_end(buf).map_err(|e| e.to_string())?;
                            if got == n {
                                Ok(())
                            } else {
                                Err(format!("client disconnected inside a blob part ({got} of {n} bytes)"))
                            }
                        })
                    });
                    if let Err(e) = r {
                        return fail(&w, code::BAD_MESSAGE, e);
                    }
                }
                kind::RING_OFFER => match Message::decode(h.kind, h.flags, &payload) {
                    Ok(Message::RingOffer { capacity }) => {
                        if let Err(e) = take_rings(&reader, &w, capacity, idle) {
                            return fail(&w, code::BAD_MESSAGE, e);
                        }
                    }
                    _ => return fail(&w, code::BAD_MESSAGE, "bad RingOffer".into()),
                },
                kind::BLOB_SHM => {
                    let entries = match Message::decode(h.kind, h.flags, &payload) {
                        Ok(Message::BlobShm(e)) => e,
                        Ok(_) | Err(_) => return fail(&w, code::BAD_MESSAGE, "bad BlobShm".into()),
                    };
                    let Some(fd) = pump::lock(&reader).get_mut().take_fd() else {
                        return fail(
                            &w,
                            code::BAD_MESSAGE,
                            "a BlobShm frame came without a descriptor: send it over the Unix socket with the memfd \
                             attached (SCM_RIGHTS; docs/PROTOCOL.md)"
                                .into(),
                        );
                    };
                    if let Err(e) = self.shared_blobs(stream, fd, &entries) {
                        return fail(&w, code::BAD_MESSAGE, e);
                    }
                    send(&w, &Message::BlobHave(vec![true; entries.len()]))?;
                }
                kind::DEPLOY => {
                    let (name, hash, len) = match Message::decode(h.kind, h.flags, &payload) {
                        Ok(Message::Deploy { name, hash, len }) => (name, hash, len),
                        Ok(_) | Err(_) => return fail(&w, code::BAD_MESSAGE, "bad Deploy".into()),
                    };
                    // The function file's bytes reach the cache first (written on a thread).
                    if let Err(e) = self.verified() {
                        return fail(&w, code::BAD_MESSAGE, e);
                    }
                    self.flush_notes(true);
                    if let Err(e) = self.ask(&Control::Barrier) {
                        return fail(&w, code::EXECUTOR, format!("deploying `{name}`: {e}"));
                    }
                    let held = stream.has_blob(&hash);
                    // A blob the tenant never sent is, for its deploy, one the server lacks.
                    let readable = held || self.owner.as_deref().is_none_or(|t| self.cache.owns(t, &hash));
                    let control = self.control;
                    let register =
                        |name: &str, hash, len| ask(control, &Control::Register { name: name.to_string(), hash, len });
                    match self.functions.deploy(self.cache, &name, hash, len, held, readable, register) {
                        Ok(m) => send(&w, &m)?,
                        Err((c, e)) => return fail(&w, c, e),
                    }
                }
                kind::INVOKE => {
                    let (name, verify, inputs) = match invoke_request(&payload) {
                        Ok(r) => r,
                        Err(e) => return fail(&w, code::BAD_MESSAGE, e.to_string()),
                    };
                    self.at_gate();
                    let r = self.functions.invoke(self.cache, &name, verify, inputs);
                    if let (Some(g), false) = (self.gate.as_mut(), self.best_effort) {
                        g.leave();
                    }
                    match r {
                        Ok(m) => send(&w, &m)?,
                        Err((c, e)) => {
                            self.only_invoked = false;
                            return fail(&w, c, e);
                        }
                    }
                    self.flush_notes(false);
                }
                kind::PIECE => {
                    let r = match Message::decode(h.kind, h.flags, &payload) {
                        Ok(Message::Piece(r)) => r,
                        Ok(_) | Err(_) => return fail(&w, code::BAD_MESSAGE, "bad Piece".into()),
                    };
                    let Some(mut p) = self.pieces.take() else {
                        let e = "a piece sent by reference, but this server does not run cached execution".into();
                        return fail(&w, code::BAD_MESSAGE, e);
                    };
                    let run = p.resolve(&r).map_err(|e| (code::BAD_MESSAGE, e)).and_then(|recs| {
                        let _first = (_pump.is_none() && recs.iter().any(host_calls::record_registers))
                            .then(|| pump::Pump::start(&reader, &kept, &calls));
                        self.stats.records += recs.len() as u64;
                        self.arrived_ns = arrived;
                        self.at_gate();
                        // One whole piece, as the client cut it: held (it is all here) and
                        // closed at its end, as the executor's own cut would close it.
                        self.exec_pieces(&mut p, stream, &recs, true)
                    });
                    self.pieces = Some(p);
                    if let Err((c, e)) = run {
                        return fail(&w, c, e);
                    }
                    self.exec_us += t0.elapsed().as_micros() as u64;
                }
                kind::CLOSE => {
                    if let Err(e) = self.verified() {
                        return fail(&w, code::BAD_MESSAGE, e);
                    }
                    // What the session uploaded is in the cache before the client hears
                    // `Closed`: its next session may start at once.
                    self.flush_notes(true);
                    let _ = self.ask(&Control::Barrier);
                    if let Some(mut p) = self.pieces.take() {
                        // A piece still open (records the client sent without an answer).
                        let r = self.exec_pieces(&mut p, stream, &[], true);
                        p.count_into(&mut self.stats);
                        // Kept before the client hears `Closed`: its next session may start at once.
                        keep_templates(self.control, &mut p);
                        let _ = self.ask(&Control::Barrier);
                        self.pieces = Some(p);
                        if let Err((c, e)) = r {
                            return fail(&w, c, e);
                        }
                    }
                    if let Err(e) = stream.synchronize() {
                        return fail(&w, code::EXECUTOR, e.to_string());
                    }
                    if self.stamps.is_some() {
                        self.take_stamps();
                        let _ = self.control.send(&Control::Samples(std::mem::take(&mut self.samples)), None);
                    }
                    self.stats.executed += std::mem::take(&mut self.executed);
                    self.stats.launches = stream.report().launches;
                    self.stats.peak_memory = stream.report().peak_memory;
                    send(&w, &Message::Closed(self.stats.clone()))?;
                    return Ok(());
                }
                k => {
                    let name = gpuless_traces::protocol::message::kind_name(k);
                    return fail(
                        &w,
                        code::BAD_MESSAGE,
                        format!("a {name} message (kind {k}) is not allowed in a session"),
                    );
                }
            }
        }
    }
}
