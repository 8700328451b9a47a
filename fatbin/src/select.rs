//! Choosing the entry of a fatbin that a given GPU would run.

use crate::arch::Variant;
use crate::entry::{Entry, EntryKind};
use crate::error::{Error, Result};

/// The entry chosen for a device, and whether the driver must JIT it from PTX.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    /// Index into the slice handed to [`select`].
    pub index: usize,
    /// True when the chosen entry is PTX.
    pub jit: bool,
}

/// Picks the entry a GPU of SM `device_sm` runs: SASS for exactly that SM (arch-specific `a`
/// first, then family `f`, then plain), else the newest compatible older SASS of the same
/// major, else the newest PTX it can JIT.
pub fn select(entries: &[Entry<'_>], device_sm: u32) -> Result<Choice> {
    let rank = |variant: Variant| match variant {
        Variant::Specific => 2,
        Variant::Family => 1,
        Variant::Plain => 0,
    };
    let sass = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind == EntryKind::Elf && e.arch.sass_runs_on(device_sm))
        .max_by_key(|(_, e)| (e.arch.sm, rank(e.arch.variant)));
    if let Some((index, _)) = sass {
        return Ok(Choice { index, jit: false });
    }
    let ptx = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind == EntryKind::Ptx && e.arch.ptx_runs_on(device_sm))
        .max_by_key(|(_, e)| (e.arch.sm, rank(e.arch.variant), e.version));
    if let Some((index, _)) = ptx {
        return Ok(Choice { index, jit: true });
    }
    let mut names: Vec<String> = entries.iter().map(|e| e.arch_name()).collect();
    names.sort();
    names.dedup();
    Err(Error::NoCompatibleEntry {
        sm: device_sm,
        available: if names.is_empty() { "no entries".into() } else { names.join(", ") },
    })
}
