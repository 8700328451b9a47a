//! Synchronization analysis: which calls would make a remote client wait.
//!
//! The input is an abstract call stream ([`CallEvent`]: the API table's [`SyncClass`] of each
//! call, the bytes it moves up to or down from the device, and its stream); the analysis does not
//! know about trace files. Three policies are modeled:
//!
//! * `per-call`: every call is a round trip (rCUDA, Cricket, GVirtuS).
//! * `gpuless-2022`: the GPUless thesis: allocations, frees, device-to-host copies and queries
//!   whose results reach the host (handles, device properties, addresses, state) synchronize.
//! * `gpuless`: allocation addresses are chosen by the client and library handles are
//!   virtualized, so only data that reaches the host synchronizes: device-to-host copies (an
//!   asynchronous one at the next synchronization of its stream, an event or the context) and
//!   query answers.
//!
//! Calls the table does not model count as synchronizing under every policy (conservative).

mod policy;
mod report;
mod timeline;

pub use policy::{Policy, Reason};
pub use report::{EcdfPoint, SegmentStats, SyncReport};
pub use timeline::{Timeline, TimelineBin};

use crate::api::SyncClass;

/// One call, as the synchronization analysis sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallEvent {
    /// The call's class; `None` for calls the API table does not model.
    pub class: Option<SyncClass>,
    /// Bytes the call sends to the device (host-to-device payloads, code images).
    pub bytes_up: u64,
    /// Bytes the call brings back to the host (device-to-host copies).
    pub bytes_down: u64,
    /// The stream handle the call is ordered on, if any.
    pub stream: Option<u64>,
    /// Whether the server fills the call's out arguments (a state query with out values:
    /// an event timing, memory information), so a client must wait for it.
    pub answers: bool,
    /// A `stable` query the server answers: its question (function and input values, hashed).
    /// A client remembers the answer and asks again only after a call that [forgets](Self::forgets).
    pub memo: Option<u64>,
    /// The call may change answers (not only by creating handles): a client forgets the
    /// answers it remembered.
    pub forgets: bool,
    /// The client answers the call itself (its disposition is local, or refused): nothing is
    /// sent, whatever its class.
    pub local: bool,
    /// The client waits for the server's status of this call (a code image's load: the driver
    /// checks the image when it loads it).
    pub checked: bool,
}

/// Runs every policy over a stream of calls with bounded memory.
#[derive(Debug, Clone)]
pub struct SyncAnalyzer {
    states: Vec<policy::PolicyState>,
}

impl Default for SyncAnalyzer {
    fn default() -> Self {
        Self::new(&Policy::ALL)
    }
}

impl SyncAnalyzer {
    /// Analyze under these policies.
    pub fn new(policies: &[Policy]) -> Self {
        SyncAnalyzer { states: policies.iter().map(|p| policy::PolicyState::new(*p)).collect() }
    }

    /// Feed the next call.
    pub fn push(&mut self, ev: &CallEvent) {
        for s in &mut self.states {
            let _ = s.push(ev);
        }
    }

    /// Feeds the next call to the first policy only and says whether it synchronizes there:
    /// how a client decides where a segment ends (`gpuless replay --remote`).
    pub fn push_first(&mut self, ev: &CallEvent) -> bool {
        self.states.first_mut().is_some_and(|s| s.push(ev))
    }

    /// Reports, one per policy, in the order given to [`new`](Self::new).
    pub fn finish(self) -> Vec<SyncReport> {
        self.states.into_iter().map(|s| s.finish()).collect()
    }
}

#[cfg(test)]
mod tests;
