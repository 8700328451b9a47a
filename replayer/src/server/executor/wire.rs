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
