//! Device memory at replay. Allocations the recorder served from its arena are re-created at
//! their recorded addresses inside the same reserved range, backed as the recorder backed them
//! ([`gpuless_traces::arena::backing`]); allocations outside the arena are re-created exactly
//! with the VMM API when the address can be had, else allocated anywhere and translated.

use std::collections::{BTreeMap, HashMap, VecDeque};

use cudarc::driver::sys;
use gpuless_traces::arena::{backing, Backing, CHUNK, KEEP_EMPTY_CHUNKS};

use super::{check, ReplayError};

/// One live allocation.
#[derive(Debug, Clone, Copy)]
pub struct Allocation {
    /// Recorded base address.
    pub recorded: u64,
    /// Size in bytes.
    pub size: u64,
    /// Address at replay.
    pub live: u64,
    kind: Kind,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    /// Inside the arena (backed by shared or own chunks).
    Arena,
    /// Outside the arena, re-created exactly with its own reservation `[base, base + len)`
    /// (the allocation's address rounded down to the granularity, its end up).
    Vmm { base: u64, len: usize },
    /// `cuMemAlloc` anywhere.
    Driver,
    /// A module global: not ours to free.
    Alias,
    /// The program's own reservation (`cuMemAddressReserve`): nothing mapped by us; `own` when
    /// reserved here (outside the arena), to be freed with the driver.
    Reserved { own: bool },
}

/// The recorder's arena as re-reserved here.
#[derive(Debug, Clone, Copy)]
struct Arena {
    base: u64,
    size: u64,
    /// The reservation holding it, freed with it: the arena itself, or the early reservation of
    /// the default range it lies in (a server of a session across several servers gets a part
    /// of the client's arena).
    held: (u64, u64),
}

/// All allocations, keyed by recorded base address.
#[derive(Default)]
pub struct Memory {
    allocs: BTreeMap<u64, Allocation>,
    arena: Option<Arena>,
    /// Shared arena chunks mapped: address → live allocations in it (0: kept empty).
    chunks: HashMap<u64, u32>,
    /// Empty shared chunks still mapped, oldest first: the recorder's arena keeps up to
    /// [`KEEP_EMPTY_CHUNKS`] of them for reuse (`Layout::free`), so a program that reads
    /// outside its allocations into one did not fault when recorded and must not now.
    kept: VecDeque<u64>,
    granularity: usize,
    /// Bytes of device memory mapped or allocated now, and the most at any time.
    in_use: u64,
    peak: u64,
    limit: Option<u64>,
    /// Ranges ever recorded at one address and live at another (allocations and globals).
    moved: u64,
    /// Allocations re-created at their recorded address.
    pub exact: u64,
    /// Allocations that had to move (their pointers are translated).
    pub translated: u64,
    /// Of the exact ones, how many were inside the recorder's arena.
    pub in_arena: u64,
    /// Managed and mapped host memory re-created as device memory: (at its address, moved).
    pub shared: (u64, u64),
    /// Arena allocations the last session of the same program left mapped (warm constants,
    /// [`super::resident`]), by address: taken over by an allocation of the same range,
    /// released when an allocation needs their memory.
    held: BTreeMap<u64, Allocation>,
    /// Allocations that took over a held one.
    pub adopted: u64,
    /// The program's physical allocations and what it mapped of them (`super::vmm`).
    pub vmm: super::vmm::ProgramVmm,
    /// A session of several devices ([`gpuless_traces::devices`]): for each device, itself
    /// and the devices that can reach its memory (the arena's slice `k` lives on device `k`).
    /// Empty: one device, 0.
    devices: Vec<Vec<i32>>,
}

/// This thread's stream-capture mode relaxed while it lives: memory is created and mapped for
/// an allocation a stream capture makes (a captured `cuMemAllocAsync`, re-created when the
/// recording's or the client's record arrives), which the global mode forbids.
struct Relaxed(sys::CUstreamCaptureMode);

impl Relaxed {
    fn new() -> Self {
        let mut mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: a valid in/out pointer; exchanging the mode has no other effect.
        unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
        Relaxed(mode)
    }
}

impl Drop for Relaxed {
    fn drop(&mut self) {
        // SAFETY: as in `new`: the previous mode back.
        unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut self.0) };
    }
}

fn prop() -> sys::CUmemAllocationProp {
    // SAFETY: a plain C struct for which all-zero is a valid starting value.
    let mut p: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    p.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    // Exportable, as `cuMemAlloc` memory is (`cuIpcGetMemHandle`, `replay::share`);
    // `GPULESS_EXPORTABLE=0` leaves it out (a diagnostic).
    if SHAREABLE.load(std::sync::atomic::Ordering::Relaxed)
        && std::env::var_os("GPULESS_EXPORTABLE").is_none_or(|v| v != "0")
    {
        p.requestedHandleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    }
    p
}

/// Whether memory is still created exportable to a POSIX descriptor (cleared when the driver
/// refuses it once).
static SHAREABLE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Whether memory is still created RDMA- and decompression-capable (cleared when the driver
/// refuses it once).
static CAPABLE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Creates physical memory for `[addr, addr + len)` (reserved, unmapped) on device `on[0]`
/// and maps it, readable and writable by every device of `on`. Like the recorder's arena (and
/// `cuMemAlloc` memory on current GPUs), it is RDMA- and decompression-capable where the driver
/// allows it, so pointer queries a client sends here answer as they did where the program was
/// recorded.
unsafe fn map(addr: u64, len: u64, on: &[i32]) -> Result<(), sys::CUresult> {
    let _relaxed = Relaxed::new();
    use std::sync::atomic::Ordering;
    let len = len as usize;
    let mut p = prop();
    p.location.id = on.first().copied().unwrap_or(0);
    let capable = CAPABLE.load(Ordering::Relaxed);
    if capable {
        p.allocFlags.gpuDirectRDMACapable = 1;
        p.allocFlags.usage = sys::CU_MEM_CREATE_USAGE_HW_DECOMPRESS as u16;
    }
    // SAFETY: the range is reserved by us and unmapped; valid pointers to structs.
    unsafe {
        let mut h = 0;
        let refused =
            |r| matches!(r, sys::CUresult::CUDA_ERROR_INVALID_VALUE | sys::CUresult::CUDA_ERROR_NOT_SUPPORTED);
        let none = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
        let mut r = sys::cuMemCreate(&mut h, len, &p, 0);
        // What the driver refuses goes, exportability first (pointer queries see the rest).
        if refused(r) && p.requestedHandleTypes != none {
            let asked = p.requestedHandleTypes;
            p.requestedHandleTypes = none;
            r = sys::cuMemCreate(&mut h, len, &p, 0);
            if refused(r) {
                p.requestedHandleTypes = asked;
            } else {
                SHAREABLE.store(false, Ordering::Relaxed);
            }
        }
        if capable && refused(r) {
            CAPABLE.store(false, Ordering::Relaxed);
            p.allocFlags.gpuDirectRDMACapable = 0;
            p.allocFlags.usage = 0;
            r = sys::cuMemCreate(&mut h, len, &p, 0);
        }
        if refused(r) && p.requestedHandleTypes != none {
            SHAREABLE.store(false, Ordering::Relaxed);
            p.requestedHandleTypes = none;
            r = sys::cuMemCreate(&mut h, len, &p, 0);
        }
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(r);
        }
        let r = sys::cuMemMap(addr, len, 0, h, 0);
        sys::cuMemRelease(h);
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(r);
        }
        let desc: Vec<sys::CUmemAccessDesc> = on
            .iter()
            .chain(on.is_empty().then_some(&0))
            .map(|&d| sys::CUmemAccessDesc {
                location: sys::CUmemLocation { type_: p.location.type_, id: d },
                flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            })
            .collect();
        let r = sys::cuMemSetAccess(addr, len, desc.as_ptr(), desc.len());
        if r != sys::CUresult::CUDA_SUCCESS {
            sys::cuMemUnmap(addr, len);
            return Err(r);
        }
    }
    Ok(())
}

/// The default arena range, reserved right after `cuInit` (see [`reserve_early`]).
static EARLY: std::sync::Mutex<Option<(u64, u64)>> = std::sync::Mutex::new(None);

/// Reserves the recorder's default arena range right after `cuInit`, before any context
/// exists: once a context is up, the driver's own heaps may already sit in that range (seen on
/// the H200: one replay in about twenty). [`Memory::reserve_arena`] takes it over when the
/// trace's header names the same range, and releases it otherwise.
pub fn reserve_early() {
    let (base, size) = (gpuless_traces::arena::DEFAULT_BASES[0], gpuless_traces::arena::DEFAULT_SIZE);
    let mut got = 0u64;
    // SAFETY: a reservation with a valid out-pointer; the driver is initialized.
    let r = unsafe { sys::cuMemAddressReserve(&mut got, size as usize, CHUNK as usize, base, 0) };
    if r == sys::CUresult::CUDA_SUCCESS {
        if got == base {
            if let Ok(mut e) = EARLY.lock() {
                *e = Some((base, size));
            }
        } else {
            // SAFETY: releasing what was just reserved.
            unsafe { sys::cuMemAddressFree(got, size as usize) };
        }
    }
}

impl Memory {
    /// Memory that refuses to hold more than `limit` bytes at once (`--emulate` partitions).
    pub fn with_limit(limit: Option<u64>) -> Self {
        Memory { limit, ..Memory::default() }
    }

    /// Reserves the recorder's arena `[base, base + size)` at exactly that address. Returns a
    /// warning (allocations will then be translated) when the range cannot be had.
    pub fn reserve_arena(&mut self, base: u64, size: u64) -> Option<String> {
        let early = EARLY.lock().ok().and_then(|mut e| e.take());
        if let Some((b, n)) = early {
            // The range, or a part of it (reserving a part again once a context is up may find
            // the driver's heaps there).
            if base >= b && size > 0 && base.saturating_add(size) <= b.saturating_add(n) {
                self.arena = Some(Arena { base, size, held: (b, n) });
                return None;
            }
            // SAFETY: the early reservation is not the trace's arena: give it back.
            unsafe { sys::cuMemAddressFree(b, n as usize) };
        }
        if base == 0 || size == 0 {
            return None;
        }
        let mut got = 0u64;
        // SAFETY: a reservation with a valid out-pointer.
        let r = unsafe { sys::cuMemAddressReserve(&mut got, size as usize, CHUNK as usize, base, 0) };
        if r != sys::CUresult::CUDA_SUCCESS || got != base {
            let how = if r == sys::CUresult::CUDA_SUCCESS {
                // SAFETY: releasing what was just reserved.
                unsafe { sys::cuMemAddressFree(got, size as usize) };
                format!("the driver could only reserve it at {got:#x}")
            } else {
                format!("reserving it failed with {r:?}")
            };
            return Some(format!(
                "the recorder's arena {base:#x}..{:#x} is taken in this process ({how}); allocations are \
                 translated instead, and pointers stored in device memory cannot be",
                base.saturating_add(size)
            ));
        }
        self.arena = Some(Arena { base, size, held: (base, size) });
        None
    }

    /// Splits the arena among a session's devices: `access[k]` is device `k` and the devices
    /// that may read and write its memory.
    pub fn set_devices(&mut self, access: Vec<Vec<i32>>) {
        self.devices = access;
    }

    /// The devices arena memory at `addr` is created on (first) and mapped for.
    fn on(&self, addr: u64) -> &[i32] {
        let (Some(a), n) = (self.arena, self.devices.len() as u32) else { return &[] };
        if n < 2 {
            return &[];
        }
        let k = gpuless_traces::devices::device_of(a.base, a.size, n, addr).unwrap_or(0);
        self.devices.get(k as usize).map_or(&[], |v| &v[..])
    }

    /// Memory made outside the arena (managed and mapped host memory re-created as device
    /// memory) lives on the current context's device, mapped for every device that can reach
    /// it.
    fn current_on(&self) -> Vec<i32> {
        if self.devices.len() < 2 {
            return Vec::new();
        }
        let mut d = 0;
        // SAFETY: a valid out-pointer; a context is current.
        unsafe { sys::cuCtxGetDevice(&mut d) };
        self.devices.get(d as usize).cloned().unwrap_or_default()
    }

    /// Bytes of device memory in use at most during the replay so far.
    /// The most bytes it may hold at once, if limited.
    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// Bytes it holds now.
    pub fn in_use(&self) -> u64 {
        self.in_use
    }

    pub fn peak(&self) -> u64 {
        self.peak
    }

    fn charge(&mut self, bytes: u64, seq: u64) -> Result<(), ReplayError> {
        if let Some(limit) = self.limit {
            if self.in_use + bytes > limit {
                return Err(ReplayError::MemoryLimit { seq, limit, needed: self.in_use + bytes });
            }
        }
        self.in_use += bytes;
        self.peak = self.peak.max(self.in_use);
        Ok(())
    }

    /// The error of an allocation of `bytes` (charged already) that failed with `r`; the charge
    /// is taken back.
    fn oom(&mut self, seq: u64, bytes: u64, r: sys::CUresult) -> ReplayError {
        self.in_use = self.in_use.saturating_sub(bytes);
        if r == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            let (mut free, mut total) = (0usize, 0usize);
            // SAFETY: valid out-pointers.
            unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) };
            return ReplayError::DeviceTooSmall { seq, needed: bytes, in_use: self.in_use, free: free as u64 };
        }
        ReplayError::Driver { seq, what: "allocation".into(), code: r }
    }

    /// Re-creates managed or mapped host memory recorded at `recorded` as device memory (the
    /// replay never touches it from the host); counted apart from device allocations.
    pub fn alloc_shared(&mut self, recorded: u64, size: u64, seq: u64) -> Result<u64, ReplayError> {
        let (exact, translated) = (self.exact, self.translated);
        let live = self.alloc(recorded, size, seq)?;
        self.shared.0 += self.exact - exact;
        self.shared.1 += self.translated - translated;
        (self.exact, self.translated) = (exact, translated);
        Ok(live)
    }

    /// Re-creates an allocation of `size` bytes recorded at `recorded`; returns its live address.
    pub fn alloc(&mut self, recorded: u64, size: u64, seq: u64) -> Result<u64, ReplayError> {
        if self.arena.is_some_and(|a| recorded >= a.base && recorded - a.base < a.size) {
            if self.take_held(recorded, size) {
                return Ok(recorded);
            }
            match backing(recorded, size) {
                Backing::Shared { chunk } => {
                    if !self.chunks.contains_key(&chunk) {
                        self.charge(CHUNK, seq)?;
                        // SAFETY: a chunk of our reservation not mapped yet.
                        unsafe { map(chunk, CHUNK, self.on(chunk)) }.map_err(|r| self.oom(seq, CHUNK, r))?;
                    }
                    let n = self.chunks.entry(chunk).or_insert(0);
                    if *n == 0 {
                        self.kept.retain(|&k| k != chunk);
                    }
                    *n += 1;
                }
                Backing::Own { addr, len } => {
                    self.charge(len, seq)?;
                    // SAFETY: the recorder gave this range to one allocation only.
                    unsafe { map(addr, len, self.on(addr)) }.map_err(|r| self.oom(seq, len, r))?;
                }
            }
            self.exact += 1;
            self.in_arena += 1;
            self.allocs.insert(recorded, Allocation { recorded, size, live: recorded, kind: Kind::Arena });
            return Ok(recorded);
        }
        // SAFETY: driver calls with valid out-pointers; the context is current.
        unsafe {
            if self.granularity == 0 {
                let p = prop();
                let mut g = 0usize;
                check(
                    sys::cuMemGetAllocationGranularity(
                        &mut g,
                        &p,
                        sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
                    ),
                    seq,
                    "cuMemGetAllocationGranularity",
                )?;
                self.granularity = g.max(1);
            }
            let g = self.granularity as u64;
            // Managed and mapped host memory (and some driver allocations) do not start at a
            // granule: the reservation covers the granules around the recorded range.
            let start = recorded / g * g;
            let rounded = (recorded.saturating_add(size.max(1)).div_ceil(g) * g).saturating_sub(start);
            self.charge(rounded, seq)?;
            if recorded != 0 {
                if let Some(len) = self.exact_at(start, rounded) {
                    self.exact += 1;
                    let kind = Kind::Vmm { base: start, len };
                    self.allocs.insert(recorded, Allocation { recorded, size, live: recorded, kind });
                    return Ok(recorded);
                }
            }
            let mut live = 0u64;
            // Also for an allocation a stream capture makes (graph memory a recording has).
            let _relaxed = Relaxed::new();
            let r = sys::cuMemAlloc_v2(&mut live, size.max(1) as usize);
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(self.oom(seq, rounded, r));
            }
            self.translated += u64::from(live != recorded);
            self.moved += u64::from(live != recorded);
            self.exact += u64::from(live == recorded);
            self.allocs.insert(recorded, Allocation { recorded, size, live, kind: Kind::Driver });
            Ok(live)
        }
    }

    /// Re-creates the program's reservation of `size` bytes recorded at `recorded`
    /// (`cuMemAddressReserve`): inside the arena it is the arena's range already (memory a
    /// previous session left there is let go); elsewhere it is reserved at that address if it
    /// can be had, else anywhere and translated. Returns its live address.
    pub fn reserve_program(&mut self, recorded: u64, size: u64, align: u64, seq: u64) -> Result<u64, ReplayError> {
        if self.arena.is_some_and(|a| recorded >= a.base && recorded - a.base < a.size) {
            let range = (recorded, recorded.saturating_add(size));
            let needed: Vec<u64> = self
                .held
                .values()
                .filter(|h| overlaps(range, backing_range(backing(h.recorded, h.size))))
                .map(|h| h.recorded)
                .collect();
            for a in needed {
                self.release_one_held(a);
            }
            self.exact += 1;
            self.in_arena += 1;
            let kind = Kind::Reserved { own: false };
            self.allocs.insert(recorded, Allocation { recorded, size, live: recorded, kind });
            return Ok(recorded);
        }
        let mut live = 0u64;
        // SAFETY: a reservation with a valid out-pointer; the hint is only a hint.
        let r = unsafe { sys::cuMemAddressReserve(&mut live, size as usize, align as usize, recorded, 0) };
        check(r, seq, "cuMemAddressReserve")?;
        if live != recorded {
            self.moved += 1;
            self.translated += 1;
        } else {
            self.exact += 1;
        }
        self.allocs.insert(recorded, Allocation { recorded, size, live, kind: Kind::Reserved { own: true } });
        Ok(live)
    }

    /// Tries reserve + create + map + set-access at exactly `addr`.
    unsafe fn exact_at(&self, addr: u64, size: u64) -> Option<usize> {
        let _relaxed = Relaxed::new();
        let len = size as usize;
        let mut got = 0u64;
        // SAFETY: VMM calls with valid arguments; every failure path undoes what succeeded.
        unsafe {
            if sys::cuMemAddressReserve(&mut got, len, 0, addr, 0) != sys::CUresult::CUDA_SUCCESS {
                return None;
            }
            if got != addr {
                sys::cuMemAddressFree(got, len);
                return None;
            }
            if map(addr, size, &self.current_on()).is_err() {
                sys::cuMemAddressFree(addr, len);
                return None;
            }
            Some(len)
        }
    }

    /// Records that `recorded..recorded+size` (a module global) lives at `live` now.
    pub fn alias(&mut self, recorded: u64, size: u64, live: u64) {
        if recorded != 0 && recorded != live {
            self.moved += 1;
            self.allocs.insert(recorded, Allocation { recorded, size, live, kind: Kind::Alias });
        }
    }

    /// Frees the allocation recorded at `recorded`.
    pub fn free(&mut self, recorded: u64) {
        let Some(a) = self.allocs.remove(&recorded) else { return };
        // SAFETY: releasing what `alloc` created, after the work that may use it.
        unsafe {
            match a.kind {
                Kind::Reserved { own } => {
                    if own {
                        sys::cuMemAddressFree(a.live, a.size as usize);
                    }
                }
                Kind::Arena => {
                    let unmap = match backing(a.recorded, a.size) {
                        Backing::Shared { chunk } => {
                            let n = self.chunks.entry(chunk).or_insert(1);
                            *n = n.saturating_sub(1);
                            if *n == 0 {
                                self.kept.push_back(chunk);
                            }
                            // Beyond what the recorder keeps, the oldest empty chunk goes.
                            (self.kept.len() > KEEP_EMPTY_CHUNKS).then(|| self.kept.pop_front()).flatten().map(|old| {
                                self.chunks.remove(&old);
                                (old, CHUNK)
                            })
                        }
                        Backing::Own { addr, len } => Some((addr, len)),
                    };
                    if let Some((addr, len)) = unmap {
                        sys::cuCtxSynchronize();
                        sys::cuMemUnmap(addr, len as usize);
                        self.in_use = self.in_use.saturating_sub(len);
                    }
                }
                Kind::Vmm { base, len } => {
                    sys::cuCtxSynchronize();
                    sys::cuMemUnmap(base, len);
                    sys::cuMemAddressFree(base, len);
                    self.in_use = self.in_use.saturating_sub(len as u64);
                }
                Kind::Driver => {
                    sys::cuMemFree_v2(a.live);
                    let g = self.granularity.max(1) as u64;
                    self.in_use = self.in_use.saturating_sub(a.size.max(1).div_ceil(g) * g);
                }
                Kind::Alias => {}
            }
        }
    }

    /// (recorded base, live base, size) of every live allocation and module global.
    pub fn ranges(&self) -> Vec<(u64, u64, u64)> {
        self.allocs.values().filter(|a| a.size > 0).map(|a| (a.recorded, a.live, a.size)).collect()
    }

    /// The allocation containing recorded address `p`.
    pub fn find(&self, p: u64) -> Option<&Allocation> {
        self.allocs.range(..=p).next_back().map(|(_, a)| a).filter(|a| p < a.recorded + a.size.max(1))
    }

    /// The live address for recorded address `p` (unchanged when outside every allocation:
    /// module globals, memory the trace did not allocate).
    pub fn translate(&self, p: u64) -> u64 {
        self.find(p).map_or(p, |a| a.live + (p - a.recorded))
    }

    /// Whether any recorded range lives elsewhere now (parameter words may need rewriting).
    pub fn may_translate(&self) -> bool {
        self.moved != 0
    }

    /// Rewrites every 8-byte-aligned word of a kernel parameter buffer that points into a
    /// moved allocation. Returns how many words changed.
    pub fn translate_params(&self, bytes: &mut [u8]) -> usize {
        if self.moved == 0 {
            return 0;
        }
        let mut n = 0;
        for w in bytes.chunks_exact_mut(8) {
            let v = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
            if let Some(a) = self.find(v) {
                if a.live != a.recorded {
                    w.copy_from_slice(&(a.live + (v - a.recorded)).to_le_bytes());
                    n += 1;
                }
            }
        }
        n
    }
}

impl Memory {
    /// The inverse of [`Memory::translate_params`]: every 8-byte-aligned word that points into
    /// the live range of a moved allocation becomes the recorded address it stands for (what
    /// the device wrote, compared with the recording). Returns how many words changed.
    pub fn untranslate_words(&self, bytes: &mut [u8]) -> usize {
        let moved: Vec<&Allocation> = self.allocs.values().filter(|a| a.live != a.recorded).collect();
        if moved.is_empty() {
            return 0;
        }
        let mut n = 0;
        for w in bytes.chunks_exact_mut(8) {
            let v = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
            if let Some(a) = moved.iter().find(|a| v >= a.live && v - a.live < a.size.max(1)) {
                w.copy_from_slice(&(a.recorded + (v - a.live)).to_le_bytes());
                n += 1;
            }
        }
        n
    }
}

/// The range of device memory a backing maps.
fn backing_range(b: Backing) -> (u64, u64) {
    match b {
        Backing::Shared { chunk } => (chunk, chunk + CHUNK),
        Backing::Own { addr, len } => (addr, addr.saturating_add(len)),
    }
}

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// Whether a new arena allocation `(addr, size)` needs memory the held allocation `h` holds:
/// in one shared chunk, when their bytes overlap; else when their backings overlap.
fn needs(addr: u64, size: u64, h: &Allocation) -> bool {
    let (nb, hb) = (backing(addr, size), backing(h.recorded, h.size));
    match (nb, hb) {
        (Backing::Shared { chunk: a }, Backing::Shared { chunk: b }) => {
            a == b && overlaps((addr, addr + size.max(1)), (h.recorded, h.recorded + h.size.max(1)))
        }
        _ => overlaps(backing_range(nb), backing_range(hb)),
    }
}

/// Warm constants: the memory one session of a program leaves to the next on the same executor.
impl Memory {
    /// Ends a session whose executor is kept for its program: the arena allocations at `keep`
    /// are held (still mapped, their bytes as they are), every other allocation is freed and
    /// empty chunks are unmapped. Returns the ranges of device memory that stay mapped (for
    /// the caller to clear what no kept upload covers).
    pub fn hold(&mut self, keep: &std::collections::HashSet<u64>) -> Vec<(u64, u64)> {
        // SAFETY: a plain synchronization: nothing may still use what is freed below.
        unsafe { sys::cuCtxSynchronize() };
        self.vmm.release_all();
        let all: Vec<u64> = self.allocs.keys().copied().collect();
        for a in all {
            let arena = matches!(self.allocs.get(&a).map(|x| x.kind), Some(Kind::Arena));
            match self.allocs.remove(&a) {
                Some(x) if arena && keep.contains(&a) => {
                    self.held.insert(a, x);
                }
                Some(x) => {
                    self.allocs.insert(a, x);
                    self.free(a);
                }
                None => {}
            }
        }
        while let Some(c) = self.kept.pop_front() {
            self.chunks.remove(&c);
            // SAFETY: an empty chunk of ours, mapped; the device is idle.
            unsafe { sys::cuMemUnmap(c, CHUNK as usize) };
            self.in_use = self.in_use.saturating_sub(CHUNK);
        }
        let mut ranges: Vec<(u64, u64)> =
            self.held.values().map(|a| backing_range(backing(a.recorded, a.size))).collect();
        ranges.sort_unstable();
        ranges.dedup();
        ranges
    }

    /// The arena reserved here: (base, size).
    pub fn arena_range(&self) -> Option<(u64, u64)> {
        self.arena.map(|a| (a.base, a.size))
    }

    /// Lets everything go: held allocations and the arena's reservation (live allocations are
    /// not expected: call it after [`Self::hold`]).
    pub fn give_back(mut self) {
        // SAFETY: a plain synchronization before the program's memory goes.
        unsafe { sys::cuCtxSynchronize() };
        self.vmm.release_all();
        self.release_held();
        let live: Vec<u64> = self.allocs.keys().copied().collect();
        for a in live {
            self.free(a);
        }
        for c in std::mem::take(&mut self.kept) {
            self.chunks.remove(&c);
            // SAFETY: an empty chunk of ours, after the work that used it.
            unsafe { sys::cuMemUnmap(c, CHUNK as usize) };
        }
        if let Some(a) = self.arena.take() {
            // SAFETY: our reservation, nothing mapped in it any more.
            unsafe { sys::cuMemAddressFree(a.held.0, a.held.1 as usize) };
        }
    }

    /// Held allocations: (address, size).
    pub fn held(&self) -> Vec<(u64, u64)> {
        self.held.values().map(|a| (a.recorded, a.size)).collect()
    }

    /// Releases every held allocation (the next session is not of the same program).
    pub fn release_held(&mut self) {
        let all: Vec<u64> = self.held.keys().copied().collect();
        for a in all {
            self.release_one_held(a);
        }
    }

    fn release_one_held(&mut self, at: u64) {
        let Some(a) = self.held.remove(&at) else { return };
        let unmap = match backing(a.recorded, a.size) {
            Backing::Shared { chunk } => {
                let n = self.chunks.entry(chunk).or_insert(1);
                *n = n.saturating_sub(1);
                (*n == 0).then(|| {
                    self.chunks.remove(&chunk);
                    (chunk, CHUNK)
                })
            }
            Backing::Own { addr, len } => Some((addr, len)),
        };
        if let Some((addr, len)) = unmap {
            // SAFETY: memory of ours no live allocation uses, after the work that used it.
            unsafe {
                sys::cuCtxSynchronize();
                sys::cuMemUnmap(addr, len as usize);
            }
            self.in_use = self.in_use.saturating_sub(len);
        }
    }

    /// An arena allocation of `size` at `recorded`: takes over the held allocation of exactly
    /// that range (true), or releases the held ones whose memory it needs (false).
    fn take_held(&mut self, recorded: u64, size: u64) -> bool {
        if self.held.is_empty() {
            return false;
        }
        if self.held.get(&recorded).is_some_and(|a| a.size == size) {
            if let Some(a) = self.held.remove(&recorded) {
                self.allocs.insert(recorded, a);
                self.exact += 1;
                self.in_arena += 1;
                self.adopted += 1;
                return true;
            }
        }
        let needed: Vec<u64> = self.held.values().filter(|h| needs(recorded, size, h)).map(|h| h.recorded).collect();
        for a in needed {
            self.release_one_held(a);
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_into_moved_ranges_are_rewritten_both_ways() {
        let mut m = Memory::default();
        m.alias(0x1000, 0x100, 0x9000);
        let words = |v: &[u64]| v.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>();
        let mut b = words(&[0x1010, 0x2000, 0x10ff, 0x1100]);
        assert_eq!(m.translate_params(&mut b), 2);
        assert_eq!(b, words(&[0x9010, 0x2000, 0x90ff, 0x1100]));
        assert_eq!(m.untranslate_words(&mut b), 2);
        assert_eq!(b, words(&[0x1010, 0x2000, 0x10ff, 0x1100]), "the recorded addresses again");
        let mut fresh = words(&[0x9000]);
        assert_eq!(Memory::default().untranslate_words(&mut fresh), 0, "nothing moved: nothing rewritten");
    }
}
