//! When an asynchronous device-to-host copy has reached the host: the one rule the recorder
//! uses to hash such a copy's result and a replay uses to check it (both must agree, or a
//! result is hashed that the replay never checks, or checked before it arrived).
//!
//! Handles are the recorded ones (`u64`). Streams 0 and 1 are the legacy default stream, which
//! waits for every blocking stream; others (the per-thread default stream 2 included) only for
//! their own work. A copy is complete after:
//! - a context synchronization, or a synchronization of the legacy default stream;
//! - a synchronization of (or a successful query on) its stream;
//! - a synchronization of (or a successful query on) an event recorded after it on its
//!   stream, or recorded on the legacy default stream after it on any stream;
//! - a synchronization of a stream that waited (`cuStreamWaitEvent`) for such an event.

use std::collections::HashMap;

/// What an event covers: the copies on `stream` (every stream when it is the legacy default
/// stream) queued before `mark`.
#[derive(Debug, Clone, Copy)]
struct Mark {
    stream: u64,
    mark: u64,
}

impl Mark {
    fn covers(&self, stream: u64, id: u64) -> bool {
        id < self.mark && (self.stream <= 1 || self.stream == stream)
    }
}

/// Copies in flight, and what each synchronization completes.
#[derive(Debug)]
pub struct Completion<T> {
    pending: Vec<(u64, u64, T)>,
    next: u64,
    events: HashMap<u64, Mark>,
    /// Streams that waited for events: what a synchronization of the stream also completes.
    waits: HashMap<u64, Vec<Mark>>,
}

impl<T> Default for Completion<T> {
    fn default() -> Self {
        Completion { pending: Vec::new(), next: 0, events: HashMap::new(), waits: HashMap::new() }
    }
}

impl<T> Completion<T> {
    /// Whether no copy is in flight.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Whether a copy in flight satisfies `f`.
    pub fn any(&self, f: impl Fn(&T) -> bool) -> bool {
        self.pending.iter().any(|(_, _, t)| f(t))
    }

    /// A copy queued on `stream`.
    pub fn push(&mut self, stream: u64, item: T) {
        self.pending.push((self.next, stream, item));
        self.next += 1;
    }

    /// The copies in flight on `stream`, in the order they were queued.
    pub fn on_stream_mut(&mut self, stream: u64) -> impl Iterator<Item = &mut T> {
        self.pending.iter_mut().filter(move |(_, s, _)| *s == stream).map(|(_, _, t)| t)
    }

    /// `event` recorded on `stream` now (`cuEventRecord`).
    pub fn record_event(&mut self, event: u64, stream: u64) {
        self.events.insert(event, Mark { stream, mark: self.next });
    }

    /// `stream` waits for `event` (`cuStreamWaitEvent`); an event never recorded is complete.
    pub fn wait_event(&mut self, stream: u64, event: u64) {
        if let Some(&m) = self.events.get(&event) {
            self.waits.entry(stream).or_default().push(m);
        }
    }

    fn take(&mut self, done: impl Fn(u64, u64) -> bool) -> Vec<T> {
        if self.pending.is_empty() {
            return Vec::new();
        }
        let (out, keep): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.pending).into_iter().partition(|&(id, s, _)| done(s, id));
        self.pending = keep;
        out.into_iter().map(|(_, _, t)| t).collect()
    }

    /// A context synchronization: every copy.
    pub fn sync_all(&mut self) -> Vec<T> {
        self.waits.clear();
        self.take(|_, _| true)
    }

    /// A synchronization of (or a successful query on) `stream`.
    pub fn sync_stream(&mut self, stream: u64) -> Vec<T> {
        if stream <= 1 {
            return self.sync_all();
        }
        let waited = self.waits.remove(&stream).unwrap_or_default();
        self.take(|s, id| s == stream || waited.iter().any(|m| m.covers(s, id)))
    }

    /// A synchronization of (or a successful query on) `event`; an event never recorded
    /// completes nothing.
    pub fn sync_event(&mut self, event: u64) -> Vec<T> {
        let Some(m) = self.events.get(&event).copied() else { return Vec::new() };
        // What the event's stream had waited for before the event was recorded is covered too.
        let waited: Vec<Mark> = self
            .waits
            .get(&m.stream)
            .map(|w| w.iter().copied().filter(|w| w.mark <= m.mark).collect())
            .unwrap_or_default();
        self.take(|s, id| m.covers(s, id) || waited.iter().any(|w| w.covers(s, id)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_covers_what_its_stream_queued_before_it() {
        let mut c = Completion::default();
        c.push(5, "a");
        c.record_event(9, 5);
        c.push(5, "b");
        c.push(6, "other");
        assert_eq!(c.sync_event(9), vec!["a"]);
        assert_eq!(c.sync_stream(5), vec!["b"]);
        assert_eq!(c.sync_event(9), Vec::<&str>::new());
        assert_eq!(c.sync_all(), vec!["other"]);
    }

    #[test]
    fn an_event_on_the_legacy_stream_covers_every_stream() {
        let mut c = Completion::default();
        c.push(5, "a");
        c.push(6, "b");
        c.record_event(9, 0);
        c.push(5, "later");
        assert_eq!(c.sync_event(9), vec!["a", "b"]);
        assert_eq!(c.sync_stream(1), vec!["later"]);
    }

    #[test]
    fn a_stream_that_waited_for_an_event_completes_what_it_covers() {
        let mut c = Completion::default();
        c.push(5, "a");
        c.record_event(9, 5);
        c.push(5, "b");
        c.wait_event(7, 9);
        assert_eq!(c.sync_stream(7), vec!["a"]);
        assert_eq!(c.sync_stream(7), Vec::<&str>::new());
        // An event never recorded covers nothing; the per-thread stream is a stream like others.
        c.wait_event(8, 42);
        assert_eq!(c.sync_stream(8), Vec::<&str>::new());
        assert_eq!(c.sync_stream(2), Vec::<&str>::new());
        assert_eq!(c.sync_stream(5), vec!["b"]);
        assert!(c.is_empty());
    }
}
