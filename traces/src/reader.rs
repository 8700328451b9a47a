//! The streaming trace reader: bounded memory, lazy chunk iteration, checksums verified.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use crate::decode::{decode_blobs, decode_calls, decode_index, decode_meta, Ctx};
use crate::error::TraceError;
use crate::format::{
    decode_file_header, decode_trailer, file_header_checksum, ChunkHeader, ChunkKind, CHUNK_HEADER_LEN, CHUNK_MAGIC,
    CODEC_NONE, CODEC_ZSTD, FILE_HEADER_LEN, FORMAT_MAJOR, MAGIC, MAX_META_LEN, MAX_RAW_LEN, MAX_STORED_LEN,
    TRAILER_LEN, TRAILER_MAGIC,
};
use crate::model::{BlobPart, CallRecord, Hash128, TraceIndex, TraceMeta};

/// Reader options.
#[derive(Debug, Clone, Copy)]
pub struct ReaderOptions {
    /// Copy blob bytes into [`BlobPart::data`] (off: only hashes and lengths).
    pub blob_data: bool,
    /// Fail with [`TraceError::MissingBlob`] when a call references a blob no earlier chunk
    /// stores.
    pub check_blob_refs: bool,
}

impl Default for ReaderOptions {
    fn default() -> Self {
        ReaderOptions { blob_data: false, check_blob_refs: true }
    }
}

/// Blob bytes by hash ([`TraceReader::read_all`]).
pub type Blobs = HashMap<Hash128, Vec<u8>>;

/// A decoded chunk.
#[derive(Debug, Clone, PartialEq)]
pub enum ChunkBody {
    /// Call records.
    Calls(Vec<CallRecord>),
    /// Blob parts.
    Blobs(Vec<BlobPart>),
    /// The index.
    Index(TraceIndex),
    /// A chunk kind this reader does not know (written by a newer minor version); skipped.
    Unknown(u8),
}

/// One chunk with its position.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    /// Ordinal (0 = first chunk after the header).
    pub ordinal: u64,
    /// File offset of the chunk header.
    pub offset: u64,
    /// Stored payload length.
    pub stored_len: u32,
    /// Decompressed payload length.
    pub raw_len: u32,
    /// Contents.
    pub body: ChunkBody,
}

/// What a read recovered, for "what was lost" reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Complete chunks read.
    pub chunks: u64,
    /// Offset just after the last complete chunk (or the header).
    pub good_bytes: u64,
    /// The trailer was found: the writer finished normally.
    pub finished: bool,
    /// Chunks of unknown kinds that were skipped.
    pub skipped_unknown: u64,
    /// Damaged chunks reported and skipped (reading resumed after each).
    pub damaged: u64,
    /// Bytes skipped while looking for the next valid chunk header after a damaged one.
    pub skipped_bytes: u64,
}

/// Reads chunk headers and payloads; owns the reusable buffers.
struct ChunkIo {
    stored: Vec<u8>,
    raw: Vec<u8>,
    /// The last 32 bytes read as a chunk header (where a resynchronization starts).
    header: [u8; CHUNK_HEADER_LEN],
    /// Stored payload length of the last header that validated: after an error in its payload,
    /// the stream is positioned at the next chunk.
    payload_len: Option<u32>,
    /// A header found by resynchronization, to be read instead of the stream.
    pending: Option<[u8; CHUNK_HEADER_LEN]>,
}

enum Next {
    Chunk(ChunkHeader),
    Trailer,
    Eof,
}

/// Read until `buf` is full or EOF; returns the number of bytes read.
fn read_full(src: &mut impl Read, buf: &mut [u8], offset: u64) -> Result<usize, TraceError> {
    let mut n = 0;
    while n < buf.len() {
        match src.read(buf.get_mut(n..).unwrap_or_default()) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(TraceError::io(offset + n as u64, e)),
        }
    }
    Ok(n)
}

impl ChunkIo {
    fn new() -> Self {
        ChunkIo { stored: Vec::new(), raw: Vec::new(), header: [0; CHUNK_HEADER_LEN], payload_len: None, pending: None }
    }

    /// Read the next chunk header and payload into `self.raw`.
    fn next(&mut self, src: &mut impl Read, chunk: u64, offset: u64) -> Result<Next, TraceError> {
        self.payload_len = None;
        let mut h = [0u8; CHUNK_HEADER_LEN];
        let n = match self.pending.take() {
            Some(p) => {
                h = p;
                CHUNK_HEADER_LEN
            }
            None => read_full(src, &mut h, offset)?,
        };
        self.header = h;
        if n == 0 {
            return Ok(Next::Eof);
        }
        if h.starts_with(&TRAILER_MAGIC) {
            if n == TRAILER_LEN && decode_trailer(h.get(..TRAILER_LEN).unwrap_or_default()).is_some() {
                return Ok(Next::Trailer);
            }
            if n < TRAILER_LEN {
                return Err(truncated(chunk, offset, TRAILER_LEN as u64, n as u64));
            }
            return Err(TraceError::Corrupt { chunk, offset, reason: "bad trailer or data after the trailer".into() });
        }
        if n < CHUNK_HEADER_LEN {
            return Err(truncated(chunk, offset, CHUNK_HEADER_LEN as u64, n as u64));
        }
        if !h.starts_with(&CHUNK_MAGIC) {
            let mut found = [0u8; 4];
            found.copy_from_slice(h.get(..4).unwrap_or(&[0; 4]));
            return Err(TraceError::BadChunkMagic { chunk, offset, found });
        }
        let (hdr, stored_sum, computed_sum) = ChunkHeader::decode(&h);
        if stored_sum != computed_sum {
            return Err(TraceError::Checksum {
                chunk,
                offset,
                what: "header",
                stored: u64::from(stored_sum),
                computed: u64::from(computed_sum),
            });
        }
        let absurd = |what, len: u32, limit: u32| TraceError::AbsurdLength {
            chunk,
            offset,
            what,
            len: u64::from(len),
            limit: u64::from(limit),
        };
        if hdr.stored_len > MAX_STORED_LEN {
            return Err(absurd("stored payload", hdr.stored_len, MAX_STORED_LEN));
        }
        if hdr.raw_len > MAX_RAW_LEN {
            return Err(absurd("raw payload", hdr.raw_len, MAX_RAW_LEN));
        }
        self.payload_len = Some(hdr.stored_len);
        // Read the payload without trusting the length for the allocation: the buffer grows
        // only as bytes actually arrive.
        self.stored.clear();
        let want = u64::from(hdr.stored_len);
        let got = src
            .by_ref()
            .take(want)
            .read_to_end(&mut self.stored)
            .map_err(|e| TraceError::io(offset + CHUNK_HEADER_LEN as u64, e))?;
        if (got as u64) < want {
            self.payload_len = None;
            let header = CHUNK_HEADER_LEN as u64;
            return Err(truncated(chunk, offset, header + want, header + got as u64));
        }
        let sum = xxhash_rust::xxh3::xxh3_64(&self.stored);
        if sum != hdr.checksum {
            return Err(TraceError::Checksum { chunk, offset, what: "payload", stored: hdr.checksum, computed: sum });
        }
        let corrupt = |reason: String| TraceError::Corrupt { chunk, offset, reason };
        match hdr.codec {
            CODEC_NONE => {
                if hdr.raw_len != hdr.stored_len {
                    return Err(corrupt(format!(
                        "uncompressed chunk with raw length {} != stored length {}",
                        hdr.raw_len, hdr.stored_len
                    )));
                }
                std::mem::swap(&mut self.raw, &mut self.stored);
            }
            CODEC_ZSTD => {
                self.raw.clear();
                let mut dec = zstd::stream::read::Decoder::with_buffer(&self.stored[..])
                    .map_err(|e| corrupt(format!("zstd: {e}")))?;
                dec.window_log_max(24).map_err(|e| corrupt(format!("zstd: {e}")))?;
                dec.take(u64::from(hdr.raw_len) + 1)
                    .read_to_end(&mut self.raw)
                    .map_err(|e| corrupt(format!("zstd: {e}")))?;
                if self.raw.len() != hdr.raw_len as usize {
                    return Err(corrupt(format!(
                        "decompressed to {} bytes, header says {}",
                        self.raw.len(),
                        hdr.raw_len
                    )));
                }
            }
            c => return Err(corrupt(format!("unknown codec {c}"))),
        }
        Ok(Next::Chunk(hdr))
    }
}

fn truncated(chunk: u64, offset: u64, needed: u64, available: u64) -> TraceError {
    TraceError::Truncated { chunk, offset, needed, available, lost: available }
}

impl ChunkIo {
    /// After a damaged chunk header: slides over the stream from the byte after the damaged
    /// header's first, until 32 bytes form a valid chunk header (magic and checksum); that
    /// header is read next (a damaged last chunk ends the reading: the trailer is not searched). Returns the bytes skipped, or `None` at the
    /// end of the stream.
    fn resync(&mut self, src: &mut impl Read, offset: u64) -> Result<Option<u64>, TraceError> {
        let mut w = self.header;
        let mut skipped = 0u64;
        let mut byte = [0u8; 1];
        loop {
            w.rotate_left(1);
            if read_full(src, &mut byte, offset + skipped)? == 0 {
                return Ok(None);
            }
            w[CHUNK_HEADER_LEN - 1] = byte[0];
            skipped += 1;
            let valid = w.starts_with(&CHUNK_MAGIC) && {
                let (_, stored, computed) = ChunkHeader::decode(&w);
                stored == computed
            };
            if valid {
                self.pending = Some(w);
                return Ok(Some(skipped));
            }
        }
    }
}

/// Read and validate the file header; returns (major, minor, metadata, header length).
pub(crate) fn read_header(src: &mut impl Read) -> Result<(u16, u16, TraceMeta, u64), TraceError> {
    let mut h = [0u8; FILE_HEADER_LEN];
    let n = read_full(src, &mut h, 0)?;
    if n < MAGIC.len() || h.get(..MAGIC.len()) != Some(&MAGIC[..]) {
        return Err(TraceError::BadMagic { found: h.get(..n.min(8)).unwrap_or_default().to_vec() });
    }
    let f = decode_file_header(&h);
    if f.major > FORMAT_MAJOR || f.major == 0 {
        return Err(TraceError::UnsupportedMajor { major: f.major, minor: f.minor, supported: FORMAT_MAJOR });
    }
    if n < FILE_HEADER_LEN {
        return Err(TraceError::BadHeader { offset: n as u64, reason: "file ends inside the header".into() });
    }
    if f.meta_len > MAX_META_LEN {
        return Err(TraceError::BadHeader {
            offset: 12,
            reason: format!("metadata length {} exceeds {MAX_META_LEN}", f.meta_len),
        });
    }
    let mut meta = Vec::new();
    let got = src
        .by_ref()
        .take(u64::from(f.meta_len))
        .read_to_end(&mut meta)
        .map_err(|e| TraceError::io(FILE_HEADER_LEN as u64, e))?;
    if got < f.meta_len as usize {
        return Err(TraceError::BadHeader {
            offset: (FILE_HEADER_LEN + got) as u64,
            reason: "file ends inside the metadata".into(),
        });
    }
    let sum = file_header_checksum(h.get(..16).unwrap_or_default(), &meta);
    if sum != f.checksum {
        return Err(TraceError::BadHeader {
            offset: 16,
            reason: format!("header checksum mismatch (stored {:#x}, computed {sum:#x})", f.checksum),
        });
    }
    let m = decode_meta(&meta)?;
    Ok((f.major, f.minor, m, (FILE_HEADER_LEN + meta.len()) as u64))
}

/// Streams a trace chunk by chunk. Iterating yields every complete chunk. A damaged chunk
/// yields its error and reading resumes after it: at the length its header gives when the header
/// is intact, else at the next valid chunk header. A truncated end or an I/O error is the last
/// item. [`recovery`](Self::recovery) says what was read and skipped.
pub struct TraceReader<R: Read> {
    src: R,
    io: ChunkIo,
    opts: ReaderOptions,
    meta: TraceMeta,
    version: (u16, u16),
    pos: u64,
    chunk: u64,
    total_len: Option<u64>,
    stopped: bool,
    recovery: Recovery,
    blobs_done: HashSet<Hash128>,
    blobs_partial: HashMap<Hash128, u64>,
}

impl TraceReader<BufReader<File>> {
    /// Open a trace file.
    pub fn open(path: &Path, opts: ReaderOptions) -> Result<Self, TraceError> {
        let f = File::open(path).map_err(|e| TraceError::io(0, e))?;
        let len = f.metadata().map(|m| m.len()).ok();
        let mut r = TraceReader::new(BufReader::with_capacity(1 << 20, f), opts)?;
        r.total_len = len;
        Ok(r)
    }
}

impl<R: Read> TraceReader<R> {
    /// Read the header from `src` and prepare to stream chunks.
    pub fn new(mut src: R, opts: ReaderOptions) -> Result<Self, TraceError> {
        let (major, minor, meta, pos) = read_header(&mut src)?;
        Ok(TraceReader {
            src,
            io: ChunkIo::new(),
            opts,
            meta,
            version: (major, minor),
            pos,
            chunk: 0,
            total_len: None,
            stopped: false,
            recovery: Recovery { good_bytes: pos, ..Recovery::default() },
            blobs_done: HashSet::new(),
            blobs_partial: HashMap::new(),
        })
    }

    /// Recording metadata.
    pub fn meta(&self) -> &TraceMeta {
        &self.meta
    }

    /// Format version of the file (major, minor).
    pub fn version(&self) -> (u16, u16) {
        self.version
    }

    /// Bytes consumed so far and the file size if known (for progress bars).
    pub fn progress(&self) -> (u64, Option<u64>) {
        (self.pos, self.total_len)
    }

    /// What has been read so far.
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// Reads the rest of the trace: every call record in sequence order, and every blob's
    /// bytes by hash (its parts joined in order; without [`ReaderOptions::blob_data`] empty). The
    /// first error ends it.
    pub fn read_all(self) -> Result<(Vec<CallRecord>, Blobs), TraceError> {
        let (mut calls, mut blobs) = (Vec::new(), HashMap::<Hash128, Vec<u8>>::new());
        for chunk in self {
            match chunk?.body {
                ChunkBody::Calls(c) => calls.extend(c),
                ChunkBody::Blobs(parts) => {
                    for p in parts {
                        // A part continues its blob where the last one ended (others are
                        // skipped, as the reader's own tracking of parts does).
                        let b = blobs.entry(p.hash).or_default();
                        if p.offset == b.len() as u64 {
                            b.extend_from_slice(&p.data);
                        }
                    }
                }
                _ => {}
            }
        }
        calls.sort_by_key(|c| c.seq);
        Ok((calls, blobs))
    }

    /// The next item; `Err((error, resumable))`.
    fn read_next(&mut self) -> Result<Option<Chunk>, (TraceError, bool)> {
        let (chunk, offset) = (self.chunk, self.pos);
        match self.read_chunk(chunk, offset) {
            Ok(c) => Ok(c),
            Err(e @ (TraceError::Truncated { .. } | TraceError::Io { .. })) => Err((e, false)),
            Err(e) => {
                self.recovery.damaged += 1;
                self.chunk += 1;
                if let Some(len) = self.io.payload_len {
                    // The header was intact: the stream stands at the next chunk.
                    self.pos = offset + CHUNK_HEADER_LEN as u64 + u64::from(len);
                    return Err((e, true));
                }
                match self.io.resync(&mut self.src, offset + CHUNK_HEADER_LEN as u64) {
                    Ok(Some(skipped)) => {
                        self.recovery.skipped_bytes += skipped;
                        self.pos = offset + skipped;
                        Err((e, true))
                    }
                    Ok(None) | Err(_) => Err((e, false)),
                }
            }
        }
    }

    fn read_chunk(&mut self, chunk: u64, offset: u64) -> Result<Option<Chunk>, TraceError> {
        let hdr = match self.io.next(&mut self.src, chunk, offset) {
            Ok(Next::Chunk(h)) => h,
            Ok(Next::Trailer) => {
                self.pos += TRAILER_LEN as u64;
                self.recovery.good_bytes = self.pos;
                self.recovery.finished = true;
                return Ok(None);
            }
            Ok(Next::Eof) => return Ok(None),
            Err(TraceError::Truncated { chunk, offset, needed, available, .. }) => {
                let lost = self.total_len.map_or(available, |t| t.saturating_sub(offset));
                return Err(TraceError::Truncated { chunk, offset, needed, available, lost });
            }
            Err(e) => return Err(e),
        };
        let ctx = Ctx { chunk, offset };
        let raw = &self.io.raw;
        let body = match ChunkKind::from_u8(hdr.kind) {
            Some(ChunkKind::Calls) => {
                let calls = decode_calls(raw, ctx)?;
                if self.opts.check_blob_refs {
                    for c in &calls {
                        for b in c.blob_refs() {
                            if !self.blobs_done.contains(&b.hash) {
                                return Err(TraceError::MissingBlob {
                                    chunk,
                                    offset,
                                    seq: c.seq,
                                    hash: b.hash.to_string(),
                                    len: b.len,
                                });
                            }
                        }
                    }
                }
                ChunkBody::Calls(calls)
            }
            Some(ChunkKind::Blobs) => {
                let parts = decode_blobs(raw, ctx, self.opts.blob_data)?;
                for p in &parts {
                    let expected = self.blobs_partial.get(&p.hash).copied().unwrap_or(0);
                    if p.offset != expected {
                        continue;
                    }
                    let end = p.offset + p.len;
                    if end >= p.total_len {
                        self.blobs_partial.remove(&p.hash);
                        self.blobs_done.insert(p.hash);
                    } else {
                        self.blobs_partial.insert(p.hash, end);
                    }
                }
                ChunkBody::Blobs(parts)
            }
            Some(ChunkKind::Index) => ChunkBody::Index(decode_index(raw, ctx)?),
            None => {
                self.recovery.skipped_unknown += 1;
                ChunkBody::Unknown(hdr.kind)
            }
        };
        self.pos += CHUNK_HEADER_LEN as u64 + u64::from(hdr.stored_len);
        self.chunk += 1;
        self.recovery.chunks += 1;
        self.recovery.good_bytes = self.pos;
        Ok(Some(Chunk { ordinal: chunk, offset, stored_len: hdr.stored_len, raw_len: hdr.raw_len, body }))
    }
}

impl<R: Read> Iterator for TraceReader<R> {
    type Item = Result<Chunk, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.stopped {
            return None;
        }
        match self.read_next() {
            Ok(Some(c)) => Some(Ok(c)),
            Ok(None) => {
                self.stopped = true;
                None
            }
            Err((e, resumable)) => {
                self.stopped = !resumable;
                Some(Err(e))
            }
        }
    }
}

/// Random access through the trailing index (for replay: fetch blobs by hash).
pub struct TraceFile {
    file: File,
    index: TraceIndex,
    blobs: HashMap<Hash128, u32>,
}

impl TraceFile {
    /// Open a finished trace and load its index. Fails on unfinished traces: scan them with
    /// [`TraceReader`] instead.
    pub fn open(path: &Path) -> Result<Self, TraceError> {
        use std::io::{Seek, SeekFrom};
        let mut file = File::open(path).map_err(|e| TraceError::io(0, e))?;
        read_header(&mut BufReader::new(&file))?;
        let len = file.metadata().map_err(|e| TraceError::io(0, e))?.len();
        let tpos = len
            .checked_sub(TRAILER_LEN as u64)
            .ok_or_else(|| TraceError::BadHeader { offset: len, reason: "file too short for a trailer".into() })?;
        let mut t = [0u8; TRAILER_LEN];
        file.seek(SeekFrom::Start(tpos)).map_err(|e| TraceError::io(tpos, e))?;
        read_full(&mut file, &mut t, tpos)?;
        let index_offset = decode_trailer(&t).filter(|o| *o < tpos).ok_or_else(|| TraceError::Corrupt {
            chunk: 0,
            offset: tpos,
            reason: "no valid trailer: the trace is unfinished".into(),
        })?;
        file.seek(SeekFrom::Start(index_offset)).map_err(|e| TraceError::io(index_offset, e))?;
        let mut io = ChunkIo::new();
        let mut src = BufReader::new(&file);
        let index = match io.next(&mut src, u64::MAX, index_offset)? {
            Next::Chunk(h) if h.kind == ChunkKind::Index as u8 => {
                decode_index(&io.raw, Ctx { chunk: u64::MAX, offset: index_offset })?
            }
            _ => {
                return Err(TraceError::Corrupt {
                    chunk: 0,
                    offset: index_offset,
                    reason: "trailer does not point at an index chunk".into(),
                })
            }
        };
        let blobs = index.blobs.iter().map(|b| (b.hash, b.chunk)).collect();
        Ok(TraceFile { file, index, blobs })
    }

    /// The index.
    pub fn index(&self) -> &TraceIndex {
        &self.index
    }

    /// The bytes of a stored blob, or `None` if the trace does not store it.
    pub fn blob(&mut self, hash: Hash128) -> Result<Option<Vec<u8>>, TraceError> {
        use std::io::{Seek, SeekFrom};
        let Some(&first) = self.blobs.get(&hash) else {
            return Ok(None);
        };
        let mut out: Vec<u8> = Vec::new();
        let mut io = ChunkIo::new();
        for ordinal in first as usize..self.index.chunks.len() {
            let Some(e) = self.index.chunks.get(ordinal) else {
                break;
            };
            self.file.seek(SeekFrom::Start(e.offset)).map_err(|er| TraceError::io(e.offset, er))?;
            let ctx = Ctx { chunk: ordinal as u64, offset: e.offset };
            match io.next(&mut BufReader::new(&self.file), ctx.chunk, ctx.offset)? {
                Next::Chunk(h) if h.kind == ChunkKind::Blobs as u8 => {}
                _ => continue,
            }
            for p in decode_blobs(&io.raw, ctx, true)? {
                if p.hash != hash || p.offset != out.len() as u64 {
                    continue;
                }
                out.extend_from_slice(&p.data);
                if out.len() as u64 >= p.total_len {
                    return Ok(Some(out));
                }
            }
        }
        Err(TraceError::Corrupt { chunk: u64::from(first), offset: 0, reason: format!("blob {hash} is incomplete") })
    }
}
