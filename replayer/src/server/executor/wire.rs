//! The session's connection as the executor holds it: the client's socket, its writing half
//! shared by the executor's loop and the session's host functions, and the end of the
//! session's host calls.

use std::io::{BufWriter, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use gpuless_traces::protocol::client::Stream as Conn;
use gpuless_traces::protocol::{write_frame, Message};

use crate::replay::host_calls::HostCalls;

/// The client's socket, TCP or Unix, in blocking mode.
pub(super) fn conn_of(fd: OwnedFd) -> std::io::Result<Conn> {
    let mut domain: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid socket descriptor and an out-buffer of the option's size.
    let r = unsafe {
        libc::getsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_DOMAIN, (&raw mut domain).cast(), &mut len)
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(if domain == libc::AF_UNIX {
        let s = std::os::unix::net::UnixStream::from(fd);
        s.set_nonblocking(false)?;
        Conn::Unix(s)
    } else {
        let s = std::net::TcpStream::from(fd);
        s.set_nonblocking(false)?;
        s.set_nodelay(true)?;
        Conn::Tcp(s)
    })
}

/// The connection's writing half: the executor's loop and the session's host functions (on the
/// driver's callback thread) write whole frames under its lock.
pub(super) type Writer = Arc<Mutex<BufWriter<Conn>>>;

/// Writes one message and flushes it.
pub(super) fn write_message(w: &Writer, m: &Message) -> std::io::Result<()> {
    let mut g = super::pump::lock(w);
    write_frame(&mut *g, m.kind(), m.flags(), &m.encode()).map_err(std::io::Error::other)?;
    g.flush()
}

/// Ends the session's host calls when the session ends: a host function still waiting for the
/// client returns.
pub(super) struct Ended(pub(super) Arc<HostCalls>);

impl Drop for Ended {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// Takes a client's [`Message::RingOffer`] (`capacity` bytes each way, its memfd the next
/// descriptor that came on the socket): answers [`Message::RingReady`] on the socket, then reads
/// and writes every later frame through the rings ([`gpuless_traces::protocol::ring`]). `idle`
/// is the session's read timeout. An offer that is not a sealed memfd of the right size, or that
/// comes on anything but a Unix socket, is the client's error.
pub(super) fn take_rings(
    reader: &super::pump::Reader,
    w: &Writer,
    capacity: u64,
    idle: std::time::Duration,
) -> Result<(), String> {
    use gpuless_traces::protocol::ring::Ring;
    let mut r = super::pump::lock(reader);
    let Conn::Unix(sock) = &r.get_ref().stream else {
        return Err("a RingOffer on a connection that is not a Unix socket".into());
    };
    let sock = sock.try_clone().map_err(|e| e.to_string())?;
    let fd = r.get_mut().fds.pop_front().ok_or("a RingOffer came without its memfd (SCM_RIGHTS)")?;
    if !r.buffer().is_empty() {
        return Err("frames after a RingOffer before RingReady".into());
    }
    let ring = Ring::accept(sock, &fd, capacity).map_err(|e| e.to_string())?;
    ring.set_read_timeout(Some(idle));
    let mut g = super::pump::lock(w);
    write_frame(&mut *g, Message::RingReady.kind(), 0, &[]).map_err(|e| e.to_string())?;
    g.flush().map_err(|e| e.to_string())?;
    *g = BufWriter::with_capacity(g.capacity(), Conn::Ring(ring.try_clone().map_err(|e| e.to_string())?));
    r.get_mut().stream = Conn::Ring(ring);
    Ok(())
}
