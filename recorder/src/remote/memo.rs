//! Server answers to `stable` queries (the API table: the same answer for the same arguments
//! until a call that may change answers), by function and input words, answered again on the
//! client without a round trip; emptied by every call that may change answers except those that
//! only create handles (`trip::call` decides when).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use gpuless_analyzer::api::{ApiFunction, Direction};

/// (function id, input words) → (status, answer words).
type Memo = HashMap<(u32, Vec<u64>), (u32, Vec<u64>)>;
static MEMO: Mutex<Option<Memo>> = Mutex::new(None);
static HITS: AtomicU64 = AtomicU64::new(0);

fn key(f: &ApiFunction, raw: &[u64]) -> (u32, Vec<u64>) {
    let ins = f.args.iter().enumerate().filter(|(_, a)| a.dir == Direction::In);
    (f.id.0 as u32, ins.map(|(i, _)| raw.get(i).copied().unwrap_or(0)).collect())
}

/// Remembers the server's answer to `f` with the program's arguments `raw`.
pub(super) fn keep(f: &ApiFunction, raw: &[u64], status: u32, values: &[u64]) {
    let mut g = MEMO.lock().unwrap_or_else(|e| e.into_inner());
    g.get_or_insert_with(HashMap::new).insert(key(f, raw), (status, values.to_vec()));
}

/// A function attribute's answer carries every attribute of the function (the executor's
/// `query::FUNCTION_ATTRIBUTES`: the runtime asks for all of them in a row): the others are
/// remembered as if asked.
pub(super) fn remember_all_attributes(f: &ApiFunction, raw: &[u64], values: &[u64]) {
    if !matches!(f.name, "cuFuncGetAttribute" | "cuKernelGetAttribute") || values.len() < 2 {
        return;
    }
    let Some(at) = f.args.iter().position(|a| a.name == "attrib") else { return };
    let mut other = raw.to_vec();
    for (a, &v) in values[1..].iter().enumerate() {
        if v != u64::MAX {
            if let Some(w) = other.get_mut(at) {
                *w = a as u64;
            }
            keep(f, &other, 0, &[v]);
        }
    }
}

/// The answer the server gave before to `f` with the same input words, if any: (status, words).
pub(super) fn answer(f: &ApiFunction, raw: &[u64]) -> Option<(u32, Vec<u64>)> {
    let hit = MEMO.lock().unwrap_or_else(|e| e.into_inner()).as_ref()?.get(&key(f, raw)).cloned()?;
    HITS.fetch_add(1, Ordering::Relaxed);
    Some(hit)
}

/// Forgets every answer (a call that may change them ran).
pub(super) fn forget() {
    if let Some(m) = MEMO.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        m.clear();
    }
}

/// Queries answered from memory so far.
pub(super) fn hits() -> u64 {
    HITS.load(Ordering::Relaxed)
}
