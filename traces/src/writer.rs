//! The trace writer: recording threads push records into a bounded queue; a background thread
//! batches them into chunks, compresses chunks on a small pool of threads and writes them in
//! order. `finish()` (or `Drop`) writes the index and the trailer.

use std::collections::{HashSet, VecDeque};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender, TryRecvError};

/// First and longest sleep of the idle writer thread.
const IDLE_MIN: Duration = Duration::from_micros(50);
const IDLE_MAX: Duration = Duration::from_millis(2);

use crate::encode::{encode_blobs, encode_index, encode_meta, CallBatchEncoder};
use crate::error::TraceError;
use crate::format::{
    encode_file_header, encode_trailer, ChunkHeader, ChunkKind, CHUNK_HEADER_LEN, CODEC_NONE, CODEC_ZSTD, FORMAT_MAJOR,
    FORMAT_MINOR, MAX_RAW_LEN,
};
use crate::model::{BlobKind, BlobLocation, BlobPart, BlobRef, CallRecord, ChunkEntry, Hash128, TraceIndex, TraceMeta};

/// Writer tuning.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// zstd level (default 1).
    pub zstd_level: i32,
    /// zstd level of blob chunks holding GPU code (default 9: a third smaller than level 1 on
    /// cuDNN's sm_90 code, compressed by the background threads).
    pub code_zstd_level: i32,
    /// zstd level of call chunks before the first kernel launch (default 6): the set-up phase
    /// (imports, kernel registrations, module loads) writes tens of thousands of records once,
    /// when compression time costs nothing; after it, call chunks use `zstd_level`, so the
    /// compression thread keeps up with a hot loop.
    pub setup_zstd_level: i32,
    /// Capacity of the queue between recording threads and the writer thread, in messages
    /// (a record, a batch of records or a blob). Its slots are allocated and written when the
    /// writer is created, about 56 bytes each: the default 16 Ki is under 1 MiB.
    pub queue_capacity: usize,
    /// Encoded call bytes per call chunk before it is cut.
    pub call_chunk_bytes: usize,
    /// Blob bytes per blob chunk (larger blobs are split).
    pub blob_chunk_bytes: usize,
    /// Store blob chunks that hold no GPU code uncompressed (default false): a function file's
    /// weights, read in place from a memory mapping at a cold start
    /// ([`crate::mapped::read_mapped`]).
    pub store_data_blobs: bool,
    /// Pending records are written at least this often.
    pub flush_interval: Duration,
    /// Compression threads (0: compress on the writer thread). Default: a quarter of the
    /// CPUs, 1 to 4 (see [`default_compression_threads`]).
    pub compression_threads: usize,
    /// Nice value the compression threads give themselves (Linux: per thread; 0 leaves them
    /// at the process's priority). Default 19: a recorded program's own threads come first;
    /// `max_queued_blob_bytes` bounds what waits meanwhile.
    pub compression_nice: i32,
    /// Blob bytes allowed in the queue; `blob()` waits while more are queued (the queue's
    /// capacity counts messages, this bounds its memory).
    pub max_queued_blob_bytes: u64,
    /// Stop accepting records and blobs once the file is this large (the trace stays valid
    /// and is finished normally; calls after the limit are not in it).
    pub max_file_bytes: Option<u64>,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            zstd_level: 1,
            code_zstd_level: 9,
            setup_zstd_level: 6,
            queue_capacity: 16 * 1024,
            call_chunk_bytes: 1 << 20,
            blob_chunk_bytes: 4 << 20,
            store_data_blobs: false,
            flush_interval: Duration::from_millis(200),
            compression_threads: default_compression_threads(),
            compression_nice: 19,
            max_queued_blob_bytes: 256 << 20,
            max_file_bytes: None,
        }
    }
}

/// A quarter of the CPUs, at least 1 and at most 4. Compression runs beside the recorded
/// program, often a tenant of a shared machine: a recorder should not keep one thread per CPU.
/// Measured on a 16-vCPU GPU host, 4 threads at nice 19 and 16 at nice 0 gave the same program
/// latency (docs/benchmarks/recorder-overhead-history.md, session 8); the GPU code loaded at start-up is compressed
/// before the program's first result either way.
pub fn default_compression_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get() / 4).clamp(1, 4)
}

/// What the writer did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Call records written.
    pub calls: u64,
    /// Distinct blobs stored.
    pub blobs: u64,
    /// Blob submissions dropped as duplicates.
    pub duplicate_blobs: u64,
    /// Chunks written (including the index).
    pub chunks: u64,
    /// Uncompressed payload bytes.
    pub raw_bytes: u64,
    /// Compressed payload bytes.
    pub stored_bytes: u64,
    /// Total file size.
    pub file_bytes: u64,
}

enum Msg {
    Call(Box<CallRecord>),
    Calls(Vec<CallRecord>),
    /// Records built on the writer thread (the recording thread only gathered raw values).
    Deferred(Box<dyn FnOnce() -> Vec<CallRecord> + Send>),
    Blob {
        hash: Hash128,
        kind: BlobKind,
        data: Vec<u8>,
    },
    Flush(Sender<()>),
    Finish,
}

struct Shared {
    failed: AtomicBool,
    error: Mutex<Option<String>>,
    /// The size limit was reached: new records and blobs are refused, the file is still
    /// finished normally.
    limited: AtomicBool,
    limit_message: Mutex<Option<String>>,
    duplicates: AtomicU64,
    queued_blob_bytes: AtomicU64,
}

/// Writes a trace file. Cheap to share between recording threads (`&TraceWriter` is `Sync`).
pub struct TraceWriter {
    tx: Sender<Msg>,
    seen: Mutex<HashSet<Hash128>>,
    seq: AtomicU64,
    shared: Arc<Shared>,
    max_queued: u64,
    thread: Option<JoinHandle<WriterStats>>,
}

impl TraceWriter {
    /// Create `path` and start writing a trace with this metadata.
    pub fn create(path: &Path, meta: &TraceMeta, opts: WriterOptions) -> Result<Self, TraceError> {
        let f = std::fs::File::create(path).map_err(|e| TraceError::io(0, e))?;
        Self::new(f, meta, opts)
    }

    /// Write a trace to any byte sink (a file, a pipe, a `Vec<u8>` behind a mutex...).
    pub fn new<W: Write + Send + 'static>(
        mut out: W,
        meta: &TraceMeta,
        opts: WriterOptions,
    ) -> Result<Self, TraceError> {
        let meta = encode_meta(meta);
        let header = encode_file_header(&meta, FORMAT_MAJOR, FORMAT_MINOR);
        out.write_all(&header).map_err(|e| TraceError::io(0, e))?;
        out.write_all(&meta).map_err(|e| TraceError::io(header.len() as u64, e))?;
        out.flush().map_err(|e| TraceError::io(0, e))?;
        let pos = (header.len() + meta.len()) as u64;
        let (tx, rx) = bounded(opts.queue_capacity.max(1));
        let shared = Arc::new(Shared {
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
            limited: AtomicBool::new(false),
            limit_message: Mutex::new(None),
            duplicates: AtomicU64::new(0),
            queued_blob_bytes: AtomicU64::new(0),
        });
        let max_queued = opts.max_queued_blob_bytes;
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("gpuless-trace-writer".into())
            .spawn(move || WriterThread::new(out, pos, opts, sh).run(rx))
            .map_err(|e| TraceError::io(pos, e))?;
        Ok(TraceWriter {
            tx,
            seen: Mutex::new(HashSet::new()),
            seq: AtomicU64::new(0),
            shared,
            max_queued,
            thread: Some(thread),
        })
    }

    /// A fresh sequence number (0, 1, 2, ...). Callers may also number records themselves.
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    fn check(&self) -> Result<(), TraceError> {
        self.check_failed()?;
        if self.shared.limited.load(Ordering::Relaxed) {
            let msg = self.shared.limit_message.lock().ok().and_then(|e| e.clone());
            return Err(TraceError::WriterStopped(msg.unwrap_or_else(|| "size limit reached".into())));
        }
        Ok(())
    }

    fn check_failed(&self) -> Result<(), TraceError> {
        if self.shared.failed.load(Ordering::Relaxed) {
            let msg = self.shared.error.lock().ok().and_then(|e| e.clone());
            return Err(TraceError::WriterStopped(msg.unwrap_or_else(|| "failed".into())));
        }
        Ok(())
    }

    /// Queue a call record (blocks only while the queue is full).
    pub fn record(&self, rec: CallRecord) -> Result<(), TraceError> {
        self.check()?;
        self.tx.send(Msg::Call(Box::new(rec))).map_err(|_| TraceError::WriterStopped("writer thread exited".into()))
    }

    /// Queue a batch of call records with one queue operation (what a busy recording thread
    /// does: a queue push per record costs more than building the record).
    pub fn records(&self, recs: Vec<CallRecord>) -> Result<(), TraceError> {
        self.check()?;
        if recs.is_empty() {
            return Ok(());
        }
        self.tx.send(Msg::Calls(recs)).map_err(|_| TraceError::WriterStopped("writer thread exited".into()))
    }

    /// Queue records that `build` makes on the writer thread, in queue order: a recording
    /// thread hands over what it gathered cheaply and leaves building the records, and freeing
    /// what they hold, to the writer.
    pub fn records_with(&self, build: impl FnOnce() -> Vec<CallRecord> + Send + 'static) -> Result<(), TraceError> {
        self.check()?;
        self.tx
            .send(Msg::Deferred(Box::new(build)))
            .map_err(|_| TraceError::WriterStopped("writer thread exited".into()))
    }

    /// Store bytes as a blob (once per content) and return the reference to put in records.
    /// Queue the blob before the records that reference it.
    pub fn blob(&self, kind: BlobKind, data: &[u8]) -> Result<BlobRef, TraceError> {
        self.store_blob(kind, Hash128::of(data), data.len(), || data.to_vec())
    }

    /// Like [`blob`](Self::blob) for bytes the caller already owns (no copy).
    pub fn blob_owned(&self, kind: BlobKind, data: Vec<u8>) -> Result<BlobRef, TraceError> {
        let hash = Hash128::of(&data);
        let len = data.len();
        self.store_blob(kind, hash, len, move || data)
    }

    fn store_blob(
        &self,
        kind: BlobKind,
        hash: Hash128,
        len: usize,
        data: impl FnOnce() -> Vec<u8>,
    ) -> Result<BlobRef, TraceError> {
        self.check()?;
        let r = BlobRef { hash, len: len as u64 };
        // The lock is held while queueing so that no other thread can reference this blob
        // before it is in the queue.
        let mut seen = match self.seen.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        if !seen.insert(hash) {
            self.shared.duplicates.fetch_add(1, Ordering::Relaxed);
            return Ok(r);
        }
        // Bound the blob bytes waiting in the queue (the writer thread subtracts on receipt).
        while self.shared.queued_blob_bytes.load(Ordering::Acquire) > self.max_queued
            && !self.shared.failed.load(Ordering::Relaxed)
        {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        self.shared.queued_blob_bytes.fetch_add(len as u64, Ordering::AcqRel);
        let sent = self.tx.send(Msg::Blob { hash, kind, data: data() });
        drop(seen);
        sent.map_err(|_| TraceError::WriterStopped("writer thread exited".into()))?;
        Ok(r)
    }

    /// Write everything queued so far as complete chunks and wait until it is in the sink.
    pub fn flush(&self) -> Result<(), TraceError> {
        let (ack_tx, ack_rx) = bounded(1);
        self.tx.send(Msg::Flush(ack_tx)).map_err(|_| TraceError::WriterStopped("writer thread exited".into()))?;
        ack_rx.recv().map_err(|_| TraceError::WriterStopped("writer thread exited".into()))?;
        self.check()
    }

    /// Write the remaining records, the index and the trailer; return statistics.
    pub fn finish(mut self) -> Result<WriterStats, TraceError> {
        let stats = self.stop();
        self.check_failed()?;
        stats.ok_or_else(|| TraceError::WriterStopped("writer thread panicked".into()))
    }

    fn stop(&mut self) -> Option<WriterStats> {
        let t = self.thread.take()?;
        let _ = self.tx.send(Msg::Finish);
        let mut stats = t.join().ok()?;
        stats.duplicate_blobs = self.shared.duplicates.load(Ordering::Relaxed);
        Some(stats)
    }
}

impl Drop for TraceWriter {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Work for a compression thread.
enum Payload {
    Encoded(Vec<u8>),
    Blobs(Vec<PendingPart>),
}

struct PendingPart {
    part: BlobPart,
    data: Arc<Vec<u8>>,
}

struct Job {
    kind: ChunkKind,
    payload: Payload,
    level: i32,
    reply: Sender<Done>,
}

struct Done {
    kind: ChunkKind,
    codec: u8,
    raw_len: u32,
    /// Room for the chunk header, then the stored payload.
    framed: Vec<u8>,
}

/// The level of chunks stored uncompressed ([`WriterOptions::store_data_blobs`]).
const STORE: i32 = i32::MIN;

/// A compressor and the level it is set to.
type Cctx = Option<(i32, zstd::bulk::Compressor<'static>)>;

/// Gives the calling thread the nice value `nice` (Linux: `setpriority` on a thread id affects
/// that thread only). Best effort: a refusal leaves the thread as it was.
fn lower_priority(nice: i32) {
    if nice == 0 {
        return;
    }
    // SAFETY: gettid and setpriority take no pointers; they act on the calling thread.
    unsafe {
        let tid = libc::gettid();
        let _ = libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice);
    }
}

fn compress(job: Job, cctx: &mut Cctx) {
    let (buf, head) = match job.payload {
        Payload::Encoded(b) => (b, 0),
        Payload::Blobs(parts) => {
            let refs: Vec<(BlobPart, &[u8])> = parts
                .iter()
                .map(|p| {
                    let start = p.part.offset as usize;
                    let end = start + p.part.len as usize;
                    (p.part.clone(), p.data.get(start..end).unwrap_or_default())
                })
                .collect();
            encode_blobs(&refs)
        }
    };
    let raw = buf.get(head..).unwrap_or_default();
    if job.level == STORE {
        let mut framed = vec![0u8; CHUNK_HEADER_LEN];
        framed.extend_from_slice(raw);
        let _ = job.reply.send(Done { kind: job.kind, codec: CODEC_NONE, raw_len: raw.len() as u32, framed });
        return;
    }
    match cctx {
        Some((level, c)) if *level != job.level => {
            if c.set_compression_level(job.level).is_ok() {
                *level = job.level;
            }
        }
        Some(_) => {}
        None => *cctx = zstd::bulk::Compressor::new(job.level).ok().map(|c| (job.level, c)),
    }
    // Compress straight behind room for the chunk header: the chunk is written with one
    // `write` and without another copy.
    let mut framed = vec![0u8; CHUNK_HEADER_LEN + zstd::zstd_safe::compress_bound(raw.len())];
    let compressed = match (cctx.as_mut().map(|(_, c)| c), framed.get_mut(CHUNK_HEADER_LEN..)) {
        (Some(c), Some(dst)) => c.compress_to_buffer(raw, dst).ok(),
        _ => None,
    };
    let done = match compressed {
        Some(n) if n < raw.len() => {
            framed.truncate(CHUNK_HEADER_LEN + n);
            Done { kind: job.kind, codec: CODEC_ZSTD, raw_len: raw.len() as u32, framed }
        }
        _ => {
            framed.truncate(CHUNK_HEADER_LEN);
            framed.extend_from_slice(raw);
            Done { kind: job.kind, codec: CODEC_NONE, raw_len: raw.len() as u32, framed }
        }
    };
    let _ = job.reply.send(done);
}

struct InFlight {
    rx: Receiver<Done>,
    first_seq: u64,
    records: u32,
    blobs: Vec<(Hash128, u64)>,
}

struct WriterThread<W: Write> {
    out: W,
    pos: u64,
    opts: WriterOptions,
    shared: Arc<Shared>,
    calls: CallBatchEncoder,
    blob_parts: Vec<PendingPart>,
    blob_bytes: usize,
    pending_since: Option<Instant>,
    /// A kernel launch has been written: the set-up phase is over (`setup_zstd_level`).
    launched: bool,
    jobs: Option<Sender<Job>>,
    workers: Vec<JoinHandle<()>>,
    inline_cctx: Cctx,
    in_flight: VecDeque<InFlight>,
    index: TraceIndex,
    stats: WriterStats,
}

impl<W: Write> WriterThread<W> {
    fn new(out: W, pos: u64, opts: WriterOptions, shared: Arc<Shared>) -> Self {
        let mut workers = Vec::new();
        let jobs = if opts.compression_threads > 0 {
            let (tx, rx) = bounded::<Job>(opts.compression_threads * 2);
            for i in 0..opts.compression_threads {
                let rx = rx.clone();
                let nice = opts.compression_nice;
                let h = std::thread::Builder::new().name(format!("gpuless-trace-zstd{i}")).spawn(move || {
                    lower_priority(nice);
                    let mut cctx = None;
                    for job in rx {
                        compress(job, &mut cctx);
                    }
                });
                if let Ok(h) = h {
                    workers.push(h);
                }
            }
            (!workers.is_empty()).then_some(tx)
        } else {
            None
        };
        WriterThread {
            out,
            pos,
            opts,
            shared,
            calls: CallBatchEncoder::new(),
            blob_parts: Vec::new(),
            blob_bytes: 0,
            pending_since: None,
            launched: false,
            jobs,
            workers,
            inline_cctx: None,
            in_flight: VecDeque::new(),
            index: TraceIndex::default(),
            stats: WriterStats::default(),
        }
    }

    fn run(mut self, rx: Receiver<Msg>) -> WriterStats {
        // The writer polls instead of blocking in `recv`: a blocked receiver makes every
        // `send` wake it with a system call (about a microsecond on the recording thread, per
        // record); polling keeps `send` a plain queue push. Idle polls back off to 2 ms.
        let mut idle = IDLE_MIN;
        loop {
            let msg = match rx.try_recv() {
                Ok(m) => {
                    idle = IDLE_MIN;
                    m
                }
                Err(TryRecvError::Empty) => {
                    if self.pending_since.is_some_and(|t| t.elapsed() >= self.opts.flush_interval) {
                        self.flush_pending();
                    }
                    std::thread::sleep(idle);
                    idle = (idle * 2).min(IDLE_MAX);
                    continue;
                }
                Err(TryRecvError::Disconnected) => Msg::Finish,
            };
            if self.shared.limited.load(Ordering::Relaxed)
                && matches!(msg, Msg::Call(_) | Msg::Calls(_) | Msg::Deferred(_) | Msg::Blob { .. })
            {
                if let Msg::Blob { data, .. } = &msg {
                    self.shared.queued_blob_bytes.fetch_sub(data.len() as u64, Ordering::AcqRel);
                }
                continue;
            }
            match msg {
                Msg::Call(r) => self.add_call(&r),
                Msg::Calls(rs) => {
                    for r in &rs {
                        self.add_call(r);
                    }
                }
                Msg::Deferred(build) => {
                    for r in &build() {
                        self.add_call(r);
                    }
                }
                Msg::Blob { hash, kind, data } => {
                    self.shared.queued_blob_bytes.fetch_sub(data.len() as u64, Ordering::AcqRel);
                    self.pending_since.get_or_insert_with(Instant::now);
                    self.add_blob(hash, kind, data);
                }
                Msg::Flush(ack) => {
                    self.flush_pending();
                    self.drain(0);
                    self.sync_out();
                    let _ = ack.send(());
                }
                Msg::Finish => break,
            }
            if self.pending_since.is_some_and(|t| t.elapsed() >= self.opts.flush_interval) {
                self.flush_pending();
            }
        }
        self.flush_pending();
        self.drain(0);
        self.write_index();
        self.jobs = None;
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        self.stats.file_bytes = self.pos;
        self.stats
    }

    fn add_call(&mut self, r: &CallRecord) {
        if !self.launched && r.args.iter().any(|v| matches!(v, crate::model::Value::KernelParams(_))) {
            // The set-up phase ends: what is pending goes out at the set-up level.
            self.flush_calls();
            self.launched = true;
        }
        self.pending_since.get_or_insert_with(Instant::now);
        self.calls.push(r);
        self.stats.calls += 1;
        if self.calls.size() >= self.opts.call_chunk_bytes {
            self.flush_calls();
        }
    }

    fn fail(&mut self, e: String) {
        if !self.shared.failed.swap(true, Ordering::Relaxed) {
            if let Ok(mut slot) = self.shared.error.lock() {
                *slot = Some(e);
            }
        }
    }

    fn sync_out(&mut self) {
        if let Err(e) = self.out.flush() {
            self.fail(format!("flush at offset {}: {e}", self.pos));
        }
    }

    fn add_blob(&mut self, hash: Hash128, kind: BlobKind, data: Vec<u8>) {
        let total = data.len() as u64;
        let data = Arc::new(data);
        let step = self.opts.blob_chunk_bytes.clamp(1, MAX_RAW_LEN as usize / 2) as u64;
        let mut offset = 0u64;
        loop {
            let len = (total - offset).min(step);
            let part = BlobPart { hash, kind, total_len: total, offset, len, data: Vec::new() };
            self.blob_parts.push(PendingPart { part, data: data.clone() });
            self.blob_bytes += len as usize + 64;
            if self.blob_bytes >= self.opts.blob_chunk_bytes {
                self.flush_blobs();
            }
            offset += len;
            if offset >= total {
                break;
            }
        }
        self.stats.blobs += 1;
    }

    fn flush_pending(&mut self) {
        self.flush_calls();
        self.pending_since = None;
    }

    fn flush_blobs(&mut self) {
        if self.blob_parts.is_empty() {
            return;
        }
        let parts = std::mem::take(&mut self.blob_parts);
        self.blob_bytes = 0;
        let blobs = parts.iter().filter(|p| p.part.offset == 0).map(|p| (p.part.hash, p.part.total_len)).collect();
        let n = parts.len() as u32;
        // GPU code is most of a trace's bytes and compresses far better at a higher level.
        let level = if parts.iter().any(|p| p.part.kind == BlobKind::CodeImage) {
            self.opts.zstd_level.max(self.opts.code_zstd_level)
        } else if self.opts.store_data_blobs {
            STORE
        } else {
            self.opts.zstd_level
        };
        self.submit_at(ChunkKind::Blobs, Payload::Blobs(parts), 0, n, blobs, level);
    }

    /// Blobs first: a call chunk never precedes the blobs its records reference.
    fn flush_calls(&mut self) {
        self.flush_blobs();
        if self.calls.is_empty() {
            return;
        }
        let first = self.calls.first_seq();
        let n = self.calls.len() as u32;
        let bytes = self.calls.finish();
        let level = if self.launched { self.opts.zstd_level } else { self.opts.setup_zstd_level };
        self.submit_at(ChunkKind::Calls, Payload::Encoded(bytes), first, n, Vec::new(), level);
    }

    fn submit_at(
        &mut self,
        kind: ChunkKind,
        payload: Payload,
        first_seq: u64,
        records: u32,
        blobs: Vec<(Hash128, u64)>,
        level: i32,
    ) {
        let (reply, rx) = bounded(1);
        let job = Job { kind, payload, level, reply };
        match &self.jobs {
            Some(tx) => {
                if let Err(e) = tx.send(job) {
                    compress(e.into_inner(), &mut self.inline_cctx);
                }
            }
            None => compress(job, &mut self.inline_cctx),
        }
        self.in_flight.push_back(InFlight { rx, first_seq, records, blobs });
        let limit = self.workers.len().max(1) * 2;
        self.drain(limit);
    }

    /// Write finished chunks in order until at most `keep` are in flight.
    fn drain(&mut self, keep: usize) {
        while self.in_flight.len() > keep {
            let Some(f) = self.in_flight.pop_front() else {
                break;
            };
            match f.rx.recv() {
                Ok(done) => self.write_chunk(done, f.first_seq, f.records, f.blobs),
                Err(_) => self.fail("compression thread died".into()),
            }
        }
    }

    fn write_chunk(&mut self, done: Done, first_seq: u64, records: u32, blobs: Vec<(Hash128, u64)>) {
        if self.shared.failed.load(Ordering::Relaxed) {
            return;
        }
        let mut done = done;
        let stored = done.framed.get(CHUNK_HEADER_LEN..).unwrap_or_default();
        let header = ChunkHeader {
            kind: done.kind as u8,
            codec: done.codec,
            flags: 0,
            stored_len: stored.len() as u32,
            raw_len: done.raw_len,
            checksum: xxhash_rust::xxh3::xxh3_64(stored),
        };
        let offset = self.pos;
        if let Some(h) = done.framed.get_mut(..CHUNK_HEADER_LEN) {
            h.copy_from_slice(&header.encode());
        }
        // One write per chunk, so a killed process leaves whole chunks or a short tail.
        if let Err(e) = self.out.write_all(&done.framed) {
            self.fail(format!("write at offset {offset}: {e}"));
            return;
        }
        let ordinal = self.index.chunks.len() as u32;
        for (hash, len) in blobs {
            self.index.blobs.push(BlobLocation { hash, chunk: ordinal, len });
        }
        self.index.chunks.push(ChunkEntry {
            kind: done.kind as u8,
            offset,
            stored_len: header.stored_len,
            first_seq,
            records,
        });
        self.pos += done.framed.len() as u64;
        if let Some(max) = self.opts.max_file_bytes.filter(|&m| self.pos >= m) {
            if !self.shared.limited.swap(true, Ordering::Relaxed) {
                if let Ok(mut m) = self.shared.limit_message.lock() {
                    *m = Some(format!(
                        "trace size limit of {max} bytes reached near call #{first_seq}; the rest of the run is not \
                         recorded (raise it with --max-size)"
                    ));
                }
            }
        }
        self.stats.chunks += 1;
        self.stats.raw_bytes += u64::from(done.raw_len);
        self.stats.stored_bytes += u64::from(header.stored_len);
    }

    fn write_index(&mut self) {
        self.index.calls = self.stats.calls;
        self.index.dropped_duplicate_blobs = self.shared.duplicates.load(Ordering::Relaxed);
        let raw = encode_index(&self.index);
        let index_offset = self.pos;
        let (reply, rx) = bounded(1);
        compress(
            Job { kind: ChunkKind::Index, payload: Payload::Encoded(raw), level: self.opts.zstd_level, reply },
            &mut self.inline_cctx,
        );
        if let Ok(done) = rx.recv() {
            self.write_chunk(done, 0, 0, Vec::new());
        }
        if self.shared.failed.load(Ordering::Relaxed) {
            return;
        }
        if let Err(e) = self.out.write_all(&encode_trailer(index_offset)) {
            self.fail(format!("write trailer at offset {}: {e}", self.pos));
            return;
        }
        self.pos += crate::format::TRAILER_LEN as u64;
        self.sync_out();
    }
}
