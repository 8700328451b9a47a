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
    },
}

impl BlobBytes {
    /// A whole mapping. `None` when the range lies outside it.
    pub fn mapped(map: Arc<memmap2::Mmap>, offset: usize, len: usize) -> Option<Self> {
        (offset.checked_add(len)? <= map.len()).then_some(BlobBytes::Mapped { map, offset, len })
    }
}

impl Deref for BlobBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            BlobBytes::Owned(v) => v,
            // In range: checked when made.
            BlobBytes::Mapped { map, offset, len } => &map[*offset..*offset + *len],
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
