//! `GPULESS_EXPORT_TABLES=log:PREFIX[,PREFIX...]`: a diagnostic for learning what a private
//! export table's slots do (which client mode must then answer). Every code slot of the tables
//! whose UUID starts with one of the prefixes is replaced, in place, by a logging wrapper that
//! prints on stderr, for its first calls: the six integer argument registers, the 32 bytes each
//! pointer-like argument points at before and after the call (read with `process_vm_readv`, so
//! an argument that is not a pointer is never dereferenced), and the return value. Every
//! `cuGetExportTable` of such a table is logged too, with its status and size.
//!
//! Only for measurement runs: a slot taking more than six integer arguments, or floating-point
//! ones, is not forwarded faithfully.
//!
//! With it, `GPULESS_EXPORT_TABLES_ANSWER=SLOT=VALUE[,SLOT=VALUE...]` makes the logged slots of
//! those numbers return VALUE without calling the driver (to learn whether a library checks a
//! slot's status and what it does without the slot), and every call's line also shows 32 bytes
//! behind each pointer-like word the arguments point at (one level deeper) and the caller's
//! libraries (the return addresses on the stack).

use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// The prefixes `GPULESS_EXPORT_TABLES=log:...` asked for (lower-case hex).
fn prefixes() -> &'static [String] {
    static P: OnceLock<Vec<String>> = OnceLock::new();
    P.get_or_init(|| {
        std::env::var("GPULESS_EXPORT_TABLES")
            .ok()
            .and_then(|v| v.strip_prefix("log:").map(|l| l.split(',').map(|p| p.trim().to_ascii_lowercase()).collect()))
            .unwrap_or_default()
    })
}

/// Whether a table with this UUID (hex, no dashes) is logged.
pub fn wanted(hex: &str) -> bool {
    prefixes().iter().any(|p| !p.is_empty() && hex.starts_with(p.as_str()))
}

/// Whether log mode is on at all.
pub fn enabled() -> bool {
    !prefixes().is_empty()
}

const WRAPPERS: usize = 128;
/// Calls logged per slot before it goes quiet (its later calls are only counted).
const LOGGED_CALLS: u32 = 12;

type Fn6 = unsafe extern "C" fn(u64, u64, u64, u64, u64, u64) -> u64;

struct Entry {
    what: String,
    slot: usize,
}

/// `GPULESS_EXPORT_TABLES_ANSWER`: slot number → the status returned instead of calling it.
fn answers() -> &'static [(usize, u64)] {
    static A: OnceLock<Vec<(usize, u64)>> = OnceLock::new();
    A.get_or_init(|| {
        std::env::var("GPULESS_EXPORT_TABLES_ANSWER")
            .ok()
            .map(|v| {
                v.split(',')
                    .filter_map(|kv| {
                        let (k, v) = kv.split_once('=')?;
                        Some((k.trim().parse().ok()?, v.trim().parse().ok()?))
                    })
                    .collect()
            })
            .unwrap_or_default()
    })
}

static ENTRIES: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
static REAL: [AtomicUsize; WRAPPERS] = [const { AtomicUsize::new(0) }; WRAPPERS];
static CALLS: [AtomicU32; WRAPPERS] = [const { AtomicU32::new(0) }; WRAPPERS];

/// 32 bytes at `p` if this process can read them (never faults).
fn peek(p: u64) -> Option<[u8; 32]> {
    if p < 4096 {
        return None;
    }
    let mut buf = [0u8; 32];
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: 32 };
    let remote = libc::iovec { iov_base: p as *mut c_void, iov_len: 32 };
    // SAFETY: reads this process's memory through the kernel, which checks the range.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    (n == 32).then_some(buf)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

extern "C" fn logged<const K: usize>(a0: u64, a1: u64, a2: u64, a3: u64, a4: u64, a5: u64) -> u64 {
    let real = REAL[K].load(Ordering::Acquire);
    let n = CALLS[K].fetch_add(1, Ordering::Relaxed);
    let args = [a0, a1, a2, a3, a4, a5];
    let before: Vec<Option<[u8; 32]>> =
        if n < LOGGED_CALLS { args.iter().map(|&a| peek(a)).collect() } else { Vec::new() };
    let (what, slot) = ENTRIES.lock().ok().and_then(|e| e.get(K).map(|e| (e.what.clone(), e.slot))).unwrap_or_default();
    let answer = answers().iter().find(|(s, _)| *s == slot).map(|&(_, v)| v);
    let r = match answer {
        Some(v) => v,
        // SAFETY: the real slot, with the caller's integer registers.
        None => unsafe { std::mem::transmute::<usize, Fn6>(real)(a0, a1, a2, a3, a4, a5) },
    };
    if n < LOGGED_CALLS {
        let how = if answer.is_some() { " (answered, driver not called)" } else { "" };
        let mut line = format!("gpuless: export-table-log {what} call {n}{how}: args {args:x?} -> {r:#x}");
        for (i, b) in before.iter().enumerate() {
            if let Some(b) = b {
                let after = peek(args[i]);
                line.push_str(&format!("; *a{i} {} -> {}", hex(b), after.map(|a| hex(&a)).unwrap_or_default()));
                for (w, word) in after.iter().flat_map(|a| a.chunks_exact(8)).enumerate() {
                    let p = u64::from_le_bytes(word.try_into().unwrap_or([0; 8]));
                    if let Some(deep) = peek(p) {
                        line.push_str(&format!(" [a{i}.{w} -> {}]", hex(&deep)));
                    }
                }
            }
        }
        line.push_str(&format!("; from {}", callers()));
        eprintln!("{line}");
    }
    r
}

static WRAPPER_FNS: [Fn6; WRAPPERS] = [
    logged::<0>,
    logged::<1>,
    logged::<2>,
    logged::<3>,
    logged::<4>,
    logged::<5>,
    logged::<6>,
    logged::<7>,
    logged::<8>,
    logged::<9>,
    logged::<10>,
    logged::<11>,
    logged::<12>,
    logged::<13>,
    logged::<14>,
    logged::<15>,
    logged::<16>,
    logged::<17>,
    logged::<18>,
    logged::<19>,
    logged::<20>,
    logged::<21>,
    logged::<22>,
    logged::<23>,
    logged::<24>,
    logged::<25>,
    logged::<26>,
    logged::<27>,
    logged::<28>,
    logged::<29>,
    logged::<30>,
    logged::<31>,
    logged::<32>,
    logged::<33>,
    logged::<34>,
    logged::<35>,
    logged::<36>,
    logged::<37>,
    logged::<38>,
    logged::<39>,
    logged::<40>,
    logged::<41>,
    logged::<42>,
    logged::<43>,
    logged::<44>,
    logged::<45>,
    logged::<46>,
    logged::<47>,
    logged::<48>,
    logged::<49>,
    logged::<50>,
    logged::<51>,
    logged::<52>,
    logged::<53>,
    logged::<54>,
    logged::<55>,
    logged::<56>,
    logged::<57>,
    logged::<58>,
    logged::<59>,
    logged::<60>,
    logged::<61>,
    logged::<62>,
    logged::<63>,
    logged::<64>,
    logged::<65>,
    logged::<66>,
    logged::<67>,
    logged::<68>,
    logged::<69>,
    logged::<70>,
    logged::<71>,
    logged::<72>,
    logged::<73>,
    logged::<74>,
    logged::<75>,
    logged::<76>,
    logged::<77>,
    logged::<78>,
    logged::<79>,
    logged::<80>,
    logged::<81>,
    logged::<82>,
    logged::<83>,
    logged::<84>,
    logged::<85>,
    logged::<86>,
    logged::<87>,
    logged::<88>,
    logged::<89>,
    logged::<90>,
    logged::<91>,
    logged::<92>,
    logged::<93>,
    logged::<94>,
    logged::<95>,
    logged::<96>,
    logged::<97>,
    logged::<98>,
    logged::<99>,
    logged::<100>,
    logged::<101>,
    logged::<102>,
    logged::<103>,
    logged::<104>,
    logged::<105>,
    logged::<106>,
    logged::<107>,
    logged::<108>,
    logged::<109>,
    logged::<110>,
    logged::<111>,
    logged::<112>,
    logged::<113>,
    logged::<114>,
    logged::<115>,
    logged::<116>,
    logged::<117>,
    logged::<118>,
    logged::<119>,
    logged::<120>,
    logged::<121>,
    logged::<122>,
    logged::<123>,
    logged::<124>,
    logged::<125>,
    logged::<126>,
    logged::<127>,
];

/// A logging wrapper for `real` (named `what`), or `None` when all are taken.
pub fn wrap(what: String, slot: usize, real: *mut c_void) -> Option<*mut c_void> {
    let mut e = ENTRIES.lock().ok()?;
    let k = e.len();
    if k >= WRAPPERS {
        return None;
    }
    eprintln!("gpuless: export-table-log {what} is {}", place(real as usize));
    e.push(Entry { what, slot });
    REAL[k].store(real as usize, Ordering::Release);
    Some(WRAPPER_FNS[k] as *mut c_void)
}

/// Logs one `cuGetExportTable` of a wanted table.
pub fn said_get(hex_id: &str, status: u32, table: usize) {
    let size = if table != 0 && table % 8 == 0 {
        // SAFETY: the driver's table, readable.
        peek(table as u64).map(|b| u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]))).unwrap_or(0)
    } else {
        0
    };
    eprintln!(
        "gpuless: export-table-log get {hex_id} status {status} table {table:#x} first word {size}; asked from {}",
        callers()
    );
}

/// The shared object holding an address (its path) and the address's offset from its load base.
fn object_of(addr: usize) -> Option<(String, usize)> {
    // SAFETY: dladdr only reads the loader's tables; `info` is written on success.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    if unsafe { libc::dladdr(addr as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: a NUL-terminated name the loader keeps.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned();
    Some((name, addr - info.dli_fbase as usize))
}

/// `library+offset` of an address.
fn place(addr: usize) -> String {
    object_of(addr).map_or_else(|| format!("{addr:#x}"), |(name, off)| format!("{name}+{off:#x}"))
}

/// The shared objects on the stack now, innermost first (each once): who asked for a table.
fn callers() -> String {
    unsafe extern "C" {
        /// glibc's `backtrace(3)`.
        fn backtrace(buffer: *mut *mut c_void, size: libc::c_int) -> libc::c_int;
    }
    let mut frames = [std::ptr::null_mut::<c_void>(); 32];
    // SAFETY: a buffer of 32 slots.
    let n = unsafe { backtrace(frames.as_mut_ptr(), frames.len() as libc::c_int) }.max(0) as usize;
    let mut seen: Vec<String> = Vec::new();
    for &f in &frames[..n] {
        let Some((name, off)) = object_of(f as usize) else { continue };
        let short = name.rsplit('/').next().unwrap_or(&name).to_string();
        if !seen.iter().any(|s| s.starts_with(&short)) {
            seen.push(format!("{short}+{off:#x}"));
        }
    }
    seen.join(" < ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn wrappers_forward_and_are_distinct() {
        extern "C" fn add(a: u64, b: u64, _c: u64, _d: u64, _e: u64, _f: u64) -> u64 {
            a + b
        }
        let w = super::wrap("test:1".into(), 1, add as *mut std::ffi::c_void).unwrap();
        let f: super::Fn6 = unsafe { std::mem::transmute(w) };
        assert_eq!(unsafe { f(2, 3, 0, 0, 0, 0) }, 5);
        assert_ne!(super::WRAPPER_FNS[0] as usize, super::WRAPPER_FNS[1] as usize);
    }
}
