//! The function file: `MAGIC`, the manifest's length (`u64`, little-endian) and the manifest
//! (JSON), the trace's length (`u64`) and the trace — a gpuless trace of the function's
//! records and the blobs they use, read with the trace reader and required to be whole.

use std::io::Write;
use std::path::Path;

use crate::replay::{load_bytes, load_mapped, LoadedTrace};

use super::Manifest;

/// The first bytes of every function file (format 1).
pub const MAGIC: &[u8; 8] = b"GPULSFN1";

/// Why a function file cannot be used; each names the file and, where it applies, the offset.
#[derive(Debug, thiserror::Error)]
pub enum FunctionError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// Not a function file, or a damaged one.
    #[error("{path}: {what} (at byte {offset}); compile it again with `gpuless compile`")]
    Bad {
        /// The file.
        path: String,
        /// Where.
        offset: u64,
        /// What is wrong.
        what: String,
    },
}

/// Writes a function file: `manifest` and the trace at `trace` (moved into it).
pub fn write(path: &Path, manifest: &Manifest, trace: &Path) -> Result<(), FunctionError> {
    let io = |p: &Path| {
        let p = p.display().to_string();
        move |source| FunctionError::Io { path: p.clone(), source }
    };
    let json = serde_json::to_vec_pretty(manifest)
        .map_err(|e| FunctionError::Io { path: path.display().to_string(), source: std::io::Error::other(e) })?;
    let body = std::fs::read(trace).map_err(io(trace))?;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).map_err(io(path))?);
    out.write_all(MAGIC).map_err(io(path))?;
    out.write_all(&(json.len() as u64).to_le_bytes()).map_err(io(path))?;
    out.write_all(&json).map_err(io(path))?;
    out.write_all(&(body.len() as u64).to_le_bytes()).map_err(io(path))?;
    out.write_all(&body).map_err(io(path))?;
    out.flush().map_err(io(path))?;
    Ok(())
}

/// A function read from its file: what its manifest says, and its records and blobs.
pub struct Function {
    /// The manifest.
    pub manifest: Manifest,
    /// The set-up and body records and the blobs they use.
    pub trace: LoadedTrace,
}

/// Reads a function file (memory-mapped): its manifest, and its trace, which must be whole
/// (every chunk intact, to its end, every blob a record uses held).
pub fn open(path: &Path) -> Result<Function, FunctionError> {
    let name = path.display().to_string();
    let io = |source| FunctionError::Io { path: name.clone(), source };
    let file = std::fs::File::open(path).map_err(io)?;
    // SAFETY: the file is only read; a file changed while it is read fails its chunk checks.
    // Populated at once (while the driver starts on another thread): the weights are then
    // uploaded from memory that is already there.
    let map = std::sync::Arc::new(unsafe { memmap2::MmapOptions::new().populate().map(&file) }.map_err(io)?);
    let (manifest, t_start) = header(&map, &name)?;
    let trace = load_mapped(&name, map.clone(), t_start).map_err(|e| bad_trace(&name, t_start, e))?;
    Ok(Function { manifest, trace })
}

/// Reads a function file's bytes (a server's copy of a deployed function, say), checked as
/// [`open`] checks a file; `label` names it in errors.
pub fn open_bytes(label: &str, bytes: &[u8]) -> Result<Function, FunctionError> {
    let (manifest, t_start) = header(bytes, label)?;
    let trace = load_bytes(label, &bytes[t_start..]).map_err(|e| bad_trace(label, t_start, e))?;
    Ok(Function { manifest, trace })
}

/// [`open_bytes`] of a blob from a server's cache: a whole mapped cache file is read in place
/// as [`open`] reads a file (weights not copied, chunks decoded in parallel).
pub fn open_blob(label: &str, blob: &gpuless_traces::BlobBytes) -> Result<Function, FunctionError> {
    if let gpuless_traces::BlobBytes::Mapped { map, offset: 0, len, .. } = blob {
        if *len == map.len() {
            let (manifest, t_start) = header(map, label)?;
            let trace = load_mapped(label, map.clone(), t_start).map_err(|e| bad_trace(label, t_start, e))?;
            return Ok(Function { manifest, trace });
        }
    }
    open_bytes(label, blob)
}

/// A trace that does not read whole, from byte `t_start` of function file `label`.
fn bad_trace(label: &str, t_start: usize, e: crate::replay::ReplayError) -> FunctionError {
    FunctionError::Bad {
        path: label.to_string(),
        offset: t_start as u64,
        what: format!("its trace (from this byte) is not whole: {}", strip(&e.to_string(), label)),
    }
}

/// `e` without the leading `name: ` the trace reader puts before it.
fn strip<'e>(e: &'e str, name: &str) -> &'e str {
    e.strip_prefix(name).and_then(|r| r.strip_prefix(": ")).unwrap_or(e)
}

/// The manifest of a function file and where its trace starts; the lengths are checked.
fn header(bytes: &[u8], name: &str) -> Result<(Manifest, usize), FunctionError> {
    let bad = |offset: usize, what: String| FunctionError::Bad { path: name.to_string(), offset: offset as u64, what };
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(bad(0, "not a gpuless function file (it does not start with GPULSFN1)".into()));
    }
    let len_at = |at: usize, what: &str| -> Result<usize, FunctionError> {
        let b: [u8; 8] = bytes.get(at..at + 8).and_then(|s| s.try_into().ok()).ok_or_else(|| {
            bad(at, format!("truncated: the {what} length is missing ({} bytes in the file)", bytes.len()))
        })?;
        usize::try_from(u64::from_le_bytes(b)).map_err(|_| bad(at, format!("the {what} length does not fit")))
    };
    let m_len = len_at(8, "manifest")?;
    let m_end = 16usize.checked_add(m_len).filter(|&e| e <= bytes.len()).ok_or_else(|| {
        bad(8, format!("truncated: a manifest of {m_len} bytes announced, {} bytes follow", bytes.len() - 16))
    })?;
    let manifest: Manifest =
        serde_json::from_slice(&bytes[16..m_end]).map_err(|e| bad(16, format!("the manifest is not valid: {e}")))?;
    if manifest.format != 1 {
        return Err(bad(16, format!("format {} (this gpuless reads format 1)", manifest.format)));
    }
    let t_len = len_at(m_end, "trace")?;
    let t_start = m_end + 8;
    if t_start.checked_add(t_len) != Some(bytes.len()) {
        return Err(bad(
            m_end,
            format!("a trace of {t_len} bytes announced, {} bytes follow", bytes.len().saturating_sub(t_start)),
        ));
    }
    Ok((manifest, t_start))
}
