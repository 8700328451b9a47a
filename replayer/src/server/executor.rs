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
mod serve;
mod stamps;
use notes::{ask, keep_templates, Stored};
mod pump;
mod wire;

use wire::{conn_of, take_rings, write_message, Ended, Writer};

use kept::Kept;

/// Most bytes of blobs a session may have in flight (received in part).
const MAX_PARTIAL: u64 = 64 << 30;
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
