//! Finishing the trace on SIGINT / SIGTERM. When the program leaves a signal at its default
//! action (which ends the process without `atexit`), the recorder installs a handler that only
//! writes the signal number to a pipe (async-signal-safe); a recorder thread reads it, finishes
//! the trace (every thread's records, the index), restores the default action and raises the
//! signal again, so the program ends exactly as it would have. Programs that handle the signal
//! themselves (Python's SIGINT → KeyboardInterrupt) keep their handler: their normal exit path
//! finishes the trace.

use std::sync::atomic::{AtomicI32, Ordering};

const SIGNALS: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

/// Write end of the pipe (-1: not installed).
static PIPE_W: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = PIPE_W.load(Ordering::Relaxed);
    if fd >= 0 {
        let b = sig as u8;
        // SAFETY: write(2) is async-signal-safe; one byte from a local.
        unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
    }
}

/// Installs the handlers for the signals still at their default action.
pub fn install() {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 with a valid array; close-on-exec so programs we run do not inherit it.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return;
    }
    let (r, w) = (fds[0], fds[1]);
    let spawned = std::thread::Builder::new().name("gpuless-signals".into()).spawn(move || {
        let mut b = 0u8;
        // SAFETY: reading one byte into a local from our pipe.
        while unsafe { libc::read(r, (&mut b as *mut u8).cast(), 1) } == 1 {
            let sig = libc::c_int::from(b);
            crate::state::finish_now();
            // SAFETY: back to the default action, then the same signal to the process (not
            // just this thread, which may block it): it ends as it would have without the
            // recorder.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
                libc::kill(libc::getpid(), sig);
            }
        }
    });
    if spawned.is_err() {
        return;
    }
    PIPE_W.store(w, Ordering::Relaxed);
    for sig in SIGNALS {
        // SAFETY: querying then (if default) setting a disposition with a valid sigaction.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 || old.sa_sigaction != libc::SIG_DFL {
                continue;
            }
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// In a forked child: the handler would wake the parent's thread; back to the default.
pub fn reset_in_child() {
    if PIPE_W.swap(-1, Ordering::Relaxed) < 0 {
        return;
    }
    for sig in SIGNALS {
        // SAFETY: querying and restoring dispositions.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction == on_signal as extern "C" fn(libc::c_int) as usize
            {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
    }
}
