//! What a hook slot does on each call, decided once from the API table: the recording path
//! (folded query, raw call, full record), the arena's part, and whether the call can complete
//! pending copies or makes the program wait. A call reads one small entry instead of asking
//! the table, the arena, both plans and the diagnostics mode in turn.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use gpuless_analyzer::api::{self, ApiFunction, ArgKind, Direction, HandleKind, SyncClass};

use crate::diag::{diag, Diag};
use crate::driver::libcuda_symbol;
use crate::hooks::{HOOKS, SLOTS};
use crate::hot::HOT;
use crate::{arena, fold, hostview, pending, raw};

/// How a slot's calls are recorded.
#[derive(Clone, Copy)]
pub enum Path {
    /// Passed straight through (`GPULESS_DIAG=hooks`).
    Pass,
    /// A query folded into its previous record when the answer repeats (`fold.rs`).
    Fold(fold::Plan),
    /// Kept raw when [`raw::Plan::fits`], the record built by the writer (`raw.rs`).
    Raw(raw::Plan),
    /// Captured and recorded in full on the calling thread.
    Full,
}

/// One slot's entry, in a cache line of its own (a call reads one line of the entries).
#[repr(align(64))]
pub struct Slot {
    /// The real function (0 until known): read with the rest of the entry, one cache line.
    real: AtomicUsize,
    /// The recording path.
    pub path: Path,
    /// The API table's function.
    pub func: &'static ApiFunction,
    /// What the arena does with the call, if anything.
    pub arena: Option<arena::Op>,
    /// The per-thread default stream variant (`_ptsz`, `_ptds`).
    pub per_thread: bool,
    /// Whether a successful call may complete pending device-to-host copies (`pending.rs`).
    pub completes: bool,
    /// Whether the program waits for the device in this call (its records are handed over).
    pub waits: bool,
    /// `cuInit`: opens the trace.
    pub init: bool,
    /// `GPULESS_DIAG=selftime`: the call is timed.
    pub timed: bool,
    /// A `stable` query on the folding path: repeats are answered from the memo (`fold.rs`).
    pub stable: bool,
    /// A call that may change what stable queries answer: it starts a new epoch.
    pub invalidates: bool,
    /// What the call does to mirrored managed or mapped memory (`hostview.rs`), if anything.
    pub hostview: Option<hostview::Op>,
    /// A call that may submit device work: mirrored memory the host changed is stored first.
    pub submits: bool,
    /// A call that runs kernels (a launch, a graph launch): the device may write mirrored
    /// memory from here until the next synchronization.
    pub runs_kernels: bool,
    /// `cuGetExportTable`: its table may be measured (`export_tables.rs`).
    pub export_table: bool,
    /// Shares memory or events with other processes (`=local(share)`): under `gpuless record`
    /// the arena's memory is shared by the recorder (`ipc.rs`).
    pub shares: bool,
    /// The argument holding a function or kernel handle the call takes (`functions.rs`).
    pub func_in: Option<u8>,
    /// The argument where a handle-creating call writes a function or kernel handle.
    pub func_out: Option<u8>,
}

impl Slot {
    /// The real function behind slot `slot` (this entry): as handed out by `cuGetProcAddress`,
    /// else libcuda's export of the same name (programs that link libcuda directly).
    #[inline]
    pub fn real(&self, slot: usize) -> Option<*mut c_void> {
        let v = self.real.load(Ordering::Acquire);
        if v != 0 {
            return Some(v as *mut c_void);
        }
        let p = libcuda_symbol(HOOKS.get(slot)?.cname);
        if p.is_null() {
            return None;
        }
        self.real.store(p as usize, Ordering::Release);
        Some(p)
    }
}

/// Records the real address behind `slot`.
pub fn set_real(slot: usize, addr: *mut c_void) {
    if let Some(s) = get(slot) {
        s.real.store(addr as usize, Ordering::Release);
    }
}

fn make(slot: usize) -> Option<Slot> {
    let hook = HOOKS.get(slot)?;
    let func = api::get(hook.func)?;
    let init = func.name == "cuInit";
    let shares = func.disposition == gpuless_analyzer::api::Disposition::Local(gpuless_analyzer::api::LocalRule::Share);
    let path = if diag() == Diag::HooksOnly && !init {
        Path::Pass
    } else if shares {
        // The recorder may answer it (`ipc.rs`): the full path, which asks.
        Path::Full
    } else if let Some(p) = fold::plan(func.id) {
        Path::Fold(*p)
    } else if let Some(p) = raw::plan(func.id) {
        Path::Raw(*p)
    } else {
        Path::Full
    };
    let completes = pending::completes(func);
    Some(Slot {
        real: AtomicUsize::new(0),
        stable: func.stable && matches!(path, Path::Fold(_)) && !completes,
        invalidates: func.may_change_answers(),
        timed: diag() == Diag::SelfTime,
        path,
        func,
        arena: arena::op(func.id),
        per_thread: hook.variant.per_thread,
        completes,
        waits: matches!(func.sync, SyncClass::CtxSync | SyncClass::StreamSync | SyncClass::EventSync),
        init,
        hostview: hostview::op(func.id),
        export_table: func.name == "cuGetExportTable",
        shares,
        func_in: func
            .args
            .iter()
            .position(|a| {
                a.dir == Direction::In && matches!(a.kind, ArgKind::Handle(HandleKind::Function | HandleKind::Kernel))
            })
            .and_then(|i| u8::try_from(i).ok()),
        func_out: (func.sync == SyncClass::CreatesHandle)
            .then(|| {
                func.args.iter().position(|a| {
                    a.dir == Direction::Out
                        && matches!(a.kind, ArgKind::Handle(HandleKind::Function | HandleKind::Kernel))
                })
            })
            .flatten()
            .and_then(|i| u8::try_from(i).ok()),
        runs_kernels: func.args.iter().any(|a| a.kind == ArgKind::KernelParams)
            || (func.args.iter().any(|a| a.kind == ArgKind::Handle(HandleKind::GraphExec))
                && func.args.iter().any(|a| a.kind == ArgKind::Handle(HandleKind::Stream))),
        submits: matches!(
            func.sync,
            SyncClass::Async
                | SyncClass::HostToDevice
                | SyncClass::CopyAnyDirection
                | SyncClass::CopyAnyDirectionAsync
                | SyncClass::DeviceToHost
                | SyncClass::DeviceToHostAsync
        ),
    })
}

/// The entry of hook slot `slot`. The entries' address is kept in the line every hooked call
/// reads anyway (`hot.rs`), not in a line of its own.
#[inline]
pub fn get(slot: usize) -> Option<&'static Slot> {
    let p = HOT.slots.load(Ordering::Acquire);
    let all: &'static [Option<Slot>; SLOTS] = if p.is_null() {
        build()
    } else {
        // SAFETY: a non-null pointer is the array `build` made, kept for the whole process.
        unsafe { &*(p as *const [Option<Slot>; SLOTS]) }
    };
    all.get(slot)?.as_ref()
}

/// Builds the entries once (the first hooked call; racing first calls build one).
#[cold]
#[inline(never)]
fn build() -> &'static [Option<Slot>; SLOTS] {
    static BUILT: OnceLock<Box<[Option<Slot>; SLOTS]>> = OnceLock::new();
    let all = BUILT.get_or_init(|| Box::new(std::array::from_fn(make)));
    HOT.slots.store(all.as_ptr() as *mut (), Ordering::Release);
    all
}

#[cfg(test)]
mod tests {
    /// An entry is one cache line.
    #[test]
    fn a_slot_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Option<super::Slot>>(), 64);
    }
}
