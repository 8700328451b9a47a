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
//! after every other stream's work. An allocation's work runs in the context it was made in
//! (a session of several devices: its device's; `managed_ctx.rs`).

use std::collections::{BTreeMap, HashMap};

use cudarc::driver::sys;
use gpuless_traces::CallRecord;

use super::blockhash::BLOCK;
use super::managed_ctx::{current, Bound, Entered};
use super::{ReplayError, State};

/// Bytes compared at a time when looking for what the device changed in managed memory
/// without the block-hash kernel.
const PULL_BLOCK: usize = 4096;

fn bad(rec: &CallRecord, problem: &str) -> ReplayError {
    ReplayError::Inconsistent { seq: rec.seq, what: rec.function.name().to_string(), problem: problem.into() }
}

/// What the client last saw of one allocation.
enum Seen {
    /// Kept on the device: one hash per [`BLOCK`] bytes of what the client holds (the
    /// block-hash kernel's); only the blocks whose hash changed cross to the host.
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
/// the GPU (a hash per 256-byte block), so a pull reads the managed memory at the device's
/// bandwidth and copies only what changed (proven on an H200, 2026-11-28: the shared-memory
/// compatibility programs, the cost probe and the managed samples).
/// `GPULESS_MANAGED_COMPARE=host` in the server's environment (or a kernel that cannot be
/// loaded) copies the whole allocation to the host at every pull and compares it there.
#[derive(Default)]
pub(crate) struct Managed {
    /// Allocation address → the context it was made in and what the client holds.
    seen: BTreeMap<u64, (usize, Seen)>,
    /// Each context's stream, pinned buffer and kernel.
    bound: HashMap<usize, Bound>,
}

/// Whether the server's environment leaves the comparison on the device.
fn on_device() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("GPULESS_MANAGED_COMPARE").as_deref() != Ok("host"))
}

impl Managed {
    /// A new allocation at `addr` (live at `live`, `len` bytes) in the current context, zeroed
    /// here as the client's pages are, and tracked from now on.
    pub fn add(&mut self, addr: u64, len: u64, live: sys::CUdeviceptr, rec: &CallRecord) -> Result<(), ReplayError> {
        let ctx = current();
        let b = self.bound.entry(ctx).or_default();
        b.zero(live, len).map_err(|p| bad(rec, &p))?;
        let seen = on_device()
            .then(|| b.hashed(len, live))
            .flatten()
            .map_or_else(|| Seen::Bytes(vec![0; len as usize]), |hashes| Seen::Hashes { len, hashes });
        b.finish().map_err(|p| bad(rec, &p))?;
        if let Some((_, old)) = self.seen.insert(addr, (ctx, seen)) {
            Self::free(old);
        }
        Ok(())
    }

    fn free(seen: Seen) {
        if let Seen::Hashes { hashes, .. } = seen {
            // SAFETY: our buffer; cuMemFree waits for the kernels that use it.
            unsafe { sys::cuMemFree_v2(hashes) };
        }
    }

    /// The allocation at `addr` was freed.
    pub fn remove(&mut self, addr: u64) {
        if let Some((_, old)) = self.seen.remove(&addr) {
            Self::free(old);
        }
    }

    /// Whether `[addr, addr + n)` lies in one allocation.
    pub fn covers(&self, addr: u64, n: usize) -> bool {
        self.seen.range(..=addr).next_back().is_some_and(|(&a, (_, v))| addr + n as u64 <= a + v.len())
    }

    /// The client wrote `data` at `addr` (live at `live`): the bytes go to the device now (on
    /// the allocation's context's stream, waited for: not behind the program's work), and what
    /// the client holds is noted. With hashes, the blocks written are hashed again (the device's
    /// copy is what the client holds there), so that the next pull does not send them back.
    /// Memory no allocation here covers (a local replay's host-memory record) is written in the
    /// current context.
    pub fn write(
        &mut self,
        addr: u64,
        data: &[u8],
        live: sys::CUdeviceptr,
        rec: &CallRecord,
    ) -> Result<(), ReplayError> {
        let Managed { seen, bound } = self;
        let entry = seen.range_mut(..=addr).next_back().filter(|(&a, (_, v))| addr < a + v.len().max(1));
        let ctx = entry.as_ref().map_or_else(current, |(_, (c, _))| *c);
        let _entered = Entered::new(ctx);
        let b = bound.entry(ctx).or_default();
        b.upload(live, data).map_err(|p| bad(rec, &p))?;
        if let Some((&a, (_, v))) = entry {
            let off = addr - a;
            match v {
                Seen::Bytes(held) => {
                    if let Some(dst) = held.get_mut(off as usize..off as usize + data.len()) {
                        dst.copy_from_slice(data);
                    }
                }
                Seen::Hashes { len, hashes } => {
                    let (lo, hi) =
                        ((off / BLOCK) * BLOCK, ((off + data.len() as u64).div_ceil(BLOCK) * BLOCK).min(*len));
                    if lo < hi {
                        b.rehash(live - off, lo, hi, *hashes);
                    }
                }
            }
        }
        b.finish().map_err(|p| bad(rec, &p))
    }
}

impl Drop for Managed {
    fn drop(&mut self) {
        for (&ctx, b) in self.bound.iter_mut() {
            let _entered = Entered::new(ctx);
            b.release();
        }
        for (_, (_, seen)) in std::mem::take(&mut self.seen) {
            Self::free(seen);
        }
    }
}

/// What the device changed in the client's managed memory since the client last saw it:
/// `[u64 address, u32 length, bytes]…` (runs joined).
pub(crate) fn pull(st: &mut State, rec: &CallRecord) -> Result<Vec<u8>, ReplayError> {
    let mut out = Vec::new();
    let addrs: Vec<u64> = st.managed.seen.keys().copied().collect();
    let failed = |p: String| bad(rec, &format!("reading managed memory: {p}"));
    for a in addrs {
        let live = st.mem.translate(a);
        let Managed { seen, bound } = &mut st.managed;
        let Some((ctx, v)) = seen.get_mut(&a) else { continue };
        let _entered = Entered::new(*ctx);
        let b = bound.entry(*ctx).or_default();
        match v {
            Seen::Hashes { len, hashes } => {
                let (len, hashes) = (*len, *hashes);
                let blocks = b
                    .changed_blocks(live, len, hashes)
                    .map_err(|problem| bad(rec, &format!("comparing managed memory on the device: {problem}")))?;
                for (lo, hi) in runs(&blocks, len) {
                    out.extend_from_slice(&(a + lo).to_le_bytes());
                    out.extend_from_slice(&((hi - lo) as u32).to_le_bytes());
                    let at = out.len();
                    out.resize(at + (hi - lo) as usize, 0);
                    b.download(&mut out[at..], live + lo).map_err(failed)?;
                }
            }
            Seen::Bytes(held) => {
                let mut now = vec![0u8; held.len()];
                b.download(&mut now, live).map_err(failed)?;
                compare_bytes(a, held, now, &mut out);
            }
        }
    }
    Ok(out)
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
