//! The policies and the per-policy state machine.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::report::{SegmentStats, SyncReport};
use super::timeline::Timeline;
use super::CallEvent;
use crate::api::SyncClass;

/// A synchronization policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Policy {
    /// Every call is a round trip.
    PerCall,
    /// The 2022 GPUless prototype.
    Gpuless2022,
    /// This project: client-chosen addresses, virtualized handles.
    Gpuless,
}

impl Policy {
    /// All policies, in report order.
    pub const ALL: [Policy; 3] = [Policy::PerCall, Policy::Gpuless2022, Policy::Gpuless];

    /// The policy's name (`per-call`, `gpuless-2022`, `gpuless`).
    pub fn name(self) -> &'static str {
        match self {
            Policy::PerCall => "per-call",
            Policy::Gpuless2022 => "gpuless-2022",
            Policy::Gpuless => "gpuless",
        }
    }

    /// Parse a name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// One-line description.
    pub fn description(self) -> &'static str {
        match self {
            Policy::PerCall => "every call is a round trip (rCUDA, Cricket, GVirtuS)",
            Policy::Gpuless2022 => "allocations, frees, device-to-host copies and queries whose results reach the host",
            Policy::Gpuless => {
                "gpuless run --remote: device queries, addresses and handles answered locally; waits for data reaching the host, for server-filled query answers, and at synchronizations with work outstanding"
            }
        }
    }

    /// Whether a call of this class is a synchronization point at the call itself (the
    /// `gpuless` policy's deferred downloads are handled by the state machine).
    pub fn syncs(self, class: SyncClass) -> bool {
        use SyncClass::*;
        match self {
            Policy::PerCall => true,
            Policy::Gpuless2022 => matches!(
                class,
                DeviceToHost
                    | DeviceToHostAsync
                    | AllocatesDevice
                    | FreesDevice
                    | HostMemory
                    | CreatesHandle
                    | AddressLookup
                    | DeviceQuery
                    | StateQuery
            ),
            Policy::Gpuless => matches!(class, DeviceToHost),
        }
    }
}

/// Why a call synchronized: its class, `unmodeled`, or `deferred-download` (a `gpuless`
/// synchronization that delivers earlier asynchronous device-to-host copies).
pub type Reason = String;

#[derive(Debug, Clone)]
pub(crate) struct PolicyState {
    policy: Policy,
    calls: u64,
    syncs: u64,
    seg_calls: u64,
    seg_up: u64,
    up_total: u64,
    down_total: u64,
    up_max: u64,
    down_max: u64,
    pending_down: HashMap<Option<u64>, u64>,
    /// `gpuless`: calls were queued since the last round trip (not yet sent).
    queued: bool,
    /// `gpuless`: calls went out since the last context-wide synchronization (work the GPU
    /// may still be doing: an answer means they were submitted, not that they completed).
    outstanding: bool,
    /// `gpuless`: streams a synchronization completed since calls last went out.
    complete: std::collections::HashSet<Option<u64>>,
    /// `gpuless`: the stable questions the server answered since the last call that forgets.
    remembered: std::collections::HashSet<u64>,
    segments: BTreeMap<u64, u64>,
    reasons: BTreeMap<String, u64>,
    timeline: Timeline,
}

/// Resolve a copy whose direction is only known at run time from the bytes it moved.
fn effective(class: SyncClass, ev: &CallEvent) -> SyncClass {
    match class {
        SyncClass::CopyAnyDirection if ev.bytes_down > 0 => SyncClass::DeviceToHost,
        SyncClass::CopyAnyDirectionAsync if ev.bytes_down > 0 => SyncClass::DeviceToHostAsync,
        SyncClass::CopyAnyDirection | SyncClass::CopyAnyDirectionAsync if ev.bytes_up > 0 => SyncClass::HostToDevice,
        SyncClass::CopyAnyDirection | SyncClass::CopyAnyDirectionAsync => SyncClass::Async,
        c => c,
    }
}

fn class_name(c: SyncClass) -> String {
    format!("{c:?}")
}

impl PolicyState {
    pub(crate) fn new(policy: Policy) -> Self {
        PolicyState {
            policy,
            calls: 0,
            syncs: 0,
            seg_calls: 0,
            seg_up: 0,
            up_total: 0,
            down_total: 0,
            up_max: 0,
            down_max: 0,
            pending_down: HashMap::new(),
            queued: false,
            outstanding: false,
            complete: std::collections::HashSet::new(),
            remembered: std::collections::HashSet::new(),
            segments: BTreeMap::new(),
            reasons: BTreeMap::new(),
            timeline: Timeline::new(1024),
        }
    }

    /// Feeds one call; whether it is a synchronization point under this policy.
    pub(crate) fn push(&mut self, ev: &CallEvent) -> bool {
        let index = self.calls;
        self.calls += 1;
        self.seg_calls += 1;
        self.seg_up = self.seg_up.saturating_add(ev.bytes_up);
        self.up_total = self.up_total.saturating_add(ev.bytes_up);
        let (sync, down, reason) = match ev.class {
            None => (true, ev.bytes_down, "unmodeled".to_string()),
            Some(class) => self.decide(effective(class, ev), ev),
        };
        self.down_total = self.down_total.saturating_add(ev.bytes_down);
        if sync {
            self.sync_point(index, down, reason);
        }
        sync
    }

    /// Whether this call synchronizes, the bytes it brings down, and why.
    fn decide(&mut self, class: SyncClass, ev: &CallEvent) -> (bool, u64, String) {
        if self.policy != Policy::Gpuless {
            return (self.policy.syncs(class), ev.bytes_down, class_name(class));
        }
        // What `gpuless run --remote` does (recorder/src/remote/session.rs): a call the server
        // must run is sent (queued); a round trip happens only where the program needs a result.
        if ev.forgets {
            self.remembered.clear();
        }
        if let Some(q) = ev.memo {
            // A stable question the server answered before: answered from the client's memory.
            if !self.remembered.insert(q) {
                return (false, 0, String::new());
            }
        }
        let sent = !ev.local && !matches!(class, SyncClass::Local | SyncClass::DeviceQuery | SyncClass::HostMemory);
        let completion = matches!(class, SyncClass::StreamSync | SyncClass::EventSync | SyncClass::CtxSync)
            || (class == SyncClass::StateQuery && !ev.answers);
        // The stream a stream's synchronization or query completes (`None`: an event, the context).
        let stream = if matches!(class, SyncClass::StreamSync | SyncClass::StateQuery) { ev.stream } else { None };
        if completion {
            // Waits unless nothing is queued and what went out has completed: everything (a
            // context-wide synchronization since), or this stream's work (its own since). The
            // answer brings every finished asynchronous download with it.
            let done = !self.outstanding || stream.is_some_and(|s| self.complete.contains(&Some(s)));
            if !self.queued && done && self.pending_down.is_empty() {
                return (false, 0, String::new());
            }
            self.round_trip();
            match (class, stream) {
                (SyncClass::CtxSync, _) => self.outstanding = false,
                (_, Some(s)) => {
                    self.complete.insert(Some(s));
                }
                _ => {}
            }
            let d = self.take_all_pending();
            let why = if d > 0 { "deferred-download".into() } else { class_name(class) };
            return (true, d, why);
        }
        if class == SyncClass::DeviceToHost || class == SyncClass::StateQuery || ev.checked {
            self.queued |= sent;
            self.round_trip();
            let d = self.take_all_pending().saturating_add(ev.bytes_down);
            let why = if ev.checked { "code-load".into() } else { class_name(class) };
            return (true, d, why);
        }
        if class == SyncClass::DeviceToHostAsync {
            let slot = self.pending_down.entry(ev.stream).or_insert(0);
            *slot = slot.saturating_add(ev.bytes_down);
        }
        self.queued |= sent;
        (false, 0, String::new())
    }

    /// What a round trip sends: the queued calls go out (work the GPU may now be doing).
    fn round_trip(&mut self) {
        if self.queued {
            self.queued = false;
            self.outstanding = true;
            self.complete.clear();
        }
    }

    fn take_all_pending(&mut self) -> u64 {
        self.pending_down.drain().fold(0u64, |a, (_, b)| a.saturating_add(b))
    }

    fn sync_point(&mut self, index: u64, down: u64, reason: String) {
        self.syncs += 1;
        *self.reasons.entry(reason).or_insert(0) += 1;
        *self.segments.entry(self.seg_calls).or_insert(0) += 1;
        self.up_max = self.up_max.max(self.seg_up);
        self.down_max = self.down_max.max(down);
        self.timeline.add(index, self.seg_up, down);
        self.seg_calls = 0;
        self.seg_up = 0;
    }

    pub(crate) fn finish(mut self) -> SyncReport {
        // Downloads still pending at the end, and (`gpuless`) work sent since the last round
        // trip, are delivered by a final one: the client's wait at exit.
        if !self.pending_down.is_empty() || self.queued {
            let d = self.take_all_pending();
            let index = self.calls.saturating_sub(1);
            self.seg_calls = self.seg_calls.max(1);
            self.sync_point(index, d, if d > 0 { "deferred-download".into() } else { "exit".into() });
        }
        let tail = self.seg_calls;
        let s = self.syncs.max(1) as f64;
        SyncReport {
            policy: self.policy.name(),
            description: self.policy.description(),
            calls: self.calls,
            syncs: self.syncs,
            sync_percent: if self.calls == 0 { 0.0 } else { 100.0 * self.syncs as f64 / self.calls as f64 },
            bytes_up: self.up_total,
            bytes_down: self.down_total,
            bytes_up_per_sync: if self.syncs == 0 { 0.0 } else { self.up_total as f64 / s },
            bytes_down_per_sync: if self.syncs == 0 { 0.0 } else { self.down_total as f64 / s },
            max_bytes_up_per_sync: self.up_max,
            max_bytes_down_per_sync: self.down_max,
            trailing_calls: tail,
            segments: SegmentStats::from_histogram(&self.segments),
            reasons: self.reasons,
            timeline: self.timeline,
        }
    }
}
