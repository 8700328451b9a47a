//! The driver's private export tables (`cuGetExportTable`), measured (issue 19's first step):
//! with `GPULESS_EXPORT_TABLES=count`, every slot of every table a program asks for that
//! points into libcuda's code is replaced, in place, by a counting trampoline to the same
//! function (the unmodeled functions' trampolines, `unmodeled.rs`), so the trace ends with one
//! summary record per table slot called: `cuGetExportTable:<uuid>:<slot>` and its call count
//! (`gpuless analyze` lists them). The tables keep their addresses (a library may hash them);
//! the page is made writable for the patch and read-only again. Off by default: it changes
//! which code a library's call through a table runs first.
//!
//! Where a table ends is not published: a first word between 8 and 4096 that is a multiple of
//! 8 is taken as its size in bytes; without one the table ends at the first word that does not
//! point into libcuda's code, at most 64 words.
//!
//! `GPULESS_EXPORT_TABLES=log:PREFIX,...` patches the same way with logging wrappers instead
//! (`export_log.rs`), for the tables named.

use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::{Mutex, OnceLock};

/// Whether `GPULESS_EXPORT_TABLES=count` asked for the measurement.
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("GPULESS_EXPORT_TABLES").is_ok_and(|v| v == "count"))
        || crate::export_log::enabled()
}

/// `GPULESS_EXPORT_TABLES=deny:PREFIX[,PREFIX...]`: the tables whose UUID starts with one of
/// these (hex) are refused with `CUDA_ERROR_NOT_SUPPORTED`, the driver not asked — to find out
/// which tables a library cannot do without (what client mode must implement).
fn denied_prefixes() -> &'static [String] {
    static DENY: OnceLock<Vec<String>> = OnceLock::new();
    DENY.get_or_init(|| {
        std::env::var("GPULESS_EXPORT_TABLES")
            .ok()
            .and_then(|v| {
                v.strip_prefix("deny:").map(|l| l.split(',').map(|p| p.trim().to_ascii_lowercase()).collect())
            })
            .unwrap_or_default()
    })
}

/// Whether this `cuGetExportTable` call asks for a table `GPULESS_EXPORT_TABLES=deny:...` refuses.
///
/// # Safety
/// `raw` are the program's arguments to `cuGetExportTable`.
pub unsafe fn denied(raw: &[u64]) -> bool {
    let deny = denied_prefixes();
    let Some(&id) = raw.get(1) else { return false };
    if deny.is_empty() || id == 0 {
        return false;
    }
    // SAFETY: the program's 16-byte UUID.
    let uuid = unsafe { *(id as *const [u8; 16]) };
    let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    let hit = deny.iter().any(|p| !p.is_empty() && hex.starts_with(p.as_str()));
    if hit {
        eprintln!("gpuless: export table {hex} refused (GPULESS_EXPORT_TABLES=deny)");
    }
    hit
}

const MAX_WORDS: usize = 64;
/// UUID prefix of the table whose slots are never replaced.
const INTEGRITY_CHECK: &str = "d4082055";
static PATCHED: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

/// Executable ranges of libcuda in this process (`/proc/self/maps`).
fn libcuda_code() -> &'static [(usize, usize)] {
    static RANGES: OnceLock<Vec<(usize, usize)>> = OnceLock::new();
    RANGES.get_or_init(|| {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        maps.lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let (range, perms) = (f.next()?, f.next()?);
                let path = f.nth(3)?;
                if !perms.contains('x') || !path.contains("libcuda.so") {
                    return None;
                }
                let (a, b) = range.split_once('-')?;
                Some((usize::from_str_radix(a, 16).ok()?, usize::from_str_radix(b, 16).ok()?))
            })
            .collect()
    })
}

/// The protection of the mapping holding `addr` now (`PROT_*` bits), from `/proc/self/maps`.
fn protection(addr: usize) -> Option<i32> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (range, perms) = (f.next()?, f.next()?);
        let (a, b) = range.split_once('-')?;
        let (a, b) = (usize::from_str_radix(a, 16).ok()?, usize::from_str_radix(b, 16).ok()?);
        (addr >= a && addr < b).then(|| {
            let p = perms.as_bytes();
            (if p.first() == Some(&b'r') { libc::PROT_READ } else { 0 })
                | (if p.get(1) == Some(&b'w') { libc::PROT_WRITE } else { 0 })
                | (if p.get(2) == Some(&b'x') { libc::PROT_EXEC } else { 0 })
        })
    })
}

fn is_code(w: usize) -> bool {
    libcuda_code().iter().any(|&(a, b)| w >= a && w < b)
}

/// The table's UUID as text (`6bd5fb6c-...`).
fn uuid_text(b: &[u8; 16]) -> String {
    let h: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", h[..4].concat(), h[4..6].concat(), h[6..8].concat(), h[8..10].concat(), h[10..].concat())
}

/// After a successful `cuGetExportTable(ppExportTable, pExportTableId)`: patches the table.
///
/// # Safety
/// `raw` are the program's arguments; the driver wrote the table's address.
pub unsafe fn after_get(raw: &[u64]) {
    let (Some(&pp), Some(&id)) = (raw.first(), raw.get(1)) else { return };
    if pp == 0 || id == 0 {
        return;
    }
    // SAFETY: the driver wrote the table's address; the id is the program's 16-byte UUID.
    let (table, uuid) = unsafe { (*(pp as *const usize), *(id as *const [u8; 16])) };
    if table == 0 || table % 8 != 0 {
        return;
    }
    let Ok(mut done) = PATCHED.lock() else { return };
    if !done.get_or_insert_with(HashSet::new).insert(table) {
        return;
    }
    // SAFETY: the table is readable driver data; reading stops at its size or at the first
    // word that is not a code pointer (bounded).
    let words = unsafe {
        let first = *(table as *const usize);
        let sized = (8..=4096).contains(&first) && first % 8 == 0;
        let n = if sized { first / 8 } else { MAX_WORDS };
        let mut w = Vec::new();
        for i in 0..n {
            let v = *((table + i * 8) as *const usize);
            if !sized && i > 0 && !is_code(v) {
                break;
            }
            w.push(v);
        }
        w
    };
    let name = uuid_text(&uuid);
    let log = crate::export_log::enabled();
    if log && !crate::export_log::wanted(&name.replace('-', "")) {
        return;
    }
    // The integrity-check table (`d4082055-…`): cudart hashes what it hands out and refuses
    // to run when a slot of it points elsewhere (cudaErrorSoftwareValidityNotEstablished,
    // measured); left as it is, uncounted.
    if name.starts_with(INTEGRITY_CHECK) {
        return;
    }
    let page = 4096usize;
    let (start, end) = (table & !(page - 1), (table + words.len() * 8).div_ceil(page) * page);
    // Pages of one mapping only, whose protection is restored after the patch.
    let Some(prot) = protection(start).filter(|&p| protection(end - 1) == Some(p)) else { return };
    // SAFETY: making the table's own pages writable for the patch, then as they were.
    unsafe {
        if prot & libc::PROT_WRITE == 0
            && libc::mprotect(start as *mut c_void, end - start, prot | libc::PROT_WRITE) != 0
        {
            return;
        }
        for (i, &v) in words.iter().enumerate() {
            if is_code(v) && log {
                if let Some(t) = crate::export_log::wrap(format!("{name}:{i}"), i, v as *mut c_void) {
                    std::ptr::write_volatile((table + i * 8) as *mut usize, t as usize);
                }
            } else if is_code(v) {
                let t = crate::unmodeled::wrap(
                    &format!("{}{name}:{i}", gpuless_traces::model::EXPORT_TABLE_SLOT),
                    v as *mut c_void,
                );
                std::ptr::write_volatile((table + i * 8) as *mut usize, t as usize);
            }
        }
        if prot & libc::PROT_WRITE == 0 {
            libc::mprotect(start as *mut c_void, end - start, prot);
        }
    }
}

/// `GPULESS_EXPORT_TABLES=log:...`: says what `cuGetExportTable` answered for a table asked.
///
/// # Safety
/// `raw` are the program's arguments; on success the driver wrote the table's address.
pub unsafe fn log_get(raw: &[u64], status: u32) {
    let (Some(&pp), Some(&id)) = (raw.first(), raw.get(1)) else { return };
    if id == 0 {
        return;
    }
    // SAFETY: the program's 16-byte UUID; the out-pointer is written on success.
    let (uuid, table) =
        unsafe { (*(id as *const [u8; 16]), if status == 0 && pp != 0 { *(pp as *const usize) } else { 0 }) };
    let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    crate::export_log::said_get(&hex, status, table);
}
