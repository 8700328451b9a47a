//! Code images loaded before a session asks for them (issue 20, warm executors): a server's
//! executor waiting in the pool loads, on background threads, the code images recent sessions
//! loaded (their content hashes are kept in the cache's disk directory, `warm-images`; the
//! bytes come from the cache). When the session's record loads an image with the same content
//! and kind, it takes the loaded handle instead of loading it again: PyTorch's cuDNN and cuBLAS
//! images cost a session 150–260 ms of `cuLibraryLoadData` on an H100 otherwise.
//!
//! An image loaded ahead is a fresh load of the same bytes with no options, as the replay loads
//! every image; one the session does not ask for stays unused in its own process. A session
//! finds only what its own records name by content, so no session sees another's code.

use std::collections::HashMap;
use std::path::Path;

use gpuless_traces::{Hash128, Value};

use super::args::Call;
use super::preload::{Preloaded, Preloads};
use super::Device;

/// Images remembered for the next executors, most recent first.
const KEPT: usize = 48;
/// Threads loading ahead.
const THREADS: usize = 4;
/// The file of remembered images in the cache's disk directory.
const FILE: &str = "warm-images";

/// The warm images of a session: loads started before it, and what it loaded itself.
#[derive(Default)]
pub struct WarmImages {
    loads: Preloads,
    keys: HashMap<u64, (Hash128, bool)>,
    /// Images the session's records loaded (content, whether a library), in order.
    pub loaded: Vec<(Hash128, bool)>,
    /// Of those, how many were taken from loads made ahead.
    pub taken: usize,
}

/// Whether `name` loads an in-memory image as a library (`Some(true)`) or a module.
fn kind(name: &str) -> Option<bool> {
    match name {
        "cuModuleLoadData" | "cuModuleLoadDataEx" | "cuModuleLoadFatBinary" => Some(false),
        "cuLibraryLoadData" => Some(true),
        _ => None,
    }
}

fn key(h: &Hash128, library: bool) -> u64 {
    (h.0 as u64) ^ ((h.0 >> 64) as u64).rotate_left(1) ^ u64::from(library)
}

impl WarmImages {
    /// Starts loading the images `get` returns for the content hashes kept in `dir` (the
    /// cache's disk directory) on `device`; returns at once. `GPULESS_WARM_IMAGES=off` in the
    /// server's environment turns it off.
    pub fn start(
        device: Device,
        dir: &Path,
        get: impl Fn(&Hash128) -> Option<gpuless_traces::BlobBytes>,
    ) -> WarmImages {
        if std::env::var("GPULESS_WARM_IMAGES").is_ok_and(|v| v == "off") {
            return WarmImages::default();
        }
        let mut keys = HashMap::new();
        let jobs: Vec<_> = remembered(dir)
            .into_iter()
            .filter_map(|(h, library)| {
                let bytes = get(&h)?;
                let k = key(&h, library);
                keys.insert(k, (h, library));
                Some((k, library, bytes))
            })
            .collect();
        WarmImages { loads: Preloads::start_keyed(device, jobs, THREADS), keys, loaded: Vec::new(), taken: 0 }
    }

    /// Unloads the images loaded ahead that the session did not take (an executor kept for
    /// another session).
    pub fn unload_untaken(&mut self) {
        self.loads.unload_untaken();
    }

    /// Keeps for the session only the images loaded ahead whose content `may` take: the others
    /// stay loaded, unused, and go with [`Self::unload_untaken`] or the process (a session on
    /// a server with tenants is not handed an image its tenant never sent).
    pub fn withhold(&mut self, may: impl Fn(&Hash128) -> bool) {
        self.keys.retain(|_, (h, _)| may(h));
    }

    /// Loads started ahead and not taken.
    pub fn pending(&self) -> usize {
        self.loads.len()
    }

    /// For a record that loads an in-memory image: notes it, and hands back the same image
    /// loaded ahead (waiting for its load), if there is one.
    pub(crate) fn take_for(&mut self, c: &Call<'_>) -> Option<Preloaded> {
        let library = kind(c.f.name)?;
        let h = c.rec.args.iter().find_map(|v| match v {
            Value::Blob(b) => Some(b.hash),
            _ => None,
        })?;
        self.loaded.push((h, library));
        let k = key(&h, library);
        if self.keys.get(&k) != Some(&(h, library)) || !self.loads.has(k) {
            return None;
        }
        let p = self.loads.take(k)?;
        self.taken += 1;
        Some(p)
    }

    /// The images this session loaded: (content hash, a library rather than a module).
    pub fn loaded(&self) -> &[(Hash128, bool)] {
        &self.loaded
    }

    /// Remembers the images this session loaded for the next executors ([`remember`]).
    pub fn remember(&self, dir: &Path) {
        remember(dir, &self.loaded);
    }
}

/// Remembers the images `loaded` (content hash, a library) in the cache directory `dir` for the
/// next executors (most recent first, at most 48), written whole and renamed. The server does
/// it for its executors, which cannot write the cache (`Control::Images`).
pub fn remember(dir: &Path, loaded: &[(Hash128, bool)]) {
    if loaded.is_empty() {
        return;
    }
    let mut list: Vec<(Hash128, bool)> = Vec::new();
    for e in loaded.iter().copied().chain(remembered(dir)) {
        if !list.contains(&e) && list.len() < KEPT {
            list.push(e);
        }
    }
    let text: String = list.iter().map(|(h, l)| format!("{h} {}\n", if *l { "library" } else { "module" })).collect();
    let tmp = dir.join(format!("{FILE}.tmp{}", std::process::id()));
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, dir.join(FILE));
    }
}

/// The images kept in `dir`: one `HASH library|module` line each; lines that do not parse are
/// left out.
fn remembered(dir: &Path) -> Vec<(Hash128, bool)> {
    let Ok(text) = std::fs::read_to_string(dir.join(FILE)) else { return Vec::new() };
    text.lines()
        .filter_map(|l| {
            let (h, k) = l.split_once(' ')?;
            let h = u128::from_str_radix(h, 16).ok().map(Hash128)?;
            match k {
                "library" => Some((h, true)),
                "module" => Some((h, false)),
                _ => None,
            }
        })
        .take(KEPT)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembered_images_are_the_latest_first_without_repeats_and_bad_lines_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        assert!(remembered(dir.path()).is_empty());
        let w = WarmImages {
            loaded: vec![(Hash128(1), true), (Hash128(2), false), (Hash128(1), true)],
            ..Default::default()
        };
        w.remember(dir.path());
        assert_eq!(remembered(dir.path()), [(Hash128(1), true), (Hash128(2), false)]);
        let w = WarmImages { loaded: vec![(Hash128(3), true), (Hash128(2), false)], ..Default::default() };
        w.remember(dir.path());
        assert_eq!(remembered(dir.path()), [(Hash128(3), true), (Hash128(2), false), (Hash128(1), true)]);
        std::fs::write(dir.path().join(FILE), "zz library\n00000000000000000000000000000004 module\n5 other\n")
            .unwrap();
        assert_eq!(remembered(dir.path()), [(Hash128(4), false)]);
    }
}
