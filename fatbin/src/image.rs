//! GPU code images as the driver receives them (`cuModuleLoadData`, `cuLibraryLoadData`,
//! `__cudaRegisterFatBinary`): a fatbin wrapper, a bare fatbin, a cubin or PTX text.
//! Classifies an image and finds its exact length from a pointer and an upper bound.

use crate::container::{Container, FATBIN_MAGIC};
use crate::error::{Cursor, Error, Part, Result};

/// Magic of the 24-byte `__fatBinC_Wrapper_t`.
pub const WRAPPER_MAGIC: u32 = 0x4662_43B1;
/// ELF `e_machine` of cubins.
pub const EM_CUDA: u16 = 190;

/// A parsed `__fatBinC_Wrapper_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wrapper {
    /// 1: `data` is one fatbin; 2 (`-rdc`): `filename_or_fatbins` lists prelinked fatbins.
    pub version: u32,
    /// Address of the fatbin.
    pub data: u64,
    /// Address of a file name (v1) or of a NULL-terminated array of fatbin addresses (v2).
    pub filename_or_fatbins: u64,
}

impl Wrapper {
    /// Size of the wrapper structure.
    pub const SIZE: usize = 24;

    /// Parses a wrapper from the first 24 bytes of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Wrapper> {
        let c = Cursor::new(bytes, 0, Part::Wrapper);
        let magic = c.u32(0)?;
        if magic != WRAPPER_MAGIC {
            return Err(Error::BadMagic { part: Part::Wrapper, offset: 0, found: magic, expected: WRAPPER_MAGIC });
        }
        let version = c.u32(4)?;
        if !(1..=2).contains(&version) {
            return Err(Error::Version { part: Part::Wrapper, offset: 4, version });
        }
        Ok(Wrapper { version, data: c.u64(8)?, filename_or_fatbins: c.u64(16)? })
    }
}

/// What kind of image a buffer holds, with its exact extent.
#[derive(Debug, Clone, Copy)]
pub enum Image<'a> {
    /// A wrapper; its fatbin lies elsewhere in memory at `data`.
    Wrapper(Wrapper),
    /// A bare fatbin container (exactly its bytes).
    Fatbin(&'a [u8]),
    /// A cubin (exactly its bytes).
    Cubin(&'a [u8]),
    /// PTX text, without the terminating NUL.
    Ptx(&'a [u8]),
}

impl<'a> Image<'a> {
    /// The wrapper, when the image is one.
    pub fn wrapper(&self) -> Option<Wrapper> {
        match self {
            Image::Wrapper(w) => Some(*w),
            _ => None,
        }
    }

    /// Classifies the image at the start of `bytes` (which may run past the image's end)
    /// and trims it to its exact length.
    pub fn classify(bytes: &'a [u8]) -> Result<Image<'a>> {
        let c = Cursor::new(bytes, 0, Part::Payload);
        let magic = c.u32(0)?;
        if magic == WRAPPER_MAGIC {
            return Wrapper::parse(bytes).map(Image::Wrapper);
        }
        if magic == FATBIN_MAGIC {
            return Container::parse(bytes, 0).map(|k| Image::Fatbin(k.bytes));
        }
        if bytes.starts_with(b"\x7fELF") {
            return cubin_len(bytes).map(|n| Image::Cubin(&bytes[..n]));
        }
        // PTX: printable text up to a NUL.
        let end = bytes.iter().position(|&b| b == 0).ok_or(Error::Invalid {
            part: Part::Ptx,
            offset: 0,
            what: "no NUL terminator within the bound; not a fatbin, cubin or PTX".into(),
        })?;
        let text = &bytes[..end];
        if text.iter().all(|&b| b.is_ascii_graphic() || b.is_ascii_whitespace()) && !text.is_empty() {
            Ok(Image::Ptx(text))
        } else {
            Err(Error::Invalid { part: Part::Ptx, offset: 0, what: "not a wrapper, fatbin, cubin or PTX text".into() })
        }
    }

    /// Reads an image from process memory.
    ///
    /// # Safety
    /// `ptr` must be readable for `max_len` bytes for the returned lifetime (the recorder
    /// derives `max_len` from the mapping that contains `ptr`).
    pub unsafe fn from_ptr(ptr: *const u8, max_len: usize) -> Result<Image<'a>> {
        if ptr.is_null() {
            return Err(Error::Invalid { part: Part::Payload, offset: 0, what: "null image pointer".into() });
        }
        // SAFETY: the caller guarantees `max_len` readable bytes at `ptr`.
        let bytes = unsafe { std::slice::from_raw_parts(ptr, max_len) };
        Image::classify(bytes)
    }
}

/// Exact length of a 64-bit ELF (cubin) at the start of `bytes`: the furthest end of its
/// headers, section header table and section contents.
pub fn cubin_len(bytes: &[u8]) -> Result<usize> {
    let c = Cursor::new(bytes, 0, Part::Cubin);
    let ident = c.need(0, 64)?;
    if &ident[..4] != b"\x7fELF" {
        return Err(Error::BadMagic { part: Part::Cubin, offset: 0, found: c.u32(0)?, expected: 0x464c_457f });
    }
    if ident[4] != 2 || ident[5] != 1 {
        return Err(c.invalid(4, "not a little-endian 64-bit ELF"));
    }
    let phoff = c.u64(0x20)?;
    let shoff = c.u64(0x28)?;
    let phentsize = c.u16(0x36)? as u64;
    let phnum = c.u16(0x38)? as u64;
    let shentsize = c.u16(0x3a)? as u64;
    let shnum = c.u16(0x3c)? as u64;
    let mut end = 64u64;
    let table_end = |off: u64, n: u64, sz: u64| off.checked_add(n.checked_mul(sz)?);
    let too_far = |what: &str| c.invalid(0, format!("{what} overflows"));
    end = end.max(table_end(phoff, phnum, phentsize).ok_or_else(|| too_far("program header table"))?);
    end = end.max(table_end(shoff, shnum, shentsize).ok_or_else(|| too_far("section header table"))?);
    if end > bytes.len() as u64 {
        return Err(Error::Truncated { part: Part::Cubin, offset: 0, needed: end, available: bytes.len() as u64 });
    }
    if shentsize >= 64 {
        for i in 0..shnum {
            let sh = (shoff + i * shentsize) as usize;
            let kind = c.u32(sh + 4)?;
            const SHT_NOBITS: u32 = 8;
            if kind == SHT_NOBITS {
                continue;
            }
            let off = c.u64(sh + 0x18)?;
            let size = c.u64(sh + 0x20)?;
            end = end.max(off.checked_add(size).ok_or_else(|| too_far("section"))?);
        }
    }
    if end > bytes.len() as u64 {
        return Err(Error::Truncated { part: Part::Cubin, offset: 0, needed: end, available: bytes.len() as u64 });
    }
    Ok(end as usize)
}

/// Reads the NULL-terminated array of fatbin addresses of a version-2 wrapper.
///
/// # Safety
/// `ptr` must be readable for `max_entries` pointers or up to and including the NULL.
pub unsafe fn prelinked_fatbins(ptr: *const u64, max_entries: usize) -> Vec<u64> {
    let mut out = Vec::new();
    if ptr.is_null() {
        return out;
    }
    for i in 0..max_entries {
        // SAFETY: within the caller's bound; unaligned reads are allowed.
        let v = unsafe { std::ptr::read_unaligned(ptr.add(i)) };
        if v == 0 {
            break;
        }
        out.push(v);
    }
    out
}
