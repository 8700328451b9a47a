//! A blob's bytes wherever they live: owned by the process, or a range of a read-only shared
//! mapping (a file of the server's content cache, a client's sealed memfd). Cloning shares the
//! bytes or the mapping; no variant copies bytes.

use std::ops::Deref;
use std::sync::Arc;

/// The bytes of one blob.
#[derive(Clone)]
pub enum BlobBytes {
    /// Bytes in the process's memory (shared by clones).
    Owned(Arc<Vec<u8>>),
    /// `len` bytes at `offset` of a read-only mapping that nobody can change (a sealed memfd,
    /// a cache file replaced only by rename).
    Mapped {
        /// The mapping.
        map: Arc<memmap2::Mmap>,
        /// Where the blob starts in it.
        offset: usize,
        /// Its length.
        len: usize,
        /// The sealed memfd the mapping shows, when this process made one: it can be sent to a
        /// server on the same host instead of the bytes (`protocol::shm`).
        memfd: Option<Arc<std::os::fd::OwnedFd>>,
    },
}

impl BlobBytes {
    /// A whole mapping. `None` when the range lies outside it.
    pub fn mapped(map: Arc<memmap2::Mmap>, offset: usize, len: usize) -> Option<Self> {
        (offset.checked_add(len)? <= map.len()).then_some(BlobBytes::Mapped { map, offset, len, memfd: None })
    }

    /// A range of the read-only mapping of the sealed memfd `memfd`. `None` when the range lies
    /// outside the mapping.
    pub fn in_memfd(
        memfd: Arc<std::os::fd::OwnedFd>,
        map: Arc<memmap2::Mmap>,
        offset: usize,
        len: usize,
    ) -> Option<Self> {
        (offset.checked_add(len)? <= map.len()).then_some(BlobBytes::Mapped { map, offset, len, memfd: Some(memfd) })
    }

    /// The sealed memfd holding the blob and where: (descriptor, offset, length).
    pub fn memfd(&self) -> Option<(&Arc<std::os::fd::OwnedFd>, u64, u64)> {
        match self {
            BlobBytes::Mapped { memfd: Some(fd), offset, len, .. } => Some((fd, *offset as u64, *len as u64)),
            _ => None,
        }
    }
}

/// An empty vector with room for `capacity` bytes whose pages, for a large one, the kernel may
/// back with transparent huge pages (`MADV_HUGEPAGE`): filling it then faults once per 2 MiB
/// instead of once per 4 KiB, which on virtual machines decides how fast a large blob arrives.
pub fn buffer(capacity: usize) -> Vec<u8> {
    const HUGE: usize = 2 << 20;
    let v: Vec<u8> = Vec::with_capacity(capacity);
    if capacity >= 2 * HUGE {
        let start = (v.as_ptr() as usize).next_multiple_of(HUGE);
        let end = (v.as_ptr() as usize + capacity) / HUGE * HUGE;
        if end > start {
            // SAFETY: advice on whole pages inside the vector's own allocation; it changes how
            // the kernel backs them, never their contents.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
        }
    }
    v
}

impl Deref for BlobBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            BlobBytes::Owned(v) => v,
            // In range: checked when made.
            BlobBytes::Mapped { map, offset, len, .. } => &map[*offset..*offset + *len],
        }
    }
}

impl From<Vec<u8>> for BlobBytes {
    fn from(v: Vec<u8>) -> Self {
        BlobBytes::Owned(Arc::new(v))
    }
}

impl std::fmt::Debug for BlobBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = if matches!(self, BlobBytes::Owned(_)) { "owned" } else { "mapped" };
        write!(f, "BlobBytes({} bytes, {how})", self.len())
    }
}

impl PartialEq for BlobBytes {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}
