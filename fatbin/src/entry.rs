//! Fatbin entries: one PTX text or one cubin each, possibly compressed (REFERENCE.md §1).

use std::borrow::Cow;

use crate::arch::Arch;
use crate::compress::{self, Limits};
use crate::error::{Cursor, Error, Part, Result};

/// Entry flag: payload is a raw LZ4 block.
pub const FLAG_LZ4: u64 = 0x2000;
/// Entry flag: payload is a zstd frame.
pub const FLAG_ZSTD: u64 = 0x8000;
/// Smallest entry header understood (the fields up to the uncompressed size).
pub const MIN_ENTRY_HEADER: usize = 64;

/// What an entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// PTX assembly text, JIT-compiled by the driver.
    Ptx,
    /// A cubin (device ELF) with SASS.
    Elf,
}

impl EntryKind {
    /// `"ptx"` or `"elf"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            EntryKind::Ptx => "ptx",
            EntryKind::Elf => "elf",
        }
    }
}

/// How an entry's payload is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    /// Stored plain.
    None,
    /// A raw LZ4 block (not the frame format).
    Lz4,
    /// A zstd frame.
    Zstd,
}

impl Compression {
    /// `"none"`, `"lz4"` or `"zstd"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

/// One parsed entry, borrowing its payload from the fatbin's bytes.
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    /// Offset of the entry header in the buffer the fatbin was parsed from.
    pub offset: u64,
    /// PTX or ELF.
    pub kind: EntryKind,
    /// Entry header size in bytes (64, 80, 112 seen).
    pub header_size: u32,
    /// Version pair from the header: PTX ISA version for PTX entries.
    pub version: (u16, u16),
    /// The SM number and its variant.
    pub arch: Arch,
    /// Raw flags (see the `FLAG_*` constants).
    pub flags: u64,
    /// Compression of the payload.
    pub compression: Compression,
    /// The stored payload bytes (compressed bytes when compressed; padding included when not).
    pub stored: &'a [u8],
    /// Size of the payload once decompressed (equals `stored.len()` when plain).
    pub size: u64,
}

impl<'a> Entry<'a> {
    /// Parses the entry header at `off` inside `bytes` (`base` = offset of `bytes` for errors).
    /// Returns the entry and the offset just past its padded payload.
    pub(crate) fn parse(bytes: &'a [u8], off: usize, base: u64) -> Result<(Entry<'a>, usize)> {
        let c = Cursor::new(bytes, base, Part::Entry);
        let abs = base + off as u64;
        c.need(off, MIN_ENTRY_HEADER)?;
        let kind = match c.u16(off)? {
            1 => EntryKind::Ptx,
            2 => EntryKind::Elf,
            k => return Err(c.invalid(off, format!("unknown entry kind {k} (1 = PTX, 2 = ELF)"))),
        };
        let header_size = c.u32(off + 4)?;
        if (header_size as usize) < MIN_ENTRY_HEADER {
            return Err(c.invalid(off + 4, format!("entry header size {header_size} is below {MIN_ENTRY_HEADER}")));
        }
        let padded = c.u64(off + 8)?;
        let compressed = c.u32(off + 0x10)? as u64;
        let version = (c.u16(off + 0x1a)?, c.u16(off + 0x18)?);
        let sm = c.u32(off + 0x1c)?;
        let flags = c.u64(off + 0x28)?;
        let uncompressed = c.u64(off + 0x38)?;

        let payload_start = off
            .checked_add(header_size as usize)
            .filter(|&p| p <= bytes.len())
            .ok_or_else(|| c.invalid(off + 4, format!("entry header size {header_size} runs past the end")))?;
        let payload_end = usize::try_from(padded)
            .ok()
            .and_then(|p| payload_start.checked_add(p))
            .filter(|&e| e <= bytes.len())
            .ok_or(Error::Truncated {
                part: Part::Payload,
                offset: base + payload_start as u64,
                needed: padded,
                available: (bytes.len() - payload_start) as u64,
            })?;
        let compression = if flags & FLAG_ZSTD != 0 {
            Compression::Zstd
        } else if flags & FLAG_LZ4 != 0 {
            Compression::Lz4
        } else {
            Compression::None
        };
        let (stored, size) = match compression {
            Compression::None => (&bytes[payload_start..payload_end], padded),
            _ => {
                if compressed == 0 || compressed > padded {
                    return Err(c.invalid(
                        off + 0x10,
                        format!("compressed size {compressed} does not fit the payload of {padded} bytes"),
                    ));
                }
                let end = payload_start + compressed as usize;
                (&bytes[payload_start..end], uncompressed)
            }
        };
        let entry = Entry {
            offset: abs,
            kind,
            header_size,
            version,
            arch: Arch::from_entry(sm, flags),
            flags,
            compression,
            stored,
            size,
        };
        Ok((entry, payload_end))
    }

    /// The name tools print: `sm_90a` for cubins, `compute_90` for PTX.
    pub fn arch_name(&self) -> String {
        match self.kind {
            EntryKind::Elf => self.arch.to_string(),
            EntryKind::Ptx => format!("compute_{}{}", self.arch.sm, self.arch.suffix()),
        }
    }

    /// The payload, decompressed when needed (borrowed when stored plain).
    pub fn payload(&self, limits: &Limits) -> Result<Cow<'a, [u8]>> {
        let payload_off = self.offset + self.header_size as u64;
        match self.compression {
            Compression::None => Ok(Cow::Borrowed(self.stored)),
            Compression::Lz4 => compress::lz4_block(self.stored, self.size, payload_off, limits).map(Cow::Owned),
            Compression::Zstd => compress::zstd_frame(self.stored, self.size, payload_off, limits).map(Cow::Owned),
        }
    }
}
