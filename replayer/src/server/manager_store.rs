//! The cache's writes, done by the server for its executors: an executor's view holds the cache
//! read-only (`confine::view`), so what a session uploads reaches the cache only through the
//! server, which checks every blob against its hash in a sealed memfd the executor sends
//! (`Control::Store`: the bytes cannot change after the check), writes it, and marks it as the
//! session's tenant's; likewise piece templates (`Control::Templates`) and deployed functions
//! (`Control::Register`). A compromised executor can therefore neither rewrite a cache file that
//! another session has mapped nor claim for its tenant a blob it never sent.

use std::os::fd::{AsRawFd, OwnedFd};

use gpuless_traces::protocol::shm;
use gpuless_traces::Hash128;

use super::{Channel, Control, Manager};
use crate::server::functions::Registry;

impl Manager {
    /// The tenant of the session executor `id` serves (`Some` on a server with tenants, whose
    /// sessions' uploads are marked as theirs).
    pub(super) fn tenant_of(&self, id: u64) -> Option<String> {
        let g = self.lock();
        g.sessions.values().find(|s| s.exec == id).and_then(|s| s.tenant.clone())
    }

    /// [`Control::Store`] from executor `id`: each blob whose bytes hash to its name is written
    /// to the cache (and marked as the session's tenant's); one that does not is refused with a
    /// line in the log. Returns the blobs added.
    pub(super) fn store(&self, id: u64, entries: &[(Hash128, u64, u64)], fd: Option<OwnedFd>) -> Vec<(Hash128, u64)> {
        let Some(fd) = fd else {
            tracing::warn!(exec = id, "a Store without its memfd: ignored");
            return Vec::new();
        };
        let map = match shm::open(fd, entries) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(exec = id, error = e, "an executor's blobs for the cache were refused");
                return Vec::new();
            }
        };
        let tenant = self.tenant_of(id);
        let mut added = Vec::new();
        for &(h, off, len) in entries {
            // In bounds: `shm::open` checked every entry against the memfd's size.
            let bytes = &map[off as usize..(off + len) as usize];
            if Hash128::of(bytes) != h {
                tracing::warn!(exec = id, blob = %h, "an executor's blob does not hash to its name: not cached");
                continue;
            }
            if let Err(e) = self.cache_dirs.write(&h, bytes) {
                tracing::warn!(exec = id, blob = %h, error = %e, "could not write a blob to the cache");
                continue;
            }
            if let Some(t) = &tenant {
                let _ = self.cache_dirs.own(t, &h);
            }
            added.push((h, len));
        }
        added
    }

    /// [`Control::Templates`]: the piece templates of the program `key`, the first `len` bytes
    /// of the memfd.
    pub(super) fn templates(&self, id: u64, key: Hash128, len: u64, fd: Option<OwnedFd>) {
        let Some(fd) = fd else { return };
        let map = match shm::open(fd, &[(key, 0, len)]) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(exec = id, error = e, "an executor's piece templates were refused");
                return;
            }
        };
        let file = gpuless_traces::protocol::piece::policy::templates_file(&self.cache_dirs.disk, key);
        if let Some(parent) = file.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let tmp = file.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &map[..len as usize]).is_ok() {
            let _ = std::fs::rename(&tmp, &file);
        }
    }

    /// [`Control::Register`]: `name` becomes the session's tenant's function file `hash`
    /// (`len` bytes), if the cache holds that blob for the tenant. The answer goes back on
    /// `channel` ([`Control::Registered`]: empty, or why not).
    pub(super) fn register(&self, id: u64, channel: &Channel, name: &str, hash: Hash128, len: u64) {
        let tenant = self.tenant_of(id);
        let held = self.cache_dirs.read(&hash).is_some_and(|b| b.len() as u64 == len);
        let owned = tenant.as_deref().is_none_or(|t| self.cache_dirs.owns(t, &hash));
        let registry = Registry::of(&self.cache_dirs, tenant.as_deref().unwrap_or(""));
        let error = if !held || !owned {
            format!("blob {hash} of {len} bytes is not in the server's cache for this session")
        } else {
            match registry.register(name, hash, len) {
                Ok(()) => String::new(),
                Err(e) => format!("writing {}: {e}", registry.dir().join(name).display()),
            }
        };
        if let Err(e) = channel.send(&Control::Registered(error), None) {
            tracing::warn!(exec = id, error = %e, "could not answer an executor's Register");
        }
    }

    /// [`Control::Barrier`]: everything the executor sent before is applied; says so.
    pub(super) fn barrier(&self, id: u64, channel: &Channel) {
        if let Err(e) = channel.send(&Control::Registered(String::new()), None) {
            tracing::warn!(exec = id, error = %e, "could not answer an executor's Barrier");
        }
    }
}

/// A sealed memfd holding `blobs` and where each lies, for [`Control::Store`] (and, with one
/// blob, [`Control::Templates`]).
pub fn sealed(blobs: &[(Hash128, &[u8])]) -> std::io::Result<(OwnedFd, Vec<shm::Entry>)> {
    shm::pack(blobs, 1)
}

/// Sends `m` with `fd` on `channel`, the executor's side of a cache write.
pub fn send_with(channel: &Channel, m: &Control, fd: &OwnedFd) -> std::io::Result<()> {
    channel.send(m, Some(fd.as_raw_fd()))
}
