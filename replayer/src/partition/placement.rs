//! Pure MIG placement logic: which placements of a profile are legal next to the instances that
//! exist, and which one to take so that the largest profiles stay placeable.
//!
//! Rules modelled (those of the NVIDIA MIG user guide for GA100/GH100, with placements in memory
//! slices as NVML reports them):
//! - an instance's start slice must be one of its profile's placements;
//! - instances may not share a memory slice;
//! - at most `max_instances` instances of a profile (this is what limits `+me` profiles to one).
//!
//! Not modelled: engine constraints beyond the per-profile count (decoders, JPEG, OFA are tied
//! to `+me` and 7g profiles, which the two rules above already serialize on these GPUs), and
//! compute-instance placement inside a GPU instance. The driver remains the final judge.

use super::profiles::{Placement, Profile};
use serde::Serialize;

/// An existing GPU instance: its profile id and start slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Instance {
    /// NVML profile id.
    pub profile_id: u32,
    /// First memory slice.
    pub start: u32,
}

/// Why a placement question has no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// The requested profile id is not in the GPU's table.
    #[error("profile id {0} is not offered by this GPU")]
    UnknownProfile(u32),
    /// An existing instance names a profile id the table does not have.
    #[error("existing instance at slice {start} has profile id {profile_id}, which this GPU does not offer")]
    UnknownExistingProfile {
        /// Its profile id.
        profile_id: u32,
        /// Its start slice.
        start: u32,
    },
    /// An existing instance starts where its profile cannot start.
    #[error("existing instance of profile {name} (id {profile_id}) starts at slice {start}, not a legal placement")]
    IllegalExisting {
        /// Profile name.
        name: String,
        /// Profile id.
        profile_id: u32,
        /// Start slice.
        start: u32,
    },
    /// Two existing instances share memory slices.
    #[error("existing instances overlap: {first} and {second}")]
    OverlappingExisting {
        /// One placement.
        first: Placement,
        /// The other.
        second: Placement,
    },
    /// The profile already has its maximum number of instances.
    #[error("profile {name} already has its maximum of {max} instance(s)")]
    MaxInstances {
        /// Profile name.
        name: String,
        /// The maximum.
        max: u32,
    },
    /// Every placement of the profile overlaps an existing instance.
    #[error("no free placement for profile {name}: every start slice {starts:?} overlaps an existing instance")]
    NoFreePlacement {
        /// Profile name.
        name: String,
        /// The profile's start slices.
        starts: Vec<u32>,
    },
}

/// A chosen placement and what stays possible after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Choice {
    /// The placement to create.
    pub placement: Placement,
    /// For each profile, biggest first: `(profile id, how many more instances of it would
    /// still fit)` after this placement. This is the score candidates are compared by.
    pub remaining: Vec<(u32, u32)>,
}

fn find(profiles: &[Profile], id: u32) -> Option<&Profile> {
    profiles.iter().find(|p| p.id == id)
}

/// Resolves existing instances to placements, checking that they are consistent.
fn occupied(profiles: &[Profile], existing: &[Instance]) -> Result<Vec<(u32, Placement)>, PlacementError> {
    let mut out: Vec<(u32, Placement)> = Vec::with_capacity(existing.len());
    for inst in existing {
        let profile = find(profiles, inst.profile_id)
            .ok_or(PlacementError::UnknownExistingProfile { profile_id: inst.profile_id, start: inst.start })?;
        let placement = profile.placements.iter().find(|p| p.start == inst.start).copied().ok_or_else(|| {
            PlacementError::IllegalExisting { name: profile.name.clone(), profile_id: profile.id, start: inst.start }
        })?;
        if let Some((_, other)) = out.iter().find(|(_, o)| o.overlaps(&placement)) {
            return Err(PlacementError::OverlappingExisting { first: *other, second: placement });
        }
        out.push((profile.id, placement));
    }
    Ok(out)
}

/// Placements of `profile` that are free next to `used`, ignoring the instance limit.
fn free_placements(profile: &Profile, used: &[(u32, Placement)]) -> Vec<Placement> {
    profile.placements.iter().filter(|p| !used.iter().any(|(_, u)| u.overlaps(p))).copied().collect()
}

/// How many more instances of `profile` fit next to `used`. Placements of one profile all have
/// the same size, so taking them greedily by start is optimal (interval scheduling).
fn capacity(profile: &Profile, used: &[(u32, Placement)]) -> u32 {
    let existing = used.iter().filter(|(id, _)| *id == profile.id).count();
    let allowed = (profile.max_instances as usize).saturating_sub(existing);
    let mut free = free_placements(profile, used);
    free.sort();
    let mut taken: Vec<Placement> = Vec::new();
    for p in free {
        if taken.len() >= allowed {
            break;
        }
        if !taken.iter().any(|t| t.overlaps(&p)) {
            taken.push(p);
        }
    }
    // At most 8 placements: the cast cannot truncate.
    taken.len() as u32
}

/// The legal placements of profile `profile_id` given the `existing` instances, by start slice.
///
/// Errors if the profile or an existing instance is not in `profiles`, if the existing
/// instances are inconsistent, or if the profile is at its instance limit. An empty vector
/// means every placement overlaps an existing instance.
pub fn legal_placements(
    profiles: &[Profile],
    existing: &[Instance],
    profile_id: u32,
) -> Result<Vec<Placement>, PlacementError> {
    let profile = find(profiles, profile_id).ok_or(PlacementError::UnknownProfile(profile_id))?;
    let used = occupied(profiles, existing)?;
    let count = used.iter().filter(|(id, _)| *id == profile_id).count();
    if count >= profile.max_instances as usize {
        return Err(PlacementError::MaxInstances { name: profile.name.clone(), max: profile.max_instances });
    }
    let mut free = free_placements(profile, &used);
    free.sort();
    Ok(free)
}

/// For each profile, biggest first, how many more instances fit next to `existing`.
///
/// Errors as [`legal_placements`] does for inconsistent existing instances.
pub fn remaining_capacity(profiles: &[Profile], existing: &[Instance]) -> Result<Vec<(u32, u32)>, PlacementError> {
    let used = occupied(profiles, existing)?;
    Ok(score(profiles, &used))
}

fn score(profiles: &[Profile], used: &[(u32, Placement)]) -> Vec<(u32, u32)> {
    biggest_first(profiles).iter().map(|p| (p.id, capacity(p, used))).collect()
}

/// Chooses the legal placement of `profile_id` that leaves the most room: candidates are
/// compared by how many more instances of each profile would still fit afterwards, biggest
/// profile first (lexicographically), and ties go to the lowest start slice.
///
/// Errors as [`legal_placements`], and with [`PlacementError::NoFreePlacement`] when nothing fits.
pub fn choose_placement(
    profiles: &[Profile],
    existing: &[Instance],
    profile_id: u32,
) -> Result<Choice, PlacementError> {
    let candidates = legal_placements(profiles, existing, profile_id)?;
    let used = occupied(profiles, existing)?;
    let mut best: Option<Choice> = None;
    for placement in candidates {
        let mut after = used.clone();
        after.push((profile_id, placement));
        let remaining = score(profiles, &after);
        let better = match &best {
            None => true,
            // Lexicographic on counts in biggest-first order; candidates come by ascending
            // start, so keeping the first of equals prefers the lowest start.
            Some(b) => counts(&remaining) > counts(&b.remaining),
        };
        if better {
            best = Some(Choice { placement, remaining });
        }
    }
    best.ok_or_else(|| {
        let (name, starts) = find(profiles, profile_id)
            .map(|p| (p.name.clone(), p.placements.iter().map(|pl| pl.start).collect()))
            .unwrap_or_default();
        PlacementError::NoFreePlacement { name, starts }
    })
}

fn counts(remaining: &[(u32, u32)]) -> Vec<u32> {
    remaining.iter().map(|(_, n)| *n).collect()
}

/// Profiles sorted biggest first (the order [`Choice::remaining`] uses).
pub fn biggest_first(profiles: &[Profile]) -> Vec<&Profile> {
    let mut order: Vec<&Profile> = profiles.iter().collect();
    order.sort_by_key(|p| p.size_key());
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::profiles::GpuModel;

    const ID_1G: u32 = 19;
    const ID_1G_ME: u32 = 20;
    const ID_1G_2M: u32 = 15;
    const ID_2G: u32 = 14;
    const ID_3G: u32 = 9;
    const ID_4G: u32 = 5;
    const ID_7G: u32 = 0;

    fn inst(profile_id: u32, start: u32) -> Instance {
        Instance { profile_id, start }
    }

    fn starts(v: &[Placement]) -> Vec<u32> {
        v.iter().map(|p| p.start).collect()
    }

    /// Places `ids` one after the other with `choose_placement`, returning the instances.
    fn pack(profiles: &[Profile], ids: &[u32]) -> Result<Vec<Instance>, PlacementError> {
        let mut existing = Vec::new();
        for &id in ids {
            let choice = choose_placement(profiles, &existing, id)?;
            existing.push(inst(id, choice.placement.start));
        }
        Ok(existing)
    }

    #[test]
    fn empty_gpu_legal_placements() {
        for model in GpuModel::ALL {
            let p = model.profiles();
            assert_eq!(starts(&legal_placements(&p, &[], ID_1G).unwrap()), vec![0, 1, 2, 3, 4, 5, 6]);
            assert_eq!(starts(&legal_placements(&p, &[], ID_1G_2M).unwrap()), vec![0, 2, 4, 6]);
            assert_eq!(starts(&legal_placements(&p, &[], ID_2G).unwrap()), vec![0, 2, 4]);
            assert_eq!(starts(&legal_placements(&p, &[], ID_3G).unwrap()), vec![0, 4]);
            assert_eq!(starts(&legal_placements(&p, &[], ID_4G).unwrap()), vec![0]);
            assert_eq!(starts(&legal_placements(&p, &[], ID_7G).unwrap()), vec![0]);
        }
    }

    #[test]
    fn seven_1g_fill_every_model() {
        for model in GpuModel::ALL {
            let p = model.profiles();
            let packed = pack(&p, &[ID_1G; 7]).unwrap();
            let mut s: Vec<u32> = packed.iter().map(|i| i.start).collect();
            s.sort();
            assert_eq!(s, vec![0, 1, 2, 3, 4, 5, 6], "{model:?}");
            // An eighth 1g: at the profile limit.
            assert!(matches!(choose_placement(&p, &packed, ID_1G), Err(PlacementError::MaxInstances { .. })));
            // Nothing else fits either.
            for id in [ID_1G_ME, ID_1G_2M, ID_2G, ID_3G, ID_4G, ID_7G] {
                let r = choose_placement(&p, &packed, id);
                assert!(matches!(r, Err(PlacementError::NoFreePlacement { .. })), "{model:?} {id}: {r:?}");
            }
            assert!(remaining_capacity(&p, &packed).unwrap().iter().all(|(_, n)| *n == 0));
        }
    }

    #[test]
    fn two_3g_fill_the_gpu() {
        for model in GpuModel::ALL {
            let p = model.profiles();
            let packed = pack(&p, &[ID_3G, ID_3G]).unwrap();
            // The first goes to 4, which keeps the 4g (start 0 only) placeable.
            assert_eq!(packed, vec![inst(ID_3G, 4), inst(ID_3G, 0)]);
            assert!(matches!(choose_placement(&p, &packed, ID_3G), Err(PlacementError::MaxInstances { .. })));
            assert!(matches!(choose_placement(&p, &packed, ID_1G), Err(PlacementError::NoFreePlacement { .. })));
        }
    }

    #[test]
    fn h200_4g_then_3g() {
        let p = GpuModel::H200.profiles();
        let packed = pack(&p, &[ID_4G, ID_3G]).unwrap();
        assert_eq!(packed, vec![inst(ID_4G, 0), inst(ID_3G, 4)]);
        // 3g first: it must go to 4 so that the 4g (start 0 only) still fits.
        let packed = pack(&p, &[ID_3G, ID_4G]).unwrap();
        assert_eq!(packed, vec![inst(ID_3G, 4), inst(ID_4G, 0)]);
        assert!(matches!(choose_placement(&p, &packed, ID_1G), Err(PlacementError::NoFreePlacement { .. })));
    }

    #[test]
    fn first_1g_keeps_3g_and_4g_open() {
        for model in GpuModel::ALL {
            let p = model.profiles();
            let c = choose_placement(&p, &[], ID_1G).unwrap();
            // Slice 6 is the only 1g slot that blocks neither the 4g at 0, nor a 2g.
            assert_eq!(c.placement, Placement { start: 6, size: 1 }, "{model:?}");
            let after = [inst(ID_1G, 6)];
            assert_eq!(starts(&legal_placements(&p, &after, ID_4G).unwrap()), vec![0]);
            assert_eq!(starts(&legal_placements(&p, &after, ID_3G).unwrap()), vec![0]);
            assert_eq!(starts(&legal_placements(&p, &after, ID_2G).unwrap()), vec![0, 2, 4]);
        }
    }

    #[test]
    fn one_g_next_to_a_4g_keeps_a_2g_slot() {
        let p = GpuModel::A100_40GB.profiles();
        let c = choose_placement(&p, &[inst(ID_4G, 0)], ID_1G).unwrap();
        assert_eq!(c.placement.start, 6);
        // The 3g at 4 is gone, but a 2g at 4 remains.
        let after = [inst(ID_4G, 0), inst(ID_1G, 6)];
        assert_eq!(starts(&legal_placements(&p, &after, ID_2G).unwrap()), vec![4]);
        assert!(legal_placements(&p, &after, ID_3G).unwrap().is_empty());
    }

    #[test]
    fn one_g_and_2g_next_to_a_3g() {
        let p = GpuModel::H100_80GB.profiles();
        // A 3g at 0 exists: every free 1g slot (4, 5, 6) lies inside the other 3g's placement,
        // so that one is lost anyway; slot 6 keeps the 2g at 4.
        let c = choose_placement(&p, &[inst(ID_3G, 0)], ID_1G).unwrap();
        assert_eq!(c.placement.start, 6);
        // With nothing placed, a 2g goes where it leaves the 4g and a 3g placeable.
        let c = choose_placement(&p, &[], ID_2G).unwrap();
        assert_eq!(c.placement.start, 4);
        let after = [inst(ID_2G, 4)];
        assert_eq!(starts(&legal_placements(&p, &after, ID_4G).unwrap()), vec![0]);
    }

    #[test]
    fn mixed_full_packing_h200() {
        // 2g + 2g + 2g + 1g = 7 compute slices.
        let p = GpuModel::H200.profiles();
        let packed = pack(&p, &[ID_2G, ID_2G, ID_2G, ID_1G]).unwrap();
        let mut s: Vec<u32> = packed.iter().map(|i| i.start).collect();
        s.sort();
        assert_eq!(s, vec![0, 2, 4, 6]);
        // 4g + 2g + 1g.
        let packed = pack(&p, &[ID_4G, ID_2G, ID_1G]).unwrap();
        assert_eq!(packed[0], inst(ID_4G, 0));
        assert_eq!(packed[1], inst(ID_2G, 4));
        assert!(remaining_capacity(&p, &packed).unwrap().iter().all(|(_, n)| *n == 0));
    }

    #[test]
    fn media_extension_profile_is_limited_to_one() {
        let p = GpuModel::A100_80GB.profiles();
        let packed = pack(&p, &[ID_1G_ME]).unwrap();
        assert!(matches!(choose_placement(&p, &packed, ID_1G_ME), Err(PlacementError::MaxInstances { max: 1, .. })));
        // Plain 1g profiles still fit next to it.
        assert_eq!(legal_placements(&p, &packed, ID_1G).unwrap().len(), 6);
    }

    #[test]
    fn impossible_requests() {
        let p = GpuModel::H200.profiles();
        // Unknown profile id.
        assert_eq!(choose_placement(&p, &[], 42), Err(PlacementError::UnknownProfile(42)));
        // 7g next to anything.
        let r = choose_placement(&p, &[inst(ID_1G, 3)], ID_7G);
        assert!(matches!(r, Err(PlacementError::NoFreePlacement { ref starts, .. }) if starts == &vec![0]));
        // 4g when slice 0 is taken.
        assert!(matches!(choose_placement(&p, &[inst(ID_1G, 0)], ID_4G), Err(PlacementError::NoFreePlacement { .. })));
        // A second 7g.
        assert!(matches!(choose_placement(&p, &[inst(ID_7G, 0)], ID_7G), Err(PlacementError::MaxInstances { .. })));
        // Inconsistent existing instances.
        assert!(matches!(
            legal_placements(&p, &[inst(ID_3G, 2)], ID_1G),
            Err(PlacementError::IllegalExisting { start: 2, .. })
        ));
        assert!(matches!(
            legal_placements(&p, &[inst(ID_3G, 0), inst(ID_2G, 2)], ID_1G),
            Err(PlacementError::OverlappingExisting { .. })
        ));
        assert!(matches!(
            legal_placements(&p, &[inst(77, 0)], ID_1G),
            Err(PlacementError::UnknownExistingProfile { profile_id: 77, .. })
        ));
    }

    #[test]
    fn remaining_is_biggest_first() {
        let p = GpuModel::H200.profiles();
        let r = remaining_capacity(&p, &[]).unwrap();
        let ids: Vec<u32> = r.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, vec![ID_7G, ID_4G, ID_3G, ID_2G, ID_1G_2M, ID_1G, ID_1G_ME]);
        let n: Vec<u32> = r.iter().map(|(_, n)| *n).collect();
        assert_eq!(n, vec![1, 1, 2, 3, 4, 7, 1]);
    }
}
