//! Memory the host and the device both use directly (issue 21): managed memory and host memory
//! mapped for the device. The program reads and writes it without driver calls, so a trace of
//! its calls alone cannot be replayed; the recorder mirrors it instead
//! ([`gpuless_traces::hostview`]):
//!
//! - before a call that may submit work, while no kernel can be running (after a
//!   synchronization and before the next launch), every region whose bytes changed since the
//!   recorder last looked is stored (a `gpulessHostMemory` record: the host wrote it);
//! - after the program waited for the device, every region that changed is hashed (a
//!   `gpulessHostView` record: what the host can now read, verified by a replay).
//!
//! Reading managed memory from the host migrates it there, as the program's own reads do: a
//! program with large managed allocations records slower (never differently). Regions beyond
//! [`MAX_BYTES`] in all are not mirrored and a warning says so (their replay is not exact).
//!
//! This module keeps the regions and whose turn it is; the records are made by `mirror.rs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use gpuless_analyzer::api;
use gpuless_traces::Hash128;

/// Most bytes mirrored in all (`GPULESS_HOSTVIEW_MAX` overrides; 1 GiB by default).
pub const MAX_BYTES: u64 = 1 << 30;
/// `CU_MEMHOSTALLOC_DEVICEMAP` and `CU_MEMHOSTREGISTER_DEVICEMAP` (both 0x02).
const DEVICEMAP: u64 = 0x02;

/// What a call does to the mirrored regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `cuMemAllocManaged(dptr*, size, flags)`.
    AllocManaged,
    /// `cuMemHostAlloc(pp*, size, flags)`: mirrored with `DEVICEMAP`.
    HostAlloc,
    /// `cuMemHostRegister(p, size, flags)`: mirrored with `DEVICEMAP`.
    HostRegister,
    /// `cuMemFree(dptr)`, `cuMemFreeHost(p)`, `cuMemHostUnregister(p)`.
    Release,
}

/// The operation of API function `id`, if any.
pub fn op(id: api::ApiId) -> Option<Op> {
    let f = api::get(id)?;
    match f.name {
        _ if !f.modeled => None,
        "cuMemAllocManaged" => Some(Op::AllocManaged),
        "cuMemHostAlloc" => Some(Op::HostAlloc),
        "cuMemHostRegister" => Some(Op::HostRegister),
        "cuMemFree" | "cuMemFreeHost" | "cuMemHostUnregister" => Some(Op::Release),
        _ => None,
    }
}

struct Region {
    addr: u64,
    len: u64,
    /// The contents' hash when the recorder last stored or hashed them.
    seen: Option<Hash128>,
}

static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Whether the host may have written mirrored memory since the device last could: set by a
/// synchronization (and a new region), cleared by a call that runs kernels. Between a launch
/// and the next wait the device may be writing the memory, and a program may not write it
/// then either; looking would only read the device's half-done work.
static HOST_TURN: AtomicBool = AtomicBool::new(true);
static REGIONS: Mutex<Vec<Region>> = Mutex::new(Vec::new());

/// Whether any region is mirrored (one relaxed load on every hooked call).
#[inline]
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

fn limit() -> u64 {
    std::env::var("GPULESS_HOSTVIEW_MAX").ok().and_then(|v| v.parse().ok()).unwrap_or(MAX_BYTES)
}

/// Whether `p` lies in a region the recorder mirrors (a replay re-creates it as device memory).
pub fn contains(p: u64) -> bool {
    if !active() {
        return false;
    }
    let Ok(r) = REGIONS.lock() else { return false };
    r.iter().any(|g| p >= g.addr && p - g.addr < g.len)
}

/// Tracks the region a successful call created or released.
///
/// # Safety
/// `raw` are the program's arguments to the call (its out-pointers written by the driver).
pub unsafe fn track(op: Op, raw: &[u64]) {
    let arg = |i: usize| raw.get(i).copied().unwrap_or(0);
    // SAFETY (reads of out-pointers): the driver wrote them; the call succeeded.
    let (addr, len) = match op {
        Op::AllocManaged if arg(0) != 0 => (unsafe { *(arg(0) as *const u64) }, arg(1)),
        Op::HostAlloc if arg(0) != 0 && arg(2) & DEVICEMAP != 0 => (unsafe { *(arg(0) as *const u64) }, arg(1)),
        Op::HostRegister if arg(2) & DEVICEMAP != 0 => (arg(0), arg(1)),
        Op::Release => {
            let Ok(mut r) = REGIONS.lock() else { return };
            r.retain(|g| g.addr != arg(0));
            ACTIVE.store(!r.is_empty(), Ordering::Relaxed);
            return;
        }
        _ => return,
    };
    if addr == 0 || len == 0 {
        return;
    }
    let Ok(mut r) = REGIONS.lock() else { return };
    let held: u64 = r.iter().map(|g| g.len).sum();
    if held + len > limit() {
        eprintln!(
            "gpuless: {len} bytes of managed or mapped memory at {addr:#x} are not mirrored (more than \
             {} bytes in all; GPULESS_HOSTVIEW_MAX raises it): a replay of this trace will not see what the host wrote there",
            limit()
        );
        return;
    }
    r.push(Region { addr, len, seen: None });
    ACTIVE.store(true, Ordering::Relaxed);
    HOST_TURN.store(true, Ordering::Relaxed);
}

/// Calls `f(address, bytes, hash)` for every region whose bytes changed since it was last
/// seen (by either side), and remembers their new hash.
pub(crate) fn changed(mut f: impl FnMut(u64, &[u8], Hash128)) {
    let Ok(mut r) = REGIONS.lock() else { return };
    for g in r.iter_mut() {
        // SAFETY: a live region the program allocated or registered for both sides.
        let bytes = unsafe { std::slice::from_raw_parts(g.addr as *const u8, g.len as usize) };
        let h = Hash128::of(bytes);
        if g.seen != Some(h) {
            g.seen = Some(h);
            f(g.addr, bytes, h);
        }
    }
}

/// A call that runs kernels was made: until the next synchronization the device may write
/// mirrored memory, and the recorder stops looking for host writes.
pub fn device_turn() {
    HOST_TURN.store(false, Ordering::Relaxed);
}

/// Whether the host may have written mirrored memory since the device last could.
pub(crate) fn is_host_turn() -> bool {
    HOST_TURN.load(Ordering::Relaxed)
}

/// The program waited for the device: the host may write mirrored memory again.
pub(crate) fn host_turn() {
    HOST_TURN.store(true, Ordering::Relaxed);
}
