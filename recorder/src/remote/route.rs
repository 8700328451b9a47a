//! Which server a call goes to, in a session across several servers (`gpuless run --remote
//! a:7000,b:7000`): the program's device list is every server's devices in order, and each
//! server's session is a *member* holding a contiguous run of them. With one server everything
//! goes to member 0, on the thread's current device, as before.
//!
//! A call goes to the member of what its arguments name, in argument order: a handle's home
//! (the device whose context was current when the handle was made: streams, events, modules,
//! functions, graphs, pools...), a context's device, a device, or the device whose slice of the
//! arena holds an address; the thread's current device when nothing names one. The first
//! argument that names a device decides; the device the record runs on within its member is the
//! current device where that is one of the member's, else the named one.
//!
//! Code loaded as a library (`cuLibraryLoadData`, its kernels) belongs to no context: those
//! records go to every member ([`Decision::All`]). A call whose arguments name devices of two
//! members ([`Decision::Apart`]) cannot run on either server alone: `staged.rs` does what it
//! can through the client (a copy, an event wait) and refuses the rest.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use gpuless_analyzer::api::{ApiFunction, ArgKind, Direction, HandleKind, SyncClass};

use super::context_books::{current_device, device_of};
use super::devices;

/// Where one record goes: the member (a server's session, in the order the endpoints were
/// given) and the device within it (its ordinal on that server's session).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Route {
    /// The member's index.
    pub member: usize,
    /// The device within the member.
    pub device: u32,
}

/// What a call's arguments say about where it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// One member, one device.
    One(Route),
    /// Every member (code loaded as a library); a call that waits goes to this one.
    All(Route),
    /// Its arguments name devices of different members.
    Apart,
}

/// The members as device ranges, and the arena's split (to find an address's device).
#[derive(Debug)]
struct Layout {
    /// Each member's first global device ordinal; its devices run to the next one's (or to
    /// `total`).
    first: Vec<u32>,
    /// How many devices all members hold.
    total: u32,
    /// The arena's base and size, and how many slices it is cut into (at least `total`).
    arena: (u64, u64, u32),
}

static LAYOUT: OnceLock<Layout> = OnceLock::new();

/// Sets the members' device ranges once connected: `counts[i]` devices for member `i`, over an
/// arena at `base` of `size` bytes cut into `slices` slices.
pub(crate) fn set_layout(counts: &[u32], base: u64, size: u64, slices: u32) {
    let mut first = Vec::with_capacity(counts.len());
    let mut at = 0;
    for &c in counts {
        first.push(at);
        at += c;
    }
    let _ = LAYOUT.set(Layout { first, total: at, arena: (base, size, slices.max(at)) });
}

/// How many members the session has (1 before it is connected).
pub(crate) fn members() -> usize {
    LAYOUT.get().map_or(1, |l| l.first.len().max(1))
}

/// The member holding global device `d`, and `d` within it.
pub(crate) fn split(d: u32) -> Route {
    let Some(l) = LAYOUT.get() else { return Route { member: 0, device: d } };
    let member = l.first.iter().rposition(|&f| f <= d).unwrap_or(0);
    Route { member, device: d - l.first.get(member).copied().unwrap_or(0) }
}

/// Member `m`'s first global device ordinal.
pub(crate) fn first_of(m: usize) -> u32 {
    LAYOUT.get().and_then(|l| l.first.get(m).copied()).unwrap_or(0)
}

/// The global device whose slice of the arena holds `addr` (`None` outside the arena, or in a
/// slice no member holds).
pub(crate) fn device_of_address(addr: u64) -> Option<u32> {
    let l = LAYOUT.get()?;
    let (base, size, slices) = l.arena;
    gpuless_traces::devices::device_of(base, size, slices, addr).filter(|&d| d < l.total)
}

thread_local! {
    /// The route of the call this thread is making (`None` between calls).
    static ROUTE: Cell<Option<Route>> = const { Cell::new(None) };
    /// Whether that call goes to every member.
    static EVERY: Cell<bool> = const { Cell::new(false) };
}

/// The route of the call being made on this thread, or the current device's between calls.
pub(crate) fn current() -> Route {
    ROUTE.try_with(Cell::get).ok().flatten().unwrap_or_else(|| split(current_device()))
}

/// Whether the call being made on this thread goes to every member.
pub(crate) fn every() -> bool {
    EVERY.try_with(Cell::get).unwrap_or(false) && members() > 1
}

/// The members the call being made goes to.
pub(crate) fn targets() -> std::ops::Range<usize> {
    if every() {
        0..members()
    } else {
        let m = current().member;
        m..m + 1
    }
}

/// Restores the thread's previous route when dropped.
pub(crate) struct Entered(Option<Route>, bool);

impl Drop for Entered {
    fn drop(&mut self) {
        let _ = ROUTE.try_with(|c| c.set(self.0));
        let _ = EVERY.try_with(|c| c.set(self.1));
    }
}

/// Makes `route` (to every member with `all`) the route of the call this thread makes until the
/// returned guard is dropped.
pub(crate) fn enter(route: Route, all: bool) -> Entered {
    let was = ROUTE.try_with(|c| c.replace(Some(route))).ok().flatten();
    let all_was = EVERY.try_with(|c| c.replace(all)).unwrap_or(false);
    Entered(was, all_was)
}

/// Each handle's home: the global device whose context was current when it was made (handles
/// are client numbers, never handed out twice).
static HOMES: Mutex<Option<HashMap<u64, u32>>> = Mutex::new(None);

/// Handle `h`'s home (`None`: made before the session was across several servers, of no
/// context, or not a handle).
pub(crate) fn home(h: u64) -> Option<u32> {
    HOMES.lock().unwrap_or_else(|e| e.into_inner()).as_ref()?.get(&h).copied()
}

/// Gives handle `h` the home `global` (a handle made of another's memory lives where it does).
pub(crate) fn set_home(h: u64, global: u32) {
    HOMES.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(HashMap::new).insert(h, global);
}

/// The devices an array of `n` `CUmemAccessDesc` at `p` gives access (each 12 bytes:
/// `CUmemLocation { type, id }`, then the flags).
fn access_devices(p: u64, n: u64) -> Vec<u32> {
    if p == 0 {
        return Vec::new();
    }
    (0..n.min(64))
        .filter_map(|k| {
            let at = p + k * 12;
            // SAFETY: the program's array of `n` descriptors.
            let (kind, id) = unsafe {
                (std::ptr::read_unaligned(at as *const u32), std::ptr::read_unaligned((at + 4) as *const i32))
            };
            (kind == 1).then_some(u32::try_from(id).ok()).flatten()
        })
        .filter(|&d| devices::valid(d.into()))
        .collect()
}

/// The device a `CUmemAllocationProp` or `CUmemPoolProps` at `p` places memory on (both start
/// with two words, then `CUmemLocation { type, id }`; type 1 is a device).
fn location_device(p: u64) -> Option<u32> {
    if p == 0 {
        return None;
    }
    // SAFETY: the program's struct argument, at least 16 bytes (both types are larger).
    let (kind, id) =
        unsafe { (std::ptr::read_unaligned((p + 8) as *const u32), std::ptr::read_unaligned((p + 12) as *const i32)) };
    (kind == 1).then_some(u32::try_from(id).ok()).flatten().filter(|&d| devices::valid(d.into()))
}

/// Notes the homes of the handles a successful call made (its `Out` handle arguments): the
/// global device of the call's route. Nothing with one member.
///
/// # Safety
/// `raw` are the program's arguments to `f`, which succeeded.
pub(crate) unsafe fn created(f: &ApiFunction, raw: &[u64]) {
    if members() <= 1 || every() {
        return;
    }
    let r = current();
    let global = first_of(r.member) + r.device;
    let mut g = HOMES.lock().unwrap_or_else(|e| e.into_inner());
    let homes = g.get_or_insert_with(HashMap::new);
    for (i, a) in f.args.iter().enumerate() {
        let ArgKind::Handle(k) = a.kind else { continue };
        if a.dir != Direction::Out || matches!(k, HandleKind::Device | HandleKind::Context | HandleKind::Other) {
            continue;
        }
        let p = raw.get(i).copied().unwrap_or(0);
        if p != 0 {
            // SAFETY: the program's out-pointer for one handle, written by the call.
            // (A home given before, by the call itself, stays.)
            homes.entry(unsafe { std::ptr::read_unaligned(p as *const u64) }).or_insert(global);
        }
    }
}

/// Rewrites the device ordinals a record for the calling thread's route carries — device
/// arguments and memory locations (`CUmemAllocationProp`, `CUmemPoolProps`, `CUmemLocation`,
/// `CUmemAccessDesc`) — from the program's numbering to its server's own (which starts at 0).
pub(crate) fn localize(f: &ApiFunction, args: &mut [gpuless_traces::Value]) {
    use gpuless_traces::Value;
    let first = first_of(current().member);
    if first == 0 {
        return;
    }
    // A `CUmemLocation { type, id }` at `at` in `b`: a device's id (type 1) made local.
    let local = |b: &mut [u8], at: usize| {
        let (Some(kind), Some(id)) = (b.get(at..at + 4), b.get(at + 4..at + 8)) else { return };
        let (kind, id) = (
            u32::from_le_bytes([kind[0], kind[1], kind[2], kind[3]]),
            i32::from_le_bytes([id[0], id[1], id[2], id[3]]),
        );
        if kind == 1 && id >= first as i32 {
            b[at + 4..at + 8].copy_from_slice(&(id - first as i32).to_le_bytes());
        }
    };
    for (a, v) in f.args.iter().zip(args.iter_mut()) {
        match (a.kind, v) {
            (ArgKind::Handle(HandleKind::Device), Value::Handle(_, d)) if (*d as i32) >= first as i32 => {
                *d = u64::from((*d as u32) - first);
            }
            (ArgKind::Struct("CUmemAllocationProp" | "CUmemPoolProps"), Value::Bytes(b)) => local(b, 8),
            (ArgKind::Struct("CUmemLocation"), Value::Bytes(b)) => local(b, 0),
            (ArgKind::Structs { ty: "CUmemAccessDesc", .. }, Value::Bytes(b)) => {
                for k in 0..b.len() / 12 {
                    local(b, k * 12);
                }
            }
            _ => {}
        }
    }
}

/// Where `f` with arguments `raw` runs.
pub(crate) fn decide(f: &ApiFunction, raw: &[u64]) -> Decision {
    let cur = current_device();
    if members() <= 1 {
        return Decision::One(Route { member: 0, device: cur });
    }
    let mut named: Vec<u32> = Vec::new();
    for (i, a) in f.args.iter().enumerate() {
        if a.dir == Direction::Out {
            continue;
        }
        let v = raw.get(i).copied().unwrap_or(0);
        let d = match a.kind {
            // The legacy and per-thread default streams are the current context's.
            ArgKind::Handle(HandleKind::Stream) if v <= 2 => Some(cur),
            ArgKind::Handle(HandleKind::Context) if v != 0 => Some(device_of(v)),
            ArgKind::Handle(HandleKind::Device) => u32::try_from(v).ok().filter(|&d| devices::valid(d.into())),
            ArgKind::Handle(_) if v != 0 => home(v),
            // (Host addresses in the arena: mirrored pinned memory, a mapping's address.)
            ArgKind::DevPtr | ArgKind::AnyBuf(_) | ArgKind::HostPtr => device_of_address(v),
            ArgKind::Struct("CUmemAllocationProp" | "CUmemPoolProps") => location_device(v),
            ArgKind::Structs { ty: "CUmemAccessDesc", count_arg } => {
                // Access for devices: each one's server must map the memory.
                let n = raw.get(usize::from(count_arg)).copied().unwrap_or(0);
                named.extend(access_devices(v, n));
                None
            }
            _ => None,
        };
        named.extend(d);
    }
    let at = named.first().copied().unwrap_or(cur);
    let route = split(at);
    // (A call the client answers itself — a peer query — may name any devices.)
    if f.sent_by_client() && named.iter().any(|&d| split(d).member != route.member) {
        if logging() {
            eprintln!("gpuless: route {} -> apart (devices named {named:?})", f.name);
        }
        return Decision::Apart;
    }
    let here = split(cur);
    let route = if here.member == route.member { here } else { route };
    let d = if library_wide(f) { Decision::All(route) } else { Decision::One(route) };
    if logging() {
        eprintln!("gpuless: route {} -> {d:?} (devices named {named:?}, current {cur})", f.name);
    }
    d
}

/// Environment: `1` prints where each call of a session across several servers goes.
const ENV_LOG: &str = "GPULESS_ROUTE_LOG";

fn logging() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var(ENV_LOG).is_ok_and(|v| v == "1"))
}

/// Whether `f` makes or unmakes something of no context (a library, its kernels): every
/// member's executor needs it.
fn library_wide(f: &ApiFunction) -> bool {
    let library = |dir: Direction| {
        f.args
            .iter()
            .any(|a| a.dir == dir && matches!(a.kind, ArgKind::Handle(HandleKind::Library | HandleKind::Kernel)))
    };
    (f.sync == SyncClass::CreatesHandle && library(Direction::Out))
        || (f.sync == SyncClass::DestroysHandle && library(Direction::In))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_records_go_everywhere_and_queries_do_not() {
        let get = |n: &str| gpuless_analyzer::api::by_name(n).unwrap_or_else(|| panic!("{n}"));
        assert!(library_wide(get("cuLibraryLoadData")));
        assert!(library_wide(get("cuLibraryGetKernel")));
        assert!(library_wide(get("cuLibraryUnload")));
        assert!(!library_wide(get("cuLibraryGetGlobal")));
        assert!(!library_wide(get("cuModuleLoadData")));
        assert!(!library_wide(get("cuStreamCreate")));
    }
}
