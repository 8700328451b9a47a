//! Warm constants (issue 20): set-up uploads that stay on the GPU from one session of a program
//! to the next session of the same program on the same executor, so that the next session's
//! identical uploads (weights) are not copied again.
//!
//! While a session runs, every host-to-device copy of a blob of at least [`MIN_RESIDENT`] bytes
//! is noted by device address ([`Resident::upload`]). When the session ends and its executor is
//! kept for the program ([`Stream::keep`](super::stream::Stream::keep)), each noted range is read
//! back and compared with the blob: only ranges that still hold exactly what was uploaded are
//! kept, with the allocations around them (`Memory::hold`); every other byte of the memory that
//! stays mapped is zeroed, and everything else is freed.
//!
//! In the next session, an allocation at the same address and size takes over the held one
//! (the client's arena gives the same program the same addresses), and a copy of the same blob
//! to the same range of it is skipped — but only while no call that may write device memory
//! (a launch, a set, a copy into the device, a graph) has run since the allocation was taken
//! over: a kept range is then known to hold the blob, as the copy would have left it. Anything
//! else is copied as always. A wrong byte is never left in place of an upload.

use std::collections::{BTreeMap, HashSet};

use cudarc::driver::sys;
use gpuless_analyzer::api::{ApiFunction, Group, SyncClass};
use gpuless_traces::{Hash128, Value};

use super::args::Call;

/// Uploads smaller than this are not kept: they are cheap to copy again (and the client sends
/// them with the records, not as cached blobs).
pub const MIN_RESIDENT: u64 = 64 << 10;

/// The resident ranges of a session: what it uploaded, and what the last session left.
#[derive(Debug, Default)]
pub struct Resident {
    /// Whether uploads are noted (a server's live session; off in a local replay).
    on: bool,
    /// This session's uploads of blobs, by device address: (length, content).
    uploads: BTreeMap<u64, (u64, Hash128)>,
    /// Ranges the last session of the program left holding their upload.
    kept: BTreeMap<u64, (u64, Hash128)>,
    /// Allocations taken over from the last session with no device write since.
    clean: HashSet<u64>,
    /// Uploads skipped because their range held the blob already: (copies, bytes).
    pub skipped: (u64, u64),
}

/// Whether a call of `f` may write device memory other than through a plain host-to-device
/// copy of a blob (which [`Resident::upload`] follows range by range). By the API table:
/// stream work a graph could hold, copies, sets, launches, graphs and virtual-memory changes.
fn may_write_device(f: &ApiFunction) -> bool {
    !matches!(f.sync, SyncClass::DeviceToHost | SyncClass::DeviceToHostAsync)
        && (f.capturable || matches!(f.group, Group::Copy | Group::Set | Group::Launch | Group::Graph | Group::Vmm))
}

/// The blob a plain host-to-device copy record sends, and where to: (device address, blob).
fn plain_upload(c: &Call<'_>) -> Option<(u64, gpuless_traces::BlobRef)> {
    if !matches!(c.f.name, "cuMemcpyHtoD" | "cuMemcpyHtoDAsync") {
        return None;
    }
    let dst = c.word("dstDevice").ok()?;
    match c.arg("srcHost")? {
        Value::Blob(b) => Some((dst, *b)),
        _ => None,
    }
}

impl Resident {
    /// Noting uploads from now on, with the ranges the last session of the program left.
    pub fn start(kept: BTreeMap<u64, (u64, Hash128)>) -> Resident {
        Resident { on: true, kept, ..Resident::default() }
    }

    /// Whether uploads are noted.
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// Bytes the last session left resident and not yet overwritten.
    pub fn kept_bytes(&self) -> u64 {
        self.kept.values().map(|(len, _)| len).sum()
    }

    /// The allocation at `base` was taken over from the last session.
    pub fn adopted(&mut self, base: u64) {
        if self.on {
            self.clean.insert(base);
        }
    }

    /// A call that may write device memory ran: no kept range is known to hold its blob now.
    pub fn dirty(&mut self) {
        self.clean.clear();
    }

    /// For a record about to run (with `base`, the allocation containing an address, at hand):
    /// whether it is a copy of a blob into a kept range of a clean allocation, which holds
    /// that blob already (it is skipped). Notes uploads and device writes either way.
    pub(crate) fn before(&mut self, c: &Call<'_>, capturing: bool, base: impl Fn(u64) -> Option<u64>) -> bool {
        if !self.on {
            return false;
        }
        match plain_upload(c) {
            Some((dst, b)) if !capturing => self.upload(dst, b.len, b.hash, base(dst)),
            _ => {
                if may_write_device(c.f) {
                    self.dirty();
                }
                false
            }
        }
    }

    /// A copy of `len` bytes of content `hash` to `dst`, inside the allocation at `base`:
    /// noted (replacing what it overlaps); returns whether it can be skipped.
    pub fn upload(&mut self, dst: u64, len: u64, hash: Hash128, base: Option<u64>) -> bool {
        let skip = self.kept.get(&dst) == Some(&(len, hash)) && base.is_some_and(|b| self.clean.contains(&b));
        if !skip {
            remove_overlapping(&mut self.kept, dst, len);
        }
        remove_overlapping(&mut self.uploads, dst, len);
        if len >= MIN_RESIDENT {
            self.uploads.insert(dst, (len, hash));
        }
        if skip {
            self.skipped.0 += 1;
            self.skipped.1 += len;
        }
        skip
    }

    /// This session's uploads: (address, length, content).
    pub fn uploads(&self) -> impl Iterator<Item = (u64, u64, Hash128)> + '_ {
        self.uploads.iter().map(|(a, (l, h))| (*a, *l, *h))
    }
}

/// Removes the entries of `m` (non-overlapping ranges by start) that overlap `[at, at + len)`.
fn remove_overlapping(m: &mut BTreeMap<u64, (u64, Hash128)>, at: u64, len: u64) {
    let end = at.saturating_add(len.max(1));
    let hit: Vec<u64> =
        m.range(..end).rev().take_while(|(a, (l, _))| a.saturating_add(*l) > at).map(|(a, _)| *a).collect();
    for a in hit {
        m.remove(&a);
    }
}

/// The parts of `[lo, hi)` outside `ranges` (sorted by start, non-overlapping).
pub fn gaps(lo: u64, hi: u64, ranges: &BTreeMap<u64, (u64, Hash128)>) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = lo;
    for (&a, &(l, _)) in ranges.range(..hi) {
        let e = a.saturating_add(l);
        if e <= at {
            continue;
        }
        if a > at {
            out.push((at, a.min(hi) - at));
        }
        at = at.max(e);
        if at >= hi {
            break;
        }
    }
    if at < hi {
        out.push((at, hi - at));
    }
    out
}

/// Of `uploads` (address, length, content), those whose device bytes equal their blob
/// (`bytes` of a content hash), read back in pieces of 64 MiB. The context is current and idle.
pub fn verify<'b>(
    uploads: impl Iterator<Item = (u64, u64, Hash128)>,
    bytes: impl Fn(&Hash128) -> Option<&'b [u8]>,
) -> BTreeMap<u64, (u64, Hash128)> {
    const PIECE: usize = 64 << 20;
    let mut buf = Vec::new();
    let mut held = BTreeMap::new();
    'next: for (dst, len, h) in uploads {
        let Some(want) = bytes(&h).filter(|b| b.len() as u64 == len) else { continue };
        let mut off = 0usize;
        while off < want.len() {
            let n = (want.len() - off).min(PIECE);
            buf.resize(n, 0u8);
            // SAFETY: a copy of `n` bytes of live device memory (inside an allocation the
            // session made) into a host buffer of `n` bytes.
            let r = unsafe { sys::cuMemcpyDtoH_v2(buf.as_mut_ptr().cast(), dst + off as u64, n) };
            if r != sys::CUresult::CUDA_SUCCESS || buf[..n] != want[off..off + n] {
                continue 'next;
            }
            off += n;
        }
        held.insert(dst, (len, h));
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_range_is_skipped_only_in_a_clean_allocation_and_only_once_overwritten_never() {
        let (h, g) = (Hash128(7), Hash128(8));
        let mut r = Resident::start(BTreeMap::from([(0x1000, (MIN_RESIDENT, h)), (0x100000, (MIN_RESIDENT, g))]));
        assert_eq!(r.kept_bytes(), 2 * MIN_RESIDENT);
        // Not taken over yet: copied.
        assert!(!r.upload(0x1000, MIN_RESIDENT, h, Some(0x1000)));
        // The copy replaced the kept range (the same bytes, but it is no longer needed).
        assert_eq!(r.kept_bytes(), MIN_RESIDENT);
        r.adopted(0x100000);
        // Other content, or another length: copied, and the kept range is gone.
        let mut other = Resident::start(BTreeMap::from([(0x100000, (MIN_RESIDENT, g))]));
        other.adopted(0x100000);
        assert!(!other.upload(0x100000, MIN_RESIDENT, h, Some(0x100000)));
        assert!(!other.upload(0x100000, MIN_RESIDENT, g, Some(0x100000)), "overwritten by the other content");
        // The same content at the same place in a clean allocation: skipped.
        assert!(r.upload(0x100000, MIN_RESIDENT, g, Some(0x100000)));
        assert_eq!(r.skipped, (1, MIN_RESIDENT));
        // After a device write, nothing more is skipped.
        let mut d = Resident::start(BTreeMap::from([(0x100000, (MIN_RESIDENT, g))]));
        d.adopted(0x100000);
        d.dirty();
        assert!(!d.upload(0x100000, MIN_RESIDENT, g, Some(0x100000)));
        // Uploads are noted (large ones), the later replacing what it overlaps.
        assert_eq!(r.uploads().count(), 2);
        r.upload(0x1000 + 16, MIN_RESIDENT, g, None);
        assert_eq!(r.uploads().map(|u| u.0).collect::<Vec<_>>(), [0x1000 + 16, 0x100000]);
        r.upload(0x200000, 100, g, None);
        assert_eq!(r.uploads().count(), 2, "small uploads are not noted");
    }

    #[test]
    fn gaps_are_what_the_ranges_leave_out() {
        let m = BTreeMap::from([(10, (5, Hash128(1))), (20, (5, Hash128(2))), (40, (100, Hash128(3)))]);
        assert_eq!(gaps(0, 50, &m), [(0, 10), (15, 5), (25, 15)]);
        assert_eq!(gaps(12, 22, &m), [(15, 5)]);
        assert_eq!(gaps(200, 210, &m), [(200, 10)]);
        assert!(gaps(41, 50, &m).is_empty());
    }

    #[test]
    fn overlapping_ranges_go() {
        let mut m = BTreeMap::from([(10, (5, Hash128(1))), (20, (5, Hash128(2))), (40, (10, Hash128(3)))]);
        remove_overlapping(&mut m, 14, 7);
        assert_eq!(m.keys().copied().collect::<Vec<_>>(), [40]);
        remove_overlapping(&mut m, 50, 1);
        assert_eq!(m.len(), 1);
        remove_overlapping(&mut m, 49, 1);
        assert!(m.is_empty());
    }
}
