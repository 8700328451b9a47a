//! A diagnostic for crashes the recorder or the client did not cause, or did: with
//! `GPULESS_FAULT_REPORT=1`, a fault that ends the program first says on stderr where it
//! happened — the signal, the faulting address, the instruction pointer, and the lines of
//! `/proc/self/maps` that hold each (the object and the offset in it, for `addr2line`).
//! Nothing is said otherwise. Only `open`, `read`, `write` and `close` on stack buffers:
//! async-signal-safe.

use std::sync::atomic::{AtomicBool, Ordering};

static ON: AtomicBool = AtomicBool::new(false);

/// Faults reported from the moment the library is loaded, before any other handler of ours.
const FAULTS: [libc::c_int; 4] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE];

/// Reads `GPULESS_FAULT_REPORT` when the library is loaded and, when set, installs [`early`]
/// for the faults the program left at their default action (the recorder's crash handler,
/// installed later, takes its place and reports too: [`is_early`]).
pub(crate) fn init() {
    let on = std::env::var_os("GPULESS_FAULT_REPORT").is_some_and(|v| v != "0" && !v.is_empty());
    ON.store(on, Ordering::Relaxed);
    if !on {
        return;
    }
    for sig in FAULTS {
        // SAFETY: querying, then (if default) setting a disposition with a valid sigaction.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 || old.sa_sigaction != libc::SIG_DFL {
                continue;
            }
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = early as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESETHAND | libc::SA_ONSTACK;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Whether `action` is [`early`] (to be treated as the default action).
pub(crate) fn is_early(action: usize) -> bool {
    action == early as *const () as usize
}

/// Reports the fault; the default action (restored by `SA_RESETHAND`) then ends the process
/// when the faulting instruction runs again.
extern "C" fn early(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel's siginfo and context for this signal.
    unsafe { say(sig, info, ctx) };
}

/// A fixed buffer of text, for formatting in a signal handler.
struct Line {
    buf: [u8; 256],
    len: usize,
}

impl Line {
    fn new() -> Self {
        Line { buf: [0; 256], len: 0 }
    }
    fn text(&mut self, s: &[u8]) -> &mut Self {
        for &b in s {
            if self.len < self.buf.len() {
                self.buf[self.len] = b;
                self.len += 1;
            }
        }
        self
    }
    fn hex(&mut self, v: u64) -> &mut Self {
        let mut digits = [0u8; 16];
        let mut n = 0;
        let mut x = v;
        loop {
            digits[n] = b"0123456789abcdef"[(x & 15) as usize];
            n += 1;
            x >>= 4;
            if x == 0 {
                break;
            }
        }
        self.text(b"0x");
        for i in (0..n).rev() {
            let d = [digits[i]];
            self.text(&d);
        }
        self
    }
    fn say(&self) {
        // SAFETY: write(2) of our own buffer.
        unsafe { libc::write(2, self.buf.as_ptr().cast(), self.len) };
    }
}

/// The parsed `start-end` of a maps line.
fn range(line: &[u8]) -> Option<(u64, u64)> {
    let mut parts = line.split(|&b| b == b' ').next()?.split(|&b| b == b'-');
    Some((range_hex(parts.next()?)?, range_hex(parts.next()?)?))
}

/// Writes the maps lines that hold `what`'s addresses, each preceded by its label and the
/// offset of the address in the mapping's file.
fn maps(what: &[(&[u8], u64)]) {
    // SAFETY: open(2) of a constant path.
    let fd = unsafe { libc::open(c"/proc/self/maps".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return;
    }
    each_line(fd, |l| {
        let Some((start, end)) = range(l) else { return };
        // The file offset is the third field.
        let offset = l.split(|&c| c == b' ').nth(2).and_then(range_hex).unwrap_or(0);
        for &(label, a) in what {
            if a >= start && a < end {
                Line::new()
                    .text(b"gpuless: ")
                    .text(label)
                    .text(b" at offset ")
                    .hex(a - start + offset)
                    .text(b" of: ")
                    .text(l)
                    .text(b"\n")
                    .say();
            }
        }
    });
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
}

fn range_hex(s: &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for &b in s {
        v = v.checked_mul(16)?.checked_add(u64::from((b as char).to_digit(16)?))?;
    }
    Some(v)
}

/// Says where the fault `sig` happened, when asked for (`GPULESS_FAULT_REPORT`).
///
/// # Safety
/// `info` and `ctx` are the kernel's, for this signal (either may be null).
pub(crate) unsafe fn say(sig: libc::c_int, info: *const libc::siginfo_t, ctx: *const libc::c_void) {
    if !ON.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: the kernel's siginfo and ucontext for this signal, when given.
    let (addr, ip, sp) = unsafe {
        let addr = if info.is_null() { 0 } else { (*info).si_addr() as u64 };
        #[cfg(target_arch = "x86_64")]
        let (ip, sp) = if ctx.is_null() {
            (0, 0)
        } else {
            let g = &(*ctx.cast::<libc::ucontext_t>()).uc_mcontext.gregs;
            (g[libc::REG_RIP as usize] as u64, g[libc::REG_RSP as usize] as u64)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let (ip, sp) = (0u64, 0u64);
        (addr, ip, sp)
    };
    // SAFETY: gettid(2).
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u64;
    Line::new()
        .text(b"gpuless: signal ")
        .hex(sig as u64)
        .text(b" on thread ")
        .hex(tid)
        .text(b": address ")
        .hex(addr)
        .text(b", instruction ")
        .hex(ip)
        .text(b", stack ")
        .hex(sp)
        .text(b"\n")
        .say();
    maps(&[(b"address", addr), (b"instruction", ip)]);
    stack_words(sp);
}

/// The 512 words above the stack pointer, read without faulting (`process_vm_readv` of this
/// process: an unreadable stack is an error, not a second fault), 8 to a line, then every
/// mapping of code: return addresses among the words name the callers (`where.py`-style tools
/// resolve them with the mappings).
fn stack_words(sp: u64) {
    let mut words = [0u64; 512];
    let local = libc::iovec { iov_base: words.as_mut_ptr().cast(), iov_len: std::mem::size_of_val(&words) };
    let remote = libc::iovec { iov_base: sp as *mut libc::c_void, iov_len: std::mem::size_of_val(&words) };
    // SAFETY: reads this process's memory into our buffer; the kernel checks the source range.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    let n = if n > 0 { n as usize / 8 } else { 0 };
    for chunk in words[..n].chunks(8) {
        let mut l = Line::new();
        l.text(b"gpuless: stack words");
        for &w in chunk {
            l.text(b" ").hex(w);
        }
        l.text(b"\n").say();
    }
    // SAFETY: open(2) of a constant path.
    let fd = unsafe { libc::open(c"/proc/self/maps".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return;
    }
    each_line(fd, |l| {
        if l.split(|&c| c == b' ').nth(1).is_some_and(|p| p.get(2) == Some(&b'x')) {
            Line::new().text(b"gpuless: code ").text(l).text(b"\n").say();
        }
    });
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
}

/// Calls `f` with each line of the file `fd` (lines longer than 512 bytes cut).
fn each_line(fd: libc::c_int, mut f: impl FnMut(&[u8])) {
    let mut chunk = [0u8; 4096];
    let mut line = [0u8; 512];
    let mut len = 0usize;
    loop {
        // SAFETY: read(2) into our buffer.
        let n = unsafe { libc::read(fd, chunk.as_mut_ptr().cast(), chunk.len()) };
        if n <= 0 {
            break;
        }
        for &b in &chunk[..n as usize] {
            if b != b'\n' {
                if len < line.len() {
                    line[len] = b;
                    len += 1;
                }
                continue;
            }
            f(&line[..len]);
            len = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_parse() {
        assert_eq!(range(b"7f00-7f10 r-xp 00001000 08:01 42 /lib/x.so"), Some((0x7f00, 0x7f10)));
        assert_eq!(range(b"zz-10 r"), None);
        assert_eq!(range_hex(b"00001000"), Some(0x1000));
        let mut l = Line::new();
        l.text(b"a ").hex(0).text(b" ").hex(0xdead_beef);
        assert_eq!(&l.buf[..l.len], b"a 0x0 0xdeadbeef");
    }
}
