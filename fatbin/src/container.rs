//! Fatbin containers (16-byte header + entries), several of which may sit back to back.

use crate::entry::Entry;
use crate::error::{Cursor, Error, Part, Result};

/// Magic of a fatbin container header.
pub const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// Size of the container header.
pub const CONTAINER_HEADER: usize = 16;

/// One container: its location and the bytes of its entries.
#[derive(Debug, Clone, Copy)]
pub struct Container<'a> {
    /// Offset of the header in the caller's coordinates.
    pub offset: u64,
    /// Header version (1 is the only one seen).
    pub version: u16,
    /// The whole container, header included.
    pub bytes: &'a [u8],
    header_size: usize,
}

impl<'a> Container<'a> {
    /// Parses the container that starts at `bytes[0]` (`base` = its offset, for errors).
    /// `bytes` may extend beyond the container; the container's own length is returned.
    pub fn parse(bytes: &'a [u8], base: u64) -> Result<Container<'a>> {
        let c = Cursor::new(bytes, base, Part::Container);
        let magic = c.u32(0)?;
        if magic != FATBIN_MAGIC {
            return Err(Error::BadMagic { part: Part::Container, offset: base, found: magic, expected: FATBIN_MAGIC });
        }
        let version = c.u16(4)?;
        let header_size = c.u16(6)? as usize;
        let fat_size = c.u64(8)?;
        if header_size < CONTAINER_HEADER {
            return Err(c.invalid(6, format!("header size {header_size} is below {CONTAINER_HEADER}")));
        }
        let total = usize::try_from(fat_size)
            .ok()
            .and_then(|f| f.checked_add(header_size))
            .filter(|&t| t <= bytes.len())
            .ok_or(Error::Truncated {
                part: Part::Container,
                offset: base,
                needed: fat_size.saturating_add(header_size as u64),
                available: bytes.len() as u64,
            })?;
        Ok(Container { offset: base, version, bytes: &bytes[..total], header_size })
    }

    /// The container's total length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether the container holds no entry bytes.
    pub fn is_empty(&self) -> bool {
        self.bytes.len() <= self.header_size
    }

    /// Size of the container header (16 in every container seen).
    pub fn header_size(&self) -> usize {
        self.header_size
    }

    /// Every entry with the byte range (in [`Container::bytes`]) of its header and padded
    /// payload, in order.
    pub fn entry_spans(&self) -> Result<Vec<(Entry<'a>, std::ops::Range<usize>)>> {
        let mut out = Vec::new();
        let mut pos = self.header_size;
        while pos < self.bytes.len() {
            let (e, next) = Entry::parse(self.bytes, pos, self.offset)?;
            out.push((e, pos..next));
            pos = next;
        }
        Ok(out)
    }

    /// Iterates the entries; an error ends the iteration.
    pub fn entries(&self) -> Entries<'a> {
        Entries { bytes: self.bytes, base: self.offset, pos: self.header_size, failed: false }
    }
}

/// Iterator over a container's entries.
pub struct Entries<'a> {
    bytes: &'a [u8],
    base: u64,
    pos: usize,
    failed: bool,
}

impl<'a> Iterator for Entries<'a> {
    type Item = Result<Entry<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.bytes.len() {
            return None;
        }
        match Entry::parse(self.bytes, self.pos, self.base) {
            Ok((e, next)) => {
                self.pos = next;
                Some(Ok(e))
            }
            Err(err) => {
                self.failed = true;
                Some(Err(err))
            }
        }
    }
}

/// Iterates containers stored back to back in `bytes` (as in a host ELF's `.nv_fatbin`),
/// skipping zero padding between them. `base` is the offset of `bytes` for error messages.
pub fn containers(bytes: &[u8], base: u64) -> Containers<'_> {
    Containers { bytes, base, pos: 0, failed: false }
}

/// Iterator returned by [`containers`].
pub struct Containers<'a> {
    bytes: &'a [u8],
    base: u64,
    pos: usize,
    failed: bool,
}

impl<'a> Iterator for Containers<'a> {
    type Item = Result<Container<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        // Skip alignment padding (zeros) between containers.
        while self.pos < self.bytes.len() && self.bytes[self.pos] == 0 {
            self.pos += 1;
        }
        if self.pos >= self.bytes.len() {
            return None;
        }
        let rest = &self.bytes[self.pos..];
        match Container::parse(rest, self.base + self.pos as u64) {
            Ok(c) => {
                self.pos += c.len();
                Some(Ok(c))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Parses every entry of every container in `bytes`, failing on the first bad one.
pub fn all_entries(bytes: &[u8], base: u64) -> Result<Vec<Entry<'_>>> {
    let mut out = Vec::new();
    for c in containers(bytes, base) {
        for e in c?.entries() {
            out.push(e?);
        }
    }
    Ok(out)
}
