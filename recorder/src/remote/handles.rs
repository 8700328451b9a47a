//! The handles the client hands out in place of the driver's (contexts, streams, events,
//! modules, functions, pools...): client numbers, distinct, never null, never a special stream
//! value, never handed out twice.

use std::sync::atomic::{AtomicU64, Ordering};

/// Handles the client hands out: distinct, never null, never a special stream value.
static NEXT_HANDLE: AtomicU64 = AtomicU64::new(0x5000_0000);

/// A new client handle.
pub(crate) fn new_handle() -> u64 {
    NEXT_HANDLE.fetch_add(0x10, Ordering::Relaxed)
}

/// Whether `h` is a handle this client handed out (anything else is not one of the session's).
pub(crate) fn is_client_handle(h: u64) -> bool {
    (0x5000_0000..NEXT_HANDLE.load(Ordering::Relaxed)).contains(&h) && h % 0x10 == 0
}
