//! Reading a whole trace for replay: its records in order and its blobs by hash.

use std::collections::HashMap;
use std::path::Path;

use gpuless_traces::{CallRecord, ChunkBody, Hash128, ReaderOptions, TraceMeta, TraceReader};

use super::ReplayError;

/// A trace in memory.
pub struct LoadedTrace {
    /// Header metadata.
    pub meta: TraceMeta,
    /// Every call record, in sequence order.
    pub calls: Vec<CallRecord>,
    /// Every blob, reassembled.
    pub blobs: HashMap<Hash128, Vec<u8>>,
    /// What the reader could not recover (a truncated recording), if anything.
    pub lost: Option<String>,
}

/// Reads `path` completely. A damaged tail is reported in `lost`, not an error: the complete
/// chunks before it are replayed.
pub fn load(path: &Path) -> Result<LoadedTrace, ReplayError> {
    let reader = TraceReader::open(path, ReaderOptions { blob_data: true, check_blob_refs: false })
        .map_err(|e| ReplayError::Trace(format!("{}: {e}", path.display())))?;
    let meta = reader.meta().clone();
    let mut calls = Vec::new();
    let mut parts: HashMap<Hash128, Vec<u8>> = HashMap::new();
    let mut lost = None;
    for chunk in reader {
        match chunk {
            Ok(c) => match c.body {
                ChunkBody::Calls(mut v) => calls.append(&mut v),
                ChunkBody::Blobs(bs) => {
                    for p in bs {
                        let buf = parts.entry(p.hash).or_insert_with(|| Vec::with_capacity(p.total_len as usize));
                        if buf.len() as u64 == p.offset {
                            buf.extend_from_slice(&p.data);
                        }
                    }
                }
                _ => {}
            },
            Err(e) => {
                lost = Some(e.to_string());
                break;
            }
        }
    }
    calls.sort_by_key(|c| c.seq);
    Ok(LoadedTrace { meta, calls, blobs: parts, lost })
}
