//! Same-host frames through shared memory: after a Unix-socket session's handshake the client
//! offers two byte rings in one memfd ([`super::Message::RingOffer`], the descriptor attached),
//! the executor answers [`super::Message::RingReady`], and from then on every frame each way is
//! written into a ring instead of the socket. A round trip then costs two stores and two loads
//! of shared cache lines while both ends poll, instead of four system calls and, often, a
//! wake-up; a reader that has polled long enough sleeps on a futex in the ring, which the writer
//! wakes. The socket stays: it carries descriptors (a [`super::Message::BlobShm`]'s memfd, sent
//! before its frame enters the ring) and tells either end when the other has gone.
//!
//! Layout: two directions, client → executor first, each a 4 KiB header and `capacity` bytes of
//! data. A header holds `head` (bytes ever written, at byte 0), `tail` (bytes ever read, at 64),
//! the reader's futex word (128: 1 while it sleeps), the writer's (192: 1 while it waits for
//! room) and `closed` (256: the writer has gone). Positions only grow; data lies at
//! `position % capacity`.
//!
//! The executor trusts nothing in the mapping: the memfd must be sealed against shrinking and
//! growing (so no page can vanish under a read), positions that move backwards or apart by more
//! than the capacity end the session, and frames read from a ring are checked as frames from a
//! socket are.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of data in each direction (the default; a client may offer another power of two
/// between [`MIN_CAPACITY`] and [`MAX_CAPACITY`]).
pub const CAPACITY: u64 = 4 << 20;
/// Smallest ring a server accepts.
pub const MIN_CAPACITY: u64 = 64 << 10;
/// Largest ring a server accepts.
pub const MAX_CAPACITY: u64 = 64 << 20;
/// Header bytes before each direction's data.
const HEADER: u64 = 4096;
/// Longest single futex sleep: the socket is looked at (has the other end gone?) this often.
const SLICE: Duration = Duration::from_millis(20);
/// A wake-up that brought nothing is followed by this pause before the next wait.
const PAUSE: Duration = Duration::from_micros(20);

const HEAD: usize = 0;
const TAIL: usize = 64;
const READER_SLEEPS: usize = 128;
const WRITER_WAITS: usize = 192;
const CLOSED: usize = 256;

/// Which end of the rings this process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Writes the first direction, reads the second.
    Client,
    /// Reads the first direction, writes the second.
    Server,
}

/// The shared mapping.
#[derive(Debug)]
struct Mapping {
    base: *mut u8,
    len: usize,
    capacity: u64,
    side: Side,
}

// SAFETY: the mapping is shared memory accessed only through atomics (positions, futex words)
// and bounded copies; it stays mapped until the last handle goes.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn direction(&self, writing: bool) -> usize {
        let first = match self.side {
            Side::Client => writing,
            Side::Server => !writing,
        };
        if first {
            0
        } else {
            (HEADER + self.capacity) as usize
        }
    }
    fn word64(&self, dir: usize, at: usize) -> &AtomicU64 {
        // SAFETY: within the mapping, 8-byte aligned (page-aligned base), shared memory used
        // only atomically at this offset.
        unsafe { &*(self.base.add(dir + at) as *const AtomicU64) }
    }
    fn word32(&self, dir: usize, at: usize) -> &AtomicU32 {
        // SAFETY: as `word64`, 4-byte aligned.
        unsafe { &*(self.base.add(dir + at) as *const AtomicU32) }
    }
    fn data(&self, dir: usize) -> *mut u8 {
        // SAFETY: the data area follows the direction's header, within the mapping.
        unsafe { self.base.add(dir + HEADER as usize) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // This end writes no more: its reader sees the end once the data is read.
        let out = self.direction(true);
        self.word32(out, CLOSED).store(1, Ordering::SeqCst);
        wake(self.word32(out, READER_SLEEPS));
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// One end of a pair of rings, with the Unix socket beside it. Clones share the mapping.
#[derive(Debug)]
pub struct Ring {
    map: Arc<Mapping>,
    /// The session's socket: descriptors, and whether the other end is there.
    pub sock: UnixStream,
    /// How long a blocking read waits in all (`None`: for ever), as a socket's read timeout.
    timeout: Arc<AtomicU64>,
}

const NO_TIMEOUT: u64 = u64::MAX;

fn futex_wait(word: &AtomicU32, expected: u32, t: Duration) {
    let ts = libc::timespec { tv_sec: t.as_secs() as libc::time_t, tv_nsec: t.subsec_nanos() as libc::c_long };
    // SAFETY: a futex word in shared memory (not FUTEX_PRIVATE: the other process wakes it)
    // and a valid relative timeout.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, &ts as *const libc::timespec) };
}

/// Wakes whoever sleeps on `word` (if anyone says so).
fn wake(word: &AtomicU32) {
    if word.swap(0, Ordering::SeqCst) == 1 {
        // SAFETY: a futex word in shared memory.
        unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX) };
    }
}

fn bad(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("shared-memory ring: {why}"))
}

impl Ring {
    /// A new pair of rings of `capacity` bytes each way in a memfd sealed against shrinking and
    /// growing: the client's end, and the descriptor to offer.
    pub fn create(sock: UnixStream, capacity: u64) -> io::Result<(Ring, OwnedFd)> {
        if !capacity.is_power_of_two() || !(MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity) {
            return Err(bad(format!("a capacity of {capacity} bytes")));
        }
        // SAFETY: a NUL-terminated name and valid flags.
        let raw = unsafe { libc::memfd_create(c"gpuless-ring".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor memfd_create just returned.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let file = std::fs::File::from(fd);
        file.set_len(2 * (HEADER + capacity))?;
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on a descriptor we own.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let ring = Ring::map(sock, file.as_raw_fd(), capacity, Side::Client)?;
        Ok((ring, file.into()))
    }

    /// The executor's end of the rings a client offered in `fd` (`capacity` bytes each way):
    /// checked to be a memfd of exactly that size that can neither shrink nor grow.
    pub fn accept(sock: UnixStream, fd: &OwnedFd, capacity: u64) -> io::Result<Ring> {
        if !capacity.is_power_of_two() || !(MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity) {
            return Err(bad(format!("a capacity of {capacity} bytes offered")));
        }
        // SAFETY: fcntl on a descriptor we hold.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        let need = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
        if seals < 0 || seals & need != need {
            return Err(bad(format!(
                "the descriptor offered is not a memfd sealed against shrinking and growing (seals {seals:#x})"
            )));
        }
        // SAFETY: fstat into a zeroed struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 || st.st_size as u64 != 2 * (HEADER + capacity) {
            return Err(bad(format!("the memfd offered holds {} bytes, not {}", st.st_size, 2 * (HEADER + capacity))));
        }
        Ring::map(sock, fd.as_raw_fd(), capacity, Side::Server)
    }

    fn map(sock: UnixStream, fd: RawFd, capacity: u64, side: Side) -> io::Result<Ring> {
        let len = (2 * (HEADER + capacity)) as usize;
        // SAFETY: a shared mapping of a sealed memfd of `len` bytes.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let map = Arc::new(Mapping { base: p.cast(), len, capacity, side });
        Ok(Ring { map, sock, timeout: Arc::new(AtomicU64::new(NO_TIMEOUT)) })
    }

    /// Another handle on the same rings and socket.
    pub fn try_clone(&self) -> io::Result<Ring> {
        Ok(Ring { map: self.map.clone(), sock: self.sock.try_clone()?, timeout: self.timeout.clone() })
    }

    /// Sets how long a blocking read waits (`None`: for ever); past it the read fails with
    /// `TimedOut`, as a socket's would.
    pub fn set_read_timeout(&self, t: Option<Duration>) {
        let us = t.map_or(NO_TIMEOUT, |t| t.as_micros().min(u128::from(NO_TIMEOUT - 1)) as u64);
        self.timeout.store(us, Ordering::Relaxed);
    }

    /// Bytes waiting to be read (checked against the capacity).
    fn readable_bytes(&self) -> io::Result<(u64, u64)> {
        let m = &*self.map;
        let dir = m.direction(false);
        let head = m.word64(dir, HEAD).load(Ordering::Acquire);
        let tail = m.word64(dir, TAIL).load(Ordering::Relaxed);
        match head.checked_sub(tail) {
            Some(n) if n <= m.capacity => Ok((tail, n)),
            _ => Err(bad(format!("positions out of order (written {head}, read {tail})"))),
        }
    }

    /// Whether a read would return at once (bytes, the end, or an error).
    pub fn ready(&self) -> bool {
        let m = &*self.map;
        let dir = m.direction(false);
        !matches!(self.readable_bytes(), Ok((_, 0))) || m.word32(dir, CLOSED).load(Ordering::Acquire) != 0
    }

    /// Whether the other end has gone: its socket is closed.
    fn peer_gone(&self) -> bool {
        let mut p = libc::pollfd { fd: self.sock.as_raw_fd(), events: libc::POLLRDHUP, revents: 0 };
        // SAFETY: one valid pollfd, no waiting.
        unsafe { libc::poll(&mut p, 1, 0) > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0 }
    }

    /// Reads what is there into `buf`; with `wait`, waits for something first (within the read
    /// timeout). `Ok(0)`: the other end has gone and everything it wrote was read.
    pub fn read(&self, buf: &mut [u8], wait: bool) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let m = &*self.map;
        let dir = m.direction(false);
        let limit = match self.timeout.load(Ordering::Relaxed) {
            NO_TIMEOUT => None,
            us => Some(Instant::now() + Duration::from_micros(us)),
        };
        loop {
            let (tail, n) = self.readable_bytes()?;
            if n > 0 {
                let n = n.min(buf.len() as u64);
                let at = tail % m.capacity;
                let first = n.min(m.capacity - at) as usize;
                // SAFETY: `first` bytes from `at` and the rest from the start lie within the
                // data area; `buf` holds `n` bytes. The writer does not touch [tail, head).
                unsafe {
                    std::ptr::copy_nonoverlapping(m.data(dir).add(at as usize), buf.as_mut_ptr(), first);
                    std::ptr::copy_nonoverlapping(m.data(dir), buf.as_mut_ptr().add(first), n as usize - first);
                }
                m.word64(dir, TAIL).store(tail + n, Ordering::Release);
                fence(Ordering::SeqCst);
                wake(m.word32(dir, WRITER_WAITS));
                return Ok(n as usize);
            }
            if m.word32(dir, CLOSED).load(Ordering::Acquire) != 0 {
                return Ok(0);
            }
            if !wait {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let left = match limit {
                Some(l) => match l.checked_duration_since(Instant::now()) {
                    Some(d) if !d.is_zero() => d.min(SLICE),
                    _ => return Err(io::ErrorKind::TimedOut.into()),
                },
                None => SLICE,
            };
            let sleeps = m.word32(dir, READER_SLEEPS);
            sleeps.store(1, Ordering::SeqCst);
            if matches!(self.readable_bytes(), Ok((_, 0))) && m.word32(dir, CLOSED).load(Ordering::Acquire) == 0 {
                futex_wait(sleeps, 1, left);
                if matches!(self.readable_bytes(), Ok((_, 0))) {
                    if self.peer_gone() {
                        return Ok(0);
                    }
                    // Woken with nothing to read (the other end may write the word at will):
                    // a pause, so that it cannot keep this thread spinning.
                    std::thread::sleep(PAUSE);
                }
            }
            sleeps.store(0, Ordering::Relaxed);
        }
    }

    /// Writes as much of `buf` as there is room for, waiting for room when there is none.
    pub fn write(&self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let m = &*self.map;
        let dir = m.direction(true);
        let head = m.word64(dir, HEAD).load(Ordering::Relaxed);
        loop {
            let tail = m.word64(dir, TAIL).load(Ordering::Acquire);
            let used = match head.checked_sub(tail) {
                Some(u) if u <= m.capacity => u,
                _ => return Err(bad(format!("positions out of order (written {head}, read {tail})"))),
            };
            let room = m.capacity - used;
            if room > 0 {
                let n = room.min(buf.len() as u64);
                let at = head % m.capacity;
                let first = n.min(m.capacity - at) as usize;
                // SAFETY: as in `read`, into the free part of the data area.
                unsafe {
                    std::ptr::copy_nonoverlapping(buf.as_ptr(), m.data(dir).add(at as usize), first);
                    std::ptr::copy_nonoverlapping(buf.as_ptr().add(first), m.data(dir), n as usize - first);
                }
                m.word64(dir, HEAD).store(head + n, Ordering::Release);
                fence(Ordering::SeqCst);
                wake(m.word32(dir, READER_SLEEPS));
                return Ok(n as usize);
            }
            // Full: wait for the reader to take some.
            let waits = m.word32(dir, WRITER_WAITS);
            waits.store(1, Ordering::SeqCst);
            if m.word64(dir, TAIL).load(Ordering::SeqCst) == tail {
                futex_wait(waits, 1, SLICE);
                if m.word64(dir, TAIL).load(Ordering::Acquire) == tail {
                    if self.peer_gone() {
                        return Err(io::ErrorKind::BrokenPipe.into());
                    }
                    std::thread::sleep(PAUSE);
                }
            }
            waits.store(0, Ordering::Relaxed);
        }
    }

    /// Sends `fd` over the socket (with one byte): it travels beside the ring, before the frame
    /// that needs it is written into the ring.
    pub fn send_fd(&self, fd: RawFd) -> io::Result<()> {
        super::shm::send_with_fd(self.sock.as_raw_fd(), &[0], fd)
    }

    /// Receives one descriptor from the socket (waiting at most the read timeout, or 10 s).
    pub fn recv_fd(&self) -> io::Result<OwnedFd> {
        let mut fds = std::collections::VecDeque::new();
        let t = match self.timeout.load(Ordering::Relaxed) {
            NO_TIMEOUT => Duration::from_secs(10),
            us => Duration::from_micros(us).min(Duration::from_secs(10)),
        };
        let mut p = libc::pollfd { fd: self.sock.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut p, 1, t.as_millis() as libc::c_int) } <= 0 {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "no descriptor came with a BlobShm frame"));
        }
        let mut b = [0u8; 1];
        let n = super::shm::recv_with_fds(self.sock.as_raw_fd(), &mut b, libc::MSG_DONTWAIT, &mut fds)?;
        match fds.pop_front() {
            Some(fd) if n == 1 => Ok(fd),
            _ => Err(io::Error::new(io::ErrorKind::InvalidData, "the socket beside the ring carried no descriptor")),
        }
    }
}

impl AsRawFd for Ring {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(cap: u64) -> (Ring, Ring) {
        let (a, b) = UnixStream::pair().unwrap();
        let (client, fd) = Ring::create(a, cap).unwrap();
        let server = Ring::accept(b, &fd, cap).unwrap();
        (client, server)
    }

    #[test]
    fn bytes_cross_both_ways_and_wrap_around() {
        let (c, s) = pair(MIN_CAPACITY);
        let msg: Vec<u8> = (0..MIN_CAPACITY as usize * 3 + 17).map(|i| (i * 7 % 251) as u8).collect();
        let writer = {
            let c = c.try_clone().unwrap();
            let msg = msg.clone();
            std::thread::spawn(move || {
                let mut at = 0;
                while at < msg.len() {
                    at += c.write(&msg[at..]).unwrap();
                }
            })
        };
        let mut got = Vec::new();
        let mut buf = vec![0u8; 10_000];
        while got.len() < msg.len() {
            let n = s.read(&mut buf, true).unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        writer.join().unwrap();
        assert_eq!(got, msg);
        assert_eq!(s.write(b"answer").unwrap(), 6);
        let mut b = [0u8; 16];
        assert_eq!(c.read(&mut b, true).unwrap(), 6);
        assert_eq!(&b[..6], b"answer");
        assert_eq!(c.read(&mut b, false).unwrap_err().kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn a_read_times_out_and_the_end_is_seen() {
        let (c, s) = pair(MIN_CAPACITY);
        s.set_read_timeout(Some(Duration::from_millis(30)));
        let mut b = [0u8; 4];
        let t0 = Instant::now();
        assert_eq!(s.read(&mut b, true).unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert!(t0.elapsed() >= Duration::from_millis(30));
        c.write(b"ab").unwrap();
        drop(c);
        assert_eq!(s.read(&mut b, true).unwrap(), 2);
        assert_eq!(s.read(&mut b, true).unwrap(), 0);
    }

    #[test]
    fn a_process_that_goes_without_closing_is_seen_through_the_socket() {
        let (a, b) = UnixStream::pair().unwrap();
        let (c, fd) = Ring::create(a, MIN_CAPACITY).unwrap();
        let s = Ring::accept(b, &fd, MIN_CAPACITY).unwrap();
        // The other end's mapping lives on (as in a process that was killed, whose `closed`
        // flag nobody set) but its socket is gone.
        let kept = c.map.clone();
        drop(c);
        kept.word32(0, CLOSED).store(0, Ordering::SeqCst);
        let mut b = [0u8; 4];
        assert_eq!(s.read(&mut b, true).unwrap(), 0);
        drop(kept);
    }

    #[test]
    fn hostile_positions_and_unsealed_memory_are_refused() {
        let (c, s) = pair(MIN_CAPACITY);
        c.map.word64(0, HEAD).store(MIN_CAPACITY * 5, Ordering::SeqCst);
        let mut b = [0u8; 4];
        assert_eq!(s.read(&mut b, true).unwrap_err().kind(), io::ErrorKind::InvalidData);
        let (x, y) = UnixStream::pair().unwrap();
        drop(x);
        // SAFETY: a NUL-terminated name.
        let raw = unsafe { libc::memfd_create(c"t".as_ptr(), libc::MFD_CLOEXEC) };
        // SAFETY: just created.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        std::fs::File::from(fd.try_clone().unwrap()).set_len(2 * (HEADER + MIN_CAPACITY)).unwrap();
        assert!(Ring::accept(y, &fd, MIN_CAPACITY).is_err());
        assert!(Ring::create(UnixStream::pair().unwrap().0, 1000).is_err());
    }

    #[test]
    fn a_descriptor_travels_beside_the_ring() {
        let (c, s) = pair(MIN_CAPACITY);
        let f = std::fs::File::open("/dev/null").unwrap();
        c.send_fd(f.as_raw_fd()).unwrap();
        let got = s.recv_fd().unwrap();
        assert!(got.as_raw_fd() >= 0);
    }
}
