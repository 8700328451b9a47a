//! The one error type of this crate: every failure names what was being read and where.

use std::fmt;

/// What part of a fatbin was being read when a problem was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The 24-byte `__fatBinC_Wrapper_t`.
    Wrapper,
    /// A 16-byte container header.
    Container,
    /// An entry header.
    Entry,
    /// An entry's payload.
    Payload,
    /// A host ELF file.
    HostElf,
    /// A cubin (device ELF).
    Cubin,
    /// A PTX text image.
    Ptx,
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Part::Wrapper => "fatbin wrapper",
            Part::Container => "fatbin container header",
            Part::Entry => "fatbin entry header",
            Part::Payload => "fatbin entry payload",
            Part::HostElf => "host ELF",
            Part::Cubin => "cubin",
            Part::Ptx => "PTX image",
        })
    }
}

/// Errors from parsing fatbins, wrappers and host ELF files.
///
/// Offsets are byte offsets from the start of the buffer that was handed to the parser
/// (for a host ELF: from the start of the file).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The magic number does not match.
    #[error("{part} at offset {offset:#x}: bad magic {found:#010x} (expected {expected:#010x})")]
    BadMagic { part: Part, offset: u64, found: u32, expected: u32 },
    /// Fewer bytes remain than the structure needs.
    #[error("{part} at offset {offset:#x}: truncated, needs {needed} bytes but only {available} remain")]
    Truncated { part: Part, offset: u64, needed: u64, available: u64 },
    /// A size or offset field is impossible (points past the end, overflows, or is too small).
    #[error("{part} at offset {offset:#x}: {what}")]
    Invalid { part: Part, offset: u64, what: String },
    /// An unsupported version.
    #[error("{part} at offset {offset:#x}: unsupported version {version}")]
    Version { part: Part, offset: u64, version: u32 },
    /// Decompression failed or produced a different size than declared.
    #[error("entry at offset {offset:#x}: {codec} decompression failed: {what}")]
    Decompress { offset: u64, codec: &'static str, what: String },
    /// A declared size is above the configured limit.
    #[error("entry at offset {offset:#x}: declared uncompressed size {size} exceeds the limit of {limit} bytes")]
    TooLarge { offset: u64, size: u64, limit: u64 },
    /// Reading a host ELF file failed.
    #[error("{what}")]
    Elf { what: String },
    /// An I/O error opening or mapping a file.
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    /// No fatbin entry can run on the requested GPU.
    #[error("no entry can run on sm_{sm}: the fatbin holds {available}")]
    NoCompatibleEntry { sm: u32, available: String },
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Reads little-endian integers with bounds checks; every read names `part` and the offset.
pub(crate) struct Cursor<'a> {
    pub bytes: &'a [u8],
    /// Offset of `bytes[0]` in the caller's coordinate system (for error messages).
    pub base: u64,
    pub part: Part,
}

impl<'a> Cursor<'a> {
    pub fn new(bytes: &'a [u8], base: u64, part: Part) -> Self {
        Cursor { bytes, base, part }
    }

    /// Fails unless `len` bytes are available at `off`.
    pub fn need(&self, off: usize, len: usize) -> Result<&'a [u8]> {
        off.checked_add(len).and_then(|end| self.bytes.get(off..end)).ok_or(Error::Truncated {
            part: self.part,
            offset: self.base + off as u64,
            needed: len as u64,
            available: self.bytes.len().saturating_sub(off) as u64,
        })
    }

    pub fn u16(&self, off: usize) -> Result<u16> {
        let b = self.need(off, 2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    pub fn u32(&self, off: usize) -> Result<u32> {
        let b = self.need(off, 4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn u64(&self, off: usize) -> Result<u64> {
        let b = self.need(off, 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    pub fn invalid(&self, off: usize, what: impl Into<String>) -> Error {
        Error::Invalid { part: self.part, offset: self.base + off as u64, what: what.into() }
    }
}
