//! Connecting at `cuInit`: the endpoints `GPULESS_REMOTE` names (one, or several separated by
//! commas: a session across several servers), a session with each, the arena reserved and cut
//! among their devices, and the device list the program sees (`devices.rs`); and closing at
//! exit ([`finish`]: the last answer, the sessions closed, the counts written).
//!
//! With several servers, each is asked for the same number of GPUs (`GPULESS_REMOTE_GPUS`,
//! default 1); the arena is cut into that many slices per endpoint, and the servers that
//! accept take consecutive slices in order, so a device's ordinal is its slice. A server that
//! cannot be reached or refuses the session is skipped with one line; the program sees the
//! devices of the others. A TCP name that resolves to several addresses of one family (a
//! headless service's pods) stands for a server at each; loopback names do not (they are one
//! server reachable on several addresses).

use std::collections::{HashMap, HashSet};
use std::net::ToSocketAddrs;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpuless_traces::protocol::{self, Endpoint, Hello, MoreDevices, PartitionRequest, PeerFact, Priority};

use super::base::{
    forked, in_child, lock, timeout, Members, Session, CALLS, ENV_STATS, FLUSH, NO_DEVICE, READY, UNREACHED,
};
use super::outgoing::flusher;
use super::stats;
use crate::remote::{devices, link, route, tables, waits};
use crate::{arena, state};

/// Environment: the server's token.
const ENV_TOKEN: &str = "GPULESS_TOKEN";
/// Environment: the partition asked for (`whole`, `sms:N`, a MIG profile).
const ENV_PARTITION: &str = "GPULESS_REMOTE_PARTITION";
/// The server's GPU to ask for (its index), or GPUs (`1,0`: a session of two devices, device 0
/// on GPU 1); unset: wherever the server places the session.
const ENV_GPU: &str = "GPULESS_REMOTE_GPU";
/// How many GPUs the session asks for (its devices 0..N; default 1, or as many as named).
const ENV_GPUS: &str = "GPULESS_REMOTE_GPUS";
/// Environment: `best-effort` for that priority class.
const ENV_PRIORITY: &str = "GPULESS_REMOTE_PRIORITY";
/// Environment: microseconds a new segment waits before the flusher sends it without an
/// answer (default 100; 0: segments go out only at waits and when full).
const ENV_FLUSH_US: &str = "GPULESS_REMOTE_FLUSH_US";

/// `cuInit` (and `nvmlInit`): connects (once) and reserves the arena. 0, or the code every call
/// then returns.
pub(crate) fn init() -> u32 {
    let mut g = lock();
    match &*g {
        Some(Ok(_)) => return 0,
        Some(Err(code)) => return *code,
        None => {}
    }
    let endpoint = std::env::var(crate::mode::ENV_REMOTE).unwrap_or_default();
    let r = connect_all(&endpoint);
    *g = Some(match r {
        Ok(v) => {
            READY.store(1, Ordering::Release);
            Ok(v)
        }
        Err(why) => {
            eprintln!("gpuless: cannot use the GPU server at {endpoint}: {why}; the program sees no CUDA device");
            let _ = UNREACHED.set((endpoint.clone(), why));
            READY.store(NO_DEVICE, Ordering::Release);
            Err(NO_DEVICE)
        }
    });
    drop(g);
    crate::owner::note_owner();
    // SAFETY: registering plain extern "C" functions with the C library.
    unsafe {
        libc::atexit(at_exit);
        libc::pthread_atfork(None, None, Some(in_child));
    }
    // A signal that ends the program (SIGTERM, a crash) ends the session as the exit would.
    crate::signals::install();
    if devices::first().is_none() {
        return NO_DEVICE;
    }
    let us = std::env::var(ENV_FLUSH_US).ok().and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(100);
    if us > 0 {
        let _ =
            std::thread::Builder::new().name("gpuless-flush".into()).spawn(move || flusher(Duration::from_micros(us)));
    }
    if state::enabled() {
        // `gpuless record --remote`: the trace opens now, described by the session's device.
        crate::sink::open(Some(&describe));
    }
    0
}

/// What the program asked each server for.
struct Ask {
    /// GPUs named (`GPULESS_REMOTE_GPU`): device 0 on the first, and so on.
    named: Vec<u32>,
    /// Devices per server.
    devices: u32,
}

impl Ask {
    fn from_env() -> Result<Ask, String> {
        let named: Vec<u32> = std::env::var(ENV_GPU)
            .unwrap_or_default()
            .split(',')
            .filter(|v| !v.trim().is_empty())
            .map(|v| v.trim().parse().map_err(|_| format!("{ENV_GPU}={v:?} is not a GPU number")))
            .collect::<Result<_, _>>()?;
        let asked: u32 = match std::env::var(ENV_GPUS) {
            Ok(v) if !v.trim().is_empty() => {
                v.trim().parse().map_err(|_| format!("{ENV_GPUS}={v:?} is not a count"))?
            }
            _ => 0,
        };
        if !named.is_empty() && asked > 1 && named.len() as u32 != asked {
            return Err(format!("{ENV_GPUS}={asked} but {} GPUs named in {ENV_GPU}", named.len()));
        }
        Ok(Ask { devices: asked.max(named.len() as u32).max(1), named })
    }
}

/// The sessions with every server of `list`, the device list set from them.
fn connect_all(list: &str) -> Result<Members, String> {
    let ask = Ask::from_env()?;
    let endpoints = expand(list);
    if endpoints.len() > 1 && state::enabled() {
        // A call across two servers runs as several calls of the client's: the trace would not
        // be the program's.
        return Err("`gpuless record --remote` records a session of one server; give one endpoint".into());
    }
    if endpoints.len() > 1 && !ask.named.is_empty() {
        return Err(format!(
            "{ENV_GPU} names GPUs of one server; with several servers ({list}) ask for a count ({ENV_GPUS})"
        ));
    }
    // Each device allocates from its own slice of the arena: as many slices as could be had.
    let slices = ask.devices * endpoints.len() as u32;
    arena::split_among(slices);
    let (base, size) = arena::reserve().unwrap_or((0, 0));
    if endpoints.len() > 1 && size == 0 {
        return Err("a session across several servers needs the device-memory arena, which is off".into());
    }
    let slice = gpuless_traces::devices::slice_size(size, slices);
    let mut members: Members = Vec::new();
    let mut counts = Vec::new();
    let mut at = 0u32;
    let mut refused = Vec::new();
    for ep in &endpoints {
        let arena = if endpoints.len() == 1 {
            (base, size)
        } else {
            (base + u64::from(at) * slice, u64::from(ask.devices) * slice)
        };
        match connect(ep, &ask, arena, members.len()) {
            Ok(s) => {
                let n = s.welcome.more.count();
                at += n;
                counts.push(n);
                members.push(s);
            }
            Err(why) if endpoints.len() > 1 => {
                eprintln!("gpuless: skipping the GPU server at {ep}: {why}");
                refused.push(format!("{ep}: {why}"));
            }
            Err(why) => return Err(why),
        }
    }
    if members.is_empty() {
        return Err(format!("no server would take the session ({})", refused.join("; ")));
    }
    route::set_layout(&counts, base, size, slices);
    let first = &members[0].welcome;
    state::set_device_sm(first.device.sm());
    devices::set(first.device.clone(), merge(&members, &counts));
    Ok(members)
}

/// The endpoints of `list`: its comma-separated entries, a TCP or TLS name that resolves to
/// several addresses of one family (not loopback) standing for each of them (a TLS one as
/// `tls://NAME:PORT#ADDRESS:PORT`: connected to at the address, its certificate checked for the
/// name).
fn expand(list: &str) -> Vec<String> {
    expand_with(list, |hp| hp.to_socket_addrs().map(Iterator::collect).unwrap_or_default())
}

/// [`expand`] with the name resolution `resolve` (`HOST:PORT` to its addresses).
fn expand_with(list: &str, resolve: impl Fn(&str) -> Vec<std::net::SocketAddr>) -> Vec<String> {
    let mut out = Vec::new();
    for e in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let plain = e.strip_prefix("tcp://").unwrap_or(e);
        let (tls, plain) = match plain.strip_prefix("tls://") {
            Some(p) => (true, p),
            None => (false, plain),
        };
        if plain.starts_with("unix:") || plain.contains('#') {
            out.push(e.to_string());
            continue;
        }
        let addrs = resolve(plain);
        let v4: Vec<_> = addrs.iter().filter(|a| a.is_ipv4()).collect();
        let v6: Vec<_> = addrs.iter().filter(|a| a.is_ipv6()).collect();
        let group = if v4.len() > 1 { v4 } else { v6 };
        let distinct: HashSet<_> = group.iter().collect();
        let is_name = plain
            .rsplit_once(':')
            .is_some_and(|(h, _)| h.trim_matches(['[', ']']).parse::<std::net::IpAddr>().is_err());
        if is_name && distinct.len() > 1 && !group.iter().any(|a| a.ip().is_loopback()) {
            let mut seen = HashSet::new();
            let each = group.iter().filter(|a| seen.insert(**a));
            out.extend(each.map(|a| if tls { format!("tls://{plain}#{a}") } else { a.to_string() }));
        } else {
            out.push(e.to_string());
        }
    }
    out
}

/// A session with the server at `endpoint` for `ask`'s devices, over the part of the arena
/// `(base, size)` they use.
fn connect(endpoint: &str, ask: &Ask, (base, size): (u64, u64), member: usize) -> Result<Session, String> {
    let devices = ask.devices;
    let t = timeout();
    let ep = Endpoint::parse(endpoint);
    let mut conn = protocol::connect(&ep, t.min(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    conn.set_timeout(Some(t)).map_err(|e| e.to_string())?;
    let program = std::env::args().take(4).collect::<Vec<_>>().join(" ");
    let hello = Hello {
        protocol: protocol::PROTOCOL_VERSION,
        tool: format!("gpuless {} (client)", env!("CARGO_PKG_VERSION")),
        token: std::env::var(ENV_TOKEN).unwrap_or_default(),
        partition: PartitionRequest::parse(&std::env::var(ENV_PARTITION).unwrap_or_default()),
        priority: if std::env::var(ENV_PRIORITY).is_ok_and(|v| v == "best-effort") {
            Priority::BestEffort
        } else {
            Priority::LatencyCritical
        },
        arena_base: base,
        arena_size: size,
        recorded_sm: 0,
        program,
        // A live program's records go as it makes them.
        whole_segments: false,
        gpu: ask.named.first().copied(),
        devices: if devices > 1 { devices } else { 0 },
        more_gpus: ask.named.iter().skip(1).copied().collect(),
    };
    let welcome = conn.handshake(&hello).map_err(|e| e.to_string())?;
    if welcome.more.count() != devices {
        return Err(format!(
            "{devices} GPUs asked for, the server gave {} (a server older than sessions of several GPUs?)",
            welcome.more.count()
        ));
    }
    let cached_execution = welcome.cached_execution;
    Ok(Session {
        endpoint: endpoint.to_string(),
        conn: Some(Arc::new(Mutex::new(conn))),
        welcome,
        pending: Vec::new(),
        new_blobs: Vec::new(),
        held: HashSet::new(),
        outstanding: false,
        complete: HashSet::new(),
        unanswered: false,
        failed: None,
        closed: false,
        sent: 0,
        waits: 0,
        waited_for: HashMap::new(),
        server_exec_us: 0,
        sent_since: 0,
        refs: Vec::new(),
        pieces: crate::remote::pieces::ClientPieces::new(cached_execution),
        pull: None,
        pulls: 0,
        member,
        device: 0,
    })
}

/// The P2P attributes a pair of devices on different servers answers 0 for (and
/// `cuDeviceCanAccessPeer`, 0): the servers' memories do not reach each other.
const APART_ATTRIBUTES: [u32; 6] = [0, 1, 2, 3, 4, 5];
/// `NVML_P2P_STATUS_NOT_SUPPORTED`: NVML's P2P status of such a pair, at every index.
const NVML_P2P_NOT_SUPPORTED: i32 = 5;

/// The device list of `members` (holding `counts` devices each) as one session's: devices 1..
/// described, every member's pairs and links at their global ordinals, and pairs of devices on
/// different servers answering that neither reaches the other.
fn merge(members: &[Session], counts: &[u32]) -> MoreDevices {
    if members.len() == 1 {
        return members[0].welcome.more.clone();
    }
    let mut m = MoreDevices::default();
    let mut first = 0u32;
    let mut owner = Vec::new();
    for (i, (s, &n)) in members.iter().zip(counts).enumerate() {
        let w = &s.welcome;
        if i > 0 {
            m.devices.push(w.device.clone());
            m.gpus.push(w.gpu);
        }
        m.devices.extend(w.more.devices.iter().cloned());
        m.gpus.extend(w.more.gpus.iter().copied());
        m.peers.extend(w.more.peers.iter().map(|p| PeerFact { src: p.src + first, dst: p.dst + first, ..*p }));
        m.links.extend(
            w.more.links.iter().map(|l| gpuless_traces::protocol::NvLinkFact { device: l.device + first, ..l.clone() }),
        );
        owner.extend(std::iter::repeat_n(i, n as usize));
        first += n;
    }
    for (src, a) in owner.iter().enumerate() {
        for (dst, b) in owner.iter().enumerate() {
            if a != b {
                let (src, dst) = (src as u32, dst as u32);
                for attr in APART_ATTRIBUTES {
                    m.peers.push(PeerFact { src, dst, attr, value: 0 });
                }
                for index in 0..5 {
                    let attr = gpuless_traces::protocol::NVML_P2P_STATUS + index;
                    m.peers.push(PeerFact { src, dst, attr, value: NVML_P2P_NOT_SUPPORTED });
                }
            }
        }
    }
    m
}

/// Fills a trace's device facts from the session's device description (`gpuless record
/// --remote`).
fn describe(meta: &mut gpuless_traces::TraceMeta) {
    if let Some(d) = devices::first() {
        meta.gpu_name = d.name.clone();
        meta.sm = d.sm();
        meta.uuid = d.uuid.to_vec();
        meta.driver_version = d.driver_version;
        meta.extra.push(("recorded_through".into(), "gpuless serve session (client mode)".into()));
    }
}

/// At exit: the last answer (errors the program never synchronized for are said), the
/// session closed, the counts written.
extern "C" fn at_exit() {
    finish();
}

/// [`at_exit`]'s work, once (a signal that ends the program does it first: `signals.rs`).
pub(crate) fn finish() {
    if forked() {
        return;
    }
    let mut g = lock();
    if matches!(g.as_ref(), Some(Ok(v)) if v.iter().all(|s| s.closed)) {
        return;
    }
    let Some(Ok(v)) = g.as_mut() else {
        if let (Some((endpoint, why)), Some(path)) = (UNREACHED.get(), std::env::var_os(ENV_STATS)) {
            let j = serde_json::json!({
                "endpoint": endpoint,
                "calls": CALLS.load(Ordering::Relaxed),
                "failed": format!("cannot connect: {why}"),
                "failure_said": true,
            });
            let _ = std::fs::write(path, format!("{j}\n"));
        }
        return;
    };
    let mut closed = Vec::with_capacity(v.len());
    for sess in v.iter_mut() {
        closed.push(sess.close());
    }
    FLUSH.notify_all();
    stats::write(v, &closed);
    waits::write();
    tables::print_counts();
}

impl Session {
    /// The last answer (errors the program never synchronized for are said), then the session
    /// closed; the server's totals for it (its `Closed`).
    fn close(&mut self) -> Option<protocol::SessionStats> {
        if self.closed {
            return None;
        }
        if self.failed.is_none() && (self.unanswered || !self.pending.is_empty() || !self.refs.is_empty()) {
            self.waits += 1;
            match self.send(true) {
                Ok(Some(a)) => {
                    for e in a.errors.iter().take(3) {
                        eprintln!(
                            "gpuless: call #{} {} failed on the server: {} ({})",
                            e.seq, e.function, e.message, e.code
                        );
                    }
                }
                Ok(None) => {}
                Err(e) => self.fail(&e),
            }
        }
        let mut closed = None;
        if let Some(conn) = self.conn.as_ref() {
            match link::lock(conn).close() {
                Ok(stats) => closed = Some(stats),
                Err(e) => eprintln!("gpuless: closing the session at {}: {e}", self.endpoint),
            }
        }
        self.closed = true;
        closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name standing for several servers (a headless Service): each address a server; a TLS
    /// one keeps the name its certificate is checked for.
    #[test]
    fn a_name_of_several_addresses_is_a_server_at_each() {
        let resolve = |hp: &str| -> Vec<std::net::SocketAddr> {
            match hp {
                "gpus:7000" => vec!["10.0.0.5:7000".parse().unwrap(), "10.0.0.6:7000".parse().unwrap()],
                "one:7000" => vec!["10.0.0.7:7000".parse().unwrap()],
                "lo:7000" => vec!["127.0.0.1:7000".parse().unwrap(), "127.0.0.2:7000".parse().unwrap()],
                _ => Vec::new(),
            }
        };
        assert_eq!(expand_with("gpus:7000", resolve), ["10.0.0.5:7000", "10.0.0.6:7000"]);
        assert_eq!(
            expand_with("tls://gpus:7000", resolve),
            ["tls://gpus:7000#10.0.0.5:7000", "tls://gpus:7000#10.0.0.6:7000"]
        );
        // One address, loopback, an address given, or a name already pinned: as written.
        assert_eq!(expand_with("tls://one:7000,lo:7000", resolve), ["tls://one:7000", "lo:7000"]);
        assert_eq!(expand_with("tls://gpus:7000#10.0.0.6:7000", resolve), ["tls://gpus:7000#10.0.0.6:7000"]);
        assert_eq!(expand_with("10.0.0.5:7000", resolve), ["10.0.0.5:7000"]);
    }

    #[test]
    fn a_list_is_its_entries_and_loopback_names_stay_one_server() {
        assert_eq!(expand("127.0.0.1:7000, 127.0.0.1:7001"), ["127.0.0.1:7000", "127.0.0.1:7001"]);
        assert_eq!(expand("unix:/tmp/s,tls://h:1"), ["unix:/tmp/s", "tls://h:1"]);
        // localhost may resolve to 127.0.0.1 and ::1: one server, tried as before.
        assert_eq!(expand("localhost:7000"), ["localhost:7000"]);
        assert_eq!(expand("tcp://127.0.0.1:9"), ["tcp://127.0.0.1:9"]);
    }
}
