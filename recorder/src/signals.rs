//! Finishing the trace when a signal ends the program: SIGINT / SIGTERM, and the crashes
//! (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) — a crashing program is the one whose trace is
//! wanted most. When the program leaves a signal at its default action (which ends the process
//! without `atexit`), the recorder installs a handler that only writes the signal number to a
//! pipe (async-signal-safe); a recorder thread reads it and finishes the trace (every thread's
//! records, the index). For SIGINT / SIGTERM that thread then restores the default action and
//! raises the signal again. For a crash the handler, on the crashing thread, waits (`poll`, at
//! most [`CRASH_WAIT_MS`]) until the trace is finished, restores the default action and raises
//! the signal; a fault then ends the process as it would have (a core dump where the system
//! makes one). If the crash left a lock of the recorder held, the wait runs out and the process
//! ends with the records the writer already had. Programs that handle a signal themselves
//! (Python's SIGINT → KeyboardInterrupt, a runtime's SIGSEGV handler) keep their handler.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::OnceLock;

const SIGNALS: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];
/// Signals of a crash: the handler waits on the crashing thread for the trace.
const CRASHES: [libc::c_int; 5] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGABRT];
/// How long a crashing thread waits for the trace to be finished.
pub const CRASH_WAIT_MS: libc::c_int = 5000;

/// What the signal thread runs to finish: the trace and the session (`init.rs` lends it at
/// load; both lie above this layer).
static FINISH: OnceLock<fn()> = OnceLock::new();

/// Lends the signal thread what finishing the trace and the session is (once).
pub(crate) fn on_finish(finish: fn()) {
    let _ = FINISH.set(finish);
}

/// Write end of the pipe (-1: not installed).
static PIPE_W: AtomicI32 = AtomicI32::new(-1);
/// Read end of the pipe that says a crash's trace is finished.
static DONE_R: AtomicI32 = AtomicI32::new(-1);
/// A crash is being handled (a second one, on any thread, does not wait again).
static CRASHING: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = PIPE_W.load(Ordering::Relaxed);
    if fd >= 0 {
        let b = sig as u8;
        // SAFETY: write(2) is async-signal-safe; one byte from a local.
        unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
    }
}

/// What `_exit` asks of the signal thread (not a signal number).
pub const EXIT: u8 = 0xff;

/// How [`finish_and_wait`] went.
#[derive(Debug, PartialEq, Eq)]
pub enum Finished {
    /// The signal thread finished (or the wait ran out).
    Waited,
    /// No signal thread runs in this process: nothing was asked.
    NoThread,
    /// Another finish is under way (a second crash, `_exit` in a crash): nothing was asked.
    Busy,
}

/// Has the signal thread finish the trace and the session, and waits for it, at most
/// [`CRASH_WAIT_MS`]; only `write` and `poll`, so it is safe in a signal handler — a crash's,
/// or a program's own handler that calls `_exit`. If the finish needs a lock the interrupted
/// code holds, the wait runs out and the caller goes on.
pub fn finish_and_wait(code: u8) -> Finished {
    let (w, done) = (PIPE_W.load(Ordering::Relaxed), DONE_R.load(Ordering::Relaxed));
    if w < 0 || done < 0 {
        return Finished::NoThread;
    }
    if CRASHING.swap(true, Ordering::AcqRel) {
        return Finished::Busy;
    }
    let mut p = libc::pollfd { fd: done, events: libc::POLLIN, revents: 0 };
    // SAFETY: write(2) and poll(2) are async-signal-safe; a local byte and pollfd.
    unsafe {
        libc::write(w, (&code as *const u8).cast(), 1);
        libc::poll(&mut p, 1, CRASH_WAIT_MS);
    }
    Finished::Waited
}

extern "C" fn on_crash(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel's siginfo and context for this signal.
    unsafe { crate::fault_report::say(sig, info, ctx) };
    finish_and_wait(sig as u8);
    // SAFETY: signal(2) and raise(3) are async-signal-safe. The signal is blocked while this
    // handler runs: raised now, it ends the process when the handler returns (a fault would
    // also recur at the faulting instruction).
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Installs the handlers for the signals still at their default action (once per process:
/// when the trace opens, or when a client-mode session starts).
pub fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(install_once);
}

fn install_once() {
    let (mut fds, mut done) = ([0 as libc::c_int; 2], [0 as libc::c_int; 2]);
    // SAFETY: pipe2 with valid arrays; close-on-exec so programs we run do not inherit them.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return;
    }
    // SAFETY: as above.
    let crash_pipe = unsafe { libc::pipe2(done.as_mut_ptr(), libc::O_CLOEXEC) } == 0;
    let (r, w, done_w) = (fds[0], fds[1], if crash_pipe { done[1] } else { -1 });
    let spawned = std::thread::Builder::new().name("gpuless-signals".into()).spawn(move || {
        let mut b = 0u8;
        // SAFETY: reading one byte into a local from our pipe.
        while unsafe { libc::read(r, (&mut b as *mut u8).cast(), 1) } == 1 {
            let sig = libc::c_int::from(b);
            if let Some(finish) = FINISH.get() {
                finish();
            }
            if CRASHES.contains(&sig) || b == EXIT {
                // The crashing (or exiting) thread ends the process once told.
                // SAFETY: one byte from a local into our pipe.
                unsafe { libc::write(done_w, (&b as *const u8).cast(), 1) };
                continue;
            }
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
    if crash_pipe {
        DONE_R.store(done[0], Ordering::Relaxed);
        for sig in CRASHES {
            set_if_default(sig, on_crash as *const () as usize, libc::SA_ONSTACK | libc::SA_RESTART | libc::SA_SIGINFO);
        }
    }
    for sig in SIGNALS {
        set_if_default(sig, on_signal as *const () as usize, libc::SA_RESTART);
    }
}

/// Makes `handler` the action of `sig` when the program left it at the default.
fn set_if_default(sig: libc::c_int, handler: usize, flags: libc::c_int) {
    // SAFETY: querying then (if default) setting a disposition with a valid sigaction.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, std::ptr::null(), &mut old) != 0
            || (old.sa_sigaction != libc::SIG_DFL && !crate::fault_report::is_early(old.sa_sigaction))
        {
            return;
        }
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler;
        sa.sa_flags = flags;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
}

/// In a forked child: the handlers would wake the parent's thread; back to the default.
pub fn reset_in_child() {
    if PIPE_W.swap(-1, Ordering::Relaxed) < 0 {
        return;
    }
    DONE_R.store(-1, Ordering::Relaxed);
    let ours = [on_signal as *const () as usize, on_crash as *const () as usize];
    for sig in SIGNALS.into_iter().chain(CRASHES) {
        // SAFETY: querying and restoring dispositions.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && ours.contains(&old.sa_sigaction) {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
    }
}
