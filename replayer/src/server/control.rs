//! The control channel between the server and one executor process: a `SOCK_SEQPACKET`
//! socket pair (one message per packet), which also carries the client's connection to the
//! executor as a file descriptor (`SCM_RIGHTS`), so the session's data never passes through
//! the server.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use gpuless_traces::protocol::codec::{Get, Put};
use gpuless_traces::protocol::message::{DeviceDescription, MoreDevices, PartitionInfo, SessionStats};
use gpuless_traces::protocol::piece::policy::Hold;
use gpuless_traces::protocol::ProtocolError;
use gpuless_traces::Hash128;

/// Largest control packet.
const MAX_PACKET: usize = 1 << 20;

/// A message on the control channel.
#[derive(Debug, Clone, PartialEq)]
pub enum Control {
    /// Executor → server: initialized, ready for a session.
    Ready {
        /// The partition it runs on.
        partition: PartitionInfo,
        /// The device as its sessions see it.
        device: DeviceDescription,
        /// Its further devices (an executor for a session of several GPUs).
        more: MoreDevices,
        /// Whether its contexts are clients of an operator's MPS server
        /// (`CU_DEVICE_ATTRIBUTE_MPS_ENABLED`; docs/SCHEDULING.md).
        mps: bool,
    },
    /// Executor → server: the GPU could not be initialized.
    Failed(String),
    /// Server → executor: serve this session (the client's socket comes with it).
    Start(SessionStart),
    /// Executor → server: blobs added to the cache, and blobs found in it.
    Cache {
        /// Added: (hash, length).
        added: Vec<(Hash128, u64)>,
        /// Found.
        hits: Vec<Hash128>,
    },
    /// Executor → server: blobs a session received, for the cache, in the sealed memfd that
    /// comes with the message (`gpuless_traces::protocol::shm`): (hash, offset, length). The
    /// server checks each against its hash and writes it (executors cannot write the cache:
    /// their view holds it read-only), owned by the session's tenant.
    Store(Vec<(Hash128, u64, u64)>),
    /// Executor → server: the piece templates of a program (`piece::policy`), the first `len`
    /// bytes of the sealed memfd that comes with the message, for the cache's `pieces/KEY`.
    Templates {
        /// The program's key.
        key: Hash128,
        /// Bytes.
        len: u64,
    },
    /// Executor → server, waiting for [`Control::Registered`]: register the deployed function
    /// `name` as the function file `hash` of `len` bytes, for the session's tenant.
    Register {
        /// The function's name.
        name: String,
        /// Its function file's blob.
        hash: Hash128,
        /// Its length.
        len: u64,
    },
    /// Server → executor: the answer to [`Control::Register`] (empty, or why it failed), or to
    /// [`Control::Barrier`].
    Registered(String),
    /// Executor → server, waiting for [`Control::Registered`]: everything sent before has been
    /// applied (the blobs of earlier [`Control::Store`]s are in the cache).
    Barrier,
    /// Executor → server, with a descriptor, waiting for [`Control::Registered`]: the session's
    /// physical memory exported as a POSIX descriptor, offered under `token` to the other
    /// sessions of its tenant (`gpuless_traces::protocol::share`: the program's processes share
    /// memory). The server forgets it when the session ends.
    Offer {
        /// The token the client drew.
        token: u128,
    },
    /// Executor → server, waiting for [`Control::Given`]: the descriptor offered under `token`.
    Take {
        /// The exporter's token.
        token: u128,
    },
    /// Server → executor: the answer to [`Control::Take`] — empty with the descriptor attached,
    /// or why there is none.
    Given(String),
    /// Executor → server: the code images its session loaded (content hash, a library rather
    /// than a module), to remember for the next executors (`replay::warm_images`).
    Images(Vec<(Hash128, bool)>),
    /// Executor → server: latencies, microseconds: (0 = segment execution, 1 = request to
    /// answer), at most a few hundred per message.
    Samples(Vec<(u8, u32)>),
    /// Executor → server: function invocations since the last report: (function, mode —
    /// `graph` or `eager` —, count).
    Invocations(Vec<(String, String, u64)>),
    /// Executor → server: the session ended.
    Done {
        /// Its totals.
        stats: SessionStats,
        /// Empty, or why it ended abnormally.
        error: String,
    },
    /// Executor → server, after [`Control::Done`]: the session invoked only `function`, which
    /// stays set up; the executor waits (up to the keep-alive of its last `Start`) for another
    /// `Start` of a session of that function, and exits when the server closes the channel.
    Warm {
        /// The function's deployed name.
        function: String,
    },
    /// Executor → server, after [`Control::Done`]: the session of `program` ended with its
    /// uploads that still held their blob kept resident (warm constants,
    /// `crate::replay::resident`); the executor waits, like [`Control::Warm`], for the next
    /// session of that program.
    KeptProgram {
        /// The program, as its Hello named it.
        program: String,
        /// Bytes of uploads kept resident.
        resident_bytes: u64,
        /// Upload bytes the session did not copy because the last session left them resident.
        skipped_bytes: u64,
    },
}

/// A session as the server hands it to an executor ([`Control::Start`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SessionStart {
    /// Session id.
    pub session: u64,
    /// Idle timeout, milliseconds.
    pub idle_ms: u64,
    /// The client's Hello payload.
    pub hello: Vec<u8>,
    /// How long the executor may stay warm with the session's function set up after the
    /// session ends ([`Control::Warm`]), milliseconds; 0: it exits after the session.
    pub keep_alive_ms: u64,
    /// Whether repeated runs of the session's records execute as CUDA graphs
    /// ([`super::pieces`]), and when pieces are held for them.
    pub cached: Option<Hold>,
    /// The tenant whose client this is ([`super::tenants`]): its deployed functions are
    /// the ones the session sees.
    pub tenant: String,
    /// Whether the server has tenants: then the session is given a cached blob only if
    /// its tenant has sent that blob's bytes before (`Dirs::owns`).
    pub scoped: bool,
    /// How the session's class goes before or after others ([`super::gate`]).
    pub priority: super::config::PriorityPolicy,
    /// A best-effort session's kernels that may be on the GPU at once under policy
    /// `preempt` (0: no bound).
    pub be_inflight: u32,
    /// A best-effort session's predicted GPU time that may be on the GPU at once under policy
    /// `preempt`, microseconds (0: no bound; `executor/inflight.rs`).
    pub be_budget_us: u32,
}

impl SessionStart {
    /// Writes the fields, in their wire order.
    fn put(&self, p: &mut Put) {
        let cached = match self.cached {
            None => 0,
            Some(Hold::Busy) => 1,
            Some(Hold::Always) => 2,
        };
        p.u64(self.session)
            .u64(self.idle_ms)
            .bytes(&self.hello)
            .u64(self.keep_alive_ms)
            .u8(cached)
            .str(&self.tenant)
            .u8(u8::from(self.scoped))
            .u8(match self.priority {
                super::config::PriorityPolicy::Off => 0,
                super::config::PriorityPolicy::Gate => 1,
                super::config::PriorityPolicy::Preempt => 2,
            })
            .u32(self.be_inflight)
            .u32(self.be_budget_us);
    }

    /// Reads what [`SessionStart::put`] wrote.
    fn get(g: &mut Get<'_>) -> Result<SessionStart, ProtocolError> {
        Ok(SessionStart {
            session: g.u64()?,
            idle_ms: g.u64()?,
            hello: g.bytes()?.to_vec(),
            keep_alive_ms: g.u64()?,
            cached: match g.u8()? {
                0 => None,
                2 => Some(Hold::Always),
                _ => Some(Hold::Busy),
            },
            tenant: g.str()?,
            scoped: g.u8()? != 0,
            priority: match g.u8()? {
                0 => super::config::PriorityPolicy::Off,
                1 => super::config::PriorityPolicy::Gate,
                _ => super::config::PriorityPolicy::Preempt,
            },
            be_inflight: g.u32()?,
            be_budget_us: g.u32()?,
        })
    }
}

impl Control {
    fn encode(&self) -> Vec<u8> {
        let mut p = Put::default();
        match self {
            Control::Ready { partition, device, more, mps } => {
                p.u8(1);
                partition.put(&mut p);
                device.put(&mut p);
                more.put(&mut p);
                p.u8(u8::from(*mps));
            }
            Control::Failed(m) => {
                p.u8(2).str(m);
            }
            Control::Start(start) => {
                p.u8(3);
                start.put(&mut p);
            }
            Control::Cache { added, hits } => {
                p.u8(4).u32(added.len() as u32);
                for (h, n) in added {
                    p.u128(h.0).u64(*n);
                }
                p.u32(hits.len() as u32);
                for h in hits {
                    p.u128(h.0);
                }
            }
            Control::Samples(s) => {
                p.u8(5).u32(s.len() as u32);
                for (k, v) in s {
                    p.u8(*k).u32(*v);
                }
            }
            Control::Invocations(v) => {
                p.u8(7).u32(v.len() as u32);
                for (f, m, n) in v {
                    p.str(f).str(m).u64(*n);
                }
            }
            Control::Done { stats, error } => {
                p.u8(6);
                let c = gpuless_traces::protocol::Message::Closed(stats.clone());
                p.bytes(&c.encode()).str(error);
            }
            Control::Warm { function } => {
                p.u8(8).str(function);
            }
            Control::KeptProgram { program, resident_bytes, skipped_bytes } => {
                p.u8(9).str(program).u64(*resident_bytes).u64(*skipped_bytes);
            }
            Control::Store(entries) => {
                p.u8(10).u32(entries.len() as u32);
                for (h, off, len) in entries {
                    p.u128(h.0).u64(*off).u64(*len);
                }
            }
            Control::Templates { key, len } => {
                p.u8(11).u128(key.0).u64(*len);
            }
            Control::Register { name, hash, len } => {
                p.u8(12).str(name).u128(hash.0).u64(*len);
            }
            Control::Registered(error) => {
                p.u8(13).str(error);
            }
            Control::Barrier => {
                p.u8(14);
            }
            Control::Offer { token } => {
                p.u8(16).u128(*token);
            }
            Control::Take { token } => {
                p.u8(17).u128(*token);
            }
            Control::Given(error) => {
                p.u8(18).str(error);
            }
            Control::Images(images) => {
                p.u8(15).u32(images.len() as u32);
                for (h, library) in images {
                    p.u128(h.0).u8(u8::from(*library));
                }
            }
        }
        p.0
    }

    fn decode(b: &[u8]) -> Result<Control, ProtocolError> {
        use gpuless_traces::protocol::message::kind;
        use gpuless_traces::protocol::Message;
        let mut g = Get::new(b, "control");
        let m = match g.u8()? {
            1 => Control::Ready {
                partition: PartitionInfo::get(&mut g)?,
                device: DeviceDescription::get(&mut g)?,
                more: MoreDevices::get(&mut g)?,
                mps: g.u8()? != 0,
            },
            2 => Control::Failed(g.str()?),
            3 => Control::Start(SessionStart::get(&mut g)?),
            4 => {
                let n = g.count(24)?;
                let mut added = Vec::with_capacity(n);
                for _ in 0..n {
                    added.push((Hash128(g.u128()?), g.u64()?));
                }
                let n = g.count(16)?;
                let mut hits = Vec::with_capacity(n);
                for _ in 0..n {
                    hits.push(Hash128(g.u128()?));
                }
                Control::Cache { added, hits }
            }
            5 => {
                let n = g.count(5)?;
                let mut s = Vec::with_capacity(n);
                for _ in 0..n {
                    s.push((g.u8()?, g.u32()?));
                }
                Control::Samples(s)
            }
            6 => {
                let stats = match Message::decode(kind::CLOSED, 0, g.bytes()?)? {
                    Message::Closed(s) => s,
                    _ => return Err(g.error("session stats")),
                };
                Control::Done { stats, error: g.str()? }
            }
            7 => {
                let n = g.count(16)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push((g.str()?, g.str()?, g.u64()?));
                }
                Control::Invocations(v)
            }
            8 => Control::Warm { function: g.str()? },
            9 => Control::KeptProgram { program: g.str()?, resident_bytes: g.u64()?, skipped_bytes: g.u64()? },
            10 => {
                let n = g.count(32)?;
                let mut entries = Vec::with_capacity(n);
                for _ in 0..n {
                    entries.push((Hash128(g.u128()?), g.u64()?, g.u64()?));
                }
                Control::Store(entries)
            }
            11 => Control::Templates { key: Hash128(g.u128()?), len: g.u64()? },
            12 => Control::Register { name: g.str()?, hash: Hash128(g.u128()?), len: g.u64()? },
            13 => Control::Registered(g.str()?),
            14 => Control::Barrier,
            15 => {
                let n = g.count(17)?;
                let mut images = Vec::with_capacity(n);
                for _ in 0..n {
                    images.push((Hash128(g.u128()?), g.u8()? != 0));
                }
                Control::Images(images)
            }
            16 => Control::Offer { token: g.u128()? },
            17 => Control::Take { token: g.u128()? },
            18 => Control::Given(g.str()?),
            t => return Err(g.error(format!("control message {t}"))),
        };
        g.end()?;
        Ok(m)
    }
}

/// One end of a control channel.
#[derive(Debug)]
pub struct Channel {
    fd: OwnedFd,
}

/// A connected pair: (server's end, executor's end).
pub fn pair() -> io::Result<(Channel, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: fds has room for the two descriptors socketpair writes.
    let r = unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    unsafe { Ok((Channel { fd: OwnedFd::from_raw_fd(fds[0]) }, OwnedFd::from_raw_fd(fds[1]))) }
}

impl Channel {
    /// Wraps an inherited descriptor (the executor's end).
    pub fn from_fd(fd: OwnedFd) -> Channel {
        Channel { fd }
    }

    /// A second handle on the same channel (for a reader thread).
    pub fn try_clone(&self) -> io::Result<Channel> {
        Ok(Channel { fd: self.fd.try_clone()? })
    }

    /// Sends a message, with a descriptor attached if given.
    pub fn send(&self, m: &Control, fd: Option<RawFd>) -> io::Result<()> {
        let bytes = m.encode();
        let mut iov = libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() };
        // Room for one descriptor, aligned as cmsghdr needs.
        let mut cbuf = [0u64; 8];
        // SAFETY: msghdr is plain data; every pointer in it refers to live buffers above, and
        // the CMSG macros stay inside cbuf (checked by CMSG_SPACE ≤ its size).
        unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            if let Some(fd) = fd {
                let space = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
                debug_assert!(space <= std::mem::size_of_val(&cbuf));
                msg.msg_control = cbuf.as_mut_ptr().cast();
                msg.msg_controllen = space;
                let c = libc::CMSG_FIRSTHDR(&msg);
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
            }
            if libc::sendmsg(self.fd.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// Receives the next message and the descriptor sent with it. `Ok(None)`: the other end
    /// closed.
    pub fn recv(&self) -> io::Result<Option<(Control, Option<OwnedFd>)>> {
        let mut buf = vec![0u8; MAX_PACKET];
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let mut cbuf = [0u64; 8];
        // SAFETY: as in send; the descriptor read from the control message is new and owned here.
        let (n, fd) = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = std::mem::size_of_val(&cbuf);
            let n = loop {
                let n = libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
                if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                break n;
            };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut fd = None;
            let c = libc::CMSG_FIRSTHDR(&msg);
            if !c.is_null() && (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                fd = Some(OwnedFd::from_raw_fd(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<RawFd>())));
            }
            (n as usize, fd)
        };
        if n == 0 {
            return Ok(None);
        }
        let m = Control::decode(&buf[..n]).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        Ok(Some((m, fd)))
    }

    /// Like [`Channel::recv`], but gives up after `timeout`: `Ok(None)` then as when the other
    /// end closed.
    pub fn recv_timeout(&self, timeout: std::time::Duration) -> io::Result<Option<(Control, Option<OwnedFd>)>> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let ms = left.as_millis().min(i32::MAX as u128) as libc::c_int;
            let mut pfd = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd.
            let r = unsafe { libc::poll(&mut pfd, 1, ms) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if r == 0 {
                if left.is_zero() {
                    return Ok(None);
                }
                continue;
            }
            return self.recv();
        }
    }

    /// Stops sending: the other end's [`Channel::recv`] answers `Ok(None)` (it is let go),
    /// while what it still sends can be read here.
    pub fn close_write(&self) {
        // SAFETY: shutting down our own socket.
        unsafe { libc::shutdown(self.fd.as_raw_fd(), libc::SHUT_WR) };
    }

    /// The raw descriptor (to place it at a fixed number in a child).
    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_and_descriptors_cross_the_channel() {
        let (a, b) = pair().unwrap();
        let b = Channel::from_fd(b);
        let (r, w) = std::os::unix::net::UnixStream::pair().unwrap();
        let start = Control::Start(SessionStart {
            session: 3,
            idle_ms: 10,
            hello: vec![1, 2],
            keep_alive_ms: 300_000,
            cached: Some(Hold::Always),
            tenant: "alice".into(),
            scoped: true,
            priority: super::super::config::PriorityPolicy::Gate,
            be_inflight: 4,
            be_budget_us: 300,
        });
        a.send(&start, Some(w.as_raw_fd())).unwrap();
        let (m, fd) = b.recv().unwrap().unwrap();
        assert_eq!(m, start);
        // The descriptor received is the same socket: a byte written through it arrives.
        let mut got = std::os::unix::net::UnixStream::from(fd.unwrap());
        use std::io::{Read, Write};
        got.write_all(b"x").unwrap();
        let mut one = [0u8; 1];
        (&r).read_exact(&mut one).unwrap();
        assert_eq!(&one, b"x");
        let done = Control::Done { stats: SessionStats { records: 5, ..Default::default() }, error: "e".into() };
        b.send(&done, None).unwrap();
        let cache = Control::Cache { added: vec![(Hash128(9), 4)], hits: vec![Hash128(1)] };
        b.send(&cache, None).unwrap();
        let calls = Control::Invocations(vec![("resnet50".into(), "graph".into(), 200)]);
        b.send(&calls, None).unwrap();
        assert_eq!(a.recv().unwrap().unwrap().0, done);
        assert_eq!(a.recv().unwrap().unwrap().0, cache);
        assert_eq!(a.recv().unwrap().unwrap().0, calls);
        // What executors ask of the cache, and the server's answer.
        for m in [
            Control::Store(vec![(Hash128(3), 0, 10), (Hash128(4), 4096, 1)]),
            Control::Templates { key: Hash128(5), len: 3 },
            Control::Register { name: "resnet".into(), hash: Hash128(6), len: 77 },
            Control::Registered("no room".into()),
            Control::Barrier,
            Control::Offer { token: 1 << 100 | 3 },
            Control::Take { token: 7 },
            Control::Given("not offered".into()),
            Control::Images(vec![(Hash128(8), true), (Hash128(9), false)]),
            Control::Ready {
                partition: PartitionInfo::default(),
                device: DeviceDescription::default(),
                more: MoreDevices::default(),
                mps: true,
            },
        ] {
            b.send(&m, None).unwrap();
            assert_eq!(a.recv().unwrap().unwrap().0, m);
        }
        drop(b);
        assert!(a.recv().unwrap().is_none());
    }

    #[test]
    fn start_keeps_its_wire_format() {
        use super::super::config::PriorityPolicy;
        let start = |cached, priority| {
            Control::Start(SessionStart {
                session: 0x0102,
                idle_ms: 10,
                hello: vec![0xaa, 0xbb],
                keep_alive_ms: 300_000,
                cached,
                tenant: "al".into(),
                scoped: true,
                priority,
                be_inflight: 4,
                be_budget_us: 300,
            })
        };
        #[rustfmt::skip]
        let bytes: Vec<u8> = vec![
            3,
            0x02, 0x01, 0, 0, 0, 0, 0, 0, // session
            10, 0, 0, 0, 0, 0, 0, 0, // idle_ms
            2, 0, 0, 0, 0xaa, 0xbb, // hello
            0xe0, 0x93, 0x04, 0, 0, 0, 0, 0, // keep_alive_ms
            2, // cached
            2, 0, 0, 0, b'a', b'l', // tenant
            1, // scoped
            1, // priority
            4, 0, 0, 0, // be_inflight
            0x2c, 1, 0, 0, // be_budget_us
        ];
        let m = start(Some(Hold::Always), PriorityPolicy::Gate);
        assert_eq!(m.encode(), bytes);
        assert_eq!(Control::decode(&bytes).unwrap(), m);
        // Every setting of `cached` and `priority` round-trips, each as one byte.
        let (cached_at, priority_at) = (31, 39);
        for (cached, c) in [(None, 0), (Some(Hold::Busy), 1), (Some(Hold::Always), 2)] {
            for (priority, p) in [(PriorityPolicy::Off, 0), (PriorityPolicy::Gate, 1), (PriorityPolicy::Preempt, 2)] {
                let m = start(cached, priority);
                let b = m.encode();
                assert_eq!((b.len(), b[cached_at], b[priority_at]), (bytes.len(), c, p));
                assert_eq!(Control::decode(&b).unwrap(), m);
            }
        }
        // A truncated or padded Start is refused.
        assert!(Control::decode(&bytes[..bytes.len() - 1]).is_err());
        let mut long = bytes.clone();
        long.push(0);
        assert!(Control::decode(&long).is_err());
    }

    #[test]
    fn warm_round_trips_and_a_let_go_executor_hears_the_end() {
        let (a, b) = pair().unwrap();
        let b = Channel::from_fd(b);
        for m in [
            Control::Warm { function: "resnet50".into() },
            Control::Warm { function: String::new() },
            Control::KeptProgram { program: "python run.py".into(), resident_bytes: 1 << 30, skipped_bytes: 7 },
        ] {
            b.send(&m, None).unwrap();
            assert_eq!(a.recv().unwrap().unwrap().0, m);
            assert_eq!(Control::decode(&m.encode()).unwrap(), m);
        }
        // A truncated or padded Warm is refused.
        let bytes = Control::Warm { function: "f".into() }.encode();
        assert!(Control::decode(&bytes[..bytes.len() - 1]).is_err());
        let mut long = bytes.clone();
        long.push(0);
        assert!(Control::decode(&long).is_err());
        // Waiting times out with nothing sent; the server letting go reads as the end.
        let t0 = std::time::Instant::now();
        assert!(b.recv_timeout(std::time::Duration::from_millis(50)).unwrap().is_none());
        assert!(t0.elapsed() >= std::time::Duration::from_millis(50));
        a.close_write();
        assert!(b.recv_timeout(std::time::Duration::from_secs(5)).unwrap().is_none());
        assert!(t0.elapsed() < std::time::Duration::from_secs(4));
        // The executor can still report after it was let go.
        b.send(&Control::Warm { function: "g".into() }, None).unwrap();
        assert_eq!(a.recv().unwrap().unwrap().0, Control::Warm { function: "g".into() });
    }
}
