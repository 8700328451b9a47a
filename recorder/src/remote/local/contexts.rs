//! Contexts as the client keeps them: each thread's context stack (`cuCtxCreate` pushes the new
//! context, `cuCtxPopCurrent` pops and makes the one below current, `cuCtxSetCurrent` replaces
//! the top and with NULL pops it), the primary context's handle, retain count and flags, the
//! contexts the program created and destroyed, each context's device, peer access between
//! contexts, and the queries about them. The session has one context per device on the server
//! (its primary context) whatever the program creates; these books give the answers the driver
//! gives on the program's side of it. The calling thread's current device (the current
//! context's) is kept beside its stack: the session tells the executor where it changes.
//!
//! A handle the program destroyed is answered as the driver answers it (measured on driver 580,
//! `testdata/cuda/suite/driver_answers.c`): a destroyed context named as an argument is
//! `CUDA_ERROR_INVALID_CONTEXT`, a destroyed event queried or synchronized is
//! `CUDA_ERROR_CONTEXT_IS_DESTROYED` — here, before anything goes to the server, which no longer
//! knows the handle. Client handles are never handed out twice, so a destroyed one stays one.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use gpuless_analyzer::api::{ApiFunction, ArgKind, Direction, HandleKind, SyncClass};

use super::{is_client_handle, new_handle, put, Step, INVALID_CONTEXT};

/// `CUDA_ERROR_CONTEXT_IS_DESTROYED`.
const CONTEXT_IS_DESTROYED: u32 = 709;

/// `CUDA_ERROR_PEER_ACCESS_UNSUPPORTED`, `_ALREADY_ENABLED`, `_NOT_ENABLED`.
const PEER_ACCESS_UNSUPPORTED: u32 = 217;
const PEER_ACCESS_ALREADY_ENABLED: u32 = 704;
const PEER_ACCESS_NOT_ENABLED: u32 = 705;

#[derive(Default)]
struct Books {
    /// Each device's primary context, once asked for (same handle every time).
    primary: HashMap<u32, u64>,
    /// Retains of each device's primary context.
    retained: HashMap<u32, u32>,
    /// Context flags as the program set them per device (`cuDevicePrimaryCtxSetFlags`,
    /// `cuCtxSetFlags`, `cuCtxCreate`).
    flags: HashMap<u32, u64>,
    /// `cuCtxSetCacheConfig`'s last value.
    cache_config: u64,
    /// Contexts the program created (`cuCtxCreate`) and has not destroyed, with their devices.
    created: HashMap<u64, u32>,
    /// Peer access the program enabled: (context, peer context).
    peers: HashSet<(u64, u64)>,
    /// Contexts the program destroyed.
    destroyed_contexts: HashSet<u64>,
    /// Events the program destroyed (`cuEventDestroy`).
    destroyed_events: HashSet<u64>,
}

static BOOKS: Mutex<Option<Books>> = Mutex::new(None);

/// Whether any context or event was destroyed: until then no call's handles need looking up.
static ANY_DESTROYED: AtomicBool = AtomicBool::new(false);

fn books<R>(f: impl FnOnce(&mut Books) -> R) -> R {
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
    let d = if crate::remote::devices::count() > 1 { device_of(ctx) } else { 0 };
    let _ = DEVICE.try_with(|c| c.set(d));
}

/// Replaces the top of the stack (an empty stack gets `ctx` as its only entry); a null context
/// pops it, so that the one below becomes current (as the driver does).
fn set_current(ctx: u64) {
    if ctx != 0 {
        CURRENT.with(|c| c.set(ctx));
        became_current(ctx);
    } else {
        pop_current();
    }
}

/// Pushes `ctx`: it becomes current, the one that was stays below it.
fn push_current(ctx: u64) {
    let below = CURRENT.with(|c| c.replace(ctx));
    if below != 0 {
        let _ = BELOW.try_with(|b| b.borrow_mut().push(below));
    }
    became_current(ctx);
}

/// Pops the top of the stack: the context that was current (0: none); the one below it is
/// current afterwards.
fn pop_current() -> u64 {
    let next = BELOW.try_with(|b| b.borrow_mut().pop()).ok().flatten().unwrap_or(0);
    became_current(next);
    CURRENT.with(|c| c.replace(next))
}

/// `cuDevicePrimaryCtxRetain`'s handle: device `dev`'s primary context, retained once more.
pub(super) fn retain_primary(dev: u32) -> u64 {
    books(|b| {
        *b.retained.entry(dev).or_insert(0) += 1;
        *b.primary.entry(dev).or_insert_with(new_handle)
    })
}

/// A context `f` (`cuCtxCreate`) created as `h` on its device: pushed onto the thread's stack
/// on top of the current one, its flags kept.
pub(super) fn created(f: &ApiFunction, raw: &[u64], h: u64) {
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

/// `cuCtxEnablePeerAccess(peer, flags)` from the current context (`enable`), or
/// `cuCtxDisablePeerAccess(peer)`: the memory of the session's devices is mapped for every
/// device that can reach it, so this keeps the driver's answers (and errors) only; disabling
/// unmaps nothing (a kernel still reaches the peer's memory: more than the driver allows).
fn peer_access(peer: u64, flags: u64, enable: bool) -> u32 {
    let current = current_context();
    if current == 0 {
        return INVALID_CONTEXT;
    }
    let known = |ctx: u64| books(|b| b.created.contains_key(&ctx) || b.primary.values().any(|&h| h == ctx));
    if peer == 0 || !known(peer) {
        return INVALID_CONTEXT;
    }
    if enable && flags != 0 {
        return super::INVALID_VALUE;
    }
    let (me, other) = (device_of(current), device_of(peer));
    if enable && !crate::remote::devices::can_access(me, other) {
        return if me == other { super::INVALID_DEVICE } else { PEER_ACCESS_UNSUPPORTED };
    }
    books(|b| match enable {
        true if !b.peers.insert((current, peer)) => PEER_ACCESS_ALREADY_ENABLED,
        false if !b.peers.remove(&(current, peer)) => PEER_ACCESS_NOT_ENABLED,
        _ => 0,
    })
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

/// Context queries answered from the books; `None` for any other function.
///
/// # Safety
/// `raw` are the program's arguments to `f`, its out-pointers valid for their declared types.
pub(super) unsafe fn query(f: &ApiFunction, raw: &[u64]) -> Option<u32> {
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    let current = current_context();
    // SAFETY (whole match): out-pointers of the program, written at their declared widths.
    let st = unsafe {
        match f.name {
            "cuDevicePrimaryCtxGetState" => {
                let dev = w(0) as u32;
                let (flags, active) =
                    books(|b| (b.flags.get(&dev).copied().unwrap_or(0), b.retained.get(&dev).is_some_and(|&n| n > 0)));
                put(f, raw, 1, flags);
                put(f, raw, 2, u64::from(active));
                0
            }
            "cuCtxGetCurrent" => {
                put(f, raw, 0, current);
                0
            }
            // The current context's device (`cuCtxGetDevice_v2` names a context).
            "cuCtxGetDevice" => {
                let ctx = if f.args.len() > 1 && w(1) != 0 { w(1) } else { current };
                if ctx == 0 {
                    INVALID_CONTEXT
                } else {
                    put(f, raw, 0, u64::from(device_of(ctx)));
                    0
                }
            }
            // A context's id: its handle (the context asked for, else the current one).
            "cuCtxGetId" => match if w(0) != 0 { w(0) } else { current } {
                0 => INVALID_CONTEXT,
                ctx => {
                    put(f, raw, 1, ctx);
                    0
                }
            },
            "cuCtxGetFlags" => {
                let dev = current_device();
                put(f, raw, 0, books(|b| b.flags.get(&dev).copied().unwrap_or(0)));
                0
            }
            "cuCtxGetCacheConfig" => {
                put(f, raw, 0, books(|b| b.cache_config));
                0
            }
            _ => return None,
        }
    };
    Some(st)
}

/// Calls that change the context books or the thread's stack (and `cuEventDestroy`, whose
/// handle is remembered as destroyed; the call still goes to the server); `None` for any other
/// function.
///
/// # Safety
/// `raw` are the program's arguments to `f` (`cuCtxPopCurrent`'s out-pointer may be null).
pub(super) unsafe fn state_change(f: &ApiFunction, raw: &[u64]) -> Option<Step> {
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    match f.name {
        "cuCtxSetCurrent" => set_current(w(0)),
        "cuCtxPushCurrent" => push_current(w(0)),
        "cuCtxPopCurrent" => {
            let popped = pop_current();
            // SAFETY: the program's out-pointer (may be null).
            unsafe { put(f, raw, 0, popped) };
            if popped == 0 {
                return Some(Step::Done(INVALID_CONTEXT));
            }
        }
        "cuDevicePrimaryCtxRelease" => books(|b| {
            let n = b.retained.entry(w(0) as u32).or_insert(0);
            *n = n.saturating_sub(1);
        }),
        "cuCtxEnablePeerAccess" => return Some(Step::Done(peer_access(w(0), w(1), true))),
        "cuCtxDisablePeerAccess" => return Some(Step::Done(peer_access(w(0), 0, false))),
        // The session's context stays on the server; the program's handle leaves its stack,
        // and a context it created is destroyed from now on.
        "cuCtxDestroy" => {
            let ctx = w(0);
            if ctx == 0 {
                return Some(Step::Done(INVALID_CONTEXT));
            }
            if current_context() == ctx {
                pop_current();
            }
            books(|b| {
                b.peers.retain(|&(c, p)| c != ctx && p != ctx);
                if b.created.remove(&ctx).is_some() {
                    b.destroyed_contexts.insert(ctx);
                    ANY_DESTROYED.store(true, Ordering::Relaxed);
                }
            });
        }
        "cuEventDestroy" if is_client_handle(w(0)) => books(|b| {
            b.destroyed_events.insert(w(0));
            ANY_DESTROYED.store(true, Ordering::Relaxed);
        }),
        "cuDevicePrimaryCtxSetFlags" => books(|b| {
            b.flags.insert(w(0) as u32, w(1));
        }),
        "cuCtxSetFlags" => {
            let dev = current_device();
            books(|b| {
                b.flags.insert(dev, w(0));
            })
        }
        "cuCtxSetCacheConfig" => books(|b| b.cache_config = w(0)),
        _ => return None,
    }
    Some(Step::Done(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn func(name: &str) -> &'static ApiFunction {
        gpuless_analyzer::api::by_name(name).unwrap_or_else(|| panic!("{name} in the API table"))
    }

    /// `f` with these arguments through [`state_change`]: its status.
    fn change(name: &str, raw: &[u64]) -> u32 {
        // SAFETY: no out-pointer is passed (null where the function has one).
        match unsafe { state_change(func(name), raw) } {
            Some(Step::Done(st)) => st,
            _ => panic!("{name} has no context rule"),
        }
    }

    /// `cuCtxPopCurrent`: (status, the popped context).
    fn pop() -> (u32, u64) {
        let mut out = 0u64;
        // SAFETY: a CUcontext out-pointer.
        match unsafe { state_change(func("cuCtxPopCurrent"), &[&mut out as *mut u64 as u64]) } {
            Some(Step::Done(st)) => (st, out),
            _ => panic!("cuCtxPopCurrent has no context rule"),
        }
    }

    /// A context as `cuCtxCreate` makes one.
    fn create() -> u64 {
        let h = new_handle();
        created(func("cuCtxCreate"), &[0, 0, 0, 0], h);
        h
    }

    #[test]
    fn the_context_stack_is_the_drivers() {
        // driver_answers.c's sequence, on a thread of its own (a fresh stack).
        std::thread::spawn(|| {
            let primary = primary_context();
            assert_eq!(change("cuCtxSetCurrent", &[primary]), 0);
            let c1 = create();
            assert_eq!(current_context(), c1, "a created context is current");
            let c2 = create();
            assert_eq!(current_context(), c2);
            assert_eq!(pop(), (0, c2));
            assert_eq!(current_context(), c1, "the pop makes the context below current");
            assert_eq!(change("cuCtxPushCurrent", &[c2]), 0);
            assert_eq!(current_context(), c2);
            assert_eq!(pop(), (0, c2));
            assert_eq!(current_context(), c1);
            assert_eq!(change("cuCtxSetCurrent", &[0]), 0);
            assert_eq!(current_context(), primary, "setting NULL pops: the primary context is current");
            assert_eq!(pop(), (0, primary));
            assert_eq!(current_context(), 0);
            assert_eq!(pop(), (INVALID_CONTEXT, 0), "an empty stack");
            assert_eq!(change("cuCtxSetCurrent", &[primary]), 0, "an empty stack takes a context");
            assert_eq!(current_context(), primary);
        })
        .join()
        .expect("the stack's thread");
    }

    #[test]
    fn each_context_has_its_device() {
        std::thread::spawn(|| {
            let p1 = primary_of(1);
            assert_ne!(p1, primary_context(), "a primary context per device");
            // (The thread's current device follows only in a session of several devices:
            // run_remote_devices.rs; here, the books.)
            assert_eq!(change("cuCtxSetCurrent", &[p1]), 0);
            assert_eq!(device_of(current_context()), 1);
            let h = new_handle();
            created(func("cuCtxCreate"), &[0, 0, 2], h);
            assert_eq!((current_context(), device_of(h)), (h, 2), "a context created on device 2");
            assert_eq!(pop().1, h);
            assert_eq!(device_of(current_context()), 1, "the one below is current again");
            assert_eq!(device_of(primary_context()), 0);
            // Without a session of several devices, no device reaches another.
            assert_eq!(change("cuCtxEnablePeerAccess", &[primary_context(), 0]), PEER_ACCESS_UNSUPPORTED);
            assert_eq!(change("cuCtxDisablePeerAccess", &[primary_context()]), PEER_ACCESS_NOT_ENABLED);
            assert_eq!(change("cuCtxEnablePeerAccess", &[0x10, 0]), INVALID_CONTEXT, "not a context");
        })
        .join()
        .expect("the thread");
    }

    #[test]
    fn destroyed_handles_get_the_drivers_answers() {
        std::thread::spawn(|| {
            let c = create();
            let other = create();
            assert_eq!(pop().1, other);
            assert_eq!(pop().1, c);
            let version = func("cuCtxGetApiVersion");
            let mut v = 0u32;
            let raw = [c, &mut v as *mut u32 as u64];
            assert_eq!(change("cuCtxDestroy", &[c]), 0);
            assert_eq!(destroyed(version, &raw), Some(INVALID_CONTEXT));
            assert_eq!(destroyed(func("cuCtxGetId"), &raw), Some(INVALID_CONTEXT));
            assert_eq!(destroyed(version, &[other, raw[1]]), None, "a live context");
            assert_eq!(destroyed(func("cuCtxPushCurrent"), &[c]), None, "driver 580 pushes it");

            let e = new_handle();
            assert_eq!(destroyed(func("cuEventQuery"), &[e]), None);
            assert_eq!(change("cuEventDestroy", &[e]), 0);
            for name in ["cuEventQuery", "cuEventSynchronize"] {
                assert_eq!(destroyed(func(name), &[e]), Some(CONTEXT_IS_DESTROYED), "{name}");
            }
            let elapsed = func("cuEventElapsedTime");
            let mut ms = 0f32;
            let live = new_handle();
            let raw = [&mut ms as *mut f32 as u64, live, e];
            assert_eq!(destroyed(elapsed, &raw), Some(CONTEXT_IS_DESTROYED));
            assert_eq!(destroyed(func("cuEventQuery"), &[live]), None, "a live event");
            assert_eq!(destroyed(func("cuEventQuery"), &[0]), None);
        })
        .join()
        .expect("the test's thread");
    }
}
