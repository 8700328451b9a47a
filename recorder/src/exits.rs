//! `_exit` and `_Exit`, interposed (the recorder is preloaded, so a program's calls reach these
//! first). A program that leaves through them skips `atexit` — Python's `os._exit`, launchers
//! that skip a slow teardown — and its trace would stay unfinished, its last records lost. The
//! process that recorded finishes its trace (and, recording remotely, its session) first; any
//! other process passes straight through: a forked child (its writer is the parent's) and a
//! `vfork` child, which shares its parent's memory — finishing there would end the parent's
//! recording (Python's `subprocess` uses `vfork` and calls `_exit` when `exec` fails). The
//! finishing runs on the signal thread while `_exit` waits (`signals::finish_and_wait`): a
//! program may call `_exit` inside its own signal handler.

use std::ffi::{c_int, CStr};

type ExitFn = unsafe extern "C" fn(c_int) -> !;

fn leave(name: &CStr, status: c_int) -> ! {
    // On the signal thread: `_exit` may be called inside a signal handler of the program's,
    // where finishing here could wait forever for a lock the interrupted code holds.
    if crate::owner::is_owner()
        && crate::signals::finish_and_wait(crate::signals::EXIT) == crate::signals::Finished::NoThread
    {
        // No signal thread yet: the trace has not opened (its records are still in memory).
        crate::init::finish_process();
    }
    let next = crate::dl::next_symbol(name);
    if !next.is_null() {
        // SAFETY: the C library's `_exit` / `_Exit`, which never return.
        unsafe { std::mem::transmute::<*mut std::ffi::c_void, ExitFn>(next)(status) }
    }
    // SAFETY: exit_group ends every thread of the process; it does not return.
    unsafe { libc::syscall(libc::SYS_exit_group, status) };
    unreachable!("exit_group returned")
}

/// Interposed `_exit`.
///
/// # Safety
/// As the C library's: ends the process.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    leave(c"_exit", status)
}

/// Interposed `_Exit`.
///
/// # Safety
/// As the C library's: ends the process.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    leave(c"_Exit", status)
}
