//! Which backend this process's hooked calls go to: the driver, recorded (the default), or a
//! `gpuless serve` session (client mode, `GPULESS_REMOTE`, `remote/`). The layers below the
//! backends ask [`active`]; where they need the client backend itself — "the driver" the
//! recorder calls for its own use (`driver.rs`), the store of captured blobs (`sink.rs`) —
//! they go through what the client lends them here ([`lend`], done by `remote::install`
//! before its first use), never up to `remote` itself.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use gpuless_traces::{BlobKind, Value};

/// Environment: the server's endpoint (`unix:PATH`, `HOST:PORT`, or `tls://HOST:PORT` with the
/// CA file in `GPULESS_TLS_CA`); set, the library is a client.
pub const ENV_REMOTE: &str = "GPULESS_REMOTE";

/// 0 not asked yet, 1 client mode, 2 not.
static MODE: AtomicU8 = AtomicU8::new(0);

/// Whether this process is a client of a `gpuless serve` (`GPULESS_REMOTE` is set).
#[inline]
pub fn active() -> bool {
    match MODE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let on = std::env::var_os(ENV_REMOTE).is_some_and(|v| !v.is_empty());
            MODE.store(if on { 1 } else { 2 }, Ordering::Relaxed);
            on
        }
    }
}

/// What the client backend lends the layers below it.
pub struct Client {
    /// The client's implementation of a driver entry point the recorder calls for itself
    /// (`cname` NUL-terminated), or null.
    pub symbol: fn(cname: &str) -> *mut c_void,
    /// Keeps a captured blob for the session (uploaded before the segment that refers to it)
    /// and returns its reference.
    pub blob: fn(kind: BlobKind, data: &[u8]) -> Value,
}

static CLIENT: OnceLock<Client> = OnceLock::new();

/// Lends the client backend's functions (once; later calls change nothing).
pub fn lend(client: Client) {
    let _ = CLIENT.set(client);
}

/// The client backend's functions, once lent.
#[inline]
pub fn client() -> Option<&'static Client> {
    CLIENT.get()
}
