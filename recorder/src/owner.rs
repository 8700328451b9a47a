//! The process whose driver calls are recorded or sent: the first that opened a trace or a
//! session. Ending a process that is not the owner (a forked or `vfork` child) must not
//! finish the owner's trace or session (`exits.rs`).

use std::sync::atomic::{AtomicU32, Ordering};

/// The owning process (0: none yet).
static OWNER: AtomicU32 = AtomicU32::new(0);

/// Notes the calling process as the one that records (or holds the session); the first wins.
pub(crate) fn note_owner() {
    let _ = OWNER.compare_exchange(0, std::process::id(), Ordering::Relaxed, Ordering::Relaxed);
}

/// Whether the calling process is the one that records (`getpid` asks the kernel: a `vfork`
/// child gets its own pid).
pub(crate) fn is_owner() -> bool {
    let owner = OWNER.load(Ordering::Relaxed);
    // SAFETY: getpid has no preconditions.
    owner != 0 && owner == unsafe { libc::getpid() } as u32
}
