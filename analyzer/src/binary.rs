//! Analysis of whole GPU binaries: a host ELF (executable or shared library), a raw fatbin
//! or a cubin. Entries are decompressed and parsed in parallel (rayon), straight from the
//! caller's (usually memory-mapped) bytes; each decompressed cubin is dropped once parsed,
//! so memory stays bounded by the number of worker threads.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};

use gpuless_fatbin::{self as fatbin, Entry, EntryKind, Limits};
use rayon::prelude::*;
use serde::Serialize;

use crate::cubin::{analyze_cubin, CubinError, Global, Kernel};

/// What kind of file was analyzed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum InputKind {
    /// A host ELF with fatbins inside.
    #[serde(rename = "elf-host")]
    ElfHost,
    /// A raw fatbin (one or more containers).
    #[serde(rename = "fatbin")]
    Fatbin,
    /// A single cubin.
    #[serde(rename = "cubin")]
    Cubin,
}

/// One fatbin entry as reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EntryInfo {
    /// `"elf"` or `"ptx"`.
    pub kind: &'static str,
    /// `sm_90`, `sm_90a`, `compute_90`...
    pub arch: String,
    /// `"none"`, `"lz4"` or `"zstd"`.
    pub compression: &'static str,
    /// Bytes stored in the file.
    pub stored_bytes: u64,
    /// Bytes once decompressed.
    pub bytes: u64,
    /// Offset of the entry header in the file.
    #[serde(skip)]
    pub offset: u64,
    /// A relocatable cubin (`-rdc` object kept for the runtime linker; the driver cannot
    /// load it as it is).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub relocatable: bool,
}

/// The result of analyzing one file.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// What the file is.
    pub kind: InputKind,
    /// Entries that passed the arch filter, in file order.
    pub entries: Vec<EntryInfo>,
    /// Kernels of the analyzed cubins, in file order.
    pub kernels: Vec<Kernel>,
    /// Module-scope variables of the analyzed cubins.
    #[serde(skip)]
    pub globals: Vec<Global>,
}

/// A callback told about input ranges that will not be read again.
pub type Release<'a> = dyn Fn(&[u8]) + Sync + 'a;

/// Options of [`analyze`].
#[derive(Clone, Default)]
pub struct Options<'r> {
    /// Keep only entries whose arch name equals this (`sm_90`, `sm_90a`, `compute_90`).
    pub arch: Option<String>,
    /// Decompression limits.
    pub limits: Limits,
    /// Called with input ranges that will not be read again (a memory-mapped caller drops
    /// their pages: see `MappedFile::release`).
    pub release: Option<&'r Release<'r>>,
}

/// Decompressed bytes allowed in flight at once across worker threads; bounds peak memory on
/// libraries with thousands of large cubins independently of the core count.
const IN_FLIGHT_BYTES: u64 = 32 << 20;
/// Scanned input after which header pages are released during the entry scan.
const RELEASE_EVERY: usize = 4 << 20;

/// Receives progress while entries are analyzed.
pub trait Progress: Sync {
    /// The number of entries that will be analyzed.
    fn start(&self, total: u64);
    /// `n` more entries are done.
    fn advance(&self, n: u64);
}

/// A [`Progress`] that ignores everything.
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&self, _: u64) {}
    fn advance(&self, _: u64) {}
}

/// Errors of [`analyze`]; each names the byte offset in the file.
#[derive(Debug, thiserror::Error)]
pub enum AnalyzeError {
    /// The fatbin structure is broken.
    #[error(transparent)]
    Fatbin(#[from] fatbin::Error),
    /// A cubin inside the file is broken.
    #[error("cubin of entry {arch} at offset {offset:#x}: {source}")]
    Cubin {
        /// Offset of the entry (or cubin) in the file.
        offset: u64,
        /// The entry's arch.
        arch: String,
        /// What is wrong.
        source: CubinError,
    },
    /// The file is none of the supported kinds.
    #[error("not a host ELF, fatbin or cubin (first bytes {0:02x?}); expected a .so, executable, .fatbin or .cubin")]
    Unrecognized(Vec<u8>),
}

/// Determines what kind of binary `bytes` hold.
pub fn detect(bytes: &[u8]) -> Option<InputKind> {
    if bytes.len() >= 4 && u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) == fatbin::FATBIN_MAGIC {
        return Some(InputKind::Fatbin);
    }
    if fatbin::is_elf(bytes) {
        let machine = bytes.get(18..20).map(|m| u16::from_le_bytes([m[0], m[1]]));
        return Some(if machine == Some(fatbin::EM_CUDA) { InputKind::Cubin } else { InputKind::ElfHost });
    }
    None
}

/// Analyzes a host ELF, fatbin or cubin held in `bytes`.
pub fn analyze(bytes: &[u8], opts: &Options, progress: &dyn Progress) -> Result<Report, AnalyzeError> {
    let kind = detect(bytes).ok_or_else(|| AnalyzeError::Unrecognized(bytes.iter().take(8).copied().collect()))?;
    let wanted = |name: &str| opts.arch.as_deref().is_none_or(|a| a.eq_ignore_ascii_case(name));
    if kind == InputKind::Cubin {
        progress.start(1);
        let cubin = analyze_cubin(bytes, None).map_err(|source| AnalyzeError::Cubin {
            offset: 0,
            arch: "cubin".into(),
            source,
        })?;
        progress.advance(1);
        let arch = format!("sm_{}", cubin.sm);
        if !wanted(&arch) {
            return Ok(Report { kind, entries: vec![], kernels: vec![], globals: vec![] });
        }
        let entry = EntryInfo {
            kind: "elf",
            arch,
            compression: "none",
            stored_bytes: bytes.len() as u64,
            bytes: bytes.len() as u64,
            offset: 0,
            relocatable: cubin.relocatable,
        };
        return Ok(Report { kind, entries: vec![entry], kernels: cubin.kernels, globals: cubin.globals });
    }

    let release = |b: &[u8]| {
        if let Some(r) = opts.release {
            r(b)
        }
    };
    let regions: Vec<(&[u8], u64)> = if kind == InputKind::Fatbin {
        vec![(bytes, 0)]
    } else {
        fatbin::fatbin_sections(bytes)?.into_iter().map(|s| (s.bytes, s.file_offset)).collect()
    };
    let mut entries: Vec<(Entry<'_>, bool)> = Vec::new();
    for (region, base) in regions {
        let mut unreleased = 0usize;
        for c in fatbin::containers(region, base) {
            let c = c?;
            for e in c.entries() {
                let e = e?;
                if wanted(&e.arch_name()) {
                    entries.push((e, false));
                }
            }
            let start = (c.offset - base) as usize;
            if start + c.len() - unreleased >= RELEASE_EVERY {
                release(&region[unreleased..start + c.len()]);
                unreleased = start + c.len();
            }
        }
        release(&region[unreleased..]);
    }
    progress.start(entries.len() as u64);

    // Parse every cubin in parallel under a budget of decompressed bytes; stop early once
    // one fails.
    let budget = Budget::new(IN_FLIGHT_BYTES);
    let failed = AtomicBool::new(false);
    let parsed: Vec<Result<Option<crate::cubin::Cubin>, AnalyzeError>> = entries
        .par_iter_mut()
        .map(|(e, relocatable)| {
            if failed.load(Ordering::Relaxed) {
                return Ok(None);
            }
            let _permit = budget.acquire(e.size);
            let r = analyze_entry(e, &opts.limits);
            release(e.stored);
            match &r {
                Ok(Some(c)) => *relocatable = c.relocatable,
                Ok(None) => {}
                Err(_) => failed.store(true, Ordering::Relaxed),
            }
            progress.advance(1);
            r
        })
        .collect();
    let mut kernels = Vec::new();
    let mut globals = Vec::new();
    for r in parsed {
        if let Some(c) = r? {
            kernels.extend(c.kernels);
            globals.extend(c.globals);
        }
    }
    let infos = entries
        .iter()
        .map(|(e, relocatable)| EntryInfo {
            relocatable: *relocatable,
            kind: e.kind.as_str(),
            arch: e.arch_name(),
            compression: e.compression.as_str(),
            stored_bytes: e.stored.len() as u64,
            bytes: e.size,
            offset: e.offset,
        })
        .collect();
    Ok(Report { kind, entries: infos, kernels, globals })
}

fn analyze_entry(e: &Entry<'_>, limits: &Limits) -> Result<Option<crate::cubin::Cubin>, AnalyzeError> {
    if e.kind != EntryKind::Elf {
        return Ok(None);
    }
    let payload = e.payload(limits)?;
    let arch = e.arch_name();
    analyze_cubin(&payload, Some(&arch)).map(Some).map_err(|source| AnalyzeError::Cubin {
        offset: e.offset,
        arch,
        source,
    })
}

/// A counting semaphore over bytes: a request larger than the whole budget waits until
/// nothing else is in flight, then runs alone.
struct Budget {
    free: Mutex<u64>,
    cond: Condvar,
    total: u64,
}

/// Returns its bytes to the [`Budget`] when dropped.
struct Permit<'b> {
    budget: &'b Budget,
    bytes: u64,
}

impl Budget {
    fn new(total: u64) -> Budget {
        Budget { free: Mutex::new(total), cond: Condvar::new(), total }
    }

    fn acquire(&self, bytes: u64) -> Permit<'_> {
        let bytes = bytes.min(self.total);
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        while *free < bytes {
            free = self.cond.wait(free).unwrap_or_else(|p| p.into_inner());
        }
        *free -= bytes;
        Permit { budget: self, bytes }
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let mut free = self.budget.free.lock().unwrap_or_else(|p| p.into_inner());
        *free += self.bytes;
        self.budget.cond.notify_all();
    }
}
