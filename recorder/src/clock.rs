//! Record timestamps: nanoseconds since the recorder started, taken twice per recorded call.
//!
//! `clock_gettime` costs 20–25 ns through the vDSO on the machines measured, a sizeable part of
//! a recorded launch. Where the kernel itself keeps time with the TSC (clocksource `tsc`, so the
//! counter is invariant and synchronized across cores), the recorder reads the TSC directly and
//! scales it: the scale is measured against the monotonic clock once the recording is
//! [`CALIBRATE_AFTER_NS`] old (before that, timestamps come from the monotonic clock). The
//! switch is continuous and the scale error is a few parts per million, so timestamps stay
//! monotonic and drift by at most milliseconds per hour against wall time; durations are exact to
//! the tick. Elsewhere (other architectures, other clocksources) the monotonic clock is used.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// Age of the recording at which the TSC scale is measured.
pub const CALIBRATE_AFTER_NS: u64 = 20_000_000;

struct Origin {
    start: Instant,
    /// TSC at `start`; `None` when the TSC is not used.
    tsc0: Option<u64>,
}

/// The TSC at time zero and nanoseconds per tick (32.32 fixed point; 0 until calibrated), in
/// one cache line: all a calibrated reading needs.
#[repr(align(64))]
struct Tsc {
    tsc0: AtomicU64,
    scale: AtomicU64,
}

static TSC: Tsc = Tsc { tsc0: AtomicU64::new(0), scale: AtomicU64::new(0) };

fn origin() -> &'static Origin {
    static O: OnceLock<Origin> = OnceLock::new();
    O.get_or_init(|| {
        let tsc0 = tsc_usable().then(tsc);
        TSC.tsc0.store(tsc0.unwrap_or(0), Ordering::Relaxed);
        Origin { start: Instant::now(), tsc0 }
    })
}

/// Starts the clock (the first call fixes time zero).
pub fn start() {
    origin();
}

/// Nanoseconds since [`start`].
#[inline]
pub fn now_ns() -> u64 {
    let scale = TSC.scale.load(Ordering::Relaxed);
    if scale != 0 {
        let ticks = tsc().wrapping_sub(TSC.tsc0.load(Ordering::Relaxed));
        return ((u128::from(ticks) * u128::from(scale)) >> 32) as u64;
    }
    let o = origin();
    let Some(tsc0) = o.tsc0 else {
        return o.start.elapsed().as_nanos() as u64;
    };
    let ns = o.start.elapsed().as_nanos() as u64;
    if ns >= CALIBRATE_AFTER_NS {
        let ticks = tsc().wrapping_sub(tsc0);
        if ticks > 0 {
            let s = (u128::from(ns) << 32) / u128::from(ticks);
            TSC.scale.store(u64::try_from(s).unwrap_or(0), Ordering::Relaxed);
        }
    }
    ns
}

/// Whether the kernel keeps time with the TSC, which makes it safe to read directly.
fn tsc_usable() -> bool {
    cfg!(target_arch = "x86_64")
        && std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .is_ok_and(|s| s.trim() == "tsc")
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn tsc() -> u64 {
    // SAFETY: RDTSC has no preconditions on x86-64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn tsc() -> u64 {
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_and_close_to_the_monotonic_clock() {
        start();
        let wall = Instant::now();
        let first = now_ns();
        let mut last = first;
        // Run past calibration, checking that time never goes backwards across the switch.
        while wall.elapsed().as_nanos() < u128::from(CALIBRATE_AFTER_NS) * 3 {
            let t = now_ns();
            assert!(t >= last, "clock went backwards: {last} → {t}");
            last = t;
        }
        let elapsed = wall.elapsed().as_nanos() as i128;
        let measured = i128::from(now_ns() - first);
        // Within 1% (scheduling noise between the two readings is far below that).
        assert!((measured - elapsed).abs() < elapsed / 100 + 200_000, "clock {measured} ns vs monotonic {elapsed} ns");
    }
}
