//! What every hooked call reads, in one cache line: whether recording is on, the sequence
//! counter, the epoch of stable answers and where the slot entries are. Between two driver
//! calls a framework runs enough of its own code to evict the recorder's data from the first
//! level caches; each separate line a call reads is one more miss (these were three lines).

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8};

/// See the module documentation.
#[repr(C, align(64))]
pub(crate) struct Hot {
    /// Set once recording stops for good (internal error, exit, forked child).
    pub disabled: AtomicBool,
    /// Whether a trace path was given: 0 not asked yet, 1 yes, 2 no.
    pub recording: AtomicU8,
    /// Paused by `gpuless_diag_pause` (`GPULESS_DIAG=pause` only).
    pub paused: AtomicBool,
    /// The next sequence number.
    pub seq: AtomicU64,
    /// The number of calls so far that may change what a stable query answers (`fold.rs`);
    /// starts at 1 (0 marks an answer never confirmed). The driver-kind counting trampolines
    /// increment it too (`unmodeled.rs`, at [`EPOCH_AT`]).
    pub epoch: AtomicU64,
    /// The slot entries, one per hook, once built; null before. Untyped here: only `slots.rs`,
    /// which builds them above this layer, reads them.
    pub slots: AtomicPtr<()>,
}

/// The one instance.
pub(crate) static HOT: Hot = Hot {
    disabled: AtomicBool::new(false),
    recording: AtomicU8::new(0),
    paused: AtomicBool::new(false),
    seq: AtomicU64::new(0),
    epoch: AtomicU64::new(1),
    slots: AtomicPtr::new(std::ptr::null_mut()),
};

/// Where [`Hot::epoch`] lies in [`HOT`], for the trampolines' assembly.
pub(crate) const EPOCH_AT: usize = std::mem::offset_of!(Hot, epoch);

#[cfg(test)]
mod tests {
    /// Everything a hooked call reads from it fits the one line it is aligned to.
    #[test]
    fn hot_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<super::Hot>(), 64);
    }
}
