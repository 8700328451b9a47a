//! Diagnostics of the recorder's own cost (`GPULESS_DIAG`), for measurements only: the trace
//! they leave is incomplete (`hooks`, `nowrite`) or the calls are slower (`selftime`).
//!
//! - `bare`: the library is loaded but hands out the driver's own entry points (nothing is
//!   interposed or recorded: the cost of being loaded);
//! - `hooks`: every hooked call passes straight through (interposition cost only);
//! - `nowrite`: records are built on the program's threads and dropped (no writer work);
//! - `selftime`: normal recording, and each hooked call's time outside the driver is summed
//!   per function and recording path; the table goes to stderr at exit;
//! - `pause`: normal recording, which the program can pause and resume by calling the exported
//!   [`gpuless_diag_pause`] (for A/B measurements inside one process, where the noise between
//!   processes is far larger than the recorder's cost).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;

use std::ffi::c_void;

use crate::call::Real;
use crate::hooks::{HOOKS, SLOTS};

/// Environment variable choosing the diagnostics mode.
pub const ENV_DIAG: &str = "GPULESS_DIAG";

/// What `GPULESS_DIAG` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Diag {
    /// Normal recording.
    Off,
    /// Nothing interposed: `dlsym` and `cuGetProcAddress` hand out the driver's entry points.
    Bare,
    /// Hooks pass calls through unrecorded.
    HooksOnly,
    /// Records are built and dropped.
    NoWrite,
    /// Normal recording, the recorder's time per call summed.
    SelfTime,
    /// Normal recording that [`gpuless_diag_pause`] pauses and resumes.
    Pause,
}

/// The diagnostics mode (read on every call: one byte, decided on first use).
pub fn diag() -> Diag {
    static D: AtomicU8 = AtomicU8::new(0);
    match D.load(Ordering::Relaxed) {
        1 => Diag::Off,
        2 => Diag::HooksOnly,
        3 => Diag::NoWrite,
        4 => Diag::SelfTime,
        5 => Diag::Bare,
        6 => Diag::Pause,
        _ => {
            let (d, code) = match std::env::var(ENV_DIAG).as_deref() {
                Ok("hooks") => (Diag::HooksOnly, 2),
                Ok("nowrite") => (Diag::NoWrite, 3),
                Ok("selftime") => (Diag::SelfTime, 4),
                Ok("bare") => (Diag::Bare, 5),
                Ok("pause") => (Diag::Pause, 6),
                _ => (Diag::Off, 1),
            };
            D.store(code, Ordering::Relaxed);
            d
        }
    }
}

/// Pauses (`paused` not 0) or resumes recording under `GPULESS_DIAG=pause`: while paused,
/// hooked calls pass straight through unrecorded, as when recording is off. Does nothing in
/// other modes. For measurements only: the trace misses the paused calls.
#[unsafe(no_mangle)]
pub extern "C" fn gpuless_diag_pause(paused: i32) {
    if diag() == Diag::Pause {
        crate::state::pause(paused != 0);
    }
}

/// Sums of one slot: calls, and nanoseconds outside the driver.
struct Sums {
    calls: AtomicU64,
    self_ns: AtomicU64,
}

fn sums() -> &'static [Sums] {
    static S: OnceLock<Vec<Sums>> = OnceLock::new();
    S.get_or_init(|| (0..SLOTS).map(|_| Sums { calls: AtomicU64::new(0), self_ns: AtomicU64::new(0) }).collect())
}

/// Runs one hooked call (`hooked`, handed the timed driver call) and adds the time it spent
/// outside the driver to `slot`'s sums.
#[inline(never)]
pub(crate) fn timed(slot: usize, real: &mut Real, hooked: impl FnOnce(&mut Real) -> u32) -> u32 {
    let mut in_driver = 0u64;
    let t0 = crate::clock::now_ns();
    let p = real.address();
    let mut timed_call = |_: *mut c_void| {
        let a = crate::clock::now_ns();
        let s = real.call();
        in_driver = crate::clock::now_ns().saturating_sub(a);
        s
    };
    let status = hooked(&mut Real::new(&mut timed_call, p));
    let total = crate::clock::now_ns().saturating_sub(t0);
    if let Some(s) = sums().get(slot) {
        s.calls.fetch_add(1, Ordering::Relaxed);
        s.self_ns.fetch_add(total.saturating_sub(in_driver), Ordering::Relaxed);
    }
    status
}

/// Look-ups of entry points (`dlsym`, `cuGetProcAddress`) by name, with their time.
static LOOKUPS: std::sync::Mutex<Option<std::collections::HashMap<String, (u64, u64)>>> = std::sync::Mutex::new(None);

/// Counts one look-up of `name` by `via` that took `ns` (`selftime` only).
pub fn lookup(via: &str, name: &std::ffi::CStr, ns: u64) {
    if diag() != Diag::SelfTime {
        return;
    }
    if let Ok(mut m) = LOOKUPS.lock() {
        let key = format!("{via} {}", name.to_string_lossy());
        let e = m.get_or_insert_with(Default::default).entry(key).or_insert((0, 0));
        e.0 += 1;
        e.1 += ns;
    }
}

/// Writes the self-time table to stderr (at the end of a `selftime` recording): `path_of`
/// names the recording path of an API function's calls, `trampolines` are the counting
/// trampolines' (index, name, driver kind, calls) (`unmodeled::trampolines`).
pub fn report(
    path_of: impl Fn(gpuless_analyzer::api::ApiId) -> &'static str,
    trampolines: Vec<(usize, String, bool, u64)>,
) {
    if diag() != Diag::SelfTime {
        return;
    }
    if let Ok(m) = LOOKUPS.lock() {
        let mut rows: Vec<_> = m.iter().flatten().map(|(k, &(n, ns))| (n, ns, k.clone())).collect();
        rows.sort_unstable_by_key(|r| std::cmp::Reverse(r.0));
        let (n, ns) = rows.iter().fold((0, 0), |a, r| (a.0 + r.0, a.1 + r.1));
        eprintln!("gpuless selftime: {n} look-ups by name, {:.3} ms", ns as f64 / 1e6);
        for (n, ns, k) in rows.iter().take(12) {
            eprintln!("gpuless selftime: look-up {n:>9} x {:>7.0} ns  {k}", *ns as f64 / *n as f64);
        }
    }
    let mut rows: Vec<(u64, u64, &str, &str)> = sums()
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let calls = s.calls.load(Ordering::Relaxed);
            let h = HOOKS.get(i)?;
            let path = path_of(h.func);
            (calls > 0).then(|| (s.self_ns.load(Ordering::Relaxed), calls, h.symbol, path))
        })
        .collect();
    rows.sort_unstable_by_key(|r| std::cmp::Reverse(r.0));
    let total: u64 = rows.iter().map(|r| r.0).sum();
    let calls: u64 = rows.iter().map(|r| r.1).sum();
    eprintln!("gpuless selftime: {calls} hooked calls, {:.3} ms outside the driver", total as f64 / 1e6);
    for (ns, n, name, path) in rows.iter().take(25) {
        eprintln!(
            "gpuless selftime: {:>10.3} ms {:>9} calls {:>7.0} ns/call  {path:<4} {name}",
            *ns as f64 / 1e6,
            n,
            *ns as f64 / *n as f64
        );
    }
    for (i, name, driver, calls) in trampolines {
        let kind = if driver { "dtramp (new epoch)" } else { "tramp" };
        eprintln!("gpuless selftime: trampoline {i:>3} {kind:<18} {calls:>9} calls  {name}");
    }
}
