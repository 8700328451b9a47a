//! SM arithmetic of `--emulate`: how many SMs a green context gets when a MIG profile's SM count
//! is asked of `cuDevSmResourceSplitByCount`.
//!
//! The driver does not hand out arbitrary SM counts. It reports, in the device's SM resource
//! (`CUdevSmResource`, from `cuDeviceGetDevResource`), a minimum partition size
//! (`minSmPartitionSize`) and a co-scheduling alignment (`smCoscheduledAlignment`): a split rounds
//! the requested minimum up to the alignment, and never goes below the minimum. The CUDA driver
//! API documentation ("Green Contexts") gives as a guideline for compute capability 9.0 a minimum
//! of 8 SMs in multiples of 8, and says to trust what `cuDeviceGetDevResource` reports.
//! With `CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING` the driver splits at a finer granularity
//! (pairs of SMs), at the cost of the guarantee that SMs of a group are co-scheduled on one GPU
//! processing cluster (which thread-block clusters need).
//!
//! This module is pure: [`plan_split`] predicts what the driver grants, so the choice can be
//! tested without a GPU; `replay::green` makes the calls and reports what was actually granted.

use serde::Serialize;

/// SMs per group when co-scheduling is ignored (`CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING`):
/// the finest granularity the driver splits at, a pair of SMs (a TPC).
pub const FINE_GRANULARITY: u32 = 2;

/// The SM resource of a device, as `cuDeviceGetDevResource(CU_DEV_RESOURCE_TYPE_SM)` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SmShape {
    /// SMs of the whole device.
    pub sm_count: u32,
    /// `minSmPartitionSize`: the smallest group a split creates.
    pub min_partition: u32,
    /// `smCoscheduledAlignment`: group sizes are multiples of this.
    pub alignment: u32,
}

impl SmShape {
    /// The H200 (and H100 SXM5) as the CUDA documentation's guideline for compute capability
    /// 9.0 describes it: 132 SMs, groups of at least 8 in multiples of 8.
    pub const HOPPER_132: SmShape = SmShape { sm_count: 132, min_partition: 8, alignment: 8 };
}

/// How the SMs of a green context are split off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SplitMode {
    /// No split: the green context holds every SM of the device.
    WholeDevice,
    /// A default split: groups follow the co-scheduling alignment, so thread-block clusters
    /// launch as on a full GPU; the count is rounded up to the alignment.
    Coscheduled,
    /// `CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING`: pairs of SMs, so counts such as 60 or
    /// 26 are met exactly, but SMs are not guaranteed to share a processing cluster.
    Fine,
}

/// Which split to prefer when the profile's SM count is not a multiple of the alignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SplitPreference {
    /// The profile's exact SM count: a co-scheduled split when it gives the exact count, else a
    /// fine one (what a MIG slice of that profile would have).
    #[default]
    Exact,
    /// Always a co-scheduled split, rounding the count up to the alignment.
    Coscheduled,
}

/// What to ask the driver for, and what it should grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SmPlan {
    /// SMs the profile has (what was asked for).
    pub requested: u32,
    /// SMs the split should grant (the driver's answer is reported separately).
    pub expected: u32,
    /// How the SMs are split off.
    pub mode: SplitMode,
}

impl SmPlan {
    /// The `flags` argument of `cuDevSmResourceSplitByCount` for this plan.
    pub fn split_flags(&self) -> u32 {
        match self.mode {
            // CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING = 1.
            SplitMode::Fine => 1,
            SplitMode::Coscheduled | SplitMode::WholeDevice => 0,
        }
    }
}

/// Why no plan fits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SmSplitError {
    /// Zero SMs were asked for.
    #[error("a partition needs at least one SM")]
    ZeroSms,
    /// The device reported no SMs.
    #[error("the device reports no SMs in its SM resource")]
    NoDeviceSms,
}

/// Rounds `n` up to a multiple of `m` (`m` ≥ 1), saturating.
fn round_up(n: u32, m: u32) -> u32 {
    let m = m.max(1);
    n.div_ceil(m).saturating_mul(m)
}

/// SMs a single-group split of `requested` SMs grants in `mode`, or `None` when the rounded
/// count does not fit the device (the driver then creates no group).
pub fn granted(requested: u32, shape: SmShape, mode: SplitMode) -> Option<u32> {
    let n = match mode {
        SplitMode::WholeDevice => return Some(shape.sm_count),
        SplitMode::Coscheduled => round_up(requested.max(shape.min_partition), shape.alignment),
        SplitMode::Fine => round_up(requested.max(FINE_GRANULARITY), FINE_GRANULARITY),
    };
    (n > 0 && n <= shape.sm_count).then_some(n)
}

/// Chooses the split for a partition of `requested` SMs on a device of `shape`.
///
/// - `requested` ≥ the device's SMs (the 7g profile on a full H200): no split, every SM;
/// - else, with [`SplitPreference::Exact`]: a co-scheduled split if it grants exactly
///   `requested`, else a fine split if that does, else the co-scheduled rounding;
/// - with [`SplitPreference::Coscheduled`]: the co-scheduled rounding;
/// - a rounding that no longer fits the device falls back to a fine split, then to the whole
///   device.
pub fn plan_split(requested: u32, shape: SmShape, prefer: SplitPreference) -> Result<SmPlan, SmSplitError> {
    if requested == 0 {
        return Err(SmSplitError::ZeroSms);
    }
    if shape.sm_count == 0 {
        return Err(SmSplitError::NoDeviceSms);
    }
    let plan = |mode: SplitMode, expected: u32| SmPlan { requested, expected, mode };
    if requested >= shape.sm_count {
        return Ok(plan(SplitMode::WholeDevice, shape.sm_count));
    }
    let co = granted(requested, shape, SplitMode::Coscheduled);
    let fine = granted(requested, shape, SplitMode::Fine);
    let chosen = match (prefer, co, fine) {
        (_, Some(c), _) if c == requested => plan(SplitMode::Coscheduled, c),
        (SplitPreference::Exact, _, Some(f)) if f == requested => plan(SplitMode::Fine, f),
        (_, Some(c), _) => plan(SplitMode::Coscheduled, c),
        (_, None, Some(f)) => plan(SplitMode::Fine, f),
        (_, None, None) => plan(SplitMode::WholeDevice, shape.sm_count),
    };
    // A "split" that takes every SM is no split.
    if chosen.expected >= shape.sm_count {
        return Ok(plan(SplitMode::WholeDevice, shape.sm_count));
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::GpuModel;

    const H200: SmShape = SmShape::HOPPER_132;

    fn row(prefer: SplitPreference) -> Vec<(String, u32, u32, SplitMode)> {
        GpuModel::H200
            .profiles()
            .iter()
            .map(|p| {
                let plan = plan_split(p.sms, H200, prefer).unwrap();
                (p.name.clone(), plan.requested, plan.expected, plan.mode)
            })
            .collect()
    }

    #[test]
    fn h200_profiles_exact() {
        use SplitMode::*;
        let expected = [
            ("1g.18gb", 16, 16, Coscheduled),
            ("1g.18gb+me", 16, 16, Coscheduled),
            ("1g.35gb", 26, 26, Fine),
            ("2g.35gb", 32, 32, Coscheduled),
            ("3g.71gb", 60, 60, Fine),
            ("4g.71gb", 64, 64, Coscheduled),
            ("7g.141gb", 132, 132, WholeDevice),
        ];
        let got = row(SplitPreference::Exact);
        let want: Vec<_> = expected.iter().map(|(n, r, g, m)| (n.to_string(), *r, *g, *m)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn h200_profiles_coscheduled() {
        use SplitMode::*;
        let got: Vec<(u32, u32, SplitMode)> =
            row(SplitPreference::Coscheduled).into_iter().map(|(_, r, g, m)| (r, g, m)).collect();
        assert_eq!(
            got,
            [
                (16, 16, Coscheduled),
                (16, 16, Coscheduled),
                (26, 32, Coscheduled),
                (32, 32, Coscheduled),
                (60, 64, Coscheduled),
                (64, 64, Coscheduled),
                (132, 132, WholeDevice)
            ]
        );
    }

    #[test]
    fn small_and_edge_counts() {
        // Below the minimum partition: rounded up to it (co-scheduled) or to a pair (fine).
        assert_eq!(plan_split(4, H200, SplitPreference::Coscheduled).unwrap().expected, 8);
        let four = plan_split(4, H200, SplitPreference::Exact).unwrap();
        assert_eq!(four, SmPlan { requested: 4, expected: 4, mode: SplitMode::Fine });
        // Neither split gives exactly 1 SM: the co-scheduled rounding wins.
        assert_eq!(plan_split(1, H200, SplitPreference::Exact).unwrap().expected, 8);
        // 130 of 132: the co-scheduled rounding (136) does not fit, the fine split does.
        let p = plan_split(130, H200, SplitPreference::Coscheduled).unwrap();
        assert_eq!((p.expected, p.mode), (130, SplitMode::Fine));
        // 131: rounds to 136 (co-scheduled) or 132 (fine), which is the whole device.
        let p = plan_split(131, H200, SplitPreference::Exact).unwrap();
        assert_eq!((p.expected, p.mode), (132, SplitMode::WholeDevice));
        // More than the device: every SM.
        assert_eq!(plan_split(200, H200, SplitPreference::Exact).unwrap().mode, SplitMode::WholeDevice);
        assert_eq!(plan_split(0, H200, SplitPreference::Exact), Err(SmSplitError::ZeroSms));
        let none = SmShape { sm_count: 0, min_partition: 8, alignment: 8 };
        assert_eq!(plan_split(8, none, SplitPreference::Exact), Err(SmSplitError::NoDeviceSms));
        // A device whose alignment is bigger than the remaining room.
        let odd = SmShape { sm_count: 12, min_partition: 8, alignment: 8 };
        let p = plan_split(9, odd, SplitPreference::Coscheduled).unwrap();
        assert_eq!((p.expected, p.mode), (10, SplitMode::Fine));
        assert_eq!(granted(9, odd, SplitMode::Coscheduled), None);
        // ... and when even the fine rounding takes every SM, no split at all.
        let tiny = SmShape { sm_count: 10, ..odd };
        assert_eq!(plan_split(9, tiny, SplitPreference::Coscheduled).unwrap().mode, SplitMode::WholeDevice);
    }

    #[test]
    fn flags() {
        let fine = plan_split(60, H200, SplitPreference::Exact).unwrap();
        assert_eq!(fine.split_flags(), 1);
        assert_eq!(plan_split(16, H200, SplitPreference::Exact).unwrap().split_flags(), 0);
    }

    #[test]
    fn a100_profiles() {
        // Compute capability 8.x guideline: at least 4 SMs in multiples of 2, so every A100
        // profile (14/28/42/56 SMs) is met exactly by a co-scheduled split; 98 of 108 too.
        let a100 = SmShape { sm_count: 108, min_partition: 4, alignment: 2 };
        for p in GpuModel::A100_40GB.profiles() {
            let plan = plan_split(p.sms, a100, SplitPreference::Exact).unwrap();
            assert_eq!(plan.expected, p.sms, "{}", p.name);
            assert_eq!(plan.mode, SplitMode::Coscheduled, "{}", p.name);
        }
    }
}
