//! Driver functions the API table does not model still pass through a counting trampoline,
//! so no call is invisible: at the end of the recording each gets a record with its name and
//! call count.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use gpuless_analyzer::api::ApiLevel;

use crate::hooks::generated_trampolines as n;

/// One trampoline's counter and target, side by side: a call reads one cache line of them.
#[repr(C, align(16))]
struct Tramp {
    /// Calls so far (`lock inc` in the trampoline).
    count: AtomicU64,
    /// The real function (the trampoline jumps to it).
    target: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const UNUSED: Tramp = Tramp { count: AtomicU64::new(0), target: AtomicUsize::new(0) };
static TRAMPS: [Tramp; n::TRAMPOLINES] = [UNUSED; n::TRAMPOLINES];

#[cfg(target_arch = "x86_64")]
core::arch::global_asm!(
    include_str!(concat!(env!("OUT_DIR"), "/trampolines.s")),
    tramps = sym TRAMPS,
    hot = sym crate::hot::HOT,
    epoch_at = const crate::hot::EPOCH_AT,
);

#[cfg(target_arch = "x86_64")]
unsafe extern "C" {
    static gpuless_tramp_table: [usize; n::TRAMPOLINES];
    static gpuless_dtramp_table: [usize; n::TRAMPOLINES];
}

/// Names of the functions behind each used trampoline, and the reverse map.
struct Table {
    names: Vec<String>,
    by_target: HashMap<(String, usize), usize>,
    /// Functions handed out unwrapped because the trampolines ran out.
    overflow: Vec<String>,
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

/// Returns a counting stand-in for the real function `p` named `name`.
pub fn wrap(name: &str, p: *mut c_void) -> *mut c_void {
    let mut guard = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let t = guard.get_or_insert_with(|| Table { names: Vec::new(), by_target: HashMap::new(), overflow: Vec::new() });
    let driver = level_of(name) == ApiLevel::Driver;
    if let Some(&i) = t.by_target.get(&(name.to_string(), p as usize)) {
        return stub(i, driver).unwrap_or(p);
    }
    let i = t.names.len();
    match stub(i, driver) {
        Some(s) => {
            TRAMPS[i].target.store(p as usize, Ordering::Release);
            t.names.push(name.to_string());
            t.by_target.insert((name.to_string(), p as usize), i);
            s
        }
        None => {
            if !t.overflow.iter().any(|o| o == name) {
                t.overflow.push(name.to_string());
            }
            p
        }
    }
}

/// Trampoline `i`: for a driver function, the kind that also starts a new epoch of stable
/// answers before the call (an unmodeled function might change one; a query racing with it on
/// another thread may keep the old answer until the next epoch).
#[cfg(target_arch = "x86_64")]
fn stub(i: usize, driver: bool) -> Option<*mut c_void> {
    // SAFETY: the tables are immutable data emitted by global_asm above.
    let table = unsafe {
        if driver {
            &gpuless_dtramp_table
        } else {
            &gpuless_tramp_table
        }
    };
    table.get(i).map(|&a| a as *mut c_void)
}

#[cfg(not(target_arch = "x86_64"))]
fn stub(_: usize, _: bool) -> Option<*mut c_void> {
    None
}

/// The library level a symbol name belongs to, from its prefix (`dlsym` also hands out
/// cuDNN, cuBLAS and runtime entry points, which all start with "cu").
pub fn level_of(name: &str) -> ApiLevel {
    if name.starts_with("cudnn") {
        ApiLevel::Cudnn
    } else if name.starts_with("cublasLt") {
        ApiLevel::CublasLt
    } else if name.starts_with("cublas") {
        ApiLevel::Cublas
    } else if name.starts_with("cuda") || name.starts_with("__cuda") {
        ApiLevel::Runtime
    } else if name.starts_with("cu") {
        ApiLevel::Driver
    } else {
        ApiLevel::Other
    }
}

/// Every trampoline handed out: index, function name, whether of the driver kind, calls.
pub fn trampolines() -> Vec<(usize, String, bool, u64)> {
    let guard = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(t) = guard.as_ref() else { return Vec::new() };
    t.names
        .iter()
        .enumerate()
        .map(|(i, n)| (i, n.clone(), level_of(n) == ApiLevel::Driver, TRAMPS[i].count.load(Ordering::Relaxed)))
        .collect()
}

/// (name, calls) for every unmodeled function handed out, merged by name; plus the names
/// handed out without a counter.
pub fn counts() -> (Vec<(String, u64)>, Vec<String>) {
    let guard = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(t) = guard.as_ref() else { return (Vec::new(), Vec::new()) };
    let mut merged: Vec<(String, u64)> = Vec::new();
    for (i, name) in t.names.iter().enumerate() {
        let c = TRAMPS[i].count.load(Ordering::Relaxed);
        match merged.iter_mut().find(|(n, _)| n == name) {
            Some(e) => e.1 += c,
            None => merged.push((name.clone(), c)),
        }
    }
    (merged, t.overflow.clone())
}
