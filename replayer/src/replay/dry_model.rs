//! The dry run's model of the replay's state (`Model`: live ranges, loaded code, handles, in
//! recorded handles and addresses), which `dryrun` and each executor module's `check_dry`
//! update and consult, and the check that a record's stored bytes are in the trace (`blob_ok`).

use std::collections::{BTreeMap, HashMap, HashSet};

use gpuless_analyzer::api::HandleKind;
use gpuless_traces::{Hash128, Value};

use super::LoadedTrace;

/// What the dry run knows of the replay's state, in recorded handles and addresses.
#[derive(Default)]
pub(crate) struct Model {
    /// Live allocations and module globals: base → size (recorded addresses).
    pub(super) ranges: BTreeMap<u64, u64>,
    /// Modules and libraries → the code image they were loaded from (if stored).
    pub(super) modules: HashMap<u64, Option<Hash128>>,
    pub(super) libraries: HashMap<u64, Option<Hash128>>,
    /// Module-scope variables of each code image: name → size (from the cubins).
    pub(super) globals: HashMap<Hash128, HashMap<String, u64>>,
    pub(super) functions: HashSet<u64>,
    pub(super) kernels: HashSet<u64>,
    pub(super) streams: HashSet<u64>,
    pub(super) events: HashSet<u64>,
    /// Graphs, nodes, executable graphs, arrays, texture and surface objects.
    pub(super) objects: HashSet<(HandleKind, u64)>,
}

impl Model {
    pub(crate) fn inside(&self, p: u64, n: u64) -> bool {
        self.ranges
            .range(..=p)
            .next_back()
            .is_some_and(|(&base, &size)| p.checked_add(n).is_some_and(|end| end <= base.saturating_add(size.max(1))))
    }

    pub(crate) fn stream_ok(&self, s: u64) -> bool {
        s <= 2 || self.streams.contains(&s)
    }

    pub(crate) fn event_ok(&self, e: u64) -> bool {
        self.events.contains(&e)
    }

    pub(crate) fn kernel_loaded(&self, h: u64) -> bool {
        self.functions.contains(&h) || self.kernels.contains(&h)
    }

    pub(crate) fn has(&self, k: HandleKind, h: u64) -> bool {
        self.objects.contains(&(k, h))
    }

    pub(crate) fn add(&mut self, k: HandleKind, h: u64) {
        self.objects.insert((k, h));
    }

    pub(crate) fn remove(&mut self, k: HandleKind, h: u64) {
        self.objects.remove(&(k, h));
    }

    /// Size of the global `name` of a code image, read from its cubins (the driver returns it;
    /// a recording that did not ask for it has none).
    pub(super) fn global_size(&mut self, trace: &LoadedTrace, image: Option<Hash128>, name: &str) -> Option<u64> {
        let image = image?;
        let globals = self.globals.entry(image).or_insert_with(|| {
            let Some(bytes) = trace.blobs.get(&image) else { return HashMap::new() };
            let opts = gpuless_analyzer::Options::default();
            let mut sizes = HashMap::new();
            if let Ok(r) = gpuless_analyzer::analyze(bytes, &opts, &gpuless_analyzer::NoProgress) {
                for g in r.globals {
                    let n = sizes.entry(g.name).or_insert(0);
                    *n = g.size.max(*n);
                }
            }
            sizes
        });
        globals.get(name).copied()
    }
}

/// Checks that `v` names stored bytes of the trace, of the recorded length (`what`: for the
/// violation's words).
pub(crate) fn blob_ok(trace: &LoadedTrace, v: Option<&Value>, what: &str) -> Result<(), String> {
    match v {
        Some(Value::Blob(b)) => match trace.blobs.get(&b.hash) {
            Some(d) if d.len() as u64 == b.len => Ok(()),
            Some(d) => Err(format!("{what} blob {} holds {} bytes, the record says {}", b.hash, d.len(), b.len)),
            None => Err(format!("{what} blob {} ({} bytes) is missing from the trace", b.hash, b.len)),
        },
        other => Err(format!("{what} bytes were not recorded ({other:?})")),
    }
}
