//! Rewriting a fatbin to keep only what one GPU runs: in every container, the entries of the
//! kind and architecture [`select`] picks for the device (all of them when several cubins share
//! that architecture). The recorder stores code images this way by default, so a trace carries
//! the SASS the recording GPU ran instead of every architecture of a library.

use crate::container::{containers, CONTAINER_HEADER};
use crate::entry::Entry;
use crate::error::{Error, Part, Result};
use crate::select::select;

/// The fatbin `bytes` (containers back to back) reduced to the entries a GPU of SM `device_sm`
/// runs. Containers without such an entry are dropped; an error when no container keeps any.
pub fn retain_for_sm(bytes: &[u8], device_sm: u32) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for c in containers(bytes, 0) {
        let c = c?;
        let spans = c.entry_spans()?;
        let entries: Vec<Entry<'_>> = spans.iter().map(|(e, _)| e.clone()).collect();
        let Ok(choice) = select(&entries, device_sm) else { continue };
        let Some(chosen) = entries.get(choice.index) else { continue };
        let header = c.header_size();
        let start = out.len();
        out.extend_from_slice(&c.bytes[..header]);
        for (e, span) in &spans {
            if e.kind == chosen.kind && e.arch == chosen.arch {
                out.extend_from_slice(&c.bytes[span.clone()]);
            }
        }
        let fat_size = (out.len() - start - header) as u64;
        out[start + 8..start + 16].copy_from_slice(&fat_size.to_le_bytes());
    }
    if out.is_empty() {
        return Err(Error::Invalid {
            part: Part::Container,
            offset: 0,
            what: format!("no container holds code that sm_{device_sm} runs"),
        });
    }
    debug_assert!(out.len() >= CONTAINER_HEADER);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::all_entries;

    fn testdata(name: &str) -> Vec<u8> {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/bin").join(name);
        std::fs::read(p).unwrap()
    }

    /// Real multi-architecture fatbins shrink to the sm_90 code and still parse.
    #[test]
    fn keeps_only_the_device_code() {
        let mut shrunk = 0;
        for name in ["params.none.fatbin", "params.size.fatbin", "params.speed.fatbin", "many_params.fatbin"] {
            let bytes = testdata(name);
            let before = all_entries(&bytes, 0).unwrap();
            let kept = retain_for_sm(&bytes, 90).unwrap();
            let after = all_entries(&kept, 0).unwrap();
            assert!(!after.is_empty(), "{name}");
            let chosen = &after[0];
            assert!(after.iter().all(|e| e.kind == chosen.kind && e.arch == chosen.arch), "{name}: {after:?}");
            assert!(chosen.arch.sass_runs_on(90) || chosen.arch.ptx_runs_on(90), "{name}");
            if after.len() < before.len() {
                shrunk += 1;
                assert!(kept.len() < bytes.len(), "{name}");
            }
        }
        assert!(shrunk > 0, "no test fatbin had code for other GPUs");
    }

    #[test]
    fn refuses_when_nothing_runs() {
        let kept = retain_for_sm(&testdata("params.none.fatbin"), 90).unwrap();
        assert!(retain_for_sm(&kept, 52).is_err());
    }
}
