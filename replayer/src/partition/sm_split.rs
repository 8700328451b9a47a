//! SM arithmetic of `--emulate`: how many SMs a green context gets when a MIG profile's SM count
//! is asked of `cuDevSmResourceSplitByCount`.
//!
//! The driver does not hand out arbitrary SM counts. It reports, in the device's SM resource
//! (`CUdevSmResource`, from `cuDeviceGetDevResource`), a minimum partition size
//! (`minSmPartitionSize`) and a co-scheduling alignment (`smCoscheduledAlignment`): a default
//! split rounds the requested count up to the alignment and never goes below the minimum; a
//! count whose rounding does not fit beside the rest gets every SM. The CUDA documentation
//! ("Green Contexts") gives 8 and 8 as the guideline for compute capability 9.0, and the H200 of
//! the test machine reports exactly that (132 SMs, minimum 8, alignment 8).
//!
//! With `CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING` the driver splits in pairs of SMs, so
//! 60 or 26 SMs are met exactly, but the SMs of the group are no longer guaranteed to share a GPU
//! processing cluster, and thread-block clusters break: on the H200, cuDNN's sm90 convolution
//! kernels fail with `CUDA_ERROR_INVALID_CLUSTER_SIZE` in a 60-SM fine group, and a kernel with
//! clusters of 8 was seen to report success without running a single block. The default is
//! therefore the co-scheduled split (60 → 64 SMs for 3g.71gb); the fine split is opt-in.
//!
//! Measured on the H200 (driver 580.159.04, `.device` probe, see docs/PARTITIONS.md):
//!
//! | asked | default split | fine split |
//! |---|---|---|
//! | 1, 2, 4, 8 | 8 | 2, 2, 4, 8 |
//! | 14 / 16 | 16 / 16 | 14 / 16 |
//! | 26 / 32 | 32 / 32 | 26 / 32 |
//! | 60 / 64 | 64 / 64 | 60 / 64 |
//! | 128 / 130 / 132 | 128 / 132 / 132 | 128 / 130 / 132 |
//!
//! This module is pure: [`plan_split`] predicts what the driver grants, so the choice is tested
//! without a GPU; `replay::green` makes the calls and reports what was actually granted.

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

/// Which split to ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SplitPreference {
    /// A co-scheduled split, rounding the count up to the alignment (60 → 64 on an H200):
    /// thread-block clusters launch as on the full GPU.
    #[default]
    Coscheduled,
    /// The profile's exact SM count (what a MIG slice has): a co-scheduled split when it gives
    /// the exact count, else a fine one, at the risk of kernels with thread-block clusters.
    Exact,
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

/// SMs a single-group split of `requested` SMs grants in `mode`, or `None` when it cannot be
/// granted (no SMs, or a fine rounding beyond the device).
pub fn granted(requested: u32, shape: SmShape, mode: SplitMode) -> Option<u32> {
    let n = match mode {
        SplitMode::WholeDevice => return Some(shape.sm_count),
        // A rounding beyond the device gets every SM (asked 130 of 132: granted 132).
        SplitMode::Coscheduled => round_up(requested.max(shape.min_partition), shape.alignment).min(shape.sm_count),
        SplitMode::Fine => round_up(requested.max(FINE_GRANULARITY), FINE_GRANULARITY),
    };
    (n > 0 && n <= shape.sm_count).then_some(n)
}

/// Chooses the split for a partition of `requested` SMs on a device of `shape`.
///
/// - `requested` ≥ the device's SMs (the 7g profile on a full H200), or a rounding that takes
///   every SM: no split, the whole device;
/// - [`SplitPreference::Coscheduled`]: the co-scheduled rounding;
/// - [`SplitPreference::Exact`]: a co-scheduled split if it grants exactly `requested`, else a
///   fine split if that does, else the co-scheduled rounding.
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
        (_, None, _) => plan(SplitMode::WholeDevice, shape.sm_count),
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
    fn h200_profiles_default_split() {
        use SplitMode::*;
        let expected = [
            ("1g.18gb", 16, 16, Coscheduled),
            ("1g.18gb+me", 16, 16, Coscheduled),
            ("1g.35gb", 26, 32, Coscheduled),
            ("2g.35gb", 32, 32, Coscheduled),
            ("3g.71gb", 60, 64, Coscheduled),
            ("4g.71gb", 64, 64, Coscheduled),
            ("7g.141gb", 132, 132, WholeDevice),
        ];
        let want: Vec<_> = expected.iter().map(|(n, r, g, m)| (n.to_string(), *r, *g, *m)).collect();
        assert_eq!(row(SplitPreference::default()), want);
    }

    #[test]
    fn h200_profiles_exact() {
        use SplitMode::*;
        let got: Vec<(u32, u32, SplitMode)> =
            row(SplitPreference::Exact).into_iter().map(|(_, r, g, m)| (r, g, m)).collect();
        assert_eq!(
            got,
            [
                (16, 16, Coscheduled),
                (16, 16, Coscheduled),
                (26, 26, Fine),
                (32, 32, Coscheduled),
                (60, 60, Fine),
                (64, 64, Coscheduled),
                (132, 132, WholeDevice)
            ]
        );
    }

    /// What the H200 granted, as measured by the device probe (module documentation's table).
    #[test]
    fn matches_the_h200_measurements() {
        let default_split = [
            (1, 8),
            (2, 8),
            (4, 8),
            (8, 8),
            (14, 16),
            (16, 16),
            (26, 32),
            (32, 32),
            (60, 64),
            (64, 64),
            (128, 128),
            (130, 132),
            (132, 132),
        ];
        for (asked, got) in default_split {
            assert_eq!(granted(asked, H200, SplitMode::Coscheduled), Some(got), "default split of {asked}");
            assert_eq!(plan_split(asked, H200, SplitPreference::Coscheduled).unwrap().expected, got, "plan {asked}");
        }
        let fine = [
            (1, 2),
            (2, 2),
            (4, 4),
            (8, 8),
            (14, 14),
            (16, 16),
            (26, 26),
            (32, 32),
            (60, 60),
            (64, 64),
            (128, 128),
            (130, 130),
            (132, 132),
        ];
        for (asked, got) in fine {
            assert_eq!(granted(asked, H200, SplitMode::Fine), Some(got), "fine split of {asked}");
        }
    }

    #[test]
    fn small_and_edge_counts() {
        // Below the minimum partition: rounded up to it (co-scheduled) or to a pair (fine).
        assert_eq!(plan_split(4, H200, SplitPreference::Coscheduled).unwrap().expected, 8);
        let four = plan_split(4, H200, SplitPreference::Exact).unwrap();
        assert_eq!(four, SmPlan { requested: 4, expected: 4, mode: SplitMode::Fine });
        // Neither split gives exactly 1 SM: the co-scheduled rounding wins.
        assert_eq!(plan_split(1, H200, SplitPreference::Exact).unwrap().expected, 8);
        // 130 of 132: the co-scheduled split takes every SM, so no split at all ...
        let p = plan_split(130, H200, SplitPreference::Coscheduled).unwrap();
        assert_eq!((p.expected, p.mode), (132, SplitMode::WholeDevice));
        // ... unless the exact count is asked for.
        let p = plan_split(130, H200, SplitPreference::Exact).unwrap();
        assert_eq!((p.expected, p.mode), (130, SplitMode::Fine));
        // 131: 136 (co-scheduled) and 132 (fine) are the whole device.
        let p = plan_split(131, H200, SplitPreference::Exact).unwrap();
        assert_eq!((p.expected, p.mode), (132, SplitMode::WholeDevice));
        // More than the device: every SM.
        assert_eq!(plan_split(200, H200, SplitPreference::Exact).unwrap().mode, SplitMode::WholeDevice);
        assert_eq!(plan_split(0, H200, SplitPreference::Exact), Err(SmSplitError::ZeroSms));
        let none = SmShape { sm_count: 0, min_partition: 8, alignment: 8 };
        assert_eq!(plan_split(8, none, SplitPreference::Exact), Err(SmSplitError::NoDeviceSms));
        assert_eq!(granted(9, none, SplitMode::Coscheduled), None);
        // A driver reporting alignment 0: treated as 1.
        let odd = SmShape { sm_count: 12, min_partition: 0, alignment: 0 };
        assert_eq!(plan_split(9, odd, SplitPreference::Coscheduled).unwrap().expected, 9);
    }

    #[test]
    fn flags() {
        assert_eq!(plan_split(60, H200, SplitPreference::Exact).unwrap().split_flags(), 1);
        assert_eq!(plan_split(60, H200, SplitPreference::Coscheduled).unwrap().split_flags(), 0);
        assert_eq!(plan_split(16, H200, SplitPreference::Exact).unwrap().split_flags(), 0);
    }

    #[test]
    fn a100_profiles() {
        // Compute capability 8.x guideline: at least 4 SMs in multiples of 2, so every A100
        // profile (14/28/42/56 SMs) is met exactly by a co-scheduled split; 98 of 108 too.
        let a100 = SmShape { sm_count: 108, min_partition: 4, alignment: 2 };
        for p in GpuModel::A100_40GB.profiles() {
            let plan = plan_split(p.sms, a100, SplitPreference::Coscheduled).unwrap();
            assert_eq!((plan.expected, plan.mode), (p.sms, SplitMode::Coscheduled), "{}", p.name);
        }
    }
}
