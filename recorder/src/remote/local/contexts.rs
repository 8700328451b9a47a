//! The calls that read and change the contexts' books (`context_books.rs`): each thread's
//! context stack (`cuCtxCreate` pushes the new context, `cuCtxPopCurrent` pops and makes the one
//! below current, `cuCtxSetCurrent` replaces the top and with NULL pops it), the primary
//! context's retain count and flags, peer access between contexts, contexts and events
//! destroyed, and the queries about them. The calling thread's current device (the current
//! context's) is kept beside its stack: the session tells the executor where it changes.

use gpuless_analyzer::api::ApiFunction;

use crate::remote::context_books::{
    books, current_context, current_device, device_of, pop_current, push_current, set_current,
};
use crate::remote::handles::is_client_handle;
use crate::remote::step::{put, Step};

const INVALID_VALUE: u32 = 1;
const INVALID_DEVICE: u32 = 101;
const INVALID_CONTEXT: u32 = 201;

/// `CUDA_ERROR_PEER_ACCESS_UNSUPPORTED`, `_ALREADY_ENABLED`, `_NOT_ENABLED`.
const PEER_ACCESS_UNSUPPORTED: u32 = 217;
const PEER_ACCESS_ALREADY_ENABLED: u32 = 704;
const PEER_ACCESS_NOT_ENABLED: u32 = 705;

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
        return INVALID_VALUE;
    }
    let (me, other) = (device_of(current), device_of(peer));
    if enable && !crate::remote::devices::can_access(me, other) {
        return if me == other { INVALID_DEVICE } else { PEER_ACCESS_UNSUPPORTED };
    }
    books(|b| match enable {
        true if !b.peers.insert((current, peer)) => PEER_ACCESS_ALREADY_ENABLED,
        false if !b.peers.remove(&(current, peer)) => PEER_ACCESS_NOT_ENABLED,
        _ => 0,
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
                    b.context_destroyed(ctx);
                }
            });
        }
        "cuEventDestroy" if is_client_handle(w(0)) => books(|b| b.event_destroyed(w(0))),
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
    use crate::remote::context_books::{created, destroyed, primary_context, primary_of, CONTEXT_IS_DESTROYED};
    use crate::remote::handles::new_handle;

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
