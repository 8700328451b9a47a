//! The median of timings (hot replay, lowered bodies, per-launch profiles, invocations).

/// Median of `v` (sorted in place).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}
