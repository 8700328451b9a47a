//! Locating fatbins inside host ELF files (executables and shared libraries), memory-mapped.

use std::fs::File;
use std::path::Path;

use object::{Object, ObjectSection, SectionKind};

use crate::error::{Error, Result};

/// Names of host sections that hold fatbin containers: device code of whole-program builds,
/// and relocatable device code (`-rdc`) kept for the runtime linker.
pub const FATBIN_SECTIONS: &[&str] = &[".nv_fatbin", "__nv_relfatbin"];

/// A file mapped read-only into memory (or held empty: empty files cannot be mapped).
pub struct MappedFile {
    map: Option<memmap2::Mmap>,
}

impl MappedFile {
    /// Maps `path` read-only.
    pub fn open(path: &Path) -> Result<MappedFile> {
        let io = |source| Error::Io { path: path.display().to_string(), source };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len == 0 {
            return Ok(MappedFile { map: None });
        }
        // SAFETY: the mapping is read-only; a concurrent truncation of the file by another
        // process could fault, as with every mmap-based reader (ripgrep, cuobjdump).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Ok(MappedFile { map: Some(map) })
    }

    /// Drops the pages behind `sub` (a slice of [`MappedFile::bytes`]) from this process's
    /// resident set. The data stays valid: touching it again re-reads it from the page cache.
    /// This keeps the peak RSS of a pass over a large library bounded by what is in flight,
    /// rather than by the file size (the kernel maps 64 KB around every page fault).
    pub fn release(&self, sub: &[u8]) {
        let Some(map) = &self.map else { return };
        let base = map.as_ptr() as usize;
        let start = sub.as_ptr() as usize;
        if sub.is_empty() || start < base || start + sub.len() > base + map.len() {
            return;
        }
        #[cfg(unix)]
        // SAFETY: the mapping is read-only and file-backed, so MADV_DONTNEED discards nothing
        // that cannot be read back; slices into it stay valid.
        unsafe {
            let _ = map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start - base, sub.len());
        }
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
}

/// A fatbin-holding section of a host ELF.
#[derive(Debug, Clone, Copy)]
pub struct FatbinSection<'a> {
    /// Section name.
    pub name: &'static str,
    /// Offset of the section in the file.
    pub file_offset: u64,
    /// The section's bytes.
    pub bytes: &'a [u8],
}

/// Whether `bytes` start like an ELF file.
pub fn is_elf(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x7fELF")
}

/// Finds the fatbin sections of a host ELF file.
pub fn fatbin_sections(bytes: &[u8]) -> Result<Vec<FatbinSection<'_>>> {
    let file = object::File::parse(bytes).map_err(|e| Error::Elf { what: format!("not a readable ELF file: {e}") })?;
    let mut out = Vec::new();
    for sec in file.sections() {
        let Ok(name) = sec.name() else { continue };
        let Some(&known) = FATBIN_SECTIONS.iter().find(|&&n| n == name) else { continue };
        if sec.kind() == SectionKind::UninitializedData {
            continue;
        }
        let Some((off, size)) = sec.file_range() else { continue };
        let data = usize::try_from(off)
            .ok()
            .zip(usize::try_from(size).ok())
            .and_then(|(o, s)| bytes.get(o..o.checked_add(s)?))
            .ok_or_else(|| Error::Elf {
                what: format!("section {name} at offset {off:#x} with {size} bytes runs past the end of the file"),
            })?;
        out.push(FatbinSection { name: known, file_offset: off, bytes: data });
    }
    Ok(out)
}
