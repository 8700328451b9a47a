//! Alternate signal stacks for the threads of a program whose own pages the client
//! write-protects (`shared.rs`, `adopt`): a fault on a protected page of a thread's stack can
//! only be handled on another stack.

use std::sync::atomic::{AtomicBool, Ordering};

/// Some of the program's own pages are write-protected (`adopt`): from then on every thread
/// that calls the client gets an alternate signal stack ([`guard_thread`]).
static ADOPTING: AtomicBool = AtomicBool::new(false);

/// From now on, threads that call the client get an alternate signal stack; the calling one
/// at once (`shared::adopt`, before it protects the program's pages).
pub(crate) fn enable() {
    ADOPTING.store(true, Ordering::Relaxed);
    guard_thread();
}

/// Size of the alternate signal stack the client gives a thread.
const ALT_STACK: usize = 64 << 10;

/// The calling thread's alternate signal stack as [`guard_thread`] left it: 0 not looked at
/// yet, 1 the thread's own (or none could be made), else the address of the mapping of ours,
/// given back when the thread ends.
struct AltStack(std::cell::Cell<usize>);

impl Drop for AltStack {
    fn drop(&mut self) {
        let p = self.0.get();
        if p <= 1 {
            return;
        }
        // SAFETY (block): this thread's alternate stack, ours: disabled (the thread runs no
        // handler now, at its end), then the mapping given back; left mapped if it cannot be
        // disabled.
        unsafe {
            let off = libc::stack_t { ss_sp: std::ptr::null_mut(), ss_flags: libc::SS_DISABLE, ss_size: 0 };
            if libc::sigaltstack(&off, std::ptr::null_mut()) == 0 {
                libc::munmap(p as *mut libc::c_void, ALT_STACK);
            }
        }
    }
}

thread_local! {
    static ALT: AltStack = const { AltStack(std::cell::Cell::new(0)) };
}

/// Gives the calling thread an alternate signal stack, once, when the program's own pages are
/// write-protected. The program may register memory on a thread's stack (NPP does): the first
/// write there faults, and the kernel must push the fault handler's frame (`shared.rs`) somewhere else than the
/// protected stack, or it ends the process with SIGSEGV before the handler runs
/// (watershedSegmentationNPP, whenever the registered buffer shared a page with the stack's
/// top). One relaxed load per call otherwise. A thread that set its own keeps it; ours is given
/// back when the thread ends.
#[inline]
pub(crate) fn guard_thread() {
    if !ADOPTING.load(Ordering::Relaxed) {
        return;
    }
    // A thread ending (its thread-locals already gone) is left as it is.
    let _ = ALT.try_with(|a| {
        if a.0.get() == 0 {
            a.0.set(alt_stack());
        }
    });
}

/// Installs an alternate signal stack of ours for the calling thread: its address, or 1 when
/// the thread has one of its own or none could be made.
fn alt_stack() -> usize {
    // SAFETY (block): sigaltstack(2) queries and sets this thread's alternate stack; the
    // memory is a fresh anonymous mapping.
    unsafe {
        let mut old: libc::stack_t = std::mem::zeroed();
        if libc::sigaltstack(std::ptr::null(), &mut old) != 0 || old.ss_flags & libc::SS_DISABLE == 0 {
            return 1;
        }
        let p = libc::mmap(
            std::ptr::null_mut(),
            ALT_STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return 1;
        }
        let ss = libc::stack_t { ss_sp: p, ss_flags: 0, ss_size: ALT_STACK };
        if libc::sigaltstack(&ss, std::ptr::null_mut()) != 0 {
            libc::munmap(p, ALT_STACK);
            return 1;
        }
        p as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The thread's alternate signal stack now: (size, enabled).
    fn current_alt() -> (usize, bool) {
        // SAFETY: a query of this thread's alternate stack into a local.
        unsafe {
            let mut ss: libc::stack_t = std::mem::zeroed();
            assert_eq!(libc::sigaltstack(std::ptr::null(), &mut ss), 0);
            (ss.ss_size, ss.ss_flags & libc::SS_DISABLE == 0)
        }
    }

    #[test]
    fn a_thread_gets_an_alternate_stack_once_pages_are_protected_and_keeps_its_own() {
        ADOPTING.store(true, Ordering::Relaxed);
        // A thread without one gets ours, once.
        std::thread::spawn(|| {
            // SAFETY: disabling whatever the runtime gave this thread, to start from none.
            unsafe {
                let off = libc::stack_t { ss_sp: std::ptr::null_mut(), ss_flags: libc::SS_DISABLE, ss_size: 0 };
                libc::sigaltstack(&off, std::ptr::null_mut());
            }
            assert!(!current_alt().1);
            guard_thread();
            assert_eq!(current_alt(), (ALT_STACK, true));
            let at = ALT.with(|a| a.0.get());
            guard_thread();
            assert_eq!(ALT.with(|a| a.0.get()), at, "made once");
        })
        .join()
        .unwrap();
        // A thread with its own keeps it.
        std::thread::spawn(|| {
            let mut own = vec![0u8; 3 << 14];
            // SAFETY: a buffer that outlives its use as this thread's alternate stack (disabled
            // before it is dropped).
            unsafe {
                let ss = libc::stack_t { ss_sp: own.as_mut_ptr().cast(), ss_flags: 0, ss_size: own.len() };
                assert_eq!(libc::sigaltstack(&ss, std::ptr::null_mut()), 0);
            }
            guard_thread();
            assert_eq!(current_alt(), (3 << 14, true));
            assert_eq!(ALT.with(|a| a.0.get()), 1);
            // SAFETY: disabling it before the buffer goes.
            unsafe {
                let off = libc::stack_t { ss_sp: std::ptr::null_mut(), ss_flags: libc::SS_DISABLE, ss_size: 0 };
                libc::sigaltstack(&off, std::ptr::null_mut());
            }
        })
        .join()
        .unwrap();
    }
}
