//! What a recording thread keeps for itself, in one thread-local. In a preloaded library every
//! Rust thread-local access is a call into the dynamic loader (`__tls_get_addr`); a launch made
//! six of them and a remembered query two. Now a hooked call takes the thread's [`Lane`] once and
//! hands it down, finding it through an initial-exec TLS word (`tls.rs`). With that, `hot.rs` and
//! this struct's layout, a remembered `cuCtxGetDevice` adds 10.5 first-level read misses to the
//! program's thread instead of 14.5 (`scripts/cold-bench/misses.sh`, callgrind's model).

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use crate::memo::Entry;
use crate::tls;

/// Entries of a thread's recent questions (`fold.rs`), by a hash of the question.
pub(crate) const MEMO: usize = 2048;
/// Entries of a thread's layout cache (`capture.rs`), by a hash of the function handle.
pub(crate) const LAYOUTS: usize = 512;

/// A kernel's parameter layout: (offset, size) of each parameter (`capture.rs`).
/// Layouts live as long as the process (one per kernel handle): a launch refers to its
/// kernel's without a reference count shared with the writer thread.
pub(crate) type Layout = &'static [(u32, u32)];

/// A layout and the bytes its parameters span (the packed size of a launch's parameters).
pub(crate) type Packing = (Layout, u32);

/// One thread's recording state. The fields every remembered query reads come first, in the
/// first cache line (`repr(C)`, aligned to the line): such a query touches one line of it.
#[repr(C, align(64))]
pub(crate) struct Lane {
    /// Sequence number of the hooked call this thread is inside, if any.
    pub current: Cell<Option<u64>>,
    /// The last time this thread read the clock.
    pub last_ns: Cell<u64>,
    /// Recent questions and their answers, found without the batch lock (`fold.rs`).
    pub recent: RefCell<Vec<Option<Arc<Entry>>>>,
    /// Whether `counted` may miss some: the next hand-over visits every question.
    pub scan: Cell<bool>,
    /// Recent kernel parameter layouts, found without a lock (`capture.rs`).
    pub layouts: RefCell<Vec<(u64, Packing)>>,
    /// Remembered questions counted since the last hand-over (`fold.rs`).
    pub counted: RefCell<Vec<Arc<Entry>>>,
    /// OS thread id (0 until asked).
    tid: Cell<u64>,
}

impl Lane {
    pub(crate) fn new() -> Self {
        Self::with_tables(MEMO, LAYOUTS)
    }

    /// A lane whose memo and layout cache have these many entries (0: nothing is found in
    /// them, nothing kept).
    fn with_tables(memo: usize, layouts: usize) -> Self {
        Lane {
            current: Cell::new(None),
            tid: Cell::new(0),
            last_ns: Cell::new(0),
            recent: RefCell::new(vec![None; memo]),
            layouts: RefCell::new(vec![(0, (&[], 0)); layouts]),
            counted: RefCell::new(Vec::new()),
            scan: Cell::new(false),
        }
    }

    /// The caller's OS thread id.
    pub fn tid(&self) -> u64 {
        if self.tid.get() == 0 {
            // SAFETY: gettid has no preconditions.
            self.tid.set(unsafe { libc::gettid() } as u64);
        }
        self.tid.get()
    }

    /// The time now, remembered as this thread's last.
    pub fn stamp(&self) -> u64 {
        let t = crate::clock::now_ns();
        self.last_ns.set(t);
        t
    }
}

/// Owns this thread's lane; its destructor (thread exit) clears the fast pointer first.
struct Owner(Box<Lane>);

impl Drop for Owner {
    fn drop(&mut self) {
        tls::set::<{ tls::LANE }>(std::ptr::null());
    }
}

thread_local! {
    static LANE: Owner = {
        let owner = Owner(Box::new(Lane::new()));
        tls::set::<{ tls::LANE }>(&*owner.0 as *const Lane as *const ());
        owner
    };
}

/// Runs `f` with this thread's lane; while the thread is being torn down (its lane destroyed),
/// with a lane of this call's own, so that calls made from other thread-local destructors are
/// still recorded.
#[inline]
pub(crate) fn with<R>(f: impl FnOnce(&Lane) -> R) -> R {
    let p = tls::get::<{ tls::LANE }>() as *const Lane;
    if !p.is_null() {
        // SAFETY: a non-null word is this thread's lane, owned by `LANE`, whose destructor
        // clears it before the lane is freed; only this thread reads it.
        return f(unsafe { &*p });
    }
    slow(f)
}

/// [`with`] before this thread's first hooked call, where there are no TLS words, and during
/// the thread's teardown.
#[cold]
#[inline(never)]
fn slow<R>(f: impl FnOnce(&Lane) -> R) -> R {
    let mut f = Some(f);
    if let Ok(Some(r)) = LANE.try_with(|l| f.take().map(|f| f(&l.0))) {
        return r;
    }
    match f.take() {
        Some(f) => {
            // Without tables (nothing is found in them, nothing kept): no allocation per call.
            // The thread's own list of counted questions is gone with its lane.
            let lane = Lane::with_tables(0, 0);
            lane.scan.set(true);
            f(&lane)
        }
        None => unreachable!("the lane's closure returned"),
    }
}

/// The last time this thread read the clock (0 before it did).
pub(crate) fn last_ns() -> u64 {
    with(|l| l.last_ns.get())
}

/// The caller's OS thread id (cached per thread).
pub(crate) fn tid() -> u64 {
    with(Lane::tid)
}

/// Marks the call `seq` as the one this thread is inside, so that driver calls made from it
/// name it as their parent; returns the previous mark, for [`leave`].
pub(crate) fn enter(seq: u64) -> Option<u64> {
    with(|l| l.current.replace(Some(seq)))
}

/// Restores the mark [`enter`] replaced.
pub(crate) fn leave(previous: Option<u64>) {
    with(|l| l.current.set(previous));
}

#[cfg(test)]
mod tests {
    /// What a remembered query reads of its lane lies in the lane's first cache line.
    #[test]
    fn a_query_reads_one_line_of_the_lane() {
        assert!(std::mem::offset_of!(super::Lane, scan) < 64);
        assert_eq!(std::mem::align_of::<super::Lane>(), 64);
    }
}
