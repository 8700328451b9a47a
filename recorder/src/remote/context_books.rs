//! The contexts' books: each thread's context stack (the current context on top, its device
//! beside it), each device's primary context (handle, retains, flags), the contexts the program
//! created and destroyed with their devices, peer access between contexts, and the events the
//! program destroyed. The session has one context per device on the server (its primary
//! context) whatever the program creates; these books give the answers the driver gives on the
//! program's side of it (the calls that read and change them: `local/contexts.rs`).
//!
//! A handle the program destroyed is answered as the driver answers it (measured on driver 580,
//! `testdata/cuda/suite/driver_answers.c`): a destroyed context named as an argument is
//! `CUDA_ERROR_INVALID_CONTEXT`, a destroyed event queried or synchronized is
//! `CUDA_ERROR_CONTEXT_IS_DESTROYED` ([`destroyed`]) — here, before anything goes to the server,
//! which no longer knows the handle. Client handles are never handed out twice, so a destroyed
//! one stays one.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use gpuless_analyzer::api::{ApiFunction, ArgKind, Direction, HandleKind, SyncClass};

use super::handles::new_handle;

/// `CUDA_ERROR_INVALID_CONTEXT`.
const INVALID_CONTEXT: u32 = 201;
/// `CUDA_ERROR_CONTEXT_IS_DESTROYED`.
pub(crate) const CONTEXT_IS_DESTROYED: u32 = 709;

/// What the client keeps about contexts.
#[derive(Default)]
pub(crate) struct Books {
    /// Each device's primary context, once asked for (same handle every time).
    pub(crate) primary: HashMap<u32, u64>,
    /// Retains of each device's primary context.
    pub(crate) retained: HashMap<u32, u32>,
    /// Context flags as the program set them per device (`cuDevicePrimaryCtxSetFlags`,
    /// `cuCtxSetFlags`, `cuCtxCreate`).
    pub(crate) flags: HashMap<u32, u64>,
    /// `cuCtxSetCacheConfig`'s last value.
    pub(crate) cache_config: u64,
    /// Contexts the program created (`cuCtxCreate`) and has not destroyed, with their devices.
    pub(crate) created: HashMap<u64, u32>,
    /// Peer access the program enabled: (context, peer context).
    pub(crate) peers: HashSet<(u64, u64)>,
    /// Contexts the program destroyed.
    destroyed_contexts: HashSet<u64>,
    /// Events the program destroyed (`cuEventDestroy`).
    destroyed_events: HashSet<u64>,
}

impl Books {
    /// Context `ctx` is destroyed from now on.
    pub(crate) fn context_destroyed(&mut self, ctx: u64) {
        self.destroyed_contexts.insert(ctx);
        ANY_DESTROYED.store(true, Ordering::Relaxed);
    }

    /// Event `e` is destroyed from now on.
    pub(crate) fn event_destroyed(&mut self, e: u64) {
        self.destroyed_events.insert(e);
        ANY_DESTROYED.store(true, Ordering::Relaxed);
    }
}

static BOOKS: Mutex<Option<Books>> = Mutex::new(None);

/// Whether any context or event was destroyed: until then no call's handles need looking up.
static ANY_DESTROYED: AtomicBool = AtomicBool::new(false);

/// `f` over the books, locked.
pub(crate) fn books<R>(f: impl FnOnce(&mut Books) -> R) -> R {
    let mut g = BOOKS.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(Books::default))
}

thread_local! {
    /// The calling thread's current context (0: none): the top of its context stack. A plain
    /// word, so that it is still there for calls made while the thread's locals are destroyed
    /// (C++ static destructors at exit: cuFFT's plan cache calls `cuCtxGetCurrent`).
    static CURRENT: Cell<u64> = const { Cell::new(0) };
    /// The rest of the stack, below the top (`cuCtxPushCurrent`, `cuCtxCreate`).
    static BELOW: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    /// The current context's device (0 with none).
    static DEVICE: Cell<u32> = const { Cell::new(0) };
}

/// Device 0's primary context's handle (the same every time; the driver's private table hands
/// it out without a retain).
pub(crate) fn primary_context() -> u64 {
    primary_of(0)
}

/// Device `dev`'s primary context's handle.
pub(crate) fn primary_of(dev: u32) -> u64 {
    books(|b| *b.primary.entry(dev).or_insert_with(new_handle))
}

/// The calling thread's current context (0: none).
pub(crate) fn current_context() -> u64 {
    CURRENT.with(Cell::get)
}

/// The device of the calling thread's current context (0 with none).
pub(crate) fn current_device() -> u32 {
    DEVICE.try_with(Cell::get).unwrap_or(0)
}

/// The device of context `ctx` (a primary context's or one the program created; 0 for any
/// other).
pub(crate) fn device_of(ctx: u64) -> u32 {
    if ctx == 0 {
        return 0;
    }
    books(|b| {
        b.created.get(&ctx).copied().or_else(|| b.primary.iter().find(|(_, &h)| h == ctx).map(|(&d, _)| d)).unwrap_or(0)
    })
}

/// `ctx` is current now: its device is the thread's current device.
fn became_current(ctx: u64) {
    // One device (every session but one of several GPUs): no books to look in.
    let d = if super::devices::count() > 1 { device_of(ctx) } else { 0 };
    let _ = DEVICE.try_with(|c| c.set(d));
}

/// Replaces the top of the stack (an empty stack gets `ctx` as its only entry); a null context
/// pops it, so that the one below becomes current (as the driver does).
pub(crate) fn set_current(ctx: u64) {
    if ctx != 0 {
        CURRENT.with(|c| c.set(ctx));
        became_current(ctx);
    } else {
        pop_current();
    }
}

/// Pushes `ctx`: it becomes current, the one that was stays below it.
pub(crate) fn push_current(ctx: u64) {
    let below = CURRENT.with(|c| c.replace(ctx));
    if below != 0 {
        let _ = BELOW.try_with(|b| b.borrow_mut().push(below));
    }
    became_current(ctx);
}

/// Pops the top of the stack: the context that was current (0: none); the one below it is
/// current afterwards.
pub(crate) fn pop_current() -> u64 {
    let next = BELOW.try_with(|b| b.borrow_mut().pop()).ok().flatten().unwrap_or(0);
    became_current(next);
    CURRENT.with(|c| c.replace(next))
}

/// `cuDevicePrimaryCtxRetain`'s handle: device `dev`'s primary context, retained once more.
pub(crate) fn retain_primary(dev: u32) -> u64 {
    books(|b| {
        *b.retained.entry(dev).or_insert(0) += 1;
        *b.primary.entry(dev).or_insert_with(new_handle)
    })
}

/// A context `f` (`cuCtxCreate`) created as `h` on its device: pushed onto the thread's stack
/// on top of the current one, its flags kept.
pub(crate) fn created(f: &ApiFunction, raw: &[u64], h: u64) {
    let arg = |n: &str| f.args.iter().position(|a| a.name == n).map(|i| raw.get(i).copied().unwrap_or(0));
    let (flags, dev) = (arg("flags"), arg("dev").unwrap_or(0) as u32);
    books(|b| {
        b.created.insert(h, dev);
        if let Some(fl) = flags {
            b.flags.insert(dev, fl);
        }
    });
    push_current(h);
}

/// The driver's answer to a call that names a handle the program destroyed: a destroyed
/// context in a context argument is `CUDA_ERROR_INVALID_CONTEXT` (but `cuCtxPushCurrent`,
/// which driver 580 accepts); a destroyed event queried or synchronized
/// (`cuEventQuery`, `cuEventSynchronize`, `cuEventElapsedTime`) is
/// `CUDA_ERROR_CONTEXT_IS_DESTROYED`. `None`: no destroyed handle among the arguments.
pub(crate) fn destroyed(f: &ApiFunction, raw: &[u64]) -> Option<u32> {
    if !ANY_DESTROYED.load(Ordering::Relaxed) {
        return None;
    }
    let event_use = f.sync == SyncClass::EventSync || f.sync == SyncClass::StateQuery;
    let handles = |kind: HandleKind| {
        f.args
            .iter()
            .enumerate()
            .filter(move |(_, a)| a.dir == Direction::In && a.kind == ArgKind::Handle(kind))
            .filter_map(|(i, _)| raw.get(i).copied())
            .filter(|&h| h != 0)
    };
    let mut contexts = handles(HandleKind::Context).peekable();
    let mut events = handles(HandleKind::Event).filter(|_| event_use).peekable();
    if contexts.peek().is_none() && events.peek().is_none() {
        return None;
    }
    books(|b| {
        if f.name != "cuCtxPushCurrent" && contexts.any(|h| b.destroyed_contexts.contains(&h)) {
            Some(INVALID_CONTEXT)
        } else if events.any(|h| b.destroyed_events.contains(&h)) {
            Some(CONTEXT_IS_DESTROYED)
        } else {
            None
        }
    })
}
