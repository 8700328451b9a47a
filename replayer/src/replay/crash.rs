//! What a replay or an executor says when it crashes: the record it was executing.
//!
//! A driver call given something it dereferences on the host (a struct the trace describes
//! wrongly, a handle the replayer mapped wrongly) can fault inside the driver. The process
//! then ends as it would have, by the same signal, but first says on stderr which record it was
//! executing, and where in the replayer (a backtrace), so that the failure names its record as
//! every other replay failure does.

use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Once;

static SEQ: AtomicU64 = AtomicU64::new(u64::MAX);
static NAME: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static NAME_LEN: AtomicUsize = AtomicUsize::new(0);

/// Notes the record being executed now (a few relaxed stores: on every record).
pub(crate) fn at(seq: u64, name: &'static str) {
    SEQ.store(seq, Ordering::Relaxed);
    NAME_LEN.store(0, Ordering::Relaxed);
    NAME.store(name.as_ptr().cast_mut(), Ordering::Relaxed);
    NAME_LEN.store(name.len(), Ordering::Relaxed);
}

/// Installs the report for SIGSEGV, SIGBUS, SIGILL and SIGFPE (once per process).
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for sig in [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE] {
            // SAFETY: a plain sigaction with a handler of the right signature; the previous
            // disposition (the default) is restored by the handler before re-raising.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = report as *const () as usize;
                sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESETHAND;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
        }
    });
}

fn put(s: &[u8]) {
    // SAFETY: writing a valid buffer to stderr (async-signal-safe).
    unsafe { libc::write(2, s.as_ptr().cast(), s.len()) };
}

fn put_num(mut v: u64) {
    let mut b = [0u8; 20];
    let mut i = b.len();
    loop {
        i -= 1;
        b[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    put(&b[i..]);
}

extern "C" fn report(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    put(b"gpuless: crashed (signal ");
    put_num(sig as u64);
    // SAFETY: the kernel's siginfo for this signal.
    let addr = if info.is_null() { 0 } else { (unsafe { (*info).si_addr() }) as u64 };
    put(b", address 0x");
    let hex = format!("{addr:x}"); // allocation: the line above is out already
    put(hex.as_bytes());
    put(b")");
    let seq = SEQ.load(Ordering::Relaxed);
    let (p, n) = (NAME.load(Ordering::Relaxed), NAME_LEN.load(Ordering::Relaxed));
    if seq != u64::MAX && !p.is_null() {
        put(b" while executing call #");
        put_num(seq);
        put(b" ");
        // SAFETY: a &'static str's bytes, stored by `at`.
        put(unsafe { std::slice::from_raw_parts(p, n) });
    }
    put(b"\n");
    // Where in the replayer: best effort (not async-signal-safe; the process ends anyway).
    let bt = std::backtrace::Backtrace::force_capture().to_string();
    let frames: Vec<&str> = bt.lines().filter(|l| !l.trim_start().starts_with("at ")).take(40).collect();
    put(frames.join("\n").as_bytes());
    put(b"\n");
    // SA_RESETHAND restored the default: the same signal ends the process as it would have.
    // SAFETY: raising a signal.
    unsafe { libc::raise(sig) };
}

#[cfg(test)]
mod tests {
    /// A child process that crashes while "executing" a record says which, then dies of the
    /// same signal.
    #[test]
    fn a_crash_names_the_record_and_ends_by_the_same_signal() {
        let mut fds = [0; 2];
        // SAFETY: pipe, fork, dup2, raise and waitpid with valid arguments; the child only
        // makes async-signal-safe calls before the report.
        unsafe {
            assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
            let pid = libc::fork();
            assert!(pid >= 0);
            if pid == 0 {
                libc::dup2(fds[1], 2);
                super::install();
                super::at(1234, "cuGraphAddNode");
                libc::raise(libc::SIGSEGV);
                libc::_exit(0);
            }
            libc::close(fds[1]);
            let mut out = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                let n = libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len());
                if n <= 0 {
                    break;
                }
                out.extend_from_slice(&buf[..n as usize]);
            }
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
            let text = String::from_utf8_lossy(&out);
            assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV, "status {status}: {text}");
            assert!(text.contains("crashed (signal 11"), "{text}");
            assert!(text.contains("while executing call #1234 cuGraphAddNode"), "{text}");
        }
    }
}
