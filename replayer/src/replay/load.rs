//! Reading a whole trace for replay: its records in order and its blobs by hash.

use std::collections::HashMap;
use std::path::Path;

use gpuless_traces::format::CHUNK_HEADER_LEN;
use gpuless_traces::{BlobBytes, BlobRef, CallRecord, ChunkBody, Hash128, ReaderOptions, TraceMeta, TraceReader};

use super::ReplayError;

/// A trace in memory.
pub struct LoadedTrace {
    /// Header metadata.
    pub meta: TraceMeta,
    /// Every call record, in sequence order.
    pub calls: Vec<CallRecord>,
    /// Every blob, reassembled.
    pub blobs: HashMap<Hash128, BlobBytes>,
    /// What the reader could not recover (a damaged or truncated trace read with
    /// [`load_partial`]), if anything.
    pub lost: Option<String>,
}

/// A blob a call refers to, with where the call was read (for the error).
struct Reference {
    seq: u64,
    function: String,
    blob: BlobRef,
    chunk: u64,
    offset: u64,
}

/// Reads `path` completely. A damaged or truncated trace is an error naming the file, the chunk
/// and its offset, as is a call that refers to a blob the trace does not hold.
pub fn load(path: &Path) -> Result<LoadedTrace, ReplayError> {
    read(path, false)
}

/// Reads `path` up to its first damage: the complete chunks before it are returned and what was
/// lost is in [`LoadedTrace::lost`] (a recording killed while writing). Calls that refer to
/// missing blobs are still an error.
pub fn load_partial(path: &Path) -> Result<LoadedTrace, ReplayError> {
    read(path, true)
}

fn read(path: &Path, partial: bool) -> Result<LoadedTrace, ReplayError> {
    let reader = TraceReader::open(path, ReaderOptions { blob_data: true, check_blob_refs: false })
        .map_err(|e| ReplayError::Trace(format!("{}: {e}", path.display())))?;
    let meta = reader.meta().clone();
    let file_len = reader.progress().1;
    let mut calls = Vec::new();
    let mut refs = Vec::new();
    let mut parts: HashMap<Hash128, Vec<u8>> = HashMap::new();
    let mut lost = None;
    // Complete chunks, and bytes up to the end of the last one (or of the header).
    let mut good = (0u64, reader.recovery().good_bytes);
    for chunk in reader {
        match chunk {
            Ok(c) => {
                good = (c.ordinal + 1, c.offset + CHUNK_HEADER_LEN as u64 + u64::from(c.stored_len));
                match c.body {
                    ChunkBody::Calls(mut v) => {
                        for r in &v {
                            refs.extend(r.blob_refs().map(|blob| Reference {
                                seq: r.seq,
                                function: r.function.name().to_string(),
                                blob,
                                chunk: c.ordinal,
                                offset: c.offset,
                            }));
                        }
                        calls.append(&mut v);
                    }
                    ChunkBody::Blobs(bs) => {
                        for p in bs {
                            let buf = parts
                                .entry(p.hash)
                                .or_insert_with(|| gpuless_traces::blob_bytes::buffer(p.total_len as usize));
                            if buf.len() as u64 == p.offset {
                                buf.extend_from_slice(&p.data);
                            }
                        }
                    }
                    _ => {}
                }
            }
            Err(e) if partial => {
                lost = Some(e.to_string());
                break;
            }
            Err(e) => {
                let of = file_len.map_or(String::new(), |n| format!(" of {n}"));
                return Err(ReplayError::Trace(format!(
                    "{}: {e}\nthe trace is damaged after {} complete chunk{} ({} bytes{of}); nothing was replayed. \
                     Record the program again, or replay the complete chunks before the damage with --partial",
                    path.display(),
                    good.0,
                    if good.0 == 1 { "" } else { "s" },
                    good.1
                )));
            }
        }
    }
    let missing: Vec<&Reference> =
        refs.iter().filter(|r| parts.get(&r.blob.hash).is_none_or(|d| d.len() as u64 != r.blob.len)).collect();
    if let Some(r) = missing.first() {
        let held =
            parts.get(&r.blob.hash).map_or("does not hold".into(), |d| format!("holds only {} bytes of", d.len()));
        return Err(ReplayError::Trace(format!(
            "{}: call #{} {} (chunk {} at offset {}) refers to blob {} of {} bytes, which the trace {held}; \
             {} references to missing blobs in all. The trace is incomplete: record the program again",
            path.display(),
            r.seq,
            r.function,
            r.chunk,
            r.offset,
            r.blob.hash,
            r.blob.len,
            missing.len()
        )));
    }
    calls.sort_by_key(|c| c.seq);
    let blobs = parts.into_iter().map(|(h, b)| (h, BlobBytes::from(b))).collect();
    Ok(LoadedTrace { meta, calls, blobs, lost })
}
