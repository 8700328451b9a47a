//! The content cache: blobs (code images, host-to-device payloads such as weights) by content
//! hash, kept across sessions in two size-bounded tiers — a memory tier (a directory on tmpfs)
//! and a disk tier — least recently used out first (memory → disk → gone).
//!
//! Executors read and add blobs as files (`<dir>/<hash>`, written to a temporary name and
//! renamed, so a reader never sees a partial blob) and tell the server what they added and
//! found; the server alone evicts, from its [`Index`]. A blob being read while it is evicted
//! stays readable to that reader (the file is unlinked, not truncated).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

use gpuless_traces::{BlobBytes, Hash128};

/// The two tiers' directories.
#[derive(Debug, Clone)]
pub struct Dirs {
    /// Memory tier (tmpfs).
    pub memory: PathBuf,
    /// Disk tier.
    pub disk: PathBuf,
}

impl Dirs {
    /// Creates both directories.
    pub fn create(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.memory)?;
        std::fs::create_dir_all(&self.disk)
    }

    fn file(dir: &Path, h: &Hash128) -> PathBuf {
        dir.join(h.to_string())
    }

    /// The marker that says `tenant` sent blob `h`'s bytes (`owners/@TENANT/HASH` in the disk
    /// tier's directory; a tenant's name is a file name, `""` the shared tenant's).
    fn owner_marker(&self, tenant: &str, h: &Hash128) -> PathBuf {
        self.disk.join("owners").join(format!("@{tenant}")).join(h.to_string())
    }

    /// Whether `tenant` has sent blob `h`'s bytes to this server (proof of possession: on a
    /// server with tenants, a session is given a cached blob only if its tenant has).
    pub fn owns(&self, tenant: &str, h: &Hash128) -> bool {
        self.owner_marker(tenant, h).exists()
    }

    /// Forgets who sent blob `h` (it has left the cache: whoever uses it next sends it again).
    pub fn disown(&self, h: &Hash128) {
        let Ok(tenants) = std::fs::read_dir(self.disk.join("owners")) else { return };
        for t in tenants.flatten() {
            let _ = std::fs::remove_file(t.path().join(h.to_string()));
        }
    }

    /// Notes that `tenant` sent blob `h`'s bytes (checked against the hash).
    pub fn own(&self, tenant: &str, h: &Hash128) -> std::io::Result<()> {
        let p = self.owner_marker(tenant, h);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d)?;
        }
        std::fs::write(p, b"")
    }

    /// Reads blob `h` from either tier, checking its content against the hash (a damaged file
    /// is removed and counts as absent). A memory-tier blob is mapped, not copied: its file is
    /// only ever replaced by rename or unlinked, so the mapping stays whole.
    pub fn read(&self, h: &Hash128) -> Option<BlobBytes> {
        let p = Self::file(&self.memory, h);
        if let Ok(f) = std::fs::File::open(&p) {
            // SAFETY: memory-tier files are written under a temporary name and renamed into
            // place, never written or truncated in place (see `write`, `Index::enforce`).
            let map = unsafe { memmap2::MmapOptions::new().populate().map(&f) };
            match map {
                Ok(m) if Hash128::of(&m) == *h => {
                    let len = m.len();
                    return BlobBytes::mapped(std::sync::Arc::new(m), 0, len);
                }
                // Empty files cannot be mapped.
                Err(_) if f.metadata().is_ok_and(|m| m.len() == 0) && *h == Hash128::of(&[]) => {
                    return Some(Vec::new().into())
                }
                _ => {
                    let _ = std::fs::remove_file(&p);
                }
            }
        }
        let p = Self::file(&self.disk, h);
        if let Ok(bytes) = std::fs::read(&p) {
            if Hash128::of(&bytes) == *h {
                return Some(bytes.into());
            }
            let _ = std::fs::remove_file(&p);
        }
        None
    }

    /// Adds blob `h` to the memory tier (its bytes must hash to `h`).
    pub fn write(&self, h: &Hash128, bytes: &[u8]) -> std::io::Result<()> {
        let p = Self::file(&self.memory, h);
        if p.exists() {
            return Ok(());
        }
        let tmp = self.memory.join(format!(".{}.{}", h, std::process::id()));
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        drop(f);
        std::fs::rename(&tmp, &p)
    }
}

/// Which tier a blob is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// tmpfs.
    Memory,
    /// Disk.
    Disk,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    len: u64,
    tier: Tier,
    used: u64,
}

/// The server's view of the cache: sizes, tiers, recency; it evicts.
#[derive(Debug)]
pub struct Index {
    dirs: Dirs,
    limits: (u64, u64),
    entries: HashMap<Hash128, Entry>,
    /// Recency → hash, oldest first.
    order: BTreeMap<u64, Hash128>,
    clock: u64,
    bytes: (u64, u64),
    /// Lookups that found a blob / did not.
    pub hits: u64,
    /// Blobs added (each one a miss first).
    pub misses: u64,
    /// Blobs moved to disk / removed.
    pub evictions: (u64, u64),
}

impl Index {
    /// Scans both tiers (what an earlier server left stays cached) and enforces the limits
    /// (memory bytes, disk bytes).
    pub fn open(dirs: Dirs, memory_bytes: u64, disk_bytes: u64) -> std::io::Result<Index> {
        dirs.create()?;
        let mut ix = Index {
            dirs,
            limits: (memory_bytes, disk_bytes),
            entries: HashMap::new(),
            order: BTreeMap::new(),
            clock: 0,
            bytes: (0, 0),
            hits: 0,
            misses: 0,
            evictions: (0, 0),
        };
        for (dir, tier) in [(ix.dirs.disk.clone(), Tier::Disk), (ix.dirs.memory.clone(), Tier::Memory)] {
            for e in std::fs::read_dir(&dir)?.flatten() {
                let name = e.file_name();
                let Some(h) = name.to_str().and_then(|s| u128::from_str_radix(s, 16).ok()) else {
                    // Temporary files of a writer that died.
                    if name.to_str().is_some_and(|s| s.starts_with('.')) {
                        let _ = std::fs::remove_file(e.path());
                    }
                    continue;
                };
                let len = e.metadata().map(|m| m.len()).unwrap_or(0);
                ix.insert(Hash128(h), len, tier);
            }
        }
        ix.enforce();
        Ok(ix)
    }

    fn insert(&mut self, h: Hash128, len: u64, tier: Tier) {
        if let Some(old) = self.entries.remove(&h) {
            self.order.remove(&old.used);
            self.sub(old);
        }
        self.clock += 1;
        let e = Entry { len, tier, used: self.clock };
        self.order.insert(e.used, h);
        match tier {
            Tier::Memory => self.bytes.0 += len,
            Tier::Disk => self.bytes.1 += len,
        }
        self.entries.insert(h, e);
    }

    fn sub(&mut self, e: Entry) {
        match e.tier {
            Tier::Memory => self.bytes.0 -= e.len,
            Tier::Disk => self.bytes.1 -= e.len,
        }
    }

    /// An executor added `h` (in the memory tier).
    pub fn added(&mut self, h: Hash128, len: u64) {
        self.misses += 1;
        self.insert(h, len, Tier::Memory);
        self.enforce();
    }

    /// An executor found `h`: it becomes the most recently used.
    pub fn hit(&mut self, h: Hash128) {
        self.hits += 1;
        if let Some(e) = self.entries.get(&h).copied() {
            self.order.remove(&e.used);
            self.clock += 1;
            self.order.insert(self.clock, h);
            self.entries.insert(h, Entry { used: self.clock, ..e });
        }
    }

    /// Bytes held: (memory tier, disk tier).
    pub fn bytes(&self) -> (u64, u64) {
        self.bytes
    }

    /// Blobs held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Which tier holds `h`.
    pub fn tier(&self, h: &Hash128) -> Option<Tier> {
        self.entries.get(h).map(|e| e.tier)
    }

    /// Moves the least recently used memory blobs to disk and removes the least recently used
    /// disk blobs until both tiers are within their limits.
    fn enforce(&mut self) {
        while self.bytes.0 > self.limits.0 {
            let Some(h) = self.oldest(Tier::Memory) else { break };
            let e = self.entries[&h];
            let (from, to) = (Dirs::file(&self.dirs.memory, &h), Dirs::file(&self.dirs.disk, &h));
            // Across file systems: a copy under a temporary name, renamed into place.
            let tmp = to.with_extension("moving");
            let moved = std::fs::rename(&from, &to).is_ok()
                || (std::fs::copy(&from, &tmp).is_ok()
                    && std::fs::rename(&tmp, &to).is_ok()
                    && std::fs::remove_file(&from).is_ok());
            self.sub(e);
            self.evictions.0 += 1;
            if moved {
                self.bytes.1 += e.len;
                self.entries.insert(h, Entry { tier: Tier::Disk, ..e });
            } else {
                let _ = std::fs::remove_file(&from);
                self.dirs.disown(&h);
                self.order.remove(&e.used);
                self.entries.remove(&h);
            }
        }
        while self.bytes.1 > self.limits.1 {
            let Some(h) = self.oldest(Tier::Disk) else { break };
            let e = self.entries[&h];
            let _ = std::fs::remove_file(Dirs::file(&self.dirs.disk, &h));
            self.dirs.disown(&h);
            self.sub(e);
            self.order.remove(&e.used);
            self.entries.remove(&h);
            self.evictions.1 += 1;
        }
    }

    fn oldest(&self, tier: Tier) -> Option<Hash128> {
        self.order.values().find(|h| self.entries.get(h).is_some_and(|e| e.tier == tier)).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs(t: &tempfile::TempDir) -> Dirs {
        Dirs { memory: t.path().join("mem"), disk: t.path().join("disk") }
    }

    #[test]
    fn blobs_move_to_disk_then_out_least_recently_used_first() {
        let t = tempfile::tempdir().unwrap();
        let d = dirs(&t);
        let mut ix = Index::open(d.clone(), 250, 250).unwrap();
        let blobs: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i; 100]).collect();
        let hs: Vec<Hash128> = blobs.iter().map(|b| Hash128::of(b)).collect();
        for (h, b) in hs.iter().zip(&blobs).take(2) {
            d.write(h, b).unwrap();
            ix.added(*h, 100);
        }
        ix.hit(hs[0]); // blob 1 is now the oldest
        d.write(&hs[2], &blobs[2]).unwrap();
        ix.added(hs[2], 100);
        assert_eq!(ix.tier(&hs[1]), Some(Tier::Disk));
        assert_eq!((ix.tier(&hs[0]), ix.tier(&hs[2])), (Some(Tier::Memory), Some(Tier::Memory)));
        assert_eq!(d.read(&hs[1]).as_deref(), Some(&blobs[1][..]), "readable from the disk tier");
        // Disk holds at most two: the fourth blob pushes blob 0 to disk, then blob 1 is dropped.
        d.write(&hs[3], &blobs[3]).unwrap();
        ix.added(hs[3], 100);
        assert!(ix.bytes().0 <= 250 && ix.bytes().1 <= 250, "{:?}", ix.bytes());
        // A server restarted on the same directories finds what is there.
        let again = Index::open(d.clone(), 1000, 1000).unwrap();
        assert!(again.len() >= 3, "{}", again.len());
    }

    #[test]
    fn who_sent_a_blob_is_forgotten_when_it_leaves_the_cache() {
        let t = tempfile::tempdir().unwrap();
        let d = dirs(&t);
        let mut ix = Index::open(d.clone(), 100, 100).unwrap();
        let blobs: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 100]).collect();
        let hs: Vec<Hash128> = blobs.iter().map(|b| Hash128::of(b)).collect();
        d.write(&hs[0], &blobs[0]).unwrap();
        d.own("alice", &hs[0]).unwrap();
        d.own("bob", &hs[0]).unwrap();
        ix.added(hs[0], 100);
        assert!(d.owns("alice", &hs[0]) && d.owns("bob", &hs[0]) && !d.owns("carol", &hs[0]));
        // Two more blobs: the first goes to disk, then out of the cache.
        for (h, b) in hs.iter().zip(&blobs).skip(1) {
            d.write(h, b).unwrap();
            ix.added(*h, 100);
        }
        assert_eq!(ix.tier(&hs[0]), None);
        assert!(!d.owns("alice", &hs[0]) && !d.owns("bob", &hs[0]), "a blob no longer held is no one's");
    }

    #[test]
    fn a_damaged_file_is_not_served() {
        let t = tempfile::tempdir().unwrap();
        let d = dirs(&t);
        d.create().unwrap();
        let b = vec![7u8; 64];
        let h = Hash128::of(&b);
        d.write(&h, &b).unwrap();
        std::fs::write(d.memory.join(h.to_string()), b"not it").unwrap();
        assert_eq!(d.read(&h), None);
        assert!(!d.memory.join(h.to_string()).exists());
    }
}
