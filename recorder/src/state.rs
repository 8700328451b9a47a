//! Process-wide recorder state: whether recording is on, the trace writer (created once the
//! driver is initialized, so the header can name the GPU), and the end of the recording.

use std::ffi::{c_char, c_int, c_void};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use gpuless_traces::{BlobKind, BlobRef, CallRecord, Function, TraceMeta, TraceWriter, Value, WriterOptions};

use crate::diag::{diag, Diag};
use crate::fold::{self, Folds};
use crate::intercept::libcuda_symbol;
use crate::lane::Lane;
use crate::raw::{RawCall, Rec};

/// Environment variable naming the trace file to write.
pub const ENV_TRACE: &str = "GPULESS_TRACE";
/// Set to 1 to store device-to-host results in full instead of their hash.
pub const ENV_CAPTURE_OUTPUTS: &str = "GPULESS_CAPTURE_OUTPUTS";
/// `all` stores every entry of a fatbin; by default only the code the recording GPU runs.
pub const ENV_CODE: &str = "GPULESS_CODE";

/// Comma-separated API levels whose calls are counted besides the driver's (`runtime`,
/// `cublas`, `cublaslt`, `cudnn`, `nvrtc`, `other`); default all. The driver is always recorded.
pub const ENV_LEVELS: &str = "GPULESS_LEVELS";
/// Trace size limit in bytes; once reached the rest of the run is not recorded.
pub const ENV_MAX_SIZE: &str = "GPULESS_MAX_SIZE";
/// Threads compressing the trace (0: on the writer thread); default
/// [`gpuless_traces::default_compression_threads`].
pub const ENV_COMPRESS_THREADS: &str = "GPULESS_COMPRESS_THREADS";

/// Whether calls of `level` are recorded (`GPULESS_LEVELS`).
pub fn level_enabled(level: gpuless_analyzer::api::ApiLevel) -> bool {
    use gpuless_analyzer::api::ApiLevel;
    static LEVELS: OnceLock<Option<Vec<String>>> = OnceLock::new();
    let chosen = LEVELS.get_or_init(|| {
        std::env::var(ENV_LEVELS)
            .ok()
            .filter(|v| !v.trim().is_empty() && v.trim() != "all")
            .map(|v| v.split(',').map(|s| s.trim().to_ascii_lowercase()).collect())
    });
    level == ApiLevel::Driver || chosen.as_ref().is_none_or(|l| l.iter().any(|n| n == level.name()))
}

/// SM of the recording GPU (10·major + minor), known once the driver is initialized.
static DEVICE_SM: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Highest CUDA version a caller of `cuGetProcAddress` asked entry points for: the version of
/// the CUDA runtime (or library) the program was built with (1000·major + 10·minor).
static CUDA_VERSION: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Notes the `cudaVersion` argument of a `cuGetProcAddress` call.
pub fn note_cuda_version(v: c_int) {
    CUDA_VERSION.fetch_max(v, Ordering::Relaxed);
}

/// SM of the recording GPU, 0 before `cuInit`.
pub fn device_sm() -> u32 {
    DEVICE_SM.load(Ordering::Relaxed)
}

/// Sets the device's SM where no driver tells it (client mode: the session's device).
pub(crate) fn set_device_sm(sm: u32) {
    DEVICE_SM.store(sm, Ordering::Relaxed);
}

/// Whether fatbins are stored with every entry (`GPULESS_CODE=all`).
pub fn keep_all_code() -> bool {
    static ALL: OnceLock<bool> = OnceLock::new();
    *ALL.get_or_init(|| std::env::var(ENV_CODE).is_ok_and(|v| v == "all"))
}

use crate::hot::HOT;

/// Pauses or resumes recording (`diag::gpuless_diag_pause`).
pub(crate) fn pause(paused: bool) {
    HOT.paused.store(paused, Ordering::Relaxed);
}
static DISABLED: &AtomicBool = &HOT.disabled;
static SEQ: &AtomicU64 = &HOT.seq;

struct Config {
    path: Option<PathBuf>,
    capture_outputs: bool,
    start_unix_ns: u64,
}

fn config() -> &'static Config {
    static C: OnceLock<Config> = OnceLock::new();
    C.get_or_init(|| {
        let path = std::env::var_os(ENV_TRACE).filter(|p| !p.is_empty()).map(PathBuf::from);
        let start_unix_ns =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        if path.is_some() {
            crate::exits::note_owner();
            // SAFETY: registering plain extern "C" functions with the C library.
            unsafe {
                libc::atexit(at_exit);
                libc::pthread_atfork(None, None, Some(in_child));
            }
        }
        crate::clock::start();
        Config { path, capture_outputs: std::env::var(ENV_CAPTURE_OUTPUTS).is_ok_and(|v| v == "1"), start_unix_ns }
    })
}

/// Whether calls are being recorded.
pub fn enabled() -> bool {
    let on = match HOT.recording.load(Ordering::Relaxed) {
        0 => {
            let on = config().path.is_some();
            HOT.recording.store(if on { 1 } else { 2 }, Ordering::Relaxed);
            on
        }
        r => r == 1,
    };
    on && !DISABLED.load(Ordering::Relaxed) && !HOT.paused.load(Ordering::Relaxed)
}

/// Whether device-to-host results are stored in full.
pub fn capture_outputs() -> bool {
    config().capture_outputs
}

/// Nanoseconds since the recorder started.
pub fn now_ns() -> u64 {
    crate::clock::now_ns()
}

/// The next sequence number.
pub fn next_seq() -> u64 {
    SEQ.fetch_add(1, Ordering::Relaxed)
}

/// The first of `n` consecutive sequence numbers.
pub fn next_seqs(n: u64) -> u64 {
    SEQ.fetch_add(n, Ordering::Relaxed)
}

/// Stops recording after an internal error, saying so once; the program runs on unchanged.
pub fn fail(what: &str) {
    if !DISABLED.swap(true, Ordering::Relaxed) {
        eprintln!("gpuless: recorder disabled, calls now pass through untouched: {what}");
    }
}

enum Sink {
    /// Before the driver is initialized: records wait here for the header's GPU facts.
    Pending(Vec<CallRecord>, Vec<(BlobKind, Vec<u8>)>),
    Open(TraceWriter),
    Closed,
}

static SINK: RwLock<Sink> = RwLock::new(Sink::Pending(Vec::new(), Vec::new()));
static OPENING: Mutex<()> = Mutex::new(());

/// Records a thread has built and not yet handed to the writer, with the bytes its raw calls
/// refer to. Handing them over in batches makes the per-record cost a push onto this
/// (uncontended) vector instead of a queue operation shared with the writer thread.
#[derive(Default)]
struct Chunk {
    recs: Vec<Rec>,
    /// Kernel parameters and launch attributes of the raw calls in `recs`.
    bytes: Vec<u8>,
    /// The folded queries' repeat records of the hand-over, after `recs` (their sequence
    /// numbers are the newest): kept apart, they are moved, not copied into `recs`' slots.
    repeats: Vec<crate::fold::Repeats>,
    /// The OS thread whose calls these are (raw calls do not repeat it).
    thread: u64,
}

impl Chunk {
    fn with_capacity() -> Self {
        // Small at first: a program that synchronizes often hands over small chunks (and a
        // new chunk's memory is faulted in on the program's thread); chunks grow to a batch
        // and keep their capacity when the writer gives them back.
        Chunk {
            recs: Vec::with_capacity(FIRST_BATCH),
            bytes: Vec::with_capacity(FIRST_BATCH_BYTES),
            repeats: Vec::new(),
            thread: 0,
        }
    }

    /// Asks for the cache lines the next record and its bytes will be written to, with intent
    /// to write: the writer thread last read them, and taking them back from its core while
    /// the program runs (instead of at the next recorded call) took about 60 ns off a launch
    /// inside PyTorch.
    fn prepare_next(&self) {
        let rec = std::mem::size_of::<Rec>();
        if self.recs.len() < self.recs.capacity() {
            // SAFETY: inside the vector's allocation (capacity); prefetches never fault.
            prefetch_write(unsafe { self.recs.as_ptr().add(self.recs.len()) }.cast(), rec);
        }
        let spare = self.bytes.capacity() - self.bytes.len();
        // SAFETY: as above.
        prefetch_write(unsafe { self.bytes.as_ptr().add(self.bytes.len()) }, spare.min(NEXT_BYTES));
    }

    fn full(&self) -> bool {
        self.recs.len() >= BATCH || self.bytes.len() >= BATCH_BYTES
    }
}

/// A thread's batch: its chunk and the queries it folded since the last hand-over (`fold.rs`),
/// behind one lock the end of the recording can take from another thread.
#[derive(Default)]
struct Batch {
    chunk: Chunk,
    folds: Folds,
}

/// Bytes of kernel parameters prepared for the next raw call (most launches take fewer).
const NEXT_BYTES: usize = 384;

/// Prefetches `len` bytes from `p` for writing (`PREFETCHW`), where the CPU has it.
#[inline]
fn prefetch_write(p: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let mut off = 0;
        while off < len {
            // SAFETY: a prefetch hint: no memory access, never faults.
            unsafe {
                std::arch::asm!("prefetchw [{0}]", in(reg) p.wrapping_add(off), options(nostack, preserves_flags, readonly))
            };
            off += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}

/// Records per hand-over.
const BATCH: usize = 4096;
/// Bytes (kernel parameters) per hand-over, at most about.
const BATCH_BYTES: usize = 1 << 20;
/// A new chunk's room, in records and bytes.
const FIRST_BATCH: usize = 256;
const FIRST_BATCH_BYTES: usize = 64 << 10;

/// Emptied chunks the writer gave back: a thread refills warm memory instead of fresh.
static SPARE: Mutex<Vec<Chunk>> = Mutex::new(Vec::new());
/// Most spare chunks kept.
const SPARE_MAX: usize = 4;

fn spare() -> Chunk {
    SPARE.lock().ok().and_then(|mut s| s.pop()).unwrap_or_else(Chunk::with_capacity)
}

/// Builds the records of a chunk (on the writer thread) and keeps the emptied chunk.
fn build(mut c: Chunk) -> Vec<CallRecord> {
    let bytes = std::mem::take(&mut c.bytes);
    let thread = c.thread;
    let mut out: Vec<CallRecord> = c.recs.drain(..).map(|r| r.into_record(&bytes, thread)).collect();
    out.extend(c.repeats.drain(..).map(crate::fold::Repeats::into_record));
    c.bytes = bytes;
    c.bytes.clear();
    if let Ok(mut s) = SPARE.lock() {
        if s.len() < SPARE_MAX {
            s.push(c);
        }
    }
    out
}

/// Every thread's batch, so the end of the recording can collect them all.
static BATCHES: Mutex<Vec<Arc<Mutex<Batch>>>> = Mutex::new(Vec::new());

/// A thread's own batch; handed over when the thread exits.
struct Local(Arc<Mutex<Batch>>);

impl Drop for Local {
    fn drop(&mut self) {
        crate::tls::set::<{ crate::tls::BATCH }>(std::ptr::null());
        hand_over(&self.0, None);
        if let Ok(mut all) = BATCHES.lock() {
            all.retain(|b| !Arc::ptr_eq(b, &self.0));
        }
    }
}

thread_local! {
    static LOCAL: Local = {
        let mut chunk = Chunk::with_capacity();
        chunk.thread = crate::record::tid();
        let b = Arc::new(Mutex::new(Batch { chunk, folds: Folds::default() }));
        if let Ok(mut all) = BATCHES.lock() {
            all.push(b.clone());
        }
        crate::tls::set::<{ crate::tls::BATCH }>(Arc::as_ptr(&b) as *const ());
        Local(b)
    };
}

/// Runs `f` with this thread's batch; `Err` while the thread is being torn down (its batch
/// handed over and gone). The batch is found through its TLS word (`tls.rs`), else `LOCAL`.
#[inline]
fn with_batch<R>(f: impl FnOnce(&Mutex<Batch>) -> R) -> Result<R, std::thread::AccessError> {
    let p = crate::tls::get::<{ crate::tls::BATCH }>() as *const Mutex<Batch>;
    if !p.is_null() {
        // SAFETY: a non-null word is this thread's batch, kept alive by `LOCAL`, whose
        // destructor clears the word before dropping it.
        return Ok(f(unsafe { &*p }));
    }
    LOCAL.try_with(|l| f(&l.0))
}

/// Queues a record.
pub fn emit(rec: CallRecord) {
    push(|_| Rec::Full(rec));
}

/// Queues a raw call; `make` builds it, appending the bytes it refers to (kernel parameters)
/// to the buffer it is handed. The writer builds its record.
pub fn emit_raw(make: impl FnOnce(&mut Vec<u8>) -> RawCall) {
    push(|bytes| Rec::Raw(make(bytes)));
}

fn push(make: impl FnOnce(&mut Vec<u8>) -> Rec) {
    let mut make = Some(make);
    let queued = with_batch(|l| {
        let mut b = l.lock().unwrap_or_else(|e| e.into_inner());
        let c = &mut b.chunk;
        if let Some(m) = make.take() {
            let rec = m(&mut c.bytes);
            c.recs.push(rec);
        }
        c.prepare_next();
        c.full()
    });
    match queued {
        Ok(true) => crate::lane::with(flush_thread),
        Ok(false) => {}
        // The thread is exiting and its batch is gone: hand the record over alone.
        Err(_) => {
            let mut c = Chunk { thread: crate::record::tid(), ..Chunk::default() };
            if let Some(m) = make.take() {
                let rec = m(&mut c.bytes);
                c.recs.push(rec);
            }
            send(c);
        }
    }
}

/// Hands this thread's records to the writer (at synchronizations, so a killed program
/// loses little).
/// `lane` is this thread's (`lane::with`).
pub fn flush_thread(lane: &Lane) {
    let _ = with_batch(|b| hand_over(b, Some(lane)));
}

/// Counts a query that repeats this thread's remembered answer; `true` when folded.
/// `confirmed` as in [`fold::repeat`].
pub fn fold(key: &fold::Key, answer: &fold::Answer, now_ns: u64, confirmed: u64, lane: &Lane) -> bool {
    with_batch(|b| b.lock().is_ok_and(|mut b| b.folds.fold(key, answer, now_ns, confirmed, lane))).unwrap_or(false)
}

/// Queues the record of a query not folded, remembering its answer for the next ones.
/// `confirmed` as in [`fold::repeat`].
pub fn emit_query(rec: CallRecord, key: fold::Key, answer: fold::Answer, confirmed: u64, lane: &Lane) {
    let replaced = with_batch(|b| b.lock().ok().and_then(|mut b| b.folds.remember(key, answer, &rec, confirmed, lane)));
    if let Ok(Some(repeats)) = replaced {
        push(|_| Rec::Repeats(repeats));
    }
    emit(rec);
}

#[cold]
#[inline(never)]
fn hand_over(b: &Mutex<Batch>, lane: Option<&Lane>) {
    let chunk = {
        let mut guard = b.lock().unwrap_or_else(|e| e.into_inner());
        let b = &mut *guard;
        b.folds.drain(lane, &mut b.chunk.repeats);
        if b.chunk.recs.is_empty() && b.chunk.repeats.is_empty() {
            return;
        }
        let mut next = spare();
        next.thread = b.chunk.thread;
        std::mem::replace(&mut b.chunk, next)
    };
    send(chunk);
}

fn send(chunk: Chunk) {
    if diag() == Diag::NoWrite {
        return;
    }
    if let Ok(s) = SINK.read() {
        match &*s {
            Sink::Open(w) => {
                if let Err(e) = w.records_with(move || build(chunk)) {
                    drop(s);
                    fail(&format!("trace writer: {e}"));
                }
                return;
            }
            Sink::Closed => return,
            Sink::Pending(..) => {}
        }
    }
    if let Ok(mut s) = SINK.write() {
        match &mut *s {
            Sink::Pending(pending, _) => {
                let Chunk { recs, bytes, repeats, thread } = chunk;
                pending.extend(recs.into_iter().map(|r| r.into_record(&bytes, thread)));
                pending.extend(repeats.into_iter().map(crate::fold::Repeats::into_record));
            }
            Sink::Open(w) => {
                let _ = w.records_with(move || build(chunk));
            }
            Sink::Closed => {}
        }
    }
}

/// Hands every thread's records to the writer (end of the recording).
fn flush_all() {
    let all: Vec<Arc<Mutex<Batch>>> = BATCHES.lock().map(|v| v.clone()).unwrap_or_default();
    for b in all {
        hand_over(&b, None);
    }
}

/// Stores a blob, returning its reference.
pub fn blob(kind: BlobKind, data: &[u8]) -> Value {
    if crate::remote::active() {
        let r = crate::remote::blob(kind, data);
        if config().path.is_none() {
            return r;
        }
        // `gpuless record --remote`: the trace keeps the bytes too (same hash).
    }
    if let Ok(s) = SINK.read() {
        match &*s {
            Sink::Open(w) => {
                return match w.blob(kind, data) {
                    Ok(r) => Value::Blob(r),
                    Err(e) => {
                        drop(s);
                        fail(&format!("trace writer: {e}"));
                        Value::Null
                    }
                };
            }
            Sink::Closed => return Value::Null,
            Sink::Pending(..) => {}
        }
    }
    let r = BlobRef { hash: gpuless_traces::Hash128::of(data), len: data.len() as u64 };
    if let Ok(mut s) = SINK.write() {
        if let Sink::Pending(_, blobs) = &mut *s {
            blobs.push((kind, data.to_vec()));
        }
    }
    Value::Blob(r)
}

type DriverGetVersion = unsafe extern "C" fn(*mut c_int) -> u32;
type DeviceGetName = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> u32;
type DeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> u32;
type DeviceGetUuid = unsafe extern "C" fn(*mut u8, c_int) -> u32;

fn driver_fn<T: Copy>(cname: &str) -> Option<T> {
    let p = libcuda_symbol(cname);
    // SAFETY: `T` is the function's C signature (size of a pointer), checked by callers.
    (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

/// Facts about device 0 for the header, asked of the real driver (not through hooks).
fn device_facts(meta: &mut TraceMeta) {
    use cudarc::driver::sys::CUdevice_attribute as A;
    // SAFETY: real driver functions with valid out-pointers; the driver is initialized.
    unsafe {
        if let Some(f) = driver_fn::<DriverGetVersion>("cuDriverGetVersion\0") {
            let mut v = 0;
            if f(&mut v) == 0 {
                meta.driver_version = v;
            }
        }
        if let Some(f) = driver_fn::<DeviceGetName>("cuDeviceGetName\0") {
            let mut buf = [0 as c_char; 256];
            if f(buf.as_mut_ptr(), 255, 0) == 0 {
                meta.gpu_name = std::ffi::CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned();
            }
        }
        if let Some(f) = driver_fn::<DeviceGetAttribute>("cuDeviceGetAttribute\0") {
            let (mut ma, mut mi) = (0, 0);
            if f(&mut ma, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR as c_int, 0) == 0
                && f(&mut mi, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR as c_int, 0) == 0
            {
                meta.sm = (ma * 10 + mi) as u32;
            }
        }
        if let Some(f) = driver_fn::<DeviceGetUuid>("cuDeviceGetUuid_v2\0") {
            let mut u = [0u8; 16];
            if f(u.as_mut_ptr(), 0) == 0 {
                meta.uuid = u.to_vec();
            }
        }
    }
}

fn base_meta() -> TraceMeta {
    let cmdline = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    TraceMeta {
        tool_version: format!("gpuless-recorder {}", env!("CARGO_PKG_VERSION")),
        command_line: cmdline
            .split(|&b| b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect(),
        start_time_unix_ns: config().start_unix_ns,
        pid: std::process::id(),
        hostname: hostname.trim().to_string(),
        ..TraceMeta::default()
    }
}

/// Opens the trace file once the driver is initialized (or at exit if it never was).
pub fn open(driver_ready: bool) {
    let _g = OPENING.lock();
    if !matches!(SINK.read().as_deref(), Ok(Sink::Pending(..))) {
        return;
    }
    let Some(path) = config().path.clone() else { return };
    // Not inside `config()`: starting a thread calls dlsym, which asks `config()` again.
    crate::signals::install();
    let mut meta = base_meta();
    meta.cuda_version = CUDA_VERSION.load(Ordering::Relaxed);
    if driver_ready {
        if crate::remote::active() {
            crate::remote::describe(&mut meta);
        } else {
            device_facts(&mut meta);
        }
        DEVICE_SM.store(meta.sm, Ordering::Relaxed);
        if !keep_all_code() {
            meta.extra.push(("code".into(), format!("sm_{} only", meta.sm)));
        }
        if let Some((base, size)) = crate::arena::reserve() {
            meta.arena_base = base;
            meta.arena_size = size;
            meta.extra.push(("arena_chunk".into(), gpuless_traces::arena::CHUNK.to_string()));
        }
    }
    // A child process that inherited the environment writes next to the first trace.
    let path = match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
        Ok(_) => path,
        Err(_) => {
            let mut p = path.into_os_string();
            p.push(format!(".{}", std::process::id()));
            PathBuf::from(p)
        }
    };
    let max_file_bytes = std::env::var(ENV_MAX_SIZE).ok().and_then(|v| v.parse::<u64>().ok()).filter(|&m| m > 0);
    // The writer's default queue (16 Ki messages, ~1 MiB): records travel in batches, one
    // message per hand-over, so a deeper queue only costs memory — 1 Mi slots were 56 MiB
    // written at cuInit, in every recorded process.
    let mut opts = WriterOptions { max_file_bytes, ..WriterOptions::default() };
    if let Some(n) = std::env::var(ENV_COMPRESS_THREADS).ok().and_then(|v| v.trim().parse::<usize>().ok()) {
        opts.compression_threads = n.min(64);
    }
    let writer = match TraceWriter::create(&path, &meta, opts) {
        Ok(w) => w,
        Err(e) => {
            let mut s = SINK.write().unwrap_or_else(|e| e.into_inner());
            *s = Sink::Closed;
            fail(&format!("cannot create {}: {e}", path.display()));
            return;
        }
    };
    let mut s = SINK.write().unwrap_or_else(|e| e.into_inner());
    if let Sink::Pending(recs, blobs) = std::mem::replace(&mut *s, Sink::Closed) {
        for (kind, data) in blobs {
            let _ = writer.blob_owned(kind, data);
        }
        // One message for what came before the trace opened (tens of thousands of kernel
        // registrations in a PyTorch process).
        let _ = writer.records(recs);
    }
    *s = Sink::Open(writer);
}

/// Ends the recording: unmodeled call counts, then the index; runs at process exit.
pub fn finish() {
    // A process that made no driver call (a shell, a helper tool, one that only registered
    // kernels with cudart) leaves no trace behind.
    if IN_CHILD.load(Ordering::Relaxed) {
        // A forked child's copy of the parent's writer has no thread behind it: finishing it
        // would wait for nothing. The parent finishes the trace.
        return;
    }
    let only_annotations = SEQ.load(Ordering::Relaxed) == crate::cudart::recorded();
    if config().path.is_none() || (only_annotations && crate::unmodeled::counts().0.is_empty()) {
        return;
    }
    open(false);
    crate::pending::flush_unsynchronized();
    flush_all();
    let (counts, overflow) = crate::unmodeled::counts();
    for (name, calls) in counts.into_iter().filter(|&(_, c)| c > 0) {
        let level = crate::unmodeled::level_of(&name);
        let mut r = CallRecord::new(next_seq(), level, Function::Other(name));
        r.timestamp_ns = now_ns();
        r.args = vec![Value::U64(calls)];
        emit(r);
    }
    for name in overflow {
        let level = crate::unmodeled::level_of(&name);
        let mut r = CallRecord::new(next_seq(), level, Function::Other(name));
        r.args = vec![Value::Null];
        emit(r);
    }
    flush_all();
    crate::diag::report();
    let w = {
        let mut s = SINK.write().unwrap_or_else(|e| e.into_inner());
        match std::mem::replace(&mut *s, Sink::Closed) {
            Sink::Open(w) => Some(w),
            _ => None,
        }
    };
    if let Some(w) = w {
        if let Err(e) = w.finish() {
            eprintln!("gpuless: finishing the trace failed: {e}");
        }
    }
}

extern "C" fn at_exit() {
    finish();
    // Calls made after this (other atexit handlers, late threads) pass through unrecorded.
    DISABLED.store(true, Ordering::Relaxed);
}

/// Set in a child forked without `exec`: its CUDA calls are not recorded (cleared once said).
static FORKED: AtomicBool = AtomicBool::new(false);
/// Set in a child forked without `exec`, for good: the writer it inherited is the parent's.
static IN_CHILD: AtomicBool = AtomicBool::new(false);

extern "C" fn in_child() {
    // The writer thread does not exist in a forked child: record nothing there.
    DISABLED.store(true, Ordering::Relaxed);
    FORKED.store(true, Ordering::Relaxed);
    IN_CHILD.store(true, Ordering::Relaxed);
    crate::signals::reset_in_child();
}

/// A call that is not recorded because recording is off: a forked child says so once, naming
/// the call (a child that `exec`s starts a recorder of its own and writes `TRACE.PID`).
pub fn unrecorded(name: &str) {
    if FORKED.load(Ordering::Relaxed) && FORKED.swap(false, Ordering::Relaxed) {
        eprintln!(
            "gpuless: process {} was forked from a recorded process without exec; its CUDA calls \
             (first: {name}) are not recorded. Run it through exec (e.g. multiprocessing's \
             'spawn' start method) to get a trace of its own",
            std::process::id()
        );
    }
}

/// Finishes the trace now (a fatal signal is being handled); later calls pass through.
pub fn finish_now() {
    finish();
    DISABLED.store(true, Ordering::Relaxed);
}
