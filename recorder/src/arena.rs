//! The device-memory arena (issue 7): every device allocation the program makes through the
//! driver is served from one VMM range reserved at a fixed base, so recorded addresses are the
//! same in every recording and can be re-created exactly at replay.
//!
//! Placement is [`gpuless_traces::arena::Layout`] (shared with the replayer); this module backs
//! it with physical memory (`cuMemCreate` + `cuMemMap` + `cuMemSetAccess`, released on unmap),
//! answers pointer queries about arena memory as the driver would for `cuMemAlloc` memory, and
//! keeps the semantics of the calls it replaces:
//! - `cuMemFree` synchronizes the context first (as the driver's does) before memory is reused;
//! - `cuMemFreeAsync` keeps the memory until the stream has passed the free (an event), released
//!   at the next context/stream synchronization or when the arena would otherwise grow (so the
//!   addresses do not depend on timing);
//! - allocations on a capturing stream (a client's excepted: they come from the arena and stay
//!   for the graph's launches), on another device than the arena's, or when the arena could not
//!   be reserved pass through to the driver and land outside the arena;
//! - the program's own reservations (`cuMemAddressReserve`) are ranges of the arena it maps
//!   its own memory into (`cuMemMap`, the driver's): fixed addresses too, answered by the driver.
//!
//! Differences from `cuMemAlloc` memory: no legacy IPC (`cuIpcGetMemHandle` fails), no peer
//! access through `cuCtxEnablePeerAccess`, pool attributes do not apply to arena memory.

mod answers;
mod ops;
mod physical;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use cudarc::driver::sys;
use gpuless_traces::arena::{Layout, Placed, CHUNK, DEFAULT_BASES, DEFAULT_SIZE};

use crate::real;

use self::answers::{answer, Found};
pub use self::ops::{op, Op};
use self::physical::{map, unmap_all};

/// Environment: `off` disables the arena; a hex address sets the base to try.
pub const ENV_ARENA: &str = "GPULESS_ARENA";
/// Environment: arena size in bytes (default 1 TiB).
pub const ENV_ARENA_SIZE: &str = "GPULESS_ARENA_SIZE";

const SUCCESS: u32 = 0;
const INVALID_VALUE: u32 = 1;
const OUT_OF_MEMORY: u32 = 2;
const INVALID_CONTEXT: u32 = 201;
const NOT_FOUND: u32 = 500;
/// `CU_STREAM_PER_THREAD`.
const STREAM_PER_THREAD: u64 = 2;
/// Pitch alignment of `cuMemAllocPitch` allocations.
const PITCH_ALIGN: u64 = 512;

struct Info {
    ctx: u64,
    id: u64,
    /// The memory pool a stream-ordered allocation came from (`None`: `cuMemAlloc` memory).
    pool: Option<u64>,
    /// `CU_POINTER_ATTRIBUTE_SYNC_MEMOPS` as the program set it (device memory starts at 1).
    sync_memops: u32,
}

struct Deferred {
    addr: u64,
    stream: u64,
    event: Option<sys::CUevent>,
}

struct Arena {
    /// One layout per device, over its slice of the range ([`gpuless_traces::devices`]): one
    /// when recording, as many as a client's session has devices.
    layouts: Vec<Layout>,
    /// The device of the arena's memory when recording (its first allocation's): allocations
    /// on another device pass through to the driver.
    device: Option<i32>,
    info: HashMap<u64, Info>,
    deferred: Vec<Deferred>,
    events: Vec<sys::CUevent>,
    next_id: u64,
}

// SAFETY: the raw event handles are only used under the mutex, and driver handles may be used
// from any thread.
unsafe impl Send for Arena {}

static ARENA: Mutex<Option<Arena>> = Mutex::new(None);
/// The reserved range, readable without the lock: base and size (0 when there is none).
static BASE: AtomicU64 = AtomicU64::new(0);
static SIZE: AtomicU64 = AtomicU64::new(0);
/// Devices the range is split among (a client's session of several GPUs), set before
/// [`reserve`].
static DEVICES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

/// Splits the arena [`reserve`] makes among `n` devices: device `k`'s allocations come from
/// slice `k` (a client's session of several GPUs).
pub fn split_among(n: u32) {
    DEVICES.store(n.max(1), Ordering::Relaxed);
}

impl Arena {
    /// The layout of the slice holding `ptr` (the first for an address outside every slice).
    fn layout(&self, ptr: u64) -> &Layout {
        &self.layouts[self.slice(ptr)]
    }
    fn layout_mut(&mut self, ptr: u64) -> &mut Layout {
        let k = self.slice(ptr);
        &mut self.layouts[k]
    }
    fn slice(&self, ptr: u64) -> usize {
        let (base, size) = (BASE.load(Ordering::Relaxed), SIZE.load(Ordering::Relaxed));
        let k = gpuless_traces::devices::device_of(base, size, self.layouts.len() as u32, ptr).unwrap_or(0) as usize;
        k.min(self.layouts.len().saturating_sub(1))
    }
}

fn in_arena(ptr: u64) -> bool {
    let base = BASE.load(Ordering::Relaxed);
    base != 0 && ptr >= base && ptr - base < SIZE.load(Ordering::Relaxed)
}

/// Whether `ptr` lies in the arena's reserved range.
pub fn contains(ptr: u64) -> bool {
    in_arena(ptr)
}

/// The program's own reservation (`cuMemAddressReserve`) containing `ptr`: (address, length).
/// Its memory is the program's (`cuMemMap`): the driver answers for it, not the arena.
pub fn reservation(ptr: u64) -> Option<(u64, u64)> {
    if !in_arena(ptr) {
        return None;
    }
    ARENA.lock().ok()?.as_ref()?.layout(ptr).reservation(ptr)
}

/// Whether `len` bytes at `p` may be copied or set: outside the arena the driver decides; in
/// it they must lie in one live allocation (or in the program's own reservation, whose
/// mappings the driver checks).
fn range_ok(p: u64, len: u64) -> bool {
    if !in_arena(p) || reservation(p).is_some() {
        return true;
    }
    let Some(Some(f)) = lookup(p) else { return false };
    p.checked_add(len).is_some_and(|end| end <= f.base + f.size.max(1))
}

/// Arena memory the arena answers for: inside the range, outside the program's reservations.
fn arena_owned(ptr: u64) -> bool {
    in_arena(ptr) && reservation(ptr).is_none()
}

/// `cuMemAddressReserve(ptr*, size, alignment, addr, flags)`: the program's reservation is a
/// range of the arena (its `addr` a hint honoured when that range is free), so its addresses
/// are as fixed as the arena's allocations, in a recording, at replay and for a client.
unsafe fn address_reserve(out: u64, size: u64, align: u64, hint: u64) -> Option<u32> {
    if out == 0 {
        return None; // the driver's own error
    }
    let mut guard = ARENA.lock().ok()?;
    let a = guard.as_mut()?;
    if size == 0 || size % CHUNK != 0 || (align != 0 && (!align.is_power_of_two() || align % CHUNK != 0)) {
        return Some(INVALID_VALUE);
    }
    // In the current device's slice (the hint's, where it names one).
    let k = match a.layouts.len() {
        1 => 0,
        _ if in_arena(hint) => a.slice(hint),
        _ => current().map_or(0, |(_, _, d)| d.max(0) as usize),
    };
    let layout = a.layouts.get_mut(k)?;
    let Some(addr) = layout.reserve(size, align, hint) else { return Some(OUT_OF_MEMORY) };
    // SAFETY: the program's out-pointer.
    unsafe { *(out as *mut u64) = addr };
    Some(SUCCESS)
}

/// `cuMemAddressFree(ptr, size)` of a reservation in the arena.
unsafe fn address_free(ptr: u64, size: u64) -> Option<u32> {
    if !in_arena(ptr) {
        return None;
    }
    let mut guard = ARENA.lock().ok()?;
    let a = guard.as_mut()?;
    Some(if a.layout_mut(ptr).unreserve(ptr, size) { SUCCESS } else { INVALID_VALUE })
}

/// A range of `size` bytes (a multiple of the chunk) reserved in the arena for memory mapped
/// from elsewhere (client mode: another process's memory, `remote/ipc.rs`), in the current
/// device's slice; `None` without an arena or room.
pub fn reserve_range(size: u64) -> Option<u64> {
    let mut out = 0u64;
    // SAFETY: a valid out-pointer.
    match unsafe { address_reserve(&raw mut out as u64, size, CHUNK, 0) } {
        Some(SUCCESS) => Some(out),
        _ => None,
    }
}

/// Gives back a range [`reserve_range`] reserved; whether it was one.
pub fn free_range(addr: u64, size: u64) -> bool {
    // SAFETY: no pointer is written.
    let freed = unsafe { address_free(addr, size) };
    freed == Some(SUCCESS)
}

/// The pool a stream-ordered arena allocation holding `ptr` came from.
pub fn pool_of(ptr: u64) -> Option<u64> {
    if !in_arena(ptr) {
        return None;
    }
    lookup(ptr)??.pool
}

/// The live arena allocation holding `ptr`: (base, size); `None` outside every one.
pub fn allocation(ptr: u64) -> Option<(u64, u64)> {
    if !in_arena(ptr) {
        return None;
    }
    lookup(ptr)?.map(|f| (f.base, f.size))
}

/// Reserves the arena (after `cuInit`; no context is needed). Returns the base and size, or
/// `None` when disabled or no base could be had (allocations then pass through).
pub fn reserve() -> Option<(u64, u64)> {
    let setting = std::env::var(ENV_ARENA).unwrap_or_default();
    if matches!(setting.as_str(), "off" | "0" | "no" | "false") {
        return None;
    }
    let size = std::env::var(ENV_ARENA_SIZE)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map_or(DEFAULT_SIZE, |s| s.div_ceil(CHUNK) * CHUNK);
    let configured = u64::from_str_radix(setting.trim_start_matches("0x"), 16).ok().filter(|b| b % CHUNK == 0);
    let bases: Vec<u64> = configured.map_or_else(|| DEFAULT_BASES.to_vec(), |b| vec![b]);
    let r = real::get()?;
    let mut guard = ARENA.lock().ok()?;
    if guard.is_some() {
        return Some((BASE.load(Ordering::Relaxed), SIZE.load(Ordering::Relaxed)));
    }
    for base in bases {
        let mut got: sys::CUdeviceptr = 0;
        // SAFETY: valid out-pointer; a reservation has no other effect.
        let st = unsafe { (r.address_reserve)(&mut got, size as usize, CHUNK as usize, base, 0) };
        if st != sys::CUresult::CUDA_SUCCESS {
            continue;
        }
        if got != base {
            // SAFETY: releasing the range just reserved.
            unsafe { (r.address_free)(got, size as usize) };
            continue;
        }
        let n = DEVICES.load(Ordering::Relaxed).max(1);
        let slice = gpuless_traces::devices::slice_size(size, n);
        *guard = Some(Arena {
            layouts: (0..u64::from(n)).map(|k| Layout::new(base + k * slice, slice)).collect(),
            device: None,
            info: HashMap::new(),
            deferred: Vec::new(),
            events: Vec::new(),
            next_id: 1,
        });
        SIZE.store(size, Ordering::Relaxed);
        BASE.store(base, Ordering::Release);
        return Some((base, size));
    }
    eprintln!("gpuless: could not reserve the device-memory arena at any of its bases; allocations pass through and replay will translate pointers");
    None
}

/// Serves `op` instead of the driver when it concerns the arena: `Some(status)` if served,
/// `None` to call the driver.
///
/// # Safety
/// `raw` are the program's arguments to the call, in the API table's order.
pub unsafe fn before(op: Op, raw: &[u64], per_thread: bool) -> Option<u32> {
    if BASE.load(Ordering::Acquire) == 0 {
        return None;
    }
    let arg = |i: usize| raw.get(i).copied().unwrap_or(0);
    let stream = |i: usize| if arg(i) == 0 && per_thread { STREAM_PER_THREAD } else { arg(i) };
    // SAFETY: forwarded from the caller.
    unsafe {
        match op {
            Op::Alloc => alloc(arg(0), arg(1), None, None),
            Op::AllocAsync => alloc(arg(0), arg(1), Some(stream(2)), None),
            Op::AllocFromPool => alloc(arg(0), arg(1), Some(stream(3)), Some(arg(2))),
            Op::AllocPitch => alloc_pitch(arg(0), arg(1), arg(2), arg(3), arg(4)),
            Op::Free => free(arg(0)),
            Op::FreeAsync => free_async(arg(0), stream(1)),
            Op::AddressRange => address_range(arg(0), arg(1), arg(2)),
            Op::PointerAttribute => pointer_attribute(arg(0), arg(1), arg(2)),
            Op::PointerSetAttribute => set_pointer_attribute(arg(0), arg(1), arg(2)),
            Op::AddressReserve => address_reserve(arg(0), arg(1), arg(2), arg(3)),
            Op::AddressFree => address_free(arg(0), arg(1)),
            Op::PoolGetAttribute => crate::pools::get(arg(0), arg(1), arg(2)),
            Op::PoolSetAttribute => crate::pools::set(arg(0), arg(1), arg(2)),
            Op::PoolTrimTo => {
                crate::pools::trim(arg(0), arg(1));
                None
            }
            Op::PoolDestroy => {
                crate::pools::destroyed(arg(0));
                None
            }
            Op::Range { a, b, len, unit } => {
                let n = arg(usize::from(len)).saturating_mul(u64::from(unit));
                let bad = |p: u64| n != 0 && !range_ok(p, n);
                (bad(arg(usize::from(a))) || (b != 255 && bad(arg(usize::from(b))))).then_some(INVALID_VALUE)
            }
            Op::PointerAttributes | Op::CtxSync | Op::StreamSync => None,
        }
    }
}

/// Work after the driver's call: releasing async frees at synchronizations, correcting the
/// driver's answers about arena memory.
///
/// # Safety
/// As [`before`].
pub unsafe fn after(op: Op, raw: &[u64], per_thread: bool, status: u32) {
    if status != SUCCESS || BASE.load(Ordering::Acquire) == 0 {
        return;
    }
    let arg = |i: usize| raw.get(i).copied().unwrap_or(0);
    match op {
        Op::CtxSync => {
            release_deferred(None);
            crate::pools::synchronized();
        }
        Op::StreamSync => {
            let s = if arg(0) == 0 && per_thread { STREAM_PER_THREAD } else { arg(0) };
            release_deferred(Some(s));
            crate::pools::synchronized();
        }
        // SAFETY: forwarded from the caller; the driver succeeded.
        Op::PointerAttributes => unsafe { pointer_attributes(arg(0), arg(1), arg(2), arg(3)) },
        _ => {}
    }
}

fn current() -> Option<(&'static real::Real, u64, i32)> {
    let r = real::get()?;
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    let mut dev: sys::CUdevice = 0;
    // SAFETY: valid out-pointers.
    unsafe {
        if (r.ctx_get_current)(&mut ctx) != sys::CUresult::CUDA_SUCCESS || ctx.is_null() {
            return Some((r, 0, -1));
        }
        if (r.ctx_get_device)(&mut dev) != sys::CUresult::CUDA_SUCCESS {
            return Some((r, ctx as u64, -1));
        }
    }
    Some((r, ctx as u64, dev))
}

/// Serves an allocation from the arena. `stream`: a stream-ordered allocation on that stream,
/// from `pool` (`None`: the device's current pool).
unsafe fn alloc(out: u64, size: u64, stream: Option<u64>, pool: Option<u64>) -> Option<u32> {
    if out == 0 || size == 0 {
        return None; // the driver's own error
    }
    let (r, ctx, dev) = current()?;
    if ctx == 0 {
        return Some(INVALID_CONTEXT);
    }
    let mut captured = false;
    if let Some(s) = stream {
        let mut cap = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: a stream handle from the program; valid out-pointer.
        let st = unsafe { (r.stream_is_capturing)(s as sys::CUstream, &mut cap) };
        captured = cap != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // Recording, graph memory nodes belong to the driver; a client serves them from the
        // arena too (its executor keeps the memory for the graph's launches).
        if st != sys::CUresult::CUDA_SUCCESS || (captured && !crate::mode::active()) {
            return None;
        }
    }
    let mut guard = ARENA.lock().ok()?;
    let a = guard.as_mut()?;
    // A client's session of several devices: the current device's slice; recording: the
    // arena's one device.
    let slice = if a.layouts.len() > 1 {
        usize::try_from(dev).ok().filter(|&k| k < a.layouts.len())?
    } else {
        if *a.device.get_or_insert(dev) != dev {
            return None;
        }
        0
    };
    // A stream-ordered allocation reports the pool it came from, as the driver's do.
    let pool = stream.map(|_| {
        pool.unwrap_or_else(|| {
            let mut p: sys::CUmemoryPool = std::ptr::null_mut();
            // SAFETY: valid out-pointer; `dev` is the current context's device.
            unsafe { (r.device_get_mem_pool)(&mut p, dev) };
            p as u64
        })
    });
    match a.place(r, size, slice) {
        Ok(addr) => {
            let id = a.next_id;
            a.next_id += 1;
            if let Some(p) = pool {
                crate::pools::allocated(p, size);
            }
            a.info.insert(addr, Info { ctx, id, pool, sync_memops: 1 });
            if captured {
                // A client's allocation captured into a graph: graph memory.
                crate::graph_books::captured(addr, size);
            }
            // SAFETY: the program's out-pointer for the address.
            unsafe { *(out as *mut u64) = addr };
            Some(SUCCESS)
        }
        Err(code) => Some(code),
    }
}

unsafe fn alloc_pitch(out: u64, pitch_out: u64, width: u64, height: u64, elem: u64) -> Option<u32> {
    if out == 0 || pitch_out == 0 || width == 0 || height == 0 || !matches!(elem, 4 | 8 | 16) {
        return None;
    }
    let pitch = width.div_ceil(PITCH_ALIGN) * PITCH_ALIGN;
    // SAFETY: forwarded.
    let st = unsafe { alloc(out, pitch.checked_mul(height)?, None, None) }?;
    if st == SUCCESS {
        // SAFETY: the program's out-pointer for the pitch.
        unsafe { *(pitch_out as *mut usize) = pitch as usize };
    }
    Some(st)
}

impl Arena {
    /// Finds room for `size` bytes in slice `k` and maps what is new; OOM after giving back
    /// what it can.
    fn place(&mut self, r: &real::Real, size: u64, k: usize) -> Result<u64, u32> {
        if !self.deferred.is_empty() && !self.layouts[k].fits_mapped(size) {
            self.release_all(r);
        }
        let device = if self.layouts.len() > 1 { k as i32 } else { self.device.unwrap_or(0) };
        for attempt in 0..2 {
            let p = self.layouts[k].alloc(size).ok_or(OUT_OF_MEMORY)?;
            let Some((addr, len)) = p.map else { return Ok(p.addr) };
            match map(r, device, addr, len) {
                Ok(()) => return Ok(p.addr),
                Err(code) => {
                    let back = self.layouts[k].undo(Placed { addr: p.addr, map: p.map });
                    unmap_all(r, &back);
                    if attempt == 1 || code != OUT_OF_MEMORY {
                        return Err(code);
                    }
                    // Out of memory: give back kept chunks and pending async frees, then retry.
                    self.release_all(r);
                    let kept = self.layouts[k].trim();
                    unmap_all(r, &kept);
                }
            }
        }
        Err(OUT_OF_MEMORY)
    }

    /// An allocation of `size` bytes at `addr` is gone: its facts, and its pool's use of it.
    fn forget(&mut self, addr: u64, size: u64) {
        if let Some(p) = self.info.remove(&addr).and_then(|i| i.pool) {
            crate::pools::released(p, size);
        }
    }

    fn release_all(&mut self, r: &real::Real) {
        for d in std::mem::take(&mut self.deferred) {
            if let Some(ev) = d.event {
                // SAFETY: an event this module created and recorded.
                unsafe { (r.event_synchronize)(ev) };
                self.events.push(ev);
            }
            if let Some(rel) = self.layout_mut(d.addr).free(d.addr) {
                self.forget(d.addr, rel.size);
                unmap_all(r, &rel.unmap);
            }
        }
    }
}

unsafe fn free(ptr: u64) -> Option<u32> {
    if !in_arena(ptr) {
        return None;
    }
    let r = real::get()?;
    // `cuMemFree` waits for the work that may still use the memory.
    // SAFETY: no arguments; an error (no context) changes nothing.
    unsafe { (r.ctx_synchronize)() };
    if crate::mode::active() && crate::graph_books::is_graph_memory(ptr) {
        // A graph's allocation freed outside the graph: kept for its next launch.
        return Some(SUCCESS);
    }
    let mut guard = ARENA.lock().ok()?;
    let a = guard.as_mut()?;
    if a.deferred.iter().any(|d| d.addr == ptr) {
        return Some(INVALID_VALUE);
    }
    match a.layout_mut(ptr).free(ptr) {
        Some(rel) => {
            a.forget(ptr, rel.size);
            unmap_all(r, &rel.unmap);
            Some(SUCCESS)
        }
        None => Some(INVALID_VALUE),
    }
}

unsafe fn free_async(ptr: u64, stream: u64) -> Option<u32> {
    if !in_arena(ptr) {
        return None;
    }
    let r = real::get()?;
    let mut guard = ARENA.lock().ok()?;
    let a = guard.as_mut()?;
    if a.layout(ptr).find(ptr).is_none_or(|(base, _)| base != ptr) || a.deferred.iter().any(|d| d.addr == ptr) {
        return Some(INVALID_VALUE);
    }
    if crate::mode::active() && crate::graph_books::is_graph_memory(ptr) {
        // A graph's allocation (freed in a capture or after a launch): kept for its launches.
        return Some(SUCCESS);
    }
    let mut cap = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the program's stream; valid out-pointer.
    let capturing = unsafe { (r.stream_is_capturing)(stream as sys::CUstream, &mut cap) };
    if capturing != sys::CUresult::CUDA_SUCCESS {
        return Some(capturing as u32);
    }
    let event = if cap == sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
        let ev = match a.events.pop() {
            Some(ev) => ev,
            None => {
                let mut ev: sys::CUevent = std::ptr::null_mut();
                // SAFETY: valid out-pointer; 2 = CU_EVENT_DISABLE_TIMING.
                let st = unsafe { (r.event_create)(&mut ev, 2) };
                if st != sys::CUresult::CUDA_SUCCESS {
                    return Some(st as u32);
                }
                ev
            }
        };
        // SAFETY: our event, the program's stream.
        let st = unsafe { (r.event_record)(ev, stream as sys::CUstream) };
        if st != sys::CUresult::CUDA_SUCCESS {
            a.events.push(ev);
            return Some(st as u32);
        }
        Some(ev)
    } else if crate::mode::active() {
        // A client's free captured into a graph is the graph's free node: the memory stays
        // for the graph's launches (the executor keeps it), its address never given again.
        return Some(SUCCESS);
    } else {
        // Freed inside a capture: released at the next context synchronization.
        None
    };
    a.deferred.push(Deferred { addr: ptr, stream, event });
    Some(SUCCESS)
}

/// Releases async frees that a synchronization has completed: all of them (`None`, a context
/// synchronization, including frees made during a capture) or those of one stream.
fn release_deferred(stream: Option<u64>) {
    let Some(r) = real::get() else { return };
    let Ok(mut guard) = ARENA.lock() else { return };
    let Some(a) = guard.as_mut() else { return };
    if a.deferred.is_empty() {
        return;
    }
    let (now, later): (Vec<Deferred>, Vec<Deferred>) = std::mem::take(&mut a.deferred)
        .into_iter()
        .partition(|d| stream.is_none_or(|s| d.event.is_some() && d.stream == s));
    a.deferred = later;
    for d in now {
        if let Some(ev) = d.event {
            // SAFETY: our recorded event; already complete after the synchronization.
            unsafe { (r.event_synchronize)(ev) };
            a.events.push(ev);
        }
        if let Some(rel) = a.layout_mut(d.addr).free(d.addr) {
            a.forget(d.addr, rel.size);
            unmap_all(r, &rel.unmap);
        }
    }
}

/// The live arena allocation containing `ptr`.
fn lookup(ptr: u64) -> Option<Option<Found>> {
    let guard = ARENA.lock().ok()?;
    let a = guard.as_ref()?;
    Some(a.layout(ptr).find(ptr).map(|(base, size)| {
        let i = a.info.get(&base);
        Found {
            base,
            size,
            ctx: i.map_or(0, |i| i.ctx),
            id: i.map_or(0, |i| i.id),
            pool: i.and_then(|i| i.pool),
            sync_memops: i.map_or(1, |i| i.sync_memops),
        }
    }))
}

unsafe fn address_range(pbase: u64, psize: u64, ptr: u64) -> Option<u32> {
    if !arena_owned(ptr) {
        return None;
    }
    let Some(Found { base, size, .. }) = lookup(ptr)? else { return Some(NOT_FOUND) };
    // SAFETY: the program's (optional) out-pointers.
    unsafe {
        if pbase != 0 {
            *(pbase as *mut u64) = base;
        }
        if psize != 0 {
            *(psize as *mut usize) = size as usize;
        }
    }
    Some(SUCCESS)
}

/// `cuPointerSetAttribute` on arena memory: `SYNC_MEMOPS` is kept per allocation (VMM memory
/// refuses it with `CUDA_ERROR_NOT_SUPPORTED`, `cuMemAlloc` memory takes it); the driver
/// refuses every other attribute on device memory with `CUDA_ERROR_INVALID_VALUE`, and so
/// does the arena.
unsafe fn set_pointer_attribute(value: u64, attr: u64, ptr: u64) -> Option<u32> {
    if !arena_owned(ptr) {
        return None;
    }
    let mut guard = ARENA.lock().ok()?;
    let a = guard.as_mut()?;
    let Some((base, _)) = a.layout(ptr).find(ptr) else { return Some(INVALID_VALUE) };
    if attr != sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS as u64 || value == 0 {
        return Some(INVALID_VALUE);
    }
    // SAFETY: the program's pointer to the attribute's value (an unsigned int).
    let v = unsafe { *(value as *const u32) };
    if let Some(i) = a.info.get_mut(&base) {
        i.sync_memops = u32::from(v != 0);
    }
    Some(SUCCESS)
}

unsafe fn pointer_attribute(data: u64, attr: u64, ptr: u64) -> Option<u32> {
    if !arena_owned(ptr) || data == 0 {
        return None;
    }
    let Some(found) = lookup(ptr)? else { return Some(INVALID_VALUE) };
    // SAFETY: forwarded.
    unsafe { answer(attr, data, found) }.then_some(SUCCESS)
}

unsafe fn pointer_attributes(count: u64, attrs: u64, data: u64, ptr: u64) {
    if !arena_owned(ptr) || attrs == 0 || data == 0 {
        return;
    }
    let Some(Some(found)) = lookup(ptr) else { return };
    for i in 0..count.min(64) as usize {
        // SAFETY: `count` attributes and as many result pointers (the call succeeded).
        unsafe {
            let attr = *(attrs as *const u32).add(i) as u64;
            let slot = *(data as *const u64).add(i);
            if slot != 0 {
                answer(attr, slot, found);
            }
        }
    }
}
