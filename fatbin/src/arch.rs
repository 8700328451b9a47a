//! GPU architectures as fatbin entries name them: `sm_90`, `sm_90a`, `sm_100f`, `compute_90`.

use std::fmt;

/// Entry flag: arch-specific code (`sm_90a`), runs only on exactly that SM.
pub const FLAG_ARCH_SPECIFIC: u64 = 0x10_0000;
/// Entry flag: family-specific code (`sm_100f`), runs on the same major with an equal or higher minor.
pub const FLAG_FAMILY_SPECIFIC: u64 = 0x20_0000;

/// How far an entry's code is portable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Variant {
    /// Plain `sm_XY`: SASS runs on the same major with minor ≥ Y; PTX JITs to any SM ≥ XY.
    Plain,
    /// `sm_XYf`: family-specific, same major with minor ≥ Y.
    Family,
    /// `sm_XYa`: arch-specific, exactly SM XY.
    Specific,
}

/// An SM version with its variant, e.g. 90 + `Specific` for `sm_90a`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Arch {
    /// SM number as fatbins store it: 10 × major + minor (75, 80, 90, 100, 120...).
    pub sm: u32,
    /// Portability variant.
    pub variant: Variant,
}

impl Arch {
    /// Builds an arch from an entry's SM number and flags.
    pub fn from_entry(sm: u32, flags: u64) -> Arch {
        let variant = if flags & FLAG_ARCH_SPECIFIC != 0 {
            Variant::Specific
        } else if flags & FLAG_FAMILY_SPECIFIC != 0 {
            Variant::Family
        } else {
            Variant::Plain
        };
        Arch { sm, variant }
    }

    /// Major compute capability.
    pub fn major(&self) -> u32 {
        self.sm / 10
    }

    /// Minor compute capability.
    pub fn minor(&self) -> u32 {
        self.sm % 10
    }

    /// Suffix letter of the variant (`""`, `"a"` or `"f"`).
    pub fn suffix(&self) -> &'static str {
        match self.variant {
            Variant::Plain => "",
            Variant::Family => "f",
            Variant::Specific => "a",
        }
    }

    /// Whether SASS built for this arch runs on a GPU of SM `device_sm`.
    pub fn sass_runs_on(&self, device_sm: u32) -> bool {
        match self.variant {
            Variant::Specific => self.sm == device_sm,
            Variant::Plain | Variant::Family => self.major() == device_sm / 10 && self.minor() <= device_sm % 10,
        }
    }

    /// Whether PTX built for this arch can be JIT-compiled for a GPU of SM `device_sm`.
    pub fn ptx_runs_on(&self, device_sm: u32) -> bool {
        match self.variant {
            Variant::Specific => self.sm == device_sm,
            Variant::Family => self.major() == device_sm / 10 && self.minor() <= device_sm % 10,
            Variant::Plain => self.sm <= device_sm,
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}{}", self.sm, self.suffix())
    }
}

/// Parses `sm_90`, `sm_90a`, `sm_100f`, `compute_90`, `90` (case-insensitive) into an arch;
/// the returned bool says whether the name was a `compute_` (PTX) name.
pub fn parse_arch(name: &str) -> Option<(Arch, bool)> {
    let lower = name.trim().to_ascii_lowercase();
    let (rest, ptx) = if let Some(r) = lower.strip_prefix("sm_") {
        (r, false)
    } else if let Some(r) = lower.strip_prefix("compute_") {
        (r, true)
    } else {
        (lower.as_str(), false)
    };
    let (digits, variant) = match rest.as_bytes().last()? {
        b'a' => (&rest[..rest.len() - 1], Variant::Specific),
        b'f' => (&rest[..rest.len() - 1], Variant::Family),
        _ => (rest, Variant::Plain),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 4 {
        return None;
    }
    let sm = digits.parse().ok()?;
    Some((Arch { sm, variant }, ptx))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for n in ["sm_80", "sm_90", "sm_90a", "sm_100f", "sm_120"] {
            let (a, ptx) = parse_arch(n).unwrap();
            assert!(!ptx);
            assert_eq!(a.to_string(), n);
        }
        assert_eq!(parse_arch("compute_90").unwrap(), (Arch { sm: 90, variant: Variant::Plain }, true));
        assert!(parse_arch("sm_").is_none());
        assert!(parse_arch("sm_9x").is_none());
        assert!(parse_arch("").is_none());
    }

    #[test]
    fn compatibility_rules() {
        let plain86 = Arch { sm: 86, variant: Variant::Plain };
        assert!(plain86.sass_runs_on(89));
        assert!(!plain86.sass_runs_on(80));
        assert!(!plain86.sass_runs_on(90));
        let a90 = Arch { sm: 90, variant: Variant::Specific };
        assert!(a90.sass_runs_on(90) && !a90.ptx_runs_on(100));
        let f100 = Arch { sm: 100, variant: Variant::Family };
        assert!(f100.sass_runs_on(103) && !f100.sass_runs_on(120));
        let ptx80 = Arch { sm: 80, variant: Variant::Plain };
        assert!(ptx80.ptx_runs_on(90) && ptx80.ptx_runs_on(120) && !ptx80.ptx_runs_on(75));
    }
}
