//! The session's blobs: found in the session or the cache, arriving in parts or in shared
//! memory, checked, and copied to the cache.

use super::*;

/// Blobs smaller than this go to the cache in batches ([`Session::flush_small`]).
const SMALL_BLOB: usize = 64 << 10;
/// Small blobs per batch.
const SMALL_BATCH: usize = 1024;

impl Session<'_> {
    /// Whether the session or the cache holds `h` (loading it into the session from the cache).
    pub(super) fn find(&mut self, stream: &mut Stream, hashes: &[Hash128]) -> Vec<bool> {
        // What the session lacks is read from the cache on several threads (a program's
        // weights: hundreds of megabytes, each blob's hash checked).
        // On a server with tenants, only blobs the session's tenant has sent (proof of
        // possession): another tenant's are, for it, not there.
        let owner = self.owner.as_deref();
        let wanted: Vec<Hash128> = hashes
            .iter()
            .filter(|h| !stream.has_blob(h) && owner.is_none_or(|t| self.cache.owns(t, h)))
            .copied()
            .collect();
        let threads = wanted.len().clamp(1, 8);
        let cache = self.cache;
        let found: Vec<(Hash128, Option<BlobBytes>)> = std::thread::scope(|sc| {
            let parts: Vec<_> = wanted
                .chunks(wanted.len().div_ceil(threads).max(1))
                .map(|c| sc.spawn(move || c.iter().map(|h| (*h, cache.read(h))).collect::<Vec<_>>()))
                .collect();
            parts.into_iter().flat_map(|p| p.join().unwrap_or_default()).collect()
        });
        for (h, bytes) in found {
            if let Some(bytes) = bytes {
                stream.add_blob(h, bytes);
                self.hits.push(h);
            }
        }
        hashes
            .iter()
            .map(|h| {
                let held = stream.has_blob(h);
                if held {
                    self.stats.blob_hits += 1;
                } else {
                    self.stats.blob_misses += 1;
                }
                held
            })
            .collect()
    }

    /// Blobs in a client's sealed memfd ([`shm`]): mapped and used from the mapping as they
    /// are, at once. Their hashes are checked on a background thread, which then copies them
    /// into the cache: until the check the bytes serve only the session that sent them (the
    /// seals keep them from changing), and a blob that does not hash to its name ends the
    /// session at its next answer ([`Self::verified`]) and never reaches the cache.
    pub(super) fn shared_blobs(
        &mut self,
        stream: &mut Stream,
        fd: OwnedFd,
        entries: &[shm::Entry],
    ) -> Result<(), String> {
        // The client's sealed memfd goes on to the server for the cache as it is.
        let for_cache = fd.try_clone().map_err(|e| format!("the BlobShm memfd: {e}"))?;
        let map = shm::open(fd, entries)?;
        let blobs: Vec<(Hash128, BlobBytes)> = entries
            .iter()
            .map(|&(h, off, len)| {
                BlobBytes::mapped(map.clone(), off as usize, len as usize)
                    .map(|b| (h, b))
                    .ok_or_else(|| format!("blob {h} lies outside its memfd"))
            })
            .collect::<Result<_, _>>()?;
        let total: u64 = entries.iter().map(|e| e.2).sum();
        self.stats.blob_bytes_received += total;
        let (tx, rx) = std::sync::mpsc::channel();
        self.checks.push(rx);
        self.cache_copy(blobs.clone(), Some((tx, for_cache, entries.to_vec())));
        for (h, b) in blobs {
            stream.add_blob(h, b);
        }
        Ok(())
    }

    /// Waits for the hash checks of shared-memory blobs still running; the first blob whose
    /// bytes do not hash to its name is the session's error.
    pub(super) fn verified(&mut self) -> Result<(), String> {
        for rx in std::mem::take(&mut self.checks) {
            if let Ok(Some(h)) = rx.recv() {
                return Err(format!("blob {h}: the bytes sent for it through shared memory do not hash to it"));
            }
        }
        Ok(())
    }

    /// Sends `blobs` to the server for the cache (executors cannot write it: the server checks
    /// each blob's hash in a sealed memfd and writes it, [`Control::Store`]), prepared on a
    /// background thread: the session goes on with them meanwhile ([`Self::flush_notes`] sends
    /// them once ready). With `check` (blobs that came in the client's sealed memfd, sent on as
    /// it is), each blob's hash is checked first (on several threads for several blobs) and the
    /// first that fails is sent there (`None`: all good); then none goes to the cache. Without,
    /// the blobs (already checked) are packed into a new sealed memfd.
    pub(super) fn cache_copy(
        &mut self,
        blobs: Vec<(Hash128, BlobBytes)>,
        check: Option<(std::sync::mpsc::Sender<Option<Hash128>>, OwnedFd, Vec<shm::Entry>)>,
    ) {
        self.writers.push(std::thread::spawn(move || {
            let Some((tx, fd, entries)) = check else {
                let refs: Vec<(Hash128, &[u8])> = blobs.iter().map(|(h, b)| (*h, &b[..])).collect();
                return crate::server::manager::store::sealed(&refs).ok();
            };
            let threads = blobs.len().clamp(1, 8);
            let bad: Option<Hash128> = std::thread::scope(|sc| {
                let parts: Vec<_> = blobs
                    .chunks(blobs.len().div_ceil(threads).max(1))
                    .map(|c| sc.spawn(move || c.iter().find(|(h, b)| Hash128::of(b) != *h).map(|(h, _)| *h)))
                    .collect();
                parts.into_iter().find_map(|p| p.join().ok().flatten())
            });
            let _ = tx.send(bad);
            bad.is_none().then_some((fd, entries))
        }));
    }

    /// A part of `n` bytes of blob `hash` at `offset`, read into the blob's buffer by `fill`;
    /// the last part checks the hash, adds the blob to the session and the cache.
    pub(super) fn blob_part(
        &mut self,
        stream: &mut Stream,
        hash: Hash128,
        total: u64,
        offset: u64,
        n: usize,
        fill: impl FnOnce(&mut Vec<u8>) -> Result<(), String>,
    ) -> Result<(), String> {
        if offset.checked_add(n as u64).is_none_or(|end| end > total) {
            return Err(format!("blob {hash}: a part at {offset} of {n} bytes lies outside its {total} bytes"));
        }
        self.stats.blob_bytes_received += n as u64;
        if !self.partial.contains_key(&hash) {
            if offset != 0 {
                return Err(format!("blob {hash}: a part at {offset} before its first part"));
            }
            if self.partial_bytes.saturating_add(total) > MAX_PARTIAL {
                return Err(format!("blob {hash} of {total} bytes: more than {MAX_PARTIAL} bytes of blobs in flight"));
            }
            self.partial_bytes += total;
            // Address space for the whole blob, up to 4 GiB (pages are committed as bytes
            // arrive); beyond, it grows with them.
            self.partial.insert(hash, (total, gpuless_traces::blob_bytes::buffer(total.min(4 << 30) as usize)));
        }
        let (want, buf) = self.partial.get_mut(&hash).ok_or("blob")?;
        if *want != total {
            return Err(format!("blob {hash}: a part says {total} bytes, its first part said {want}"));
        }
        if buf.len() as u64 != offset {
            return Err(format!("blob {hash}: part at {offset}, expected {}", buf.len()));
        }
        fill(buf)?;
        if (buf.len() as u64) < total {
            return Ok(());
        }
        let (_, whole) = self.partial.remove(&hash).unwrap_or_default();
        self.partial_bytes = self.partial_bytes.saturating_sub(total);
        if Hash128::of(&whole) != hash {
            return Err(format!("blob {hash}: its {total} bytes do not hash to it"));
        }
        let whole = BlobBytes::from(whole);
        if whole.len() < SMALL_BLOB {
            // A live client's small uploads (a few bytes each, every iteration): a writer thread
            // and a sealed memfd apiece cost more than the copy itself, so they go in batches.
            self.small.push((hash, whole.clone()));
            if self.small.len() >= SMALL_BATCH {
                self.flush_small();
            }
        } else {
            self.cache_copy(vec![(hash, whole.clone())], None);
        }
        stream.add_blob(hash, whole);
        Ok(())
    }

    /// Hands the small blobs gathered so far to a writer for the cache.
    pub(super) fn flush_small(&mut self) {
        if !self.small.is_empty() {
            let batch = std::mem::take(&mut self.small);
            self.cache_copy(batch, None);
        }
    }
}
