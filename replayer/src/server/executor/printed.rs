//! What the session's kernels print (device `printf`): the driver writes it to this process's
//! stdout when a synchronization flushes the device's printf buffer. The executor's stdout is a
//! pipe drained by a thread; at each answer the executor flushes C's streams, writes a mark into
//! the pipe, and takes everything before the mark — all that was printed up to the answer, in
//! order — for the client, which writes it to the program's stdout. An answer with nothing
//! printed since the last one (the usual case) costs a flush and one `FIONREAD`: the drain
//! thread takes bytes out of the pipe only while it holds the lock, so an empty pipe and an empty
//! buffer under the lock mean nothing is on its way.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Ends what was printed before an answer (bytes no `printf` of a kernel writes).
const MARK: &[u8] = b"\0\x1bgpuless-printed-mark\x1b\0";
/// The most one answer carries (the driver's printf buffer is 1 MiB unless a program raises it).
const MAX: usize = 32 << 20;

#[derive(Default)]
struct Drained {
    /// Bytes read and not yet scanned past a mark.
    pending: Vec<u8>,
    /// Bytes before the last mark seen, for the next answer.
    ready: Vec<u8>,
    /// Marks seen.
    marks: u64,
    /// The pipe closed or failed: no mark will come.
    done: bool,
}

/// The executor's stdout, captured.
pub(crate) struct Printed {
    shared: Arc<(Mutex<Drained>, Condvar)>,
    marks: u64,
    /// The pipe's read end (the drain thread's), for `FIONREAD`.
    read: std::os::fd::RawFd,
}

impl Printed {
    /// Makes stdout a pipe and starts draining it.
    pub(crate) fn capture() -> std::io::Result<Printed> {
        let mut fds = [0; 2];
        // SAFETY: an array of two descriptors for pipe(2).
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned here.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: flushes C's buffered stdout, then makes descriptor 1 the pipe's write end.
        if unsafe {
            libc::fflush(std::ptr::null_mut());
            libc::dup2(write.as_raw_fd(), 1)
        } < 0
        {
            return Err(std::io::Error::last_os_error());
        }
        drop(write);
        let shared = Arc::new((Mutex::new(Drained::default()), Condvar::new()));
        let s = Arc::clone(&shared);
        let raw = read.as_raw_fd();
        std::thread::Builder::new().name("gpuless-printed".into()).spawn(move || drain(read, &s))?;
        Ok(Printed { shared, marks: 0, read: raw })
    }

    /// Whether anything was printed that no answer took yet (after the flush).
    fn pending(&self) -> bool {
        let (lock, _) = &*self.shared;
        let d = lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD of the pipe's read end (open as long as the drain thread runs) into `n`.
        let queued = unsafe { libc::ioctl(self.read, libc::FIONREAD, &mut n) } != 0 || n > 0;
        !d.done && (queued || !d.pending.is_empty() || !d.ready.is_empty())
    }

    /// Everything printed since the last call, up to now.
    pub(crate) fn take(&mut self) -> Vec<u8> {
        // SAFETY: flushes every C stream (the driver's printf output among them).
        unsafe { libc::fflush(std::ptr::null_mut()) };
        if !self.pending() {
            return Vec::new();
        }
        // SAFETY: a write of the mark's bytes to descriptor 1.
        let wrote = unsafe { libc::write(1, MARK.as_ptr().cast(), MARK.len()) };
        if wrote != MARK.len() as isize {
            return Vec::new();
        }
        self.marks += 1;
        let (lock, cv) = &*self.shared;
        let g = lock.lock().unwrap_or_else(|e| e.into_inner());
        let (mut g, _) = cv
            .wait_timeout_while(g, Duration::from_secs(5), |d| d.marks < self.marks && !d.done)
            .unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut g.ready)
    }
}

/// The drain thread: waits until the pipe is readable, then reads it under the lock (bytes
/// leave the pipe only while the lock is held) and moves what precedes each mark to `ready`.
fn drain(read: OwnedFd, shared: &(Mutex<Drained>, Condvar)) {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let mut pfd = libc::pollfd { fd: read.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd of the pipe's read end, owned here.
        let polled = unsafe { libc::poll(&mut pfd, 1, -1) };
        let (lock, cv) = shared;
        if polled < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            // No way to wait for the pipe: nothing more is taken from it.
            lock.lock().unwrap_or_else(|e| e.into_inner()).done = true;
            cv.notify_all();
            return;
        }
        let mut d = lock.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: a read into `buf` from the pipe's read end, which poll found readable (data,
        // or its end): it does not block.
        let n = unsafe { libc::read(read.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            d.done = true;
            cv.notify_all();
            return;
        }
        d.pending.extend_from_slice(&buf[..n as usize]);
        while let Some(i) = d.pending.windows(MARK.len()).position(|w| w == MARK) {
            let before: Vec<u8> = d.pending.drain(..i + MARK.len()).take(i).collect();
            let room = MAX.saturating_sub(d.ready.len());
            d.ready.extend_from_slice(&before[..before.len().min(room)]);
            d.marks += 1;
        }
        if d.pending.len() > MAX {
            // Printed without an answer in between: keep the newest, as the driver's buffer does.
            let cut = d.pending.len() - MAX;
            d.pending.drain(..cut);
        }
        cv.notify_all();
    }
}
