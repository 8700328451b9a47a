//! Reading a whole trace for replay: its records in order and its blobs by hash.

use std::collections::HashMap;
use std::path::Path;

use gpuless_traces::format::CHUNK_HEADER_LEN;
use gpuless_traces::protocol::shm::{self, Arena};
use gpuless_traces::{
    BlobBytes, BlobRef, CallRecord, ChunkBody, Hash128, ReaderOptions, TraceFile, TraceMeta, TraceReader,
};

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
    read(path, false, None, false)
}

/// The call records of `path` and its metadata, without the blobs' bytes (`blobs` is empty;
/// references are not checked): what a remote client needs before the server says which
/// blobs it lacks. [`load`] reads the rest.
pub fn load_calls(path: &Path) -> Result<LoadedTrace, ReplayError> {
    read(path, false, None, true)
}

/// [`load`], with every blob of at least `min_len` bytes placed in one sealed memfd as it is
/// read ([`gpuless_traces::protocol::shm::Arena`]) instead of in this process's heap: a client
/// on the server's host then sends the descriptor, not the bytes. Needs the trace's index (a
/// finished recording); without one the blobs stay in the heap.
pub fn load_shared(path: &Path, min_len: u64) -> Result<LoadedTrace, ReplayError> {
    read(path, false, Some(min_len), false)
}

/// Reads `path` up to its first damage: the complete chunks before it are returned and what was
/// lost is in [`LoadedTrace::lost`] (a recording killed while writing). Calls that refer to
/// missing blobs are still an error.
pub fn load_partial(path: &Path) -> Result<LoadedTrace, ReplayError> {
    read(path, true, None, false)
}

/// Blobs being read into a shared arena: where each goes and how much of it arrived.
struct Shared {
    arena: Arena,
    places: HashMap<Hash128, (usize, usize, usize)>,
}

impl Shared {
    /// An arena for the blobs of at least `min_len` bytes the trace's index lists.
    fn new(path: &Path, min_len: u64) -> Option<Shared> {
        let file = TraceFile::open(path).ok()?;
        let big: Vec<(Hash128, u64)> =
            file.index().blobs.iter().filter(|b| b.len >= min_len).map(|b| (b.hash, b.len)).collect();
        if big.is_empty() {
            return None;
        }
        let (offsets, size) = shm::layout(big.iter().map(|b| b.1));
        let arena = Arena::new(size, true).ok()?;
        let places = big.iter().zip(offsets).map(|(&(h, len), off)| (h, (off as usize, len as usize, 0))).collect();
        Some(Shared { arena, places })
    }

    /// Takes a part of a blob it holds a place for; false: not one of its blobs.
    fn take(&mut self, p: &gpuless_traces::BlobPart) -> bool {
        let Some((off, len, filled)) = self.places.get_mut(&p.hash) else { return false };
        if *filled as u64 == p.offset && *filled + p.data.len() <= *len {
            let at = *off + *filled;
            self.arena.bytes_mut()[at..at + p.data.len()].copy_from_slice(&p.data);
            *filled += p.data.len();
        }
        true
    }

    /// Seals the arena; its complete blobs, mapped.
    fn finish(self) -> Vec<(Hash128, BlobBytes)> {
        let Ok((fd, map)) = self.arena.seal() else { return Vec::new() };
        self.places
            .into_iter()
            .filter(|(_, (_, len, filled))| filled == len)
            .filter_map(|(h, (off, len, _))| BlobBytes::in_memfd(fd.clone(), map.clone(), off, len).map(|b| (h, b)))
            .collect()
    }
}

/// A whole trace held in memory (the trace inside a function file): [`load`]'s checks, and the
/// trace must end as a finished recording ends (a trace cut at a chunk boundary is refused).
/// `name` names it in errors.
pub fn load_bytes(name: &str, bytes: &[u8]) -> Result<LoadedTrace, ReplayError> {
    let reader =
        TraceReader::new(std::io::Cursor::new(bytes), ReaderOptions { blob_data: true, check_blob_refs: false })
            .map_err(|e| ReplayError::Trace(format!("{name}: {e}")))?;
    read_from(reader, name, false, None, false, true)
}

/// A whole trace at `map[start..]` (a function file's), read at once: payloads checked and
/// decoded in parallel, blobs stored uncompressed used in place
/// ([`gpuless_traces::mapped::read_mapped`]). `name` names it in errors.
pub fn load_mapped(name: &str, map: std::sync::Arc<memmap2::Mmap>, start: usize) -> Result<LoadedTrace, ReplayError> {
    let t = gpuless_traces::mapped::read_mapped(map, start).map_err(|e| ReplayError::Trace(format!("{name}: {e}")))?;
    for r in &t.calls {
        for b in r.blob_refs() {
            if t.blobs.get(&b.hash).is_none_or(|d| d.len() as u64 != b.len) {
                return Err(ReplayError::Trace(format!(
                    "{name}: call #{} {} refers to blob {} of {} bytes, which the trace does not hold",
                    r.seq,
                    r.function.name(),
                    b.hash,
                    b.len
                )));
            }
        }
    }
    Ok(LoadedTrace { meta: t.meta, calls: t.calls, blobs: t.blobs, lost: None })
}

fn read(path: &Path, partial: bool, shared_min: Option<u64>, calls_only: bool) -> Result<LoadedTrace, ReplayError> {
    let shared = shared_min.and_then(|min| Shared::new(path, min));
    let reader = TraceReader::open(path, ReaderOptions { blob_data: !calls_only, check_blob_refs: false })
        .map_err(|e| ReplayError::Trace(format!("{}: {e}", path.display())))?;
    read_from(reader, &path.display().to_string(), partial, shared, calls_only, false)
}

/// Reads every chunk of `reader` (named `name` in errors); `finished`: the trace must end as a
/// finished recording does.
fn read_from<R: std::io::Read>(
    mut reader: TraceReader<R>,
    name: &str,
    partial: bool,
    mut shared: Option<Shared>,
    calls_only: bool,
    finished: bool,
) -> Result<LoadedTrace, ReplayError> {
    let meta = reader.meta().clone();
    let file_len = reader.progress().1;
    let mut calls = Vec::new();
    let mut refs = Vec::new();
    let mut parts: HashMap<Hash128, Vec<u8>> = HashMap::new();
    let mut lost = None;
    // Complete chunks, and bytes up to the end of the last one (or of the header).
    let mut good = (0u64, reader.recovery().good_bytes);
    for chunk in reader.by_ref() {
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
                    ChunkBody::Blobs(_) if calls_only => {}
                    ChunkBody::Blobs(bs) => {
                        for p in bs {
                            if shared.as_mut().is_some_and(|s| s.take(&p)) {
                                continue;
                            }
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
                    "{name}: {e}\nthe trace is damaged after {} complete chunk{} ({} bytes{of}); nothing was replayed. \
                     Record the program again, or replay the complete chunks before the damage with --partial",
                    good.0,
                    if good.0 == 1 { "" } else { "s" },
                    good.1
                )));
            }
        }
    }
    if finished {
        let rec = reader.recovery();
        if !rec.finished || rec.skipped_bytes > 0 || rec.damaged > 0 {
            return Err(ReplayError::Trace(format!(
                "{name}: the trace is cut short or damaged after {} good bytes",
                rec.good_bytes
            )));
        }
    }
    let mut blobs: HashMap<Hash128, BlobBytes> = parts.into_iter().map(|(h, b)| (h, BlobBytes::from(b))).collect();
    if let Some(s) = shared {
        blobs.extend(s.finish());
    }
    let missing: Vec<&Reference> = if calls_only {
        Vec::new()
    } else {
        refs.iter().filter(|r| blobs.get(&r.blob.hash).is_none_or(|d| d.len() as u64 != r.blob.len)).collect()
    };
    if let Some(r) = missing.first() {
        let held =
            blobs.get(&r.blob.hash).map_or("does not hold".into(), |d| format!("holds only {} bytes of", d.len()));
        return Err(ReplayError::Trace(format!(
            "{name}: call #{} {} (chunk {} at offset {}) refers to blob {} of {} bytes, which the trace {held}; \
             {} references to missing blobs in all. The trace is incomplete: record the program again",
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
    Ok(LoadedTrace { meta, calls, blobs, lost })
}
