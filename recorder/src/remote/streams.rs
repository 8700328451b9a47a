//! What the client keeps about streams (contexts: `context_books.rs`): the streams being
//! captured and each capture's id and graph, each stream's flags and context.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use gpuless_analyzer::api::{ApiFunction, ArgKind, HandleKind};

/// The streams' books.
#[derive(Default)]
pub(crate) struct Streams {
    /// Streams being captured.
    pub(crate) capturing: HashSet<u64>,
    /// Each capture's id (`cuStreamGetCaptureInfo`), unique in the process.
    pub(crate) capture_ids: HashMap<u64, u64>,
    /// Captures into an existing graph (`cuStreamBeginCaptureToGraph`): ending them hands
    /// back that graph.
    pub(crate) capture_into: HashMap<u64, u64>,
    /// The flags each stream was created with (`cuStreamGetFlags`).
    pub(crate) stream_flags: HashMap<u64, u64>,
    /// The context each stream was created in (`cuStreamGetCtx`, `cuStreamGetDevice`).
    pub(crate) stream_ctx: HashMap<u64, u64>,
}

static STREAMS: Mutex<Option<Streams>> = Mutex::new(None);

/// `f` over the books, locked.
pub(crate) fn with<R>(f: impl FnOnce(&mut Streams) -> R) -> R {
    let mut g = STREAMS.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(Streams::default))
}

/// Whether `f`'s stream argument is being captured.
pub(crate) fn captured(f: &ApiFunction, raw: &[u64]) -> bool {
    f.args
        .iter()
        .position(|a| a.kind == ArgKind::Handle(HandleKind::Stream))
        .and_then(|i| raw.get(i))
        .is_some_and(|&s| is_capturing(s))
}

/// Whether stream `s` is being captured (`cuStreamBeginCapture`).
pub(crate) fn is_capturing(s: u64) -> bool {
    with(|c| c.capturing.contains(&s))
}

/// Whether `stream` captures into an existing graph (`cuStreamBeginCaptureToGraph`).
pub(crate) fn captures_into_graph(stream: u64) -> bool {
    with(|c| c.capture_into.contains_key(&stream))
}
