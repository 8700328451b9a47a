//! Resolution of a `--mig` argument (profile name or id) against the profiles a GPU offers.

use super::profiles::Profile;

/// Why a `--mig` argument does not name a profile of this GPU.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// The GPU offers no MIG profiles at all.
    #[error("this GPU offers no MIG profiles (not MIG-capable)")]
    NoProfiles,
    /// A numeric id that is not one of this GPU's profile ids.
    #[error("MIG profile id {id} is not offered by this GPU; it offers: {offered}")]
    UnknownId {
        /// The id asked for.
        id: u32,
        /// This GPU's profiles, `name (id N)`, comma-separated.
        offered: String,
    },
    /// A name of the `<n>g.<m>gb` form that this GPU does not offer (typically a name of
    /// another GPU model, such as `3g.20gb` on an H200).
    #[error(
        "MIG profile `{requested}` is not offered by this GPU (names are per GPU model); it offers: {offered}{}",
        same_slices_hint(requested, same_slices)
    )]
    OtherModel {
        /// The name asked for.
        requested: String,
        /// This GPU's profiles, `name (id N)`, comma-separated.
        offered: String,
        /// This GPU's profiles with the same compute-slice count, best match first.
        same_slices: Vec<String>,
    },
    /// Neither an id nor a profile name.
    #[error("`{requested}` is not a MIG profile name (like `3g.71gb`) or id; this GPU offers: {offered}")]
    Malformed {
        /// The argument.
        requested: String,
        /// This GPU's profiles, `name (id N)`, comma-separated.
        offered: String,
    },
}

fn same_slices_hint(requested: &str, same: &[String]) -> String {
    let slices = super::profiles::Profile::slices_from_name(requested).unwrap_or(0);
    match same {
        [] => format!("; none has {slices} compute slice(s)"),
        [one] => format!("; the profile with the same slice count ({slices}g) here is `{one}`"),
        [first, rest @ ..] => format!(
            "; the profile with the same slice count ({slices}g) here is `{first}` (also: {})",
            rest.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
        ),
    }
}

fn offered(profiles: &[Profile]) -> String {
    profiles.iter().map(|p| format!("{} (id {})", p.name, p.id)).collect::<Vec<_>>().join(", ")
}

/// Normalizes a profile name: trimmed, lower case, without a leading `MIG ` (as NVML and
/// `nvidia-smi` print names).
fn normalize(name: &str) -> String {
    let t = name.trim();
    let t = match (t.get(..4), t.get(4..)) {
        (Some(head), Some(rest)) if head.eq_ignore_ascii_case("mig ") => rest,
        _ => t,
    };
    t.trim().to_ascii_lowercase()
}

/// Resolves `name_or_id` (`3g.71gb`, `MIG 3g.71gb`, or a profile id such as `9`) to one of
/// `gpu_profiles`, the profiles this GPU offers (as reported by NVML, or a built-in table).
///
/// A name of the right form that this GPU does not offer gives [`ResolveError::OtherModel`],
/// whose message lists this GPU's profiles and the one(s) with the same compute-slice count:
/// `3g.20gb` on an H200 suggests `3g.71gb`.
pub fn resolve_profile<'a>(name_or_id: &str, gpu_profiles: &'a [Profile]) -> Result<&'a Profile, ResolveError> {
    if gpu_profiles.is_empty() {
        return Err(ResolveError::NoProfiles);
    }
    let wanted = normalize(name_or_id);
    if !wanted.is_empty() && wanted.bytes().all(|b| b.is_ascii_digit()) {
        return match wanted.parse::<u32>() {
            Ok(id) => gpu_profiles
                .iter()
                .find(|p| p.id == id)
                .ok_or_else(|| ResolveError::UnknownId { id, offered: offered(gpu_profiles) }),
            Err(_) => Err(ResolveError::Malformed {
                requested: name_or_id.trim().to_string(),
                offered: offered(gpu_profiles),
            }),
        };
    }
    if let Some(p) = gpu_profiles.iter().find(|p| normalize(&p.name) == wanted) {
        return Ok(p);
    }
    let Some(slices) = Profile::slices_from_name(&wanted).filter(|_| is_profile_name(&wanted)) else {
        return Err(ResolveError::Malformed {
            requested: name_or_id.trim().to_string(),
            offered: offered(gpu_profiles),
        });
    };
    let wants_me = wanted.ends_with("+me");
    let mut same: Vec<&Profile> = gpu_profiles.iter().filter(|p| p.compute_slices == slices).collect();
    // Best match first: same media-extension flag, then fewest memory slices (the plain
    // profile of that slice count), then id.
    same.sort_by_key(|p| (p.is_media_extended() != wants_me, p.memory_slices, p.id));
    Err(ResolveError::OtherModel {
        requested: name_or_id.trim().to_string(),
        offered: offered(gpu_profiles),
        same_slices: same.iter().map(|p| p.name.clone()).collect(),
    })
}

/// Whether `s` (normalized) has the form `<n>g.<m>gb` with an optional `+me` or other `+x`
/// suffix.
fn is_profile_name(s: &str) -> bool {
    let base = s.split_once('+').map_or(s, |(b, _)| b);
    let Some((g, mem)) = base.split_once("g.") else { return false };
    let Some(gb) = mem.strip_suffix("gb") else { return false };
    !g.is_empty() && g.bytes().all(|b| b.is_ascii_digit()) && !gb.is_empty() && gb.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::profiles::GpuModel;

    #[test]
    fn names_and_ids() {
        let h200 = GpuModel::H200.profiles();
        assert_eq!(resolve_profile("3g.71gb", &h200).map(|p| p.id), Ok(9));
        assert_eq!(resolve_profile("MIG 3g.71gb", &h200).map(|p| p.id), Ok(9));
        assert_eq!(resolve_profile(" 3G.71GB ", &h200).map(|p| p.id), Ok(9));
        assert_eq!(resolve_profile("9", &h200).map(|p| p.name.as_str()), Ok("3g.71gb"));
        assert_eq!(resolve_profile("0", &h200).map(|p| p.name.as_str()), Ok("7g.141gb"));
        assert_eq!(resolve_profile("1g.18gb+me", &h200).map(|p| p.id), Ok(20));
        let a100 = GpuModel::A100_40GB.profiles();
        assert_eq!(resolve_profile("3g.20gb", &a100).map(|p| p.id), Ok(9));
        assert_eq!(resolve_profile("1g.10gb", &a100).map(|p| p.id), Ok(15));
    }

    #[test]
    fn name_of_another_model() {
        let h200 = GpuModel::H200.profiles();
        let err = resolve_profile("3g.20gb", &h200).unwrap_err();
        assert_eq!(
            err,
            ResolveError::OtherModel {
                requested: "3g.20gb".into(),
                offered: offered(&h200),
                same_slices: vec!["3g.71gb".into()],
            }
        );
        let msg = err.to_string();
        assert!(msg.contains("`3g.20gb` is not offered by this GPU"), "{msg}");
        assert!(msg.contains("3g.71gb (id 9)") && msg.contains("7g.141gb (id 0)"), "{msg}");
        assert!(msg.contains("the profile with the same slice count (3g) here is `3g.71gb`"), "{msg}");

        // 1g from an A100: the plain 1g first, the others as alternatives.
        let msg = resolve_profile("1g.5gb", &h200).unwrap_err().to_string();
        assert!(msg.contains("here is `1g.18gb` (also: `1g.35gb`, `1g.18gb+me`)"), "{msg}");
        let msg = resolve_profile("1g.10gb+me", &h200).unwrap_err().to_string();
        assert!(msg.contains("here is `1g.18gb+me`"), "{msg}");
        // No profile with that slice count.
        let msg = resolve_profile("6g.90gb", &h200).unwrap_err().to_string();
        assert!(msg.contains("none has 6 compute slice(s)"), "{msg}");
    }

    #[test]
    fn bad_ids_and_garbage() {
        let h200 = GpuModel::H200.profiles();
        assert!(matches!(resolve_profile("3", &h200), Err(ResolveError::UnknownId { id: 3, .. })));
        assert!(matches!(resolve_profile("99999999999999", &h200), Err(ResolveError::Malformed { .. })));
        for bad in ["", "big", "3g", "3g.", "g.20gb", "3g.20", "3g.xgb", "MIG "] {
            assert!(matches!(resolve_profile(bad, &h200), Err(ResolveError::Malformed { .. })), "{bad:?}");
        }
        assert_eq!(resolve_profile("3g.71gb", &[]), Err(ResolveError::NoProfiles));
    }
}
