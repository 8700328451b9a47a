//! The device-memory arena contract shared by the recorder and the replayer.
//!
//! The recorder serves every device allocation from one virtual range reserved with the VMM API
//! at a fixed base (recorded in the trace header as `arena_base`/`arena_size`), so a replaying
//! process that reserves the same range can put every allocation at its recorded address and
//! every pointer, wherever it is stored, stays valid.
//!
//! This module is the pure part: where allocations go ([`Layout`], deterministic — the same
//! sequence of allocations and frees gives the same addresses in every process) and which
//! physical memory backs them ([`backing`]): allocations of at most [`SMALL_MAX`] bytes are
//! packed into shared [`CHUNK`]-sized chunks, larger ones own a chunk-aligned range. The
//! replayer needs only [`backing`] to know what to map for a recorded `(address, size)`.

use std::collections::{BTreeMap, VecDeque};

/// Physical granularity of the arena: 2 MiB, the VMM granularity of every current NVIDIA GPU.
pub const CHUNK: u64 = 2 << 20;
/// Alignment of every arena allocation (`cuMemAlloc` guarantees at least 256 bytes).
pub const ALIGN: u64 = 512;
/// Largest allocation packed into a shared chunk; larger ones own their chunks.
pub const SMALL_MAX: u64 = 1 << 20;
/// Size of the reserved range: 1 TiB of virtual addresses (no physical memory).
pub const DEFAULT_SIZE: u64 = 1 << 40;
/// Bases tried in order when none is configured. Below the region where the kernel places
/// `mmap`s (libraries, the driver's own heaps: randomized over the 1 TiB below
/// 0x7fff_ffff_ffff with 28 bits of ASLR, growing down) and far above the program's heap. On the
/// H200, 0x7e00_0000_0000 (REFERENCE.md §7) was refused in about one process in four once
/// PyTorch's mappings had grown into it. (Holding the range with a `PROT_NONE` mapping until
/// after `cuInit` made the driver refuse it in every process: the driver keeps its own view of
/// the address space from `cuInit` on.)
pub const DEFAULT_BASES: [u64; 4] = [0x6400_0000_0000, 0x6800_0000_0000, 0x6c00_0000_0000, 0x7e00_0000_0000];
/// Empty shared chunks kept mapped for reuse before they are returned to the driver
/// (mapping a chunk costs about 50 µs, unmapping 30 µs on an H200).
pub const KEEP_EMPTY_CHUNKS: usize = 8;

/// Which physical memory backs an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backing {
    /// Part of the shared chunk at this address.
    Shared {
        /// Chunk address (a multiple of [`CHUNK`]).
        chunk: u64,
    },
    /// A range of its own.
    Own {
        /// Start (the allocation's address).
        addr: u64,
        /// Length, a multiple of [`CHUNK`].
        len: u64,
    },
}

/// The physical backing of an allocation of `size` bytes at `addr`, as the recorder chose it.
pub fn backing(addr: u64, size: u64) -> Backing {
    if size <= SMALL_MAX {
        Backing::Shared { chunk: addr & !(CHUNK - 1) }
    } else {
        Backing::Own { addr, len: round_up(size, CHUNK) }
    }
}

fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to).saturating_mul(to)
}

/// Result of [`Layout::alloc`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    /// Address of the allocation.
    pub addr: u64,
    /// A range that must be backed by new physical memory first (address, length).
    pub map: Option<(u64, u64)>,
}

/// Result of [`Layout::free`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Released {
    /// Size the allocation was made with.
    pub size: u64,
    /// Ranges whose physical memory can now be returned to the driver.
    pub unmap: Vec<(u64, u64)>,
}

/// Returns `[start, start + len)` to a map of free ranges (start → length), merged with the
/// free ranges it touches.
fn give_back(free: &mut BTreeMap<u64, u64>, start: u64, len: u64) {
    let (mut s, mut e) = (start, start + len);
    if let Some((&o, &l)) = free.range(..start).next_back() {
        if o + l == start {
            s = o;
            free.remove(&o);
        }
    }
    if let Some(l) = free.remove(&e) {
        e += l;
    }
    free.insert(s, e - s);
}

#[derive(Debug, Clone, Default)]
struct Chunk {
    /// Free holes: offset → length.
    holes: BTreeMap<u64, u64>,
    /// Live allocations in the chunk.
    used: u32,
}

impl Chunk {
    fn empty() -> Self {
        Chunk { holes: BTreeMap::from([(0, CHUNK)]), used: 0 }
    }

    /// First hole that fits `len` bytes: its offset.
    fn fit(&self, len: u64) -> Option<u64> {
        self.holes.iter().find(|&(_, &l)| l >= len).map(|(&o, _)| o)
    }

    fn take(&mut self, off: u64, len: u64) {
        if let Some(hole) = self.holes.remove(&off) {
            if hole > len {
                self.holes.insert(off + len, hole - len);
            }
        }
        self.used += 1;
    }

    fn give(&mut self, off: u64, len: u64) {
        give_back(&mut self.holes, off, len);
        self.used = self.used.saturating_sub(1);
    }
}

/// Address-space layout of an arena: which addresses are live and which chunks are mapped.
#[derive(Debug, Clone)]
pub struct Layout {
    base: u64,
    size: u64,
    /// Unused address ranges, chunk-aligned and coalesced: start → length.
    free: BTreeMap<u64, u64>,
    /// Shared chunks: address → holes.
    chunks: BTreeMap<u64, Chunk>,
    /// Live allocations: address → (requested size, rounded size).
    live: BTreeMap<u64, (u64, u64)>,
    /// Empty shared chunks still mapped, oldest first.
    empty: VecDeque<u64>,
    live_bytes: u64,
    /// The program's own reservations (`cuMemAddressReserve`): address → length. Never
    /// mapped by the arena: the program maps its own memory there.
    reserved: BTreeMap<u64, u64>,
}

impl Layout {
    /// An empty arena over `[base, base + size)`; both are rounded to [`CHUNK`].
    pub fn new(base: u64, size: u64) -> Self {
        let base = round_up(base, CHUNK);
        let size = size & !(CHUNK - 1);
        let mut free = BTreeMap::new();
        if size > 0 {
            free.insert(base, size);
        }
        Layout {
            base,
            size,
            free,
            chunks: BTreeMap::new(),
            live: BTreeMap::new(),
            empty: VecDeque::new(),
            live_bytes: 0,
            reserved: BTreeMap::new(),
        }
    }

    /// Start of the arena.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Size of the arena.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Whether `ptr` lies inside the arena's range.
    pub fn contains(&self, ptr: u64) -> bool {
        ptr >= self.base && ptr - self.base < self.size
    }

    /// Number of live allocations.
    pub fn live_count(&self) -> usize {
        self.live.len()
    }

    /// Bytes requested by the live allocations.
    pub fn live_bytes(&self) -> u64 {
        self.live_bytes
    }

    /// The live allocation containing `ptr`: its address and requested size.
    pub fn find(&self, ptr: u64) -> Option<(u64, u64)> {
        let (&a, &(size, _)) = self.live.range(..=ptr).next_back()?;
        (ptr < a + size.max(1)).then_some((a, size))
    }

    /// Whether an allocation of `size` bytes fits without mapping new memory.
    pub fn fits_mapped(&self, size: u64) -> bool {
        size <= SMALL_MAX && self.chunks.values().any(|c| c.fit(round_up(size.max(1), ALIGN)).is_some())
    }

    fn take_range(&mut self, len: u64) -> Option<u64> {
        let (&start, &l) = self.free.iter().find(|&(_, &l)| l >= len)?;
        self.free.remove(&start);
        if l > len {
            self.free.insert(start + len, l - len);
        }
        Some(start)
    }

    fn give_range(&mut self, start: u64, len: u64) {
        give_back(&mut self.free, start, len);
    }

    /// Places an allocation of `size` bytes (0 is treated as 1); `None` when the arena's
    /// address range is exhausted.
    pub fn alloc(&mut self, size: u64) -> Option<Placed> {
        let placed = if size <= SMALL_MAX {
            let len = round_up(size.max(1), ALIGN);
            let found = self.chunks.iter().find_map(|(&a, c)| c.fit(len).map(|o| (a, o)));
            let (chunk, off, map) = match found {
                Some((a, o)) => (a, o, None),
                None => {
                    let a = self.take_range(CHUNK)?;
                    self.chunks.insert(a, Chunk::empty());
                    (a, 0, Some((a, CHUNK)))
                }
            };
            let c = self.chunks.get_mut(&chunk)?;
            if c.used == 0 {
                self.empty.retain(|&e| e != chunk);
            }
            c.take(off, len);
            self.live.insert(chunk + off, (size, len));
            Placed { addr: chunk + off, map }
        } else {
            let len = round_up(size, CHUNK);
            let a = self.take_range(len)?;
            self.live.insert(a, (size, len));
            Placed { addr: a, map: Some((a, len)) }
        };
        self.live_bytes += size;
        Some(placed)
    }

    /// Frees the allocation at `addr` (its exact address); `None` if there is none.
    pub fn free(&mut self, addr: u64) -> Option<Released> {
        let (size, len) = self.live.remove(&addr)?;
        self.live_bytes -= size;
        let mut out = Released { size, unmap: Vec::new() };
        match backing(addr, size) {
            Backing::Own { addr, len } => {
                self.give_range(addr, len);
                out.unmap.push((addr, len));
            }
            Backing::Shared { chunk } => {
                let Some(c) = self.chunks.get_mut(&chunk) else { return Some(out) };
                c.give(addr - chunk, len);
                if c.used == 0 {
                    self.empty.push_back(chunk);
                    while self.empty.len() > KEEP_EMPTY_CHUNKS {
                        if let Some(old) = self.empty.pop_front() {
                            out.unmap.push(self.drop_chunk(old));
                        }
                    }
                }
            }
        }
        Some(out)
    }

    fn drop_chunk(&mut self, chunk: u64) -> (u64, u64) {
        self.chunks.remove(&chunk);
        self.give_range(chunk, CHUNK);
        (chunk, CHUNK)
    }

    /// Takes back an allocation whose new memory (`Placed::map`) could not be mapped: like
    /// [`Layout::free`], but that never-mapped range is dropped at once instead of kept, and is
    /// not among the returned ranges (those are mapped ranges to return to the driver).
    pub fn undo(&mut self, placed: Placed) -> Vec<(u64, u64)> {
        let Some(r) = self.free(placed.addr) else { return Vec::new() };
        let Some(never) = placed.map else { return r.unmap };
        if self.empty.contains(&never.0) {
            self.empty.retain(|&e| e != never.0);
            self.drop_chunk(never.0);
        }
        r.unmap.into_iter().filter(|&u| u != never).collect()
    }

    /// Returns every empty chunk kept for reuse (to retry an allocation that ran out of memory).
    pub fn trim(&mut self) -> Vec<(u64, u64)> {
        let empty: Vec<u64> = self.empty.drain(..).collect();
        empty.into_iter().map(|c| self.drop_chunk(c)).collect()
    }

    /// Places a reservation of the program's own (`cuMemAddressReserve`): `size` bytes (a
    /// multiple of [`CHUNK`]) aligned to `align` (at least [`CHUNK`]), at `hint` when that
    /// range is free (the driver's `addr` argument is a hint too). `None`: the size is not a
    /// multiple of the chunk, the alignment not a power of two, or no range is left.
    pub fn reserve(&mut self, size: u64, align: u64, hint: u64) -> Option<u64> {
        let align = align.max(CHUNK);
        if size == 0 || size % CHUNK != 0 || !align.is_power_of_two() {
            return None;
        }
        let end = |a: u64| a.checked_add(size);
        let fits = |start: u64, len: u64, at: u64| at >= start && end(at).is_some_and(|e| e <= start + len);
        let at = if hint != 0 && hint % CHUNK == 0 {
            self.free.range(..=hint).next_back().filter(|&(&s, &l)| fits(s, l, hint)).map(|_| hint)
        } else {
            None
        };
        let at = at.or_else(|| {
            self.free.iter().find_map(|(&s, &l)| {
                let a = s.checked_next_multiple_of(align)?;
                fits(s, l, a).then_some(a)
            })
        })?;
        let (&start, &len) = self.free.range(..=at).next_back()?;
        self.free.remove(&start);
        if at > start {
            self.free.insert(start, at - start);
        }
        if start + len > at + size {
            self.free.insert(at + size, start + len - at - size);
        }
        self.reserved.insert(at, size);
        Some(at)
    }

    /// Frees the program's reservation at `addr` of `size` bytes (exactly as reserved);
    /// false if there is none.
    pub fn unreserve(&mut self, addr: u64, size: u64) -> bool {
        if self.reserved.get(&addr) != Some(&size) {
            return false;
        }
        self.reserved.remove(&addr);
        self.give_range(addr, size);
        true
    }

    /// The program's reservation containing `ptr`: (address, length).
    pub fn reservation(&self, ptr: u64) -> Option<(u64, u64)> {
        let (&a, &l) = self.reserved.range(..=ptr).next_back()?;
        (ptr < a + l).then_some((a, l))
    }

    /// Live allocations in address order: (address, requested size).
    pub fn allocations(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.live.iter().map(|(&a, &(s, _))| (a, s))
    }
}

#[cfg(test)]
mod tests;
