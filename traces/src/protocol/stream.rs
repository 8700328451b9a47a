//! The bytes under a session: a TCP or Unix socket, or shared-memory rings beside a Unix socket
//! ([`super::ring`]), read with busy polling ([`Polled`]). Shared by the client
//! ([`super::client::Connection`]) and the executor, which read and write frames over them.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// A connected stream of either kind.
#[derive(Debug)]
pub enum Stream {
    /// TCP (no Nagle delay).
    Tcp(TcpStream),
    /// Unix-domain.
    Unix(UnixStream),
    /// Shared-memory rings beside a Unix socket ([`super::ring`]), after a
    /// [`Message::RingOffer`] was taken.
    Ring(super::ring::Ring),
}

impl Stream {
    /// Another handle on the same connection.
    pub fn try_clone(&self) -> std::io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Ring(r) => Stream::Ring(r.try_clone()?),
        })
    }
    /// Sets the read timeout (None: wait forever).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Unix(s) => s.set_read_timeout(t),
            Stream::Ring(r) => {
                r.set_read_timeout(t);
                r.sock.set_read_timeout(t)
            }
        }
    }
}

impl std::os::fd::AsRawFd for Stream {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Ring(r) => r.as_raw_fd(),
        }
    }
}

/// A stream read with busy polling: a read first polls the socket without blocking for up to
/// `spin`, then blocks. Waking a blocked thread costs tens of microseconds on virtual machines,
/// more than a round trip over loopback; a waiter that expects an answer soon polls instead.
#[derive(Debug)]
pub struct Polled {
    /// The stream.
    pub stream: Stream,
    /// How long a read polls before it blocks (zero: it blocks at once).
    pub spin: Duration,
    /// Descriptors that arrived on a Unix socket (SCM_RIGHTS), in order: a
    /// [`Message::BlobShm`] frame takes the first.
    pub fds: std::collections::VecDeque<std::os::fd::OwnedFd>,
}

impl Polled {
    /// Reads `stream` polling for up to `spin` first.
    pub fn new(stream: Stream, spin: Duration) -> Self {
        Polled { stream, spin, fds: Default::default() }
    }

    /// One `recv` with `flags`; on a Unix socket, descriptors that come along are kept.
    fn recv(&mut self, buf: &mut [u8], flags: libc::c_int) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        let fd = self.stream.as_raw_fd();
        match &self.stream {
            Stream::Unix(_) => return super::shm::recv_with_fds(fd, buf, flags, &mut self.fds),
            Stream::Ring(r) => return r.read(buf, flags & libc::MSG_DONTWAIT == 0),
            Stream::Tcp(_) => {}
        }
        // SAFETY: a valid socket and a buffer of buf.len() writable bytes.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), flags) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

impl Polled {
    /// Whether a read would return without waiting (bytes, the end or an error).
    pub fn readable(&self) -> bool {
        use std::os::fd::AsRawFd;
        if let Stream::Ring(r) = &self.stream {
            return r.ready();
        }
        let mut p = libc::pollfd { fd: self.stream.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd, no waiting. A hang-up or an error is readable too: the read
        // returns at once with the end or the error.
        unsafe { libc::poll(&mut p, 1, 0) > 0 && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 }
    }

    /// The descriptor a [`Message::BlobShm`] frame just read carries: the first that came with
    /// the socket's bytes, or, when frames travel through rings, the next one on the socket
    /// beside them.
    pub fn take_fd(&mut self) -> Option<std::os::fd::OwnedFd> {
        match (self.fds.pop_front(), &self.stream) {
            (Some(fd), _) => Some(fd),
            (None, Stream::Ring(r)) => r.recv_fd().ok(),
            (None, _) => None,
        }
    }
}

impl Read for Polled {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if !self.spin.is_zero() && !buf.is_empty() {
            let t0 = std::time::Instant::now();
            loop {
                match self.recv(buf, libc::MSG_DONTWAIT) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
                if t0.elapsed() >= self.spin {
                    break;
                }
                std::hint::spin_loop();
            }
        }
        loop {
            match self.recv(buf, 0) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            Stream::Ring(r) => r.read(buf, true),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
            Stream::Ring(r) => r.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
            Stream::Ring(_) => Ok(()),
        }
    }
}
