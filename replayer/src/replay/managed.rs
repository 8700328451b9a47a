//! A client's shared memory as the executor holds it (client mode): managed allocations and
//! mirrored pinned memory, device memory at the client's addresses, with what the client last
//! saw of each, so that a `gpulessHostPull` answers only what the device changed since.
//!
//! Everything here runs on a stream of its own that does not wait for the program's streams
//! (`CU_STREAM_NON_BLOCKING`), each step waited for on that stream alone. What the host writes
//! to shared memory is visible to the device at once, as it is natively: a kernel that polls a
//! flag in pinned memory until the host sets it (`UnifiedMemoryPerf`'s latch) is still running
//! when the host's write comes, and a copy on the legacy stream would wait for that kernel
//! forever. Likewise a pull after a wait for one stream reads the memory as it is then, not
//! after every other stream's work.

use cudarc::driver::sys;
use gpuless_traces::CallRecord;

use super::blockhash::{Kernel, BLOCK};
use super::{check, ReplayError, State};

/// Bytes compared at a time when looking for what the device changed in managed memory
/// without the block-hash kernel.
const PULL_BLOCK: usize = 4096;

fn bad(rec: &CallRecord, problem: &str) -> ReplayError {
    ReplayError::Inconsistent { seq: rec.seq, what: rec.function.name().to_string(), problem: problem.into() }
}

fn ok(what: &str, r: sys::CUresult) -> Result<(), String> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what}: {r:?}"))
    }
}

/// What the client last saw of one allocation.
enum Seen {
    /// Kept on the device: one hash per [`BLOCK`] bytes of what the client holds
    /// ([`Kernel`]'s hashes); only the blocks whose hash changed cross to the host.
    Hashes { len: u64, hashes: sys::CUdeviceptr },
    /// Kept on the host (the kernel could not be loaded): the bytes the client holds, compared
    /// in [`PULL_BLOCK`]s with a copy of the whole allocation.
    Bytes(Vec<u8>),
}

impl Seen {
    fn len(&self) -> u64 {
        match self {
            Seen::Hashes { len, .. } => *len,
            Seen::Bytes(b) => b.len() as u64,
        }
    }
}

/// A client's managed memory (client mode): what the client last saw of each allocation, to
/// answer a `gpulessHostPull` with only what the device changed since. The comparison runs on
/// the GPU (a hash per 256-byte block, [`Kernel`]), so a pull reads the managed memory at the
/// device's bandwidth and copies only what changed (proven on an H200, 2026-11-28: the
/// shared-memory compatibility programs, the cost probe and the managed samples).
/// `GPULESS_MANAGED_COMPARE=host` in the server's environment (or a kernel that cannot be
/// loaded) copies the whole allocation to the host at every pull and compares it there.
#[derive(Default)]
pub(crate) struct Managed {
    /// Allocation address → what the client holds.
    seen: std::collections::BTreeMap<u64, Seen>,
    /// The kernel, loaded at the first allocation (`Err`: it could not be; host comparison).
    kernel: Option<Result<Kernel, String>>,
    /// The kernel's list of changed blocks (a count, then room for `list_blocks` blocks).
    list: sys::CUdeviceptr,
    list_blocks: u64,
    /// The stream of all of the above (null until the first allocation).
    stream: Option<Stream>,
    /// Pinned host memory every copy goes through (allocated at first use): a copy from or to
    /// pageable memory is staged by the driver in ways that may wait for other streams' work.
    staging: Option<Staging>,
}

/// Bytes of the pinned buffer copies go through (larger copies go in pieces).
const STAGING: usize = 8 << 20;

/// Pinned host memory of ours (freed when dropped).
struct Staging {
    ptr: *mut u8,
    len: usize,
}

impl Drop for Staging {
    fn drop(&mut self) {
        // SAFETY: our pinned buffer; every copy through it was waited for.
        unsafe { sys::cuMemFreeHost(self.ptr.cast()) };
    }
}

/// A stream of ours that waits for no other (destroyed when dropped).
struct Stream(sys::CUstream);

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: our stream; its work was waited for by each step.
        unsafe { sys::cuStreamDestroy_v2(self.0) };
    }
}

impl Managed {
    /// The stream of shared memory's work, created at first use.
    fn stream(&mut self) -> Result<sys::CUstream, String> {
        if let Some(s) = &self.stream {
            return Ok(s.0);
        }
        let mut s = std::ptr::null_mut();
        // SAFETY: an out-pointer; a stream of the current context.
        ok("cuStreamCreate", unsafe {
            sys::cuStreamCreate(&mut s, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
        })?;
        self.stream = Some(Stream(s));
        Ok(s)
    }

    /// Waits for this module's work.
    fn finish(&mut self) -> Result<(), String> {
        let s = self.stream()?;
        // SAFETY: our stream.
        ok("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(s) })
    }

    /// The pinned buffer ([`STAGING`] bytes), allocated once: freeing pinned memory may wait
    /// for the device, and a kernel polling a flag would keep it waiting.
    fn staging(&mut self) -> Result<(*mut u8, usize), String> {
        if let Some(b) = &self.staging {
            return Ok((b.ptr, b.len));
        }
        let mut p = std::ptr::null_mut();
        // SAFETY: an out-pointer for pinned memory of STAGING bytes.
        ok("cuMemAllocHost", unsafe { sys::cuMemAllocHost_v2(&mut p, STAGING) })?;
        self.staging = Some(Staging { ptr: p.cast(), len: STAGING });
        Ok((p.cast(), STAGING))
    }

    /// Copies `data` to device memory at `live`, through the pinned buffer, on our stream
    /// (waited for).
    fn upload(&mut self, live: sys::CUdeviceptr, data: &[u8]) -> Result<(), String> {
        let s = self.stream()?;
        let (buf, cap) = self.staging()?;
        for (i, piece) in data.chunks(cap).enumerate() {
            // SAFETY: our pinned buffer of `cap` bytes, free (the last copy was waited for);
            // device memory of the shared range; our stream.
            unsafe {
                std::ptr::copy_nonoverlapping(piece.as_ptr(), buf, piece.len());
                let at = live + (i * cap) as u64;
                ok("cuMemcpyHtoDAsync", sys::cuMemcpyHtoDAsync_v2(at, buf.cast(), piece.len(), s))?;
                ok("cuStreamSynchronize", sys::cuStreamSynchronize(s))?;
            }
        }
        Ok(())
    }

    /// Copies device memory at `live` into `out`, through the pinned buffer, on our stream.
    fn download(&mut self, out: &mut [u8], live: sys::CUdeviceptr) -> Result<(), String> {
        let s = self.stream()?;
        let (buf, cap) = self.staging()?;
        for (i, piece) in out.chunks_mut(cap).enumerate() {
            // SAFETY: as in `upload`, the other way.
            unsafe {
                let at = live + (i * cap) as u64;
                ok("cuMemcpyDtoHAsync", sys::cuMemcpyDtoHAsync_v2(buf.cast(), at, piece.len(), s))?;
                ok("cuStreamSynchronize", sys::cuStreamSynchronize(s))?;
                std::ptr::copy_nonoverlapping(buf, piece.as_mut_ptr(), piece.len());
            }
        }
        Ok(())
    }

    /// A new allocation at `addr` (live at `live`, `len` bytes), zeroed here as the client's
    /// pages are, and tracked from now on.
    pub fn add(&mut self, addr: u64, len: u64, live: sys::CUdeviceptr, rec: &CallRecord) -> Result<(), ReplayError> {
        let s = self.stream().map_err(|p| bad(rec, &p))?;
        // SAFETY: device memory just created for the range; our stream, waited for.
        check(unsafe { sys::cuMemsetD8Async(live, 0, len as usize, s) }, rec.seq, rec.function.name())?;
        let seen = self
            .hashed(len, live)
            .map_or_else(|| Seen::Bytes(vec![0; len as usize]), |hashes| Seen::Hashes { len, hashes });
        self.finish().map_err(|p| bad(rec, &p))?;
        if let Some(old) = self.seen.insert(addr, seen) {
            Self::free(old);
        }
        Ok(())
    }

    /// Device hashes of the `len` bytes at `live`, as they are now; `None` without the kernel,
    /// or when the server's environment asks for the host comparison
    /// (`GPULESS_MANAGED_COMPARE=host`).
    fn hashed(&mut self, len: u64, live: sys::CUdeviceptr) -> Option<sys::CUdeviceptr> {
        static ON_DEVICE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        if !*ON_DEVICE.get_or_init(|| std::env::var("GPULESS_MANAGED_COMPARE").as_deref() != Ok("host")) {
            return None;
        }
        let s = self.stream().ok()?;
        let kernel = self.kernel.get_or_insert_with(Kernel::load).as_ref().ok()?;
        let blocks = len.div_ceil(BLOCK).max(1);
        let mut hashes = 0;
        // SAFETY (block): a new buffer of ours; our list grown to room for every block of this
        // allocation (the old one freed after our stream's work); one pass of the kernel over
        // the allocation (its baseline), on our stream.
        unsafe {
            if sys::cuMemAlloc_v2(&mut hashes, (blocks * 8) as usize) != sys::CUresult::CUDA_SUCCESS {
                return None;
            }
            // Stream-ordered: a plain free waits for the whole device, a polling kernel too.
            if blocks > self.list_blocks {
                if self.list != 0 {
                    sys::cuMemFreeAsync(self.list, s);
                }
                self.list = 0;
                if sys::cuMemAllocAsync(&mut self.list, ((blocks + 1) * 8) as usize, s) != sys::CUresult::CUDA_SUCCESS {
                    self.list_blocks = 0;
                    sys::cuMemFree_v2(hashes);
                    return None;
                }
                self.list_blocks = blocks;
            }
            // The list's count restarts: a pass appends from it, and the list has room for one
            // allocation's blocks only.
            if sys::cuMemsetD8Async(self.list, 0, 8, s) != sys::CUresult::CUDA_SUCCESS
                || kernel.pass(live, len, hashes, 0, self.list, s).is_err()
            {
                sys::cuStreamSynchronize(s);
                sys::cuMemFree_v2(hashes);
                return None;
            }
        }
        Some(hashes)
    }

    fn free(seen: Seen) {
        if let Seen::Hashes { hashes, .. } = seen {
            // SAFETY: our buffer; cuMemFree waits for the kernels that use it.
            unsafe { sys::cuMemFree_v2(hashes) };
        }
    }

    /// The allocation at `addr` was freed.
    pub fn remove(&mut self, addr: u64) {
        if let Some(old) = self.seen.remove(&addr) {
            Self::free(old);
        }
    }

    /// Whether `[addr, addr + n)` lies in one allocation.
    pub fn covers(&self, addr: u64, n: usize) -> bool {
        self.seen.range(..=addr).next_back().is_some_and(|(&a, v)| addr + n as u64 <= a + v.len())
    }

    /// The client wrote `data` at `addr` (live at `live`): the bytes go to the device now (on
    /// our stream, waited for: not behind the program's work), and what the client holds is
    /// noted. With hashes, the blocks written are hashed again (the device's copy is what the
    /// client holds there), so that the next pull does not send them back.
    pub fn write(
        &mut self,
        addr: u64,
        data: &[u8],
        live: sys::CUdeviceptr,
        rec: &CallRecord,
    ) -> Result<(), ReplayError> {
        self.upload(live, data).map_err(|p| bad(rec, &p))?;
        self.noted(addr, data, live);
        self.finish().map_err(|p| bad(rec, &p))
    }

    /// [`Managed::write`]'s note of what the client holds.
    fn noted(&mut self, addr: u64, data: &[u8], live: sys::CUdeviceptr) {
        let Some(s) = self.stream.as_ref().map(|s| s.0) else { return };
        let Some((&a, v)) = self.seen.range_mut(..=addr).next_back() else { return };
        let off = addr - a;
        match v {
            Seen::Bytes(b) => {
                if let Some(dst) = b.get_mut(off as usize..off as usize + data.len()) {
                    dst.copy_from_slice(data);
                }
            }
            Seen::Hashes { len, hashes } => {
                let (lo, hi) = ((off / BLOCK) * BLOCK, ((off + data.len() as u64).div_ceil(BLOCK) * BLOCK).min(*len));
                let (Some(Ok(kernel)), true) = (&self.kernel, lo < hi) else { return };
                // SAFETY: the written blocks of the allocation (live at `live - off`), their
                // slice of its hashes, and our list, its count reset first (room for every
                // block of one allocation; reset again before every pull, so these blocks are
                // not reported), on our stream after the copy. Without the reset, passes
                // between two pulls appended past the list's end (found on the H200:
                // mapped_mem's values corrupted).
                let _ = unsafe {
                    if sys::cuMemsetD8Async(self.list, 0, 8, s) != sys::CUresult::CUDA_SUCCESS {
                        return;
                    }
                    kernel.pass(live - (off - lo), hi - lo, *hashes + (lo / BLOCK) * 8, lo / BLOCK, self.list, s)
                };
            }
        }
    }
}

impl Drop for Managed {
    fn drop(&mut self) {
        if let Some(s) = &self.stream {
            // SAFETY: our stream.
            unsafe { sys::cuStreamSynchronize(s.0) };
        }
        for (_, seen) in std::mem::take(&mut self.seen) {
            Self::free(seen);
        }
        if let (true, Some(st)) = (self.list != 0, &self.stream) {
            // SAFETY: our buffer, allocated on our stream.
            unsafe {
                sys::cuMemFreeAsync(self.list, st.0);
                sys::cuStreamSynchronize(st.0);
            }
        }
    }
}

/// What the device changed in the client's managed memory since the client last saw it:
/// `[u64 address, u32 length, bytes]…` (runs joined).
pub(crate) fn pull(st: &mut State, rec: &CallRecord) -> Result<Vec<u8>, ReplayError> {
    let mut out = Vec::new();
    let addrs: Vec<u64> = st.managed.seen.keys().copied().collect();
    if addrs.is_empty() {
        return Ok(out);
    }
    let failed = |p: String| bad(rec, &format!("reading managed memory: {p}"));
    for a in addrs {
        let live = st.mem.translate(a);
        let m = &mut st.managed;
        match m.seen.get_mut(&a) {
            Some(Seen::Hashes { len, hashes }) => {
                let (len, hashes) = (*len, *hashes);
                let blocks = m
                    .changed_blocks(live, len, hashes)
                    .map_err(|problem| bad(rec, &format!("comparing managed memory on the device: {problem}")))?;
                for (lo, hi) in runs(&blocks, len) {
                    out.extend_from_slice(&(a + lo).to_le_bytes());
                    out.extend_from_slice(&((hi - lo) as u32).to_le_bytes());
                    let at = out.len();
                    out.resize(at + (hi - lo) as usize, 0);
                    m.download(&mut out[at..], live + lo).map_err(failed)?;
                }
            }
            Some(Seen::Bytes(seen)) => {
                let mut now = vec![0u8; seen.len()];
                let mut seen = std::mem::take(seen);
                m.download(&mut now, live).map_err(failed)?;
                compare_bytes(a, &mut seen, now, &mut out);
                if let Some(Seen::Bytes(kept)) = m.seen.get_mut(&a) {
                    *kept = seen;
                }
            }
            None => {}
        }
    }
    Ok(out)
}

impl Managed {
    /// The blocks of the `len` bytes at `live` whose hash changed since the last pass, on our
    /// stream (the memory as it is now: after the program's wait before the pull, not after
    /// every stream's work).
    fn changed_blocks(
        &mut self,
        live: sys::CUdeviceptr,
        len: u64,
        hashes: sys::CUdeviceptr,
    ) -> Result<Vec<u64>, String> {
        let s = self.stream()?;
        let Some(Ok(kernel)) = &self.kernel else { return Err("no block-hash kernel".into()) };
        let total = len.div_ceil(BLOCK);
        // SAFETY: our list (room for every block of the allocation), reset; the pass, on our
        // stream; the count and the list read after it on the same stream.
        unsafe {
            ok("cuMemsetD8Async", sys::cuMemsetD8Async(self.list, 0, 8, s))?;
            kernel.pass(live, len, hashes, 0, self.list, s)?;
        }
        let mut n = [0u8; 8];
        self.download(&mut n, self.list)?;
        let n = u64::from_le_bytes(n).min(total) as usize;
        let mut raw = vec![0u8; n * 8];
        if n > 0 {
            self.download(&mut raw, self.list + 8)?;
        }
        Ok(raw.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default())).collect())
    }
}

/// Byte ranges `[lo, hi)` of an allocation of `len` bytes covering `blocks` (in any order),
/// contiguous blocks joined (a run at most 2 GiB).
fn runs(blocks: &[u64], len: u64) -> Vec<(u64, u64)> {
    let mut b = blocks.to_vec();
    b.sort_unstable();
    b.dedup();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for k in b {
        let lo = k * BLOCK;
        if lo >= len {
            continue;
        }
        let hi = (lo + BLOCK).min(len);
        match out.last_mut() {
            Some(r) if r.1 == lo && hi - r.0 <= u64::from(u32::MAX) / 2 => r.1 = hi,
            _ => out.push((lo, hi)),
        }
    }
    out
}

/// [`pull`] of one allocation at `a` compared on the host: `now`, the whole allocation as the
/// device holds it, against `seen`, by [`PULL_BLOCK`]s; the runs that differ go to `out` and
/// `now` becomes what the client holds.
fn compare_bytes(a: u64, seen: &mut Vec<u8>, now: Vec<u8>, out: &mut Vec<u8>) {
    let mut run: Option<(usize, usize)> = None;
    let flush = |out: &mut Vec<u8>, (lo, hi): (usize, usize), now: &[u8]| {
        out.extend_from_slice(&(a + lo as u64).to_le_bytes());
        out.extend_from_slice(&((hi - lo) as u32).to_le_bytes());
        out.extend_from_slice(&now[lo..hi]);
    };
    for lo in (0..now.len()).step_by(PULL_BLOCK) {
        let hi = (lo + PULL_BLOCK).min(now.len());
        if now[lo..hi] != seen[lo..hi] {
            run = match run {
                Some((s, e)) if e == lo && hi - s <= u32::MAX as usize / 2 => Some((s, hi)),
                Some(r) => {
                    flush(out, r, &now);
                    Some((lo, hi))
                }
                None => Some((lo, hi)),
            };
        }
    }
    if let Some(r) = run {
        flush(out, r, &now);
    }
    *seen = now;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_blocks_become_runs_within_the_allocation() {
        assert_eq!(runs(&[3, 1, 2, 2], 10_000), [(256, 1024)]);
        assert_eq!(runs(&[0, 5], 1300), [(0, 256), (1280, 1300)]);
        assert!(runs(&[9], 1300).is_empty(), "blocks past the end are ignored");
        assert!(runs(&[], 1300).is_empty());
    }

    #[test]
    fn bytes_that_changed_go_out_in_joined_runs() {
        let mut seen = vec![0u8; 3 * PULL_BLOCK];
        let mut now = seen.clone();
        now[10] = 1;
        now[PULL_BLOCK + 5] = 2;
        let mut out = Vec::new();
        compare_bytes(0x1000, &mut seen, now.clone(), &mut out);
        assert_eq!(u64::from_le_bytes(out[..8].try_into().unwrap()), 0x1000);
        assert_eq!(u32::from_le_bytes(out[8..12].try_into().unwrap()) as usize, 2 * PULL_BLOCK);
        assert_eq!(out.len(), 12 + 2 * PULL_BLOCK);
        assert_eq!(seen, now, "what the client holds now");
        let mut again = Vec::new();
        compare_bytes(0x1000, &mut seen, now, &mut again);
        assert!(again.is_empty());
    }
}
