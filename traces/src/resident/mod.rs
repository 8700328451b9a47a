//! Warm constants' rules (issue 20): which of a session's uploads may stay on the GPU for the
//! next session of the same program, and when that session may skip copying them again. Shared
//! by the server's executor (`gpuless_replayer::replay::resident`, which also reads the device
//! memory back before it keeps anything) and `gpuless analyze --resident` ([`survey`]).
//!
//! While a session runs, every host-to-device copy of a blob of at least [`MIN_RESIDENT`] bytes
//! is noted by device address ([`Resident::upload`]; a later copy over it replaces it). In the
//! next session, an allocation that takes over a held one is *clean* ([`Resident::adopted`]),
//! and a copy of the same blob to the same kept range of a clean allocation is skipped. Any
//! call that may write device memory other than such a copy ([`may_write_device`]) makes every
//! allocation unclean ([`Resident::dirty`]): from then on, copies run as always.

use std::collections::{BTreeMap, HashSet};

use gpuless_analyzer::api::{ApiFunction, ArgKind, Direction, Group, SyncClass};

use crate::{BlobRef, CallRecord, Hash128, Value};

pub mod survey;

/// Uploads smaller than this are not kept: they are cheap to copy again (and the client sends
/// them with the records, not as cached blobs).
pub const MIN_RESIDENT: u64 = 64 << 10;

/// Ranges by device address: (length, content).
pub type Ranges = BTreeMap<u64, (u64, Hash128)>;

/// The resident ranges of a session: what it uploaded, and what the last session left.
#[derive(Debug, Default)]
pub struct Resident {
    /// Whether uploads are noted (a server's live session; off in a local replay).
    on: bool,
    /// This session's uploads of blobs, by device address: (length, content).
    uploads: Ranges,
    /// Ranges the last session of the program left holding their upload.
    kept: Ranges,
    /// Allocations taken over from the last session with no device write since.
    clean: HashSet<u64>,
    /// Uploads skipped because their range held the blob already: (copies, bytes).
    pub skipped: (u64, u64),
}

/// Whether a call of `f` may write device memory other than through a plain host-to-device
/// copy of a blob (which [`Resident::upload`] follows range by range). By the API table:
/// stream work a graph could hold, copies, sets, launches, graphs and virtual-memory changes.
pub fn may_write_device(f: &ApiFunction) -> bool {
    !matches!(f.sync, SyncClass::DeviceToHost | SyncClass::DeviceToHostAsync)
        && (f.capturable || matches!(f.group, Group::Copy | Group::Set | Group::Launch | Group::Graph | Group::Vmm))
}

/// The blob a plain host-to-device copy record sends, and where to: (device address, blob). A
/// plain copy is a copy whose arguments (not a struct's fields) name one device destination and
/// one stored host source: `cuMemcpyHtoD(Async)`, and `cuMemcpy(Async)` of a host source to
/// device memory (`anybuf`, read from the values).
pub fn plain_upload(f: &ApiFunction, rec: &CallRecord) -> Option<(u64, BlobRef)> {
    if f.group != Group::Copy
        || !matches!(f.sync, SyncClass::HostToDevice | SyncClass::CopyAnyDirection | SyncClass::CopyAnyDirectionAsync)
    {
        return None;
    }
    let mut args = f.args.iter().zip(&rec.args);
    let blob = args.clone().find_map(|(a, v)| match (a.dir, a.kind, v) {
        (Direction::In, ArgKind::HostBuf(_) | ArgKind::AnyBuf(_), Value::Blob(b)) => Some(*b),
        _ => None,
    })?;
    let dst = args.find_map(|(a, v)| match (a.kind, v) {
        (ArgKind::DevPtr | ArgKind::AnyBuf(_), Value::DevPtr(x)) | (ArgKind::DevPtr, Value::U64(x)) => Some(*x),
        _ => None,
    })?;
    Some((dst, blob))
}

impl Resident {
    /// Noting uploads from now on, with the ranges the last session of the program left.
    pub fn start(kept: Ranges) -> Resident {
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

    /// For a record of `f` about to run (`base`: the allocation containing an address): whether
    /// it is a copy of a blob into a kept range of a clean allocation, which holds that blob
    /// already (it is skipped). Notes uploads and device writes either way. While a capture
    /// is going on nothing is skipped.
    pub fn before(
        &mut self,
        f: &ApiFunction,
        rec: &CallRecord,
        capturing: bool,
        base: impl Fn(u64) -> Option<u64>,
    ) -> bool {
        if !self.on {
            return false;
        }
        match plain_upload(f, rec) {
            Some((dst, b)) if !capturing => self.upload(dst, b.len, b.hash, base(dst)),
            _ => {
                if may_write_device(f) {
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
fn remove_overlapping(m: &mut Ranges, at: u64, len: u64) {
    let end = at.saturating_add(len.max(1));
    let hit: Vec<u64> =
        m.range(..end).rev().take_while(|(a, (l, _))| a.saturating_add(*l) > at).map(|(a, _)| *a).collect();
    for a in hit {
        m.remove(&a);
    }
}

/// The parts of `[lo, hi)` outside `ranges` (sorted by start, non-overlapping).
pub fn gaps(lo: u64, hi: u64, ranges: &Ranges) -> Vec<(u64, u64)> {
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

#[cfg(test)]
mod tests;
