//! Only the code a function runs: code images (modules, libraries) none of whose kernels the
//! function launches or otherwise uses are left out, with the look-ups of their functions and
//! kernels and the queries about them.
//!
//! A code handle (module, library, function, kernel) is used when a launch runs it or a call
//! that changes state names it (an attribute set, a global's address taken); the handles it was
//! made from (a function from its module, a kernel from its library) are then used too. A call
//! that creates code handles is kept when one of them is used; a call that destroys one, or
//! only asks about one (a query), is kept when the handle is used.

use std::collections::{HashMap, HashSet};

use gpuless_analyzer::api::{HandleKind, SyncClass};
use gpuless_traces::{CallRecord, Value};

/// What pruning left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Records left out.
    pub records: usize,
    /// Code images (module or library loads) left out.
    pub images: usize,
}

fn is_code(k: HandleKind) -> bool {
    matches!(k, HandleKind::Module | HandleKind::Library | HandleKind::Function | HandleKind::Kernel)
}

/// The code handles among `values`, by value: the runtime launches a `CUkernel` as a
/// `CUfunction`, so a handle is known by its value whatever kind it is given as.
fn code_handles(values: &[Value]) -> impl Iterator<Item = u64> + '_ {
    values.iter().filter_map(|v| match v {
        Value::Handle(k, h) if is_code(*k) => Some(*h),
        _ => None,
    })
}

/// `keep` (indices into `calls`, in order) without the code the function does not use.
pub fn prune(calls: &[CallRecord], keep: &[usize]) -> (Vec<usize>, Pruned) {
    // Where each code handle came from, and which handles calls that change state use.
    let mut parents: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut used: Vec<u64> = Vec::new();
    for &i in keep {
        let r = &calls[i];
        let Some(f) = r.function.api() else { continue };
        let ins: Vec<_> = code_handles(&r.args).collect();
        match f.sync {
            SyncClass::CreatesHandle => {
                for out in code_handles(&r.results) {
                    parents.entry(out).or_default().extend(ins.iter().copied());
                }
            }
            SyncClass::DestroysHandle | SyncClass::DeviceQuery | SyncClass::Local | SyncClass::StateQuery => {}
            _ => used.extend(ins),
        }
    }
    let mut live: HashSet<u64> = HashSet::new();
    while let Some(h) = used.pop() {
        if live.insert(h) {
            used.extend(parents.get(&h).into_iter().flatten().copied());
        }
    }
    let mut out = Vec::with_capacity(keep.len());
    let mut pruned = Pruned::default();
    for &i in keep {
        let r = &calls[i];
        let Some(f) = r.function.api() else {
            out.push(i);
            continue;
        };
        let keep_it = match f.sync {
            SyncClass::CreatesHandle => {
                let made: Vec<_> = code_handles(&r.results).collect();
                made.is_empty() || made.iter().any(|h| live.contains(h))
            }
            SyncClass::DestroysHandle | SyncClass::DeviceQuery | SyncClass::Local | SyncClass::StateQuery => {
                code_handles(&r.args).all(|h| live.contains(&h))
            }
            _ => true,
        };
        if keep_it {
            out.push(i);
        } else {
            pruned.records += 1;
            pruned.images += usize::from(loads_code(r));
        }
    }
    (out, pruned)
}

/// Whether `r` loads a code image (its results hold a module or library handle).
pub(crate) fn loads_code(r: &CallRecord) -> bool {
    r.function.api().is_some_and(|f| f.sync == gpuless_analyzer::api::SyncClass::CreatesHandle)
        && r.results.iter().any(|v| {
            matches!(
                v,
                gpuless_traces::Value::Handle(
                    gpuless_analyzer::api::HandleKind::Module | gpuless_analyzer::api::HandleKind::Library,
                    _
                )
            )
        })
        && r.args.iter().any(|v| matches!(v, gpuless_traces::Value::Blob(_)))
}
