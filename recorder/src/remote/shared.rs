//! Managed memory in client mode (`cuMemAllocManaged`): one address on both sides.
//!
//! The client places the allocation in its arena, as any device allocation, and maps host
//! memory of its own at that address; the executor backs the same address with device memory
//! (zeroed, as the client's pages are). The two copies are made coherent at the points CUDA
//! defines for a device without concurrent managed access (the device's own attributes are
//! reported, but the host touching managed memory while kernels run sees what it saw at the
//! last wait, and its writes reach the device at the next submission):
//!
//! - **What the host wrote reaches the device before the next work the server runs.** Pages
//!   are mapped read-only; the first write to one faults, the handler ([`on_fault`]) marks the
//!   page dirty and makes it writable. Before the next record goes to the server, the dirty
//!   pages' bytes go first (`gpulessHostMemory` records, [`take_dirty`]) and the pages become
//!   read-only again. Pages the host did not write are not sent.
//! - **What the device wrote reaches the host when the program waits.** Every wait for the
//!   server ends with a `gpulessHostPull` record: the executor compares the managed memory
//!   with what the client last saw and answers the blocks that changed ([`apply_pull`]).
//!
//! The fault handler is installed for SIGSEGV in front of whatever handled it before (the
//! program's, the recorder's crash handler or the default), which still gets every fault that
//! is not a first write to managed memory.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};

use super::step::Step;

/// Page size of the host mappings (what a fault marks dirty).
pub(crate) const PAGE: u64 = 4096;
/// Most managed allocations at once.
const SLOTS: usize = 1024;

/// A managed allocation: its range and one dirty bit per page it touches.
struct Slot {
    start: AtomicU64,
    len: AtomicU64,
    /// A leaked `[AtomicU64]` of one bit per page of `[page_of(start), page_end(start + len))`.
    bits: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot { start: AtomicU64::new(0), len: AtomicU64::new(0), bits: AtomicU64::new(0) };
static TABLE: [Slot; SLOTS] = [EMPTY; SLOTS];
/// Slots in use may lie below this index.
static USED: AtomicUsize = AtomicUsize::new(0);
/// Pages marked dirty since the last [`take_dirty`].
static DIRTY: AtomicU64 = AtomicU64::new(0);
/// Live managed allocations.
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// Allocations shared over the session, their bytes, and the dirty pages sent (the counts at
/// exit).
static EVER: AtomicU64 = AtomicU64::new(0);
static EVER_BYTES: AtomicU64 = AtomicU64::new(0);
static PAGES_UP: AtomicU64 = AtomicU64::new(0);

/// (allocations shared, their bytes, dirty pages sent) over the session so far.
pub(crate) fn counts() -> (u64, u64, u64) {
    (EVER.load(Ordering::Relaxed), EVER_BYTES.load(Ordering::Relaxed), PAGES_UP.load(Ordering::Relaxed))
}
/// Host pages mapped, with how many allocations share each.
static PAGES: LazyLock<Mutex<HashMap<u64, u32>>> = LazyLock::new(Default::default);
/// Pages of the program's own (`adopt`): made writable again when released, never unmapped.
static ADOPTED: LazyLock<Mutex<std::collections::HashSet<u64>>> = LazyLock::new(Default::default);
/// The handler that had SIGSEGV before ours.
static mut PREVIOUS: Option<libc::sigaction> = None;
static INSTALLED: AtomicBool = AtomicBool::new(false);

fn page_of(a: u64) -> u64 {
    a & !(PAGE - 1)
}

fn page_end(a: u64) -> u64 {
    a.div_ceil(PAGE) * PAGE
}

/// Whether managed memory is live (one relaxed load on the hot path).
#[inline]
pub(crate) fn active() -> bool {
    LIVE.load(Ordering::Relaxed) > 0
}

/// Whether any page was written since the last [`take_dirty`].
#[inline]
pub(crate) fn dirty() -> bool {
    DIRTY.load(Ordering::Relaxed) > 0
}

/// Whether `p` lies in a live managed allocation.
pub(crate) fn contains(p: u64) -> bool {
    active() && slot_of(p).is_some()
}

fn slot_of(p: u64) -> Option<usize> {
    (0..USED.load(Ordering::Acquire)).find(|&i| {
        let (s, n) = (TABLE[i].start.load(Ordering::Acquire), TABLE[i].len.load(Ordering::Acquire));
        n != 0 && p >= s && p - s < n
    })
}

/// `cuMemAllocManaged(dptr*, bytesize, flags)`: an arena address, host memory mapped there.
///
/// # Safety
/// `raw` are the program's arguments.
pub(crate) unsafe fn alloc_managed(raw: &[u64]) -> Step {
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    // CU_MEM_ATTACH_GLOBAL (1) or CU_MEM_ATTACH_HOST (2), as the driver accepts.
    if w(0) == 0 || w(1) == 0 || !matches!(w(2), 1 | 2) {
        return Step::Done(1);
    }
    // SAFETY: the program's out-pointer and size.
    Step::Done(unsafe { place(w(0), w(1), "cuMemAllocManaged") }.unwrap_or(2))
}

/// Memory shared with the device at an arena address, written to `out`: the arena's
/// allocation with host pages mapped there. `None` when there is no arena.
///
/// # Safety
/// `out` is the program's out-pointer for the address (non-null).
unsafe fn place(out: u64, len: u64, what: &str) -> Option<u32> {
    // SAFETY: the caller's out-pointer and size, as for cuMemAlloc.
    match unsafe { crate::arena::before(crate::arena::Op::Alloc, &[out, len], false) }? {
        0 => {}
        st => return Some(st),
    }
    // SAFETY: written by the arena just now.
    let addr = unsafe { *(out as *const u64) };
    if !add(addr, len) {
        eprintln!(
            "gpuless: {what}: the {len} bytes at {addr:#x} cannot be mapped in this process (taken, or more than \
             {SLOTS} shared allocations): CUDA_ERROR_OUT_OF_MEMORY"
        );
        // SAFETY: the arena allocation just made.
        unsafe { crate::arena::before(crate::arena::Op::Free, &[addr], false) };
        return Some(2);
    }
    Some(0)
}

/// `cuMemHostAlloc` with `DEVICEMAP`: mirrored as managed memory is, at an arena address
/// (`host.rs`). `None` when there is no arena (the caller allocates plain memory).
///
/// # Safety
/// `out` is the program's out-pointer for the address (non-null).
pub(crate) unsafe fn alloc_mirrored(out: u64, len: u64) -> Option<u32> {
    // SAFETY: forwarded.
    unsafe { place(out, len, "cuMemHostAlloc") }
}

/// `cuMemFreeHost` of mirrored memory: its pages and its arena range go.
pub(crate) fn free_mirrored(addr: u64) {
    remove(addr);
    // SAFETY: the arena allocation `alloc_mirrored` made.
    unsafe { crate::arena::before(crate::arena::Op::Free, &[addr], false) };
}

/// What the program advised and prefetched for a managed allocation (the server's memory is
/// device memory, where hints have nothing to act on: the client answers range attributes).
#[derive(Default, Clone)]
struct Hints {
    read_mostly: bool,
    /// (`CUmemLocationType`, id) of the preferred location.
    preferred: Option<(u32, i32)>,
    accessed_by: Vec<i32>,
    /// (`CUmemLocationType`, id) of the last prefetch.
    prefetched: Option<(u32, i32)>,
}

static HINTS: LazyLock<Mutex<HashMap<u64, Hints>>> = LazyLock::new(Default::default);

/// `CU_MEM_LOCATION_TYPE_DEVICE`, `_HOST`; `CU_DEVICE_CPU`, `CU_DEVICE_INVALID`.
const LOC_DEVICE: u32 = 1;
const LOC_HOST: u32 = 2;
const DEVICE_CPU: i32 = -1;
const DEVICE_INVALID: i32 = -2;

/// A location as a legacy device number (`CU_DEVICE_CPU` for the host).
fn as_device(l: Option<(u32, i32)>) -> i32 {
    match l {
        Some((LOC_DEVICE, id)) => id,
        Some(_) => DEVICE_CPU,
        None => DEVICE_INVALID,
    }
}

/// Notes an advice or prefetch of managed memory (`cuMemAdvise[_v2]`, `cuMemPrefetchAsync[_v2]`).
///
/// # Safety
/// `raw` are the program's arguments to `name`.
pub(crate) unsafe fn note_hint(name: &str, v2: bool, raw: &[u64]) {
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    let Some(i) = slot_of(w(0)) else { return };
    let start = TABLE[i].start.load(Ordering::Acquire);
    // A CUmemLocation passed by value reaches the hook as the address of its 8 bytes
    // (type, then id).
    let loc = |x: u64| {
        if x == 0 {
            return (0, 0);
        }
        // SAFETY: the hook's copy of the program's struct argument.
        let v = unsafe { std::ptr::read_unaligned(x as *const u64) };
        (v as u32, (v >> 32) as i32)
    };
    let dev = |x: u64| if x as i32 == DEVICE_CPU { (LOC_HOST, 0) } else { (LOC_DEVICE, x as i32) };
    let mut g = HINTS.lock().unwrap_or_else(|e| e.into_inner());
    let h = g.entry(start).or_default();
    if name == "cuMemPrefetchAsync" {
        h.prefetched = Some(if v2 { loc(w(2)) } else { dev(w(2)) });
        return;
    }
    let at = if v2 { loc(w(3)) } else { dev(w(3)) };
    match w(2) {
        1 => h.read_mostly = true,
        2 => h.read_mostly = false,
        3 => h.preferred = Some(at),
        4 => h.preferred = None,
        5 if !h.accessed_by.contains(&at.1) => h.accessed_by.push(at.1),
        6 => h.accessed_by.retain(|&d| d != at.1),
        _ => {}
    }
}

/// `cuMemRangeGetAttribute(data, dataSize, attribute, devPtr, count)` for managed memory, from
/// what the program advised and prefetched.
///
/// # Safety
/// `raw` are the program's arguments; `data` holds `dataSize` bytes.
pub(crate) unsafe fn range_attribute(raw: &[u64]) -> Step {
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    let (data, size, attr, p, count) = (w(0), w(1) as usize, w(2), w(3), w(4));
    let Some(i) = slot_of(p) else { return Step::Done(1) };
    if data == 0 || count == 0 || size < 4 || size % 4 != 0 || slot_of(p + count - 1) != Some(i) {
        return Step::Done(1);
    }
    let h = HINTS.lock().unwrap_or_else(|e| e.into_inner()).get(&TABLE[i].start.load(Ordering::Acquire)).cloned();
    let h = h.unwrap_or_default();
    let ints: Vec<i32> = match attr {
        1 => vec![i32::from(h.read_mostly)],
        2 => vec![as_device(h.preferred)],
        3 => h.accessed_by.clone(),
        4 => vec![as_device(h.prefetched)],
        5 => vec![h.preferred.map_or(0, |l| l.0 as i32)],
        6 => vec![h.preferred.map_or(0, |l| l.1)],
        7 => vec![h.prefetched.map_or(0, |l| l.0 as i32)],
        8 => vec![h.prefetched.map_or(0, |l| l.1)],
        _ => return Step::Done(1),
    };
    let n = size / 4;
    // SAFETY: the program's buffer of `size` bytes; ACCESSED_BY fills the rest with invalid.
    unsafe {
        for k in 0..n {
            let v = ints.get(k).copied().unwrap_or(DEVICE_INVALID);
            std::ptr::write_unaligned((data as *mut i32).add(k), v);
            if attr != 3 {
                break;
            }
        }
    }
    Step::Done(0)
}

/// Maps host memory at `[addr, addr + len)` (read-only: a write marks its page) and keeps the
/// allocation. `false` when the address range is taken in this process or no slot is free.
pub(crate) fn add(addr: u64, len: u64) -> bool {
    install();
    let (first, end) = (page_of(addr), page_end(addr + len.max(1)));
    let pages = (end - first) / PAGE;
    {
        let mut g = PAGES.lock().unwrap_or_else(|e| e.into_inner());
        // Runs of pages no allocation maps yet, each mapped at once.
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for k in 0..pages {
            let p = first + k * PAGE;
            if g.contains_key(&p) {
                continue;
            }
            match runs.last_mut() {
                Some((a, n)) if *a + *n == p => *n += PAGE,
                _ => runs.push((p, PAGE)),
            }
        }
        for (i, &(p, n)) in runs.iter().enumerate() {
            // Inside the arena the pages replace the client's own reservation of the range
            // (`driver.rs`: PROT_NONE); anywhere else they must replace nothing.
            let fixed = if crate::arena::contains(p) { libc::MAP_FIXED } else { libc::MAP_FIXED_NOREPLACE };
            // SAFETY: a fixed mapping over this process's reservation, or over nothing.
            let r = unsafe {
                libc::mmap(
                    p as *mut libc::c_void,
                    n as usize,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | fixed,
                    -1,
                    0,
                )
            };
            if r as u64 != p {
                if r != libc::MAP_FAILED {
                    // SAFETY: what this call mapped elsewhere (an old kernel ignoring the flag).
                    unsafe { libc::munmap(r, n as usize) };
                }
                for &(q, m) in &runs[..i] {
                    let mut x = q;
                    while x < q + m {
                        unmap(x);
                        x += PAGE;
                    }
                }
                return false;
            }
        }
        for k in 0..pages {
            *g.entry(first + k * PAGE).or_insert(0) += 1;
        }
    }
    if take_slot(addr, len, pages, false) {
        return true;
    }
    release_pages(first, end);
    false
}

/// Gives `[addr, addr + len)` (of `pages` pages from its first) a slot; every page dirty when
/// `all_dirty` (its bytes go before the next record).
fn take_slot(addr: u64, len: u64, pages: u64, all_dirty: bool) -> bool {
    let words = pages.div_ceil(64) as usize;
    let fill = |w: usize| {
        if !all_dirty {
            return 0;
        }
        let left = pages - (w as u64) * 64;
        if left >= 64 {
            u64::MAX
        } else {
            (1u64 << left) - 1
        }
    };
    let bits: &'static [AtomicU64] = Box::leak((0..words).map(|w| AtomicU64::new(fill(w))).collect());
    for (i, s) in TABLE.iter().enumerate() {
        if s.len.load(Ordering::Acquire) == 0
            && s.bits.compare_exchange(0, bits.as_ptr() as u64, Ordering::AcqRel, Ordering::Acquire).is_ok()
        {
            s.start.store(addr, Ordering::Release);
            s.len.store(len.max(1), Ordering::Release);
            USED.fetch_max(i + 1, Ordering::AcqRel);
            LIVE.fetch_add(1, Ordering::Relaxed);
            EVER.fetch_add(1, Ordering::Relaxed);
            EVER_BYTES.fetch_add(len, Ordering::Relaxed);
            if all_dirty {
                DIRTY.fetch_add(pages, Ordering::AcqRel);
            }
            return true;
        }
    }
    false
}

/// Pinned memory the program already holds (`host.rs`: plain pinned memory a kernel is given,
/// or memory registered for the device) becomes shared as managed memory is, at its own
/// address: its pages stay, read-only from now on, and every one of them is dirty (what they
/// hold goes to the server before the next record). `false` when no slot is free.
pub(crate) fn adopt(addr: u64, len: u64) -> bool {
    install();
    super::altstack::enable();
    let (first, end) = (page_of(addr), page_end(addr + len.max(1)));
    let pages = (end - first) / PAGE;
    {
        let mut g = PAGES.lock().unwrap_or_else(|e| e.into_inner());
        let mut adopted = ADOPTED.lock().unwrap_or_else(|e| e.into_inner());
        for k in 0..pages {
            let p = first + k * PAGE;
            *g.entry(p).or_insert(0) += 1;
            adopted.insert(p);
        }
    }
    if !take_slot(addr, len, pages, true) {
        release_pages(first, end);
        return false;
    }
    // SAFETY: the program's pages (the caller's allocation); a write now faults and marks.
    unsafe { libc::mprotect(first as *mut libc::c_void, (end - first) as usize, libc::PROT_READ) };
    true
}

/// Forgets the managed allocation at `addr` and unmaps its pages no other one shares.
/// Returns whether there was one.
pub(crate) fn remove(addr: u64) -> bool {
    let Some(i) = slot_of(addr).filter(|&i| TABLE[i].start.load(Ordering::Acquire) == addr) else { return false };
    let len = TABLE[i].len.swap(0, Ordering::AcqRel);
    TABLE[i].start.store(0, Ordering::Release);
    // The bitmap stays leaked (a fault handler may still be reading it); the slot is free.
    TABLE[i].bits.store(0, Ordering::Release);
    LIVE.fetch_sub(1, Ordering::Relaxed);
    release_pages(page_of(addr), page_end(addr + len));
    true
}

fn release_pages(first: u64, end: u64) {
    let mut g = PAGES.lock().unwrap_or_else(|e| e.into_inner());
    let mut p = first;
    while p < end {
        if let Some(n) = g.get_mut(&p) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                g.remove(&p);
                unmap(p);
            }
        }
        p += PAGE;
    }
}

/// Gives a page back: to the program when it was its own, to the arena's reservation inside
/// it, to the system elsewhere.
fn unmap(p: u64) {
    if ADOPTED.lock().unwrap_or_else(|e| e.into_inner()).remove(&p) {
        // SAFETY: the program's page, read-only while shared.
        unsafe { libc::mprotect(p as *mut libc::c_void, PAGE as usize, libc::PROT_READ | libc::PROT_WRITE) };
        return;
    }
    // SAFETY: a page this module mapped that no allocation uses any more.
    unsafe {
        if crate::arena::contains(p) {
            libc::mmap(
                p as *mut libc::c_void,
                PAGE as usize,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
                -1,
                0,
            );
        } else {
            libc::munmap(p as *mut libc::c_void, PAGE as usize);
        }
    }
}

/// The bitmap of slot `i` (one word per 64 pages), and its page count.
fn bits(i: usize) -> Option<(&'static [AtomicU64], u64, u64)> {
    let b = TABLE[i].bits.load(Ordering::Acquire);
    let (s, n) = (TABLE[i].start.load(Ordering::Acquire), TABLE[i].len.load(Ordering::Acquire));
    if b == 0 || n == 0 {
        return None;
    }
    let pages = (page_end(s + n) - page_of(s)) / PAGE;
    // SAFETY: a leaked bitmap of this many words, never freed.
    Some((unsafe { std::slice::from_raw_parts(b as *const AtomicU64, pages.div_ceil(64) as usize) }, s, n))
}

/// The bytes the host wrote since the last call to the allocations `mine` takes (by their
/// start: those of one server, in a session across several): (address, bytes) of every dirty
/// page's part of each; the pages become read-only again. Others stay dirty.
pub(crate) fn take_dirty(mine: impl Fn(u64) -> bool) -> Vec<(u64, Vec<u8>)> {
    if DIRTY.swap(0, Ordering::AcqRel) == 0 {
        return Vec::new();
    }
    // The dirty pages of each allocation: (page, allocation start, allocation length).
    let mut pages = Vec::new();
    for i in 0..USED.load(Ordering::Acquire) {
        let Some((words, s, n)) = bits(i) else { continue };
        if !mine(s) {
            if words.iter().any(|w| w.load(Ordering::Acquire) != 0) {
                DIRTY.fetch_add(1, Ordering::AcqRel);
            }
            continue;
        }
        let first = page_of(s);
        for (w, word) in words.iter().enumerate() {
            let mut m = word.swap(0, Ordering::AcqRel);
            while m != 0 {
                let b = m.trailing_zeros() as u64;
                m &= m - 1;
                pages.push((first + (w as u64 * 64 + b) * PAGE, s, n));
            }
        }
    }
    PAGES_UP.fetch_add(pages.len() as u64, Ordering::Relaxed);
    // Read-only before they are read: a write from now on faults and marks the page again, so
    // nothing written while the bytes are taken is lost.
    for &(page, _, _) in &pages {
        // SAFETY: a page this module mapped.
        unsafe { libc::mprotect(page as *mut libc::c_void, PAGE as usize, libc::PROT_READ) };
    }
    let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
    for (page, s, n) in pages {
        let (lo, hi) = (page.max(s), (page + PAGE).min(s + n));
        if lo >= hi {
            continue;
        }
        // SAFETY: readable host memory of a live managed allocation.
        let bytes = unsafe { std::slice::from_raw_parts(lo as *const u8, (hi - lo) as usize) };
        match out.last_mut() {
            Some((a, v)) if *a + v.len() as u64 == lo => v.extend_from_slice(bytes),
            _ => out.push((lo, bytes.to_vec())),
        }
    }
    out
}

/// Writes what the device changed (a `gpulessHostPull` answer: `[u64 address, u32 length,
/// bytes]…`) into the host pages. A page the host wrote since its last push stays dirty.
pub(crate) fn apply_pull(mut b: &[u8]) {
    while b.len() >= 12 {
        let addr = u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]));
        let n = u32::from_le_bytes(b[8..12].try_into().unwrap_or([0; 4])) as usize;
        let Some(bytes) = b.get(12..12 + n) else { return };
        b = &b[12 + n..];
        write_synced(addr, bytes);
    }
}

/// Writes `bytes` at `addr` in shared memory as the server's copy of it already holds them (a
/// pull, or a device-to-host copy the executor also made into its copy): nothing becomes dirty
/// that was not. `false` (nothing written) unless the whole range is shared memory.
pub(crate) fn write_synced(addr: u64, bytes: &[u8]) -> bool {
    let n = bytes.len();
    if n == 0 || slot_of(addr).is_none() || slot_of(addr + n as u64 - 1).is_none() {
        return false;
    }
    let (first, end) = (page_of(addr), page_end(addr + n as u64));
    let dirty: Vec<bool> = (0..(end - first) / PAGE).map(|k| is_dirty(first + k * PAGE)).collect();
    // SAFETY (block): pages this module mapped, made writable for the copy and read-only again
    // (one call a run of pages) unless the host wrote them since they were last sent.
    unsafe {
        libc::mprotect(first as *mut libc::c_void, (end - first) as usize, libc::PROT_READ | libc::PROT_WRITE);
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, n);
        let mut k = 0;
        while k < dirty.len() {
            let run = dirty[k..].iter().take_while(|&&d| d == dirty[k]).count();
            if !dirty[k] {
                libc::mprotect((first + k as u64 * PAGE) as *mut libc::c_void, run * PAGE as usize, libc::PROT_READ);
            }
            k += run;
        }
    }
    true
}

fn is_dirty(page: u64) -> bool {
    (0..USED.load(Ordering::Acquire)).any(|i| {
        let Some((words, s, _)) = bits(i) else { return false };
        let first = page_of(s);
        if page < first {
            return false;
        }
        let k = (page - first) / PAGE;
        words.get((k / 64) as usize).is_some_and(|w| w.load(Ordering::Acquire) & (1 << (k % 64)) != 0)
    })
}

/// Marks `page` dirty in every allocation that has it; whether any had it.
fn mark(page: u64) -> bool {
    let mut found = false;
    for i in 0..USED.load(Ordering::Acquire) {
        let Some((words, s, n)) = bits(i) else { continue };
        let first = page_of(s);
        if page < first || page >= page_end(s + n) {
            continue;
        }
        let k = (page - first) / PAGE;
        if let Some(w) = words.get((k / 64) as usize) {
            if w.fetch_or(1 << (k % 64), Ordering::AcqRel) & (1 << (k % 64)) == 0 {
                DIRTY.fetch_add(1, Ordering::AcqRel);
            }
            found = true;
        }
    }
    found
}

/// The first write to a managed page: marks it and lets the write go on; any other fault goes
/// to the handler before ours. Only atomics, `mprotect` and `sigaction`: async-signal-safe.
extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel's siginfo for this fault.
    let addr = unsafe { (*info).si_addr() } as u64;
    let page = page_of(addr);
    if mark(page) {
        // SAFETY: a page this module mapped.
        unsafe { libc::mprotect(page as *mut libc::c_void, PAGE as usize, libc::PROT_READ | libc::PROT_WRITE) };
        return;
    }
    // SAFETY: the handler saved at installation, called as the kernel would have.
    unsafe {
        match *std::ptr::addr_of!(PREVIOUS) {
            Some(prev)
                if prev.sa_sigaction != libc::SIG_DFL
                    && prev.sa_sigaction != libc::SIG_IGN
                    && !crate::fault_report::is_early(prev.sa_sigaction) =>
            {
                if prev.sa_flags & libc::SA_SIGINFO != 0 {
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        std::mem::transmute(prev.sa_sigaction);
                    f(sig, info, ctx);
                } else {
                    let f: extern "C" fn(libc::c_int) = std::mem::transmute(prev.sa_sigaction);
                    f(sig);
                }
                // Called here, not by the kernel: a one-shot handler's reset is ours to do, or
                // the fault, recurring on return, would come back here for ever.
                if prev.sa_flags & libc::SA_RESETHAND != 0 {
                    let mut dfl: libc::sigaction = std::mem::zeroed();
                    dfl.sa_sigaction = libc::SIG_DFL;
                    libc::sigaction(sig, &dfl, std::ptr::null_mut());
                }
            }
            _ => {
                crate::fault_report::say(sig, info, ctx);
                // The default action: the fault happens again on return, and ends the process.
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
    }
}

/// Installs [`on_fault`] for SIGSEGV (once; again when the program replaced it, keeping the
/// program's as the previous handler).
pub(crate) fn install() {
    // SAFETY (block): sigaction with valid structs; PREVIOUS is written before the handler
    // that reads it is installed.
    unsafe {
        let mut cur: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut cur);
        if cur.sa_sigaction == on_fault as *const () as usize {
            return;
        }
        *std::ptr::addr_of_mut!(PREVIOUS) = Some(cur);
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_fault as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_NODEFER | libc::SA_ONSTACK;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGSEGV, &sa, std::ptr::null_mut());
    }
    INSTALLED.store(true, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A free, page-aligned range of `n` pages of this process's address space.
    fn free_range(n: usize) -> u64 {
        // SAFETY: a fresh anonymous mapping, given back at once: its range is free afterwards.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                n * PAGE as usize,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            libc::munmap(p, n * PAGE as usize);
            p as u64
        }
    }

    #[test]
    fn writes_are_found_by_page_and_pulls_keep_the_pages_protected() {
        let base = free_range(8);
        let (a, len) = (base + 100, 5 * PAGE);
        assert!(add(a, len));
        assert!(contains(a) && contains(a + len - 1) && !contains(a + len));
        // SAFETY (block): the mapping `add` made, written through the fault handler.
        unsafe {
            assert_eq!(*(a as *const u8), 0, "fresh pages are zero");
            *((a + 2 * PAGE) as *mut u8) = 7; // page 2 of the region
            *((a + 2 * PAGE + 9) as *mut u8) = 8; // the same page again: no second fault
            *((a + len - 1) as *mut u8) = 9; // the last page
        }
        assert!(dirty());
        let d = take_dirty(|_| true);
        let pages: Vec<u64> = d.iter().map(|(p, _)| page_of(*p)).collect();
        assert_eq!(pages, vec![page_of(a + 2 * PAGE), page_of(a + len - 1)], "{d:?}");
        // Parts of the allocation only: the last page's part ends at the allocation's end.
        let (last_at, last) = &d[1];
        assert_eq!(last_at + last.len() as u64, a + len);
        assert_eq!(*last.last().unwrap(), 9);
        assert!(!dirty() && take_dirty(|_| true).is_empty());
        // A pull writes the device's bytes; the page stays read-only: the next write is seen.
        let mut pull = Vec::new();
        pull.extend_from_slice(&(a + 10).to_le_bytes());
        pull.extend_from_slice(&3u32.to_le_bytes());
        pull.extend_from_slice(&[1, 2, 3]);
        apply_pull(&pull);
        // SAFETY: the mapping, read and written again.
        unsafe {
            assert_eq!(std::slice::from_raw_parts((a + 10) as *const u8, 3), &[1, 2, 3]);
            assert!(!dirty(), "a pull is not a host write");
            *((a + 11) as *mut u8) = 5;
        }
        assert_eq!(take_dirty(|_| true).len(), 1);
        // A pull outside every allocation is ignored.
        let mut stray = Vec::new();
        stray.extend_from_slice(&(base + 7 * PAGE).to_le_bytes());
        stray.extend_from_slice(&1u32.to_le_bytes());
        stray.push(1);
        apply_pull(&stray);
        assert!(remove(a));
        assert!(!contains(a) && !remove(a));
    }
}
