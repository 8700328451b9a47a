//! Warm functions (issue 20): executors kept after a session of one function, with that
//! function still set up on the GPU, for the next session of the same function on the same
//! partition spec. This is the manager's bookkeeping only — which executor holds which
//! function, and since when it is unused; the manager lets executors go as it says.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The prefix of a Hello's `program` that names the one function a session invokes
/// (`function:NAME`, as `gpuless invoke --remote` sends it).
pub const PROGRAM_PREFIX: &str = "function:";

/// The function a Hello's `program` announces, if it announces one.
pub fn announced(program: &str) -> Option<&str> {
    program.strip_prefix(PROGRAM_PREFIX).filter(|n| !n.is_empty())
}

/// Separates a tenant's name from what it owns in a [`key`] (no tenant name holds it).
const SEP: char = '\u{1f}';

/// What an executor kept after its session is kept as and found by: `name` (a function, a
/// program) of `tenant` ([`super::tenants`]), so that only that tenant's next session of it
/// is handed the executor.
pub fn key(tenant: &str, name: &str) -> String {
    format!("{tenant}{SEP}{name}")
}

/// A [`key`] as the metrics and logs show it: `name` for the tenant `""`, else `tenant/name`.
pub fn shown(key: &str) -> String {
    match key.split_once(SEP) {
        Some(("", name)) => name.to_string(),
        Some((tenant, name)) => format!("{tenant}/{name}"),
        None => key.to_string(),
    }
}

#[derive(Debug, Clone)]
struct Entry {
    exec: u64,
    spec: String,
    function: String,
    last_used: Instant,
}

/// Executors kept warm with a function, at most `max` at once.
#[derive(Debug, Clone)]
pub struct WarmSet {
    entries: Vec<Entry>,
    max: usize,
    keep_alive: Duration,
}

impl WarmSet {
    /// An empty set holding at most `max` executors, each for `keep_alive` after its last use.
    pub fn new(max: usize, keep_alive: Duration) -> WarmSet {
        WarmSet { entries: Vec::new(), max, keep_alive }
    }

    /// Keeps executor `exec` (of partition `spec`) warm with `function` from `now`. Returns the
    /// executors to end: the least recently used beyond the cap (`exec` itself when the cap
    /// is 0).
    pub fn insert(&mut self, exec: u64, spec: &str, function: &str, now: Instant) -> Vec<u64> {
        self.remove(exec);
        self.entries.push(Entry { exec, spec: spec.to_string(), function: function.to_string(), last_used: now });
        let mut out = Vec::new();
        while self.entries.len() > self.max {
            match self.evict_lru("") {
                Some(e) => out.push(e),
                None => break,
            }
        }
        out
    }

    /// Takes the most recently used executor warm with `function` on `spec` that has not
    /// expired at `now`; it leaves the set.
    pub fn take(&mut self, spec: &str, function: &str, now: Instant) -> Option<u64> {
        let keep = self.keep_alive;
        let (i, _) = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.spec == spec && e.function == function && !expired(e, now, keep))
            .max_by_key(|(_, e)| e.last_used)?;
        Some(self.entries.remove(i).exec)
    }

    /// Whether an executor warm with `function` on `spec` is in the set and has not expired at
    /// `now` (placement prefers its GPU).
    pub fn holds(&self, spec: &str, function: &str, now: Instant) -> bool {
        self.entries.iter().any(|e| e.spec == spec && e.function == function && !expired(e, now, self.keep_alive))
    }

    /// Removes and returns the executors unused for longer than the keep-alive at `now`.
    pub fn expire(&mut self, now: Instant) -> Vec<u64> {
        let keep = self.keep_alive;
        let (old, live): (Vec<Entry>, Vec<Entry>) =
            std::mem::take(&mut self.entries).into_iter().partition(|e| expired(e, now, keep));
        self.entries = live;
        old.into_iter().map(|e| e.exec).collect()
    }

    /// The executors in the set.
    pub fn execs(&self) -> impl Iterator<Item = u64> + '_ {
        self.entries.iter().map(|e| e.exec)
    }

    /// When the least recently used executor whose spec starts with `on` was last used.
    pub fn oldest(&self, on: &str) -> Option<Instant> {
        self.entries.iter().filter(|e| e.spec.starts_with(on)).map(|e| e.last_used).min()
    }

    /// Removes and returns the least recently used executor whose spec starts with `on`
    /// (`""`: of all; the manager's specs start with their GPU).
    pub fn evict_lru(&mut self, on: &str) -> Option<u64> {
        let (i, _) =
            self.entries.iter().enumerate().filter(|(_, e)| e.spec.starts_with(on)).min_by_key(|(_, e)| e.last_used)?;
        Some(self.entries.remove(i).exec)
    }

    /// Forgets `exec` (it exited); whether it was in the set.
    pub fn remove(&mut self, exec: u64) -> bool {
        let n = self.entries.len();
        self.entries.retain(|e| e.exec != exec);
        self.entries.len() != n
    }

    /// Removes and returns every executor (the server drains).
    pub fn clear(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.entries).into_iter().map(|e| e.exec).collect()
    }

    /// Executors kept warm, per function.
    pub fn counts(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for e in &self.entries {
            *m.entry(e.function.clone()).or_insert(0) += 1;
        }
        m
    }

    /// Executors kept warm.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

fn expired(e: &Entry, now: Instant, keep: Duration) -> bool {
    now.saturating_duration_since(e.last_used) >= keep
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_announce_functions() {
        assert_eq!(announced("function:resnet50"), Some("resnet50"));
        assert_eq!(announced("function:"), None);
        assert_eq!(announced("invoke resnet50"), None);
        assert_eq!(announced("python train.py"), None);
    }

    #[test]
    fn taken_by_function_and_spec_most_recent_first() {
        let t = Instant::now();
        let s = |n| t + Duration::from_secs(n);
        let mut w = WarmSet::new(8, Duration::from_secs(60));
        assert!(w.insert(1, "whole", "a", s(0)).is_empty());
        assert!(w.insert(2, "whole", "a", s(1)).is_empty());
        assert!(w.insert(3, "sms:16", "a", s(2)).is_empty());
        assert!(w.insert(4, "whole", "b", s(3)).is_empty());
        assert_eq!(w.counts(), BTreeMap::from([("a".into(), 3), ("b".into(), 1)]));
        assert_eq!(w.take("whole", "c", s(4)), None, "no executor of another function");
        assert_eq!(w.take("sms:8", "a", s(4)), None, "no executor of another spec");
        assert_eq!(w.take("whole", "a", s(4)), Some(2), "the most recently used first");
        assert_eq!(w.take("whole", "a", s(4)), Some(1));
        assert_eq!(w.take("whole", "a", s(4)), None, "taken executors leave the set");
        assert_eq!(w.take("sms:16", "a", s(4)), Some(3));
        assert_eq!(w.len(), 1);
        assert!(w.remove(4) && !w.remove(4) && w.is_empty());
    }

    #[test]
    fn the_least_recently_used_goes_at_the_cap() {
        let t = Instant::now();
        let s = |n| t + Duration::from_secs(n);
        let mut w = WarmSet::new(2, Duration::from_secs(60));
        assert!(w.insert(1, "whole", "a", s(0)).is_empty());
        assert!(w.insert(2, "whole", "b", s(1)).is_empty());
        assert_eq!(w.insert(3, "whole", "c", s(2)), vec![1]);
        assert_eq!(w.counts(), BTreeMap::from([("b".into(), 1), ("c".into(), 1)]));
        // Used again (taken and kept after its session): now the most recent.
        assert_eq!(w.take("whole", "b", s(3)), Some(2));
        assert!(w.insert(2, "whole", "b", s(4)).is_empty());
        assert_eq!(w.insert(4, "whole", "d", s(5)), vec![3]);
        assert_eq!(w.evict_lru(""), Some(2));
        assert_eq!(w.clear(), vec![4]);
        // A cap of 0 keeps nothing: the executor itself is let go.
        let mut none = WarmSet::new(0, Duration::from_secs(60));
        assert_eq!(none.insert(7, "whole", "a", t), vec![7]);
        assert!(none.is_empty());
    }

    #[test]
    fn unused_executors_expire_after_the_keep_alive() {
        let t = Instant::now();
        let s = |n| t + Duration::from_secs(n);
        let mut w = WarmSet::new(4, Duration::from_secs(10));
        w.insert(1, "whole", "a", s(0));
        w.insert(2, "whole", "a", s(5));
        assert_eq!(w.take("whole", "a", s(12)), Some(2), "1 has expired, 2 has not");
        w.insert(2, "whole", "a", s(12));
        assert_eq!(w.expire(s(14)), vec![1]);
        assert!(w.expire(s(21)).is_empty());
        assert_eq!(w.take("whole", "a", s(22)), None, "expired, though not yet removed");
        assert_eq!(w.expire(s(22)), vec![2]);
        assert!(w.is_empty());
    }
}
