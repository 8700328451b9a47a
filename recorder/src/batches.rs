//! Each recording thread's records on their way to the writer: queued in the thread's own
//! batch (with the queries it folded, `fold.rs`) and handed over in chunks — when a batch is
//! full, when the program waits for the device, when the thread ends, and at the end of the
//! recording ([`flush_all`]). The writer's thread builds the records of raw calls and folded
//! repeats (`raw.rs`, `fold.rs`) from a chunk ([`sink::records_with`]).

use std::sync::{Arc, Mutex};

use gpuless_traces::CallRecord;

use crate::diag::{diag, Diag};
use crate::fold::{self, Folds};
use crate::lane::Lane;
use crate::raw::{RawCall, Rec};
use crate::sink;

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
        chunk.thread = crate::lane::tid();
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
            let mut c = Chunk { thread: crate::lane::tid(), ..Chunk::default() };
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
    sink::records_with(move || build(chunk));
}

/// Hands every thread's records to the writer (end of the recording).
pub(crate) fn flush_all() {
    let all: Vec<Arc<Mutex<Batch>>> = BATCHES.lock().map(|v| v.clone()).unwrap_or_default();
    for b in all {
        hand_over(&b, None);
    }
}
