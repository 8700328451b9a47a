//! Segments the session decoded before, kept by their bytes.

use super::*;

/// Segments decoded before, by their exact bytes: a client that repeats a segment (a hot loop)
/// costs a hash and a comparison instead of a decode. Bounded; cleared when full.
#[derive(Default)]
pub(super) struct Decoded {
    map: HashMap<Hash128, (Vec<u8>, Rc<Vec<CallRecord>>)>,
    bytes: usize,
    /// Hashes of the segments seen lately (cached or not), to tell whether segments repeat.
    seen: std::collections::HashSet<Hash128>,
    /// Segments decoded (not found in the map), and how many of those had been seen before.
    misses: u64,
    repeats: u64,
}

impl Decoded {
    const MAX_BYTES: usize = 64 << 20;
    /// Segments decoded before the repeat rate decides whether keeping them pays.
    const WARM_UP: u64 = 64;
    const MAX_SEEN: usize = 1 << 16;

    pub(super) fn get(&self, payload: &[u8]) -> Option<Rc<Vec<CallRecord>>> {
        match self.map.get(&Hash128::of(payload)) {
            Some((bytes, recs)) if bytes.as_slice() == payload => Some(recs.clone()),
            _ => None,
        }
    }

    /// Whether decoded segments are worth keeping. A live client's segments never repeat byte
    /// for byte (their sequence numbers grow): keeping them would only grow the executor's
    /// memory — fresh pages, faulted and zeroed, for every segment (half of an executor's time
    /// on a launch loop, measured). A replayed loop repeats its segments from its second
    /// iteration on; hashes of recent segments tell the two apart, and keeping resumes as soon
    /// as segments repeat.
    pub(super) fn worth_keeping(&self) -> bool {
        self.misses < Self::WARM_UP || self.repeats * 8 >= self.misses
    }

    pub(super) fn insert(&mut self, payload: &[u8], recs: Vec<CallRecord>) -> Rc<Vec<CallRecord>> {
        let hash = Hash128::of(payload);
        self.misses += 1;
        if self.seen.len() >= Self::MAX_SEEN {
            self.seen.clear();
        }
        if !self.seen.insert(hash) {
            self.repeats += 1;
        }
        let recs = Rc::new(recs);
        if !self.worth_keeping() {
            if !self.map.is_empty() {
                self.map.clear();
                self.bytes = 0;
            }
            return recs;
        }
        if self.bytes + payload.len() > Self::MAX_BYTES {
            self.map.clear();
            self.bytes = 0;
        }
        self.bytes += payload.len();
        self.map.insert(hash, (payload.to_vec(), recs.clone()));
        recs
    }
}
