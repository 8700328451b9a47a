//! A blocking client connection: endpoints, the handshake, pipelined sends, answers, and the
//! byte and round-trip counts a client reports.

use std::io::{BufReader, BufWriter, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::frame::{read_frame, write_frame};
use super::message::{kind, Answer, Hello, HostCall, Message, Outputs, Welcome, WANT_ANSWER};
pub use super::stream::{Polled, Stream};
use super::ProtocolError;
use crate::model::{CallRecord, Hash128};

/// Blobs travel in parts of at most this many bytes.
pub const BLOB_PART: usize = 16 << 20;

/// Where a server listens: `unix:PATH`, `HOST:PORT` (TCP) or `tls://HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A TCP address.
    Tcp(String),
    /// A Unix-domain socket path.
    Unix(std::path::PathBuf),
    /// TLS over TCP (a server started with `--tls-cert`): the server's certificate must be
    /// signed by a CA in `ca` (a PEM file; `None`: the file `$GPULESS_TLS_CA` names) and name
    /// the host part of `addr`.
    Tls {
        /// `HOST:PORT`: the name the certificate must carry (and where to connect, without `at`).
        addr: String,
        /// The PEM file of trusted CA certificates.
        ca: Option<std::path::PathBuf>,
        /// `ADDRESS:PORT` to connect to instead of resolving `addr` (`tls://HOST:PORT#ADDRESS:PORT`:
        /// one server of several a name resolves to).
        at: Option<String>,
    },
}

impl Endpoint {
    /// Parses `unix:PATH`, `tls://HOST:PORT` (no CA file yet; `tls://HOST:PORT#ADDRESS:PORT`
    /// connects to ADDRESS and checks the certificate names HOST), `tcp://HOST:PORT` or
    /// `HOST:PORT`.
    pub fn parse(s: &str) -> Self {
        if let Some(p) = s.strip_prefix("unix:") {
            Endpoint::Unix(p.into())
        } else if let Some(a) = s.strip_prefix("tls://") {
            let (addr, at) = match a.split_once('#') {
                Some((addr, at)) => (addr, Some(at.to_string())),
                None => (a, None),
            };
            Endpoint::Tls { addr: addr.to_string(), ca: None, at }
        } else {
            Endpoint::Tcp(s.strip_prefix("tcp://").unwrap_or(s).to_string())
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "{a}"),
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
            Endpoint::Tls { addr, at: None, .. } => write!(f, "tls://{addr}"),
            Endpoint::Tls { addr, at: Some(at), .. } => write!(f, "tls://{addr}#{at}"),
        }
    }
}

/// Opens a TCP connection to `addr` (the first of its addresses that answers).
fn connect_tcp(addr: &str, timeout: Duration) -> Result<TcpStream, ProtocolError> {
    use std::net::ToSocketAddrs;
    let mut last = None;
    for a in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => {
                s.set_nodelay(true)?;
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, format!("{addr}: no address"))).into())
}

/// Opens a connection to `endpoint`, waiting at most `timeout` for it (for TLS: for the TCP
/// connection and again for the TLS handshake).
pub fn connect(endpoint: &Endpoint, timeout: Duration) -> Result<Connection, ProtocolError> {
    let stream = match endpoint {
        Endpoint::Tcp(addr) => Stream::Tcp(connect_tcp(addr, timeout)?),
        Endpoint::Unix(p) => Stream::Unix(UnixStream::connect(p)?),
        Endpoint::Tls { addr, ca, at } => {
            let tcp = connect_tcp(at.as_deref().unwrap_or(addr), timeout)?;
            let tls = super::tls::connect(tcp, addr, ca.as_deref(), timeout)?;
            return Connection::tls(tls);
        }
    };
    Connection::new(stream)
}

/// A connection's reading half: a plain stream, busy-polled, or a TLS session (whose reads
/// block: the session may hold decrypted bytes that the socket no longer shows).
#[derive(Debug)]
enum ReadHalf {
    Plain(Polled),
    Tls(super::tls::TlsStream),
}

impl ReadHalf {
    /// The socket underneath (TCP under a TLS session), to wait on.
    fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        match self {
            ReadHalf::Plain(p) => p.stream.as_raw_fd(),
            ReadHalf::Tls(s) => s.as_raw_fd(),
        }
    }

    /// Whether a read would return without waiting (bytes, the end or an error): the socket is
    /// readable; for TLS, the session holds decrypted bytes or the socket whole records with
    /// some ([`super::tls::TlsStream::ready`]: a readable socket may bring no message yet).
    fn ready(&self) -> std::io::Result<bool> {
        match self {
            ReadHalf::Plain(p) => Ok(p.readable()),
            ReadHalf::Tls(s) => s.ready(),
        }
    }
}

impl Read for ReadHalf {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            ReadHalf::Plain(p) => p.read(buf),
            ReadHalf::Tls(s) => s.read(buf),
        }
    }
}

/// A connection's writing half.
#[derive(Debug)]
enum WriteHalf {
    Plain(Stream),
    Tls(super::tls::TlsStream),
}

impl Write for WriteHalf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            WriteHalf::Plain(s) => s.write(buf),
            WriteHalf::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            WriteHalf::Plain(s) => s.flush(),
            WriteHalf::Tls(s) => s.flush(),
        }
    }
}

/// Counts of what a client sent and waited for.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Traffic {
    /// Bytes sent (frames and headers).
    pub bytes_up: u64,
    /// Bytes received.
    pub bytes_down: u64,
    /// Times the client waited for the server (handshake, blob queries, answers).
    pub round_trips: u64,
    /// Segments sent.
    pub segments: u64,
    /// Blob bytes sent.
    pub blob_bytes: u64,
    /// Blobs the server already held when asked.
    pub blob_hits: u64,
    /// Blobs it did not.
    pub blob_misses: u64,
    /// Seconds spent writing blob bytes to the connection (their throughput is
    /// `blob_bytes / blob_send_s`: the socket holds little, so the server's reading paces it),
    /// or, through shared memory, from packing them until the server holds them.
    pub blob_send_s: f64,
    /// Of `blob_bytes`, those that went through shared memory (a sealed memfd).
    pub shm_bytes: u64,
}

/// One session's connection, from the client's side.
pub struct Connection {
    reader: BufReader<ReadHalf>,
    /// Most a wait for an answer polls before it blocks (`GPULESS_SPIN_US`, default 2,000).
    spin_max: Duration,
    writer: BufWriter<WriteHalf>,
    payload: Vec<u8>,
    encoder: crate::encode::CallBatchEncoder,
    /// What went over the wire so far.
    pub traffic: Traffic,
    /// Runs the host functions of a [`Message::HostCall`] (set by a client that registers
    /// host functions); [`Message::HostReturned`] follows when it returns.
    host_calls: Option<HostCallHandler>,
    /// Whether large segments are compressed: not to a server on this host (a Unix socket, a
    /// loopback address), where compressing costs the program more than the bytes do.
    compress: bool,
}

/// What a client does with a [`HostCall`]: applies its outputs and runs its functions, in order;
/// returns the bytes its late reads read (by id).
pub type HostCallHandler = Box<dyn FnMut(&HostCall) -> Vec<(u64, Vec<u8>)> + Send>;

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").field("traffic", &self.traffic).finish_non_exhaustive()
    }
}

impl Connection {
    /// Wraps a connected stream.
    pub fn new(stream: Stream) -> Result<Self, ProtocolError> {
        let reader = ReadHalf::Plain(Polled::new(stream.try_clone()?, Duration::ZERO));
        Ok(Self::halves(reader, WriteHalf::Plain(stream)))
    }

    /// Wraps a TLS session (its reader and writer halves share it).
    pub fn tls(stream: super::tls::TlsStream) -> Result<Self, ProtocolError> {
        Ok(Self::halves(ReadHalf::Tls(stream.try_clone()?), WriteHalf::Tls(stream)))
    }

    fn halves(reader: ReadHalf, writer: WriteHalf) -> Self {
        let spin_max =
            Duration::from_micros(std::env::var("GPULESS_SPIN_US").ok().and_then(|v| v.parse().ok()).unwrap_or(2000));
        let compress = match &writer {
            WriteHalf::Plain(Stream::Tcp(t)) => t.peer_addr().map_or(true, |a| !a.ip().is_loopback()),
            WriteHalf::Plain(_) => false,
            WriteHalf::Tls(_) => true,
        };
        let reader = BufReader::with_capacity(1 << 16, reader);
        Connection {
            compress,
            reader,
            spin_max,
            writer: BufWriter::with_capacity(1 << 16, writer),
            payload: Vec::new(),
            encoder: crate::encode::CallBatchEncoder::new(),
            traffic: Traffic::default(),
            host_calls: None,
        }
    }

    /// Sets how long a wait for the server may last.
    pub fn set_timeout(&self, t: Option<Duration>) -> Result<(), ProtocolError> {
        match self.reader.get_ref() {
            ReadHalf::Plain(p) => Ok(p.stream.set_read_timeout(t)?),
            ReadHalf::Tls(s) => Ok(s.set_read_timeout(t)?),
        }
    }

    fn frame(&mut self, kind: u16, flags: u16, payload: &[u8]) -> Result<(), ProtocolError> {
        write_frame(&mut self.writer, kind, flags, payload)?;
        self.traffic.bytes_up += (payload.len() + super::FRAME_HEADER_LEN) as u64;
        Ok(())
    }

    /// Queues a message (sent at the next flush or wait).
    pub fn send(&mut self, m: &Message) -> Result<(), ProtocolError> {
        self.frame(m.kind(), m.flags(), &m.encode())
    }

    /// Queues a segment of records; the server answers it only with `want_answer`.
    pub fn send_segment(&mut self, records: &[CallRecord], want_answer: bool) -> Result<(), ProtocolError> {
        for r in records {
            self.encoder.push(r);
        }
        let batch = self.encoder.finish();
        let (flags, bytes) = if self.compress { super::segment::wire(batch) } else { (0, batch) };
        self.send_segment_bytes(&bytes, flags, want_answer)
    }

    /// Queues a segment already encoded for the wire ([`super::segment::wire`]: a client that
    /// sends the same records again encodes them once).
    pub fn send_segment_bytes(&mut self, payload: &[u8], flags: u16, want_answer: bool) -> Result<(), ProtocolError> {
        self.traffic.segments += 1;
        self.frame(kind::SEGMENT, flags | if want_answer { WANT_ANSWER } else { 0 }, payload)
    }

    /// Queues a blob's bytes, in parts.
    pub fn send_blob(&mut self, hash: Hash128, bytes: &[u8]) -> Result<(), ProtocolError> {
        let t0 = std::time::Instant::now();
        let total = bytes.len() as u64;
        let mut offset = 0usize;
        loop {
            let end = (offset + BLOB_PART).min(bytes.len());
            let mut head = super::codec::Put::default();
            head.u128(hash.0).u64(total).u64(offset as u64);
            let len = head.0.len() + (end - offset);
            let h = super::FrameHeader { len: len as u32, kind: kind::BLOB_DATA, flags: 0 }.encode();
            self.writer.write_all(&h)?;
            self.writer.write_all(&head.0)?;
            self.writer.write_all(&bytes[offset..end])?;
            self.traffic.bytes_up += (len + super::FRAME_HEADER_LEN) as u64;
            offset = end;
            if offset >= bytes.len() {
                break;
            }
        }
        self.traffic.blob_bytes += total;
        self.traffic.blob_send_s += t0.elapsed().as_secs_f64();
        Ok(())
    }

    /// Whether the connection can carry descriptors (a Unix socket): blobs can then travel
    /// through shared memory ([`Self::send_blobs_shm`]).
    pub fn can_share_memory(&self) -> bool {
        matches!(self.writer.get_ref(), WriteHalf::Plain(Stream::Unix(_) | Stream::Ring(_)))
    }

    /// Whether frames travel through shared-memory rings ([`super::ring`]).
    pub fn uses_rings(&self) -> bool {
        matches!(self.writer.get_ref(), WriteHalf::Plain(Stream::Ring(_)))
    }

    /// Offers the executor frames through shared memory (a Unix-socket session whose
    /// [`Welcome`] said `rings`) and, once it is ready, sends and reads every frame through them.
    /// Where the rings cannot be made, the session stays on the socket and says why.
    fn offer_rings(&mut self) -> Result<(), ProtocolError> {
        use std::os::fd::AsRawFd;
        self.writer.flush()?;
        let WriteHalf::Plain(Stream::Unix(sock)) = self.writer.get_ref() else { return Ok(()) };
        let sock = sock.try_clone()?;
        let (ring, fd) = match sock.try_clone().and_then(|s| super::ring::Ring::create(s, super::ring::CAPACITY)) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("frames stay on the Unix socket: {e}");
                return Ok(());
            }
        };
        ring.set_read_timeout(sock.read_timeout()?);
        let m = Message::RingOffer { capacity: super::ring::CAPACITY };
        let mut frame = Vec::new();
        write_frame(&mut frame, m.kind(), 0, &m.encode())?;
        super::shm::send_with_fd(sock.as_raw_fd(), &frame, fd.as_raw_fd())?;
        self.traffic.bytes_up += frame.len() as u64;
        self.traffic.round_trips += 1;
        match self.recv_one()? {
            Message::RingReady => {}
            Message::Error { code, message } => {
                return Err(ProtocolError::Server(format!("ended the session (code {code}): {message}")))
            }
            m => return Err(ProtocolError::Unexpected { expected: "RingReady", got: m.name() }),
        }
        if !self.reader.buffer().is_empty() {
            return Err(ProtocolError::Frame("bytes on the socket after RingReady".into()));
        }
        let spin = match self.reader.get_ref() {
            ReadHalf::Plain(p) => p.spin,
            ReadHalf::Tls(_) => Duration::ZERO,
        };
        let reader = ReadHalf::Plain(Polled::new(Stream::Ring(ring.try_clone()?), spin));
        self.reader = BufReader::with_capacity(self.reader.capacity(), reader);
        self.writer = BufWriter::with_capacity(self.writer.capacity(), WriteHalf::Plain(Stream::Ring(ring)));
        Ok(())
    }

    /// Sends `blobs` through a sealed memfd ([`super::shm`]) and waits until the server holds
    /// them (one round trip). Only on a Unix socket. Blobs that already lie in one sealed
    /// memfd (a trace loaded into shared memory) go as they are; others are copied into a new
    /// one first. Where no memfd can be made and sealed, they go through the socket (queued,
    /// like [`Self::send_blob`]).
    pub fn send_blobs_shm(&mut self, blobs: &[(Hash128, &crate::BlobBytes)]) -> Result<(), ProtocolError> {
        use std::os::fd::AsRawFd;
        if !self.can_share_memory() {
            return Err(ProtocolError::Frame("shared-memory blobs need a Unix-socket connection".into()));
        }
        let t0 = std::time::Instant::now();
        let first = blobs.first().and_then(|(_, b)| b.memfd()).map(|(fd, _, _)| fd.clone());
        let shared: Option<(std::sync::Arc<std::os::fd::OwnedFd>, Vec<super::shm::Entry>)> = first.and_then(|fd| {
            let entries = blobs
                .iter()
                .map(|(h, b)| match b.memfd() {
                    Some((f, off, len)) if std::sync::Arc::ptr_eq(f, &fd) => Some((*h, off, len)),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?;
            Some((fd, entries))
        });
        let (fd, entries) = match shared {
            Some((fd, entries)) => (fd, entries),
            None => {
                let threads = std::thread::available_parallelism().map_or(4, |n| n.get()).min(8);
                let bytes: Vec<(Hash128, &[u8])> = blobs.iter().map(|(h, b)| (*h, &***b)).collect();
                match super::shm::pack(&bytes, threads) {
                    Ok((fd, entries)) => (std::sync::Arc::new(fd), entries),
                    Err(e) => {
                        // Nothing has been sent yet: the socket carries them instead.
                        tracing::warn!("blobs go through the socket: {e}");
                        for (h, b) in bytes {
                            self.send_blob(h, b)?;
                        }
                        return Ok(());
                    }
                }
            }
        };
        let m = Message::BlobShm(entries);
        let mut frame = Vec::new();
        write_frame(&mut frame, m.kind(), 0, &m.encode())?;
        self.writer.flush()?;
        match self.writer.get_ref() {
            // The descriptor goes beside the rings, before the frame that needs it.
            WriteHalf::Plain(Stream::Ring(r)) => {
                r.send_fd(fd.as_raw_fd())?;
                self.writer.write_all(&frame)?;
                self.writer.flush()?;
            }
            WriteHalf::Plain(sock) => super::shm::send_with_fd(sock.as_raw_fd(), &frame, fd.as_raw_fd())?,
            WriteHalf::Tls(_) => {
                return Err(ProtocolError::Frame("shared-memory blobs need a Unix-socket connection".into()))
            }
        }
        drop(fd);
        self.traffic.bytes_up += frame.len() as u64;
        self.traffic.round_trips += 1;
        let have = match self.recv()? {
            Message::BlobHave(h) => h,
            Message::Error { code, message } => {
                return Err(ProtocolError::Server(format!("ended the session (code {code}): {message}")))
            }
            m => return Err(ProtocolError::Unexpected { expected: "BlobHave", got: m.name() }),
        };
        if have.len() != blobs.len() || have.iter().any(|h| !h) {
            return Err(ProtocolError::Server("did not take every blob sent through shared memory".into()));
        }
        let total: u64 = blobs.iter().map(|(_, b)| b.len() as u64).sum();
        self.traffic.blob_bytes += total;
        self.traffic.shm_bytes += total;
        self.traffic.blob_send_s += t0.elapsed().as_secs_f64();
        Ok(())
    }

    /// Sends what is queued.
    pub fn flush(&mut self) -> Result<(), ProtocolError> {
        Ok(self.writer.flush()?)
    }

    /// Flushes, then reads the next message; host calls that come first are run on the way
    /// ([`Connection::set_host_calls`]).
    pub fn recv(&mut self) -> Result<Message, ProtocolError> {
        loop {
            self.flush()?;
            match self.recv_one()? {
                Message::HostCall(c) => self.host_call(&c)?,
                m => return Ok(m),
            }
        }
    }

    fn recv_one(&mut self) -> Result<Message, ProtocolError> {
        let h = read_frame(&mut self.reader, &mut self.payload)?;
        self.traffic.bytes_down += u64::from(h.len) + super::FRAME_HEADER_LEN as u64;
        Message::decode(h.kind, h.flags, &self.payload)
    }

    /// Sets what runs the host functions the server reaches.
    pub fn set_host_calls(&mut self, h: HostCallHandler) {
        self.host_calls = Some(h);
    }

    /// Runs a host call and tells the server it returned.
    fn host_call(&mut self, c: &HostCall) -> Result<(), ProtocolError> {
        let Some(h) = self.host_calls.as_mut() else {
            return Err(ProtocolError::Unexpected { expected: "a reply", got: "HostCall" });
        };
        // Late reads in parts that fit a frame: data-only frames first, the ids last.
        const PART: usize = 16 << 20;
        let mut last = Vec::new();
        for (id, bytes) in h(c) {
            let mut off = 0;
            while bytes.len() - off > PART {
                let part = vec![(id, off as u64, bytes[off..off + PART].to_vec())];
                self.send(&Message::HostReturned { ids: Vec::new(), data: part })?;
                off += PART;
            }
            last.push((id, off as u64, bytes[off..].to_vec()));
        }
        self.send(&Message::HostReturned { ids: c.ids.clone(), data: last })?;
        self.flush()
    }

    /// The socket to poll for host calls while nobody waits (over TLS, the TCP socket: it may
    /// be readable with no whole message yet, or hold none while the session holds one —
    /// [`Self::pump_host_calls`] looks at both without waiting).
    pub fn poll_fd(&self) -> std::os::fd::RawFd {
        self.reader.get_ref().fd()
    }

    /// Runs every host call that has arrived (read already, or readable on the socket now)
    /// when no reply is expected: what a client's poller does while the program does not wait.
    /// Returns how many it ran.
    pub fn pump_host_calls(&mut self) -> Result<usize, ProtocolError> {
        let mut n = 0;
        loop {
            let ready = !self.reader.buffer().is_empty() || self.reader.get_ref().ready()?;
            if !ready {
                return Ok(n);
            }
            match self.recv_one()? {
                Message::HostCall(c) => self.host_call(&c)?,
                Message::Error { code, message } => {
                    return Err(ProtocolError::Server(format!("ended the session (code {code}): {message}")))
                }
                m => return Err(ProtocolError::Unexpected { expected: "HostCall", got: m.name() }),
            }
            n += 1;
        }
    }

    /// Sends `hello` and waits for the session.
    pub fn handshake(&mut self, hello: &Hello) -> Result<Welcome, ProtocolError> {
        self.send(&Message::Hello(hello.clone()))?;
        self.traffic.round_trips += 1;
        match self.recv()? {
            Message::Welcome(w) => {
                if w.rings && std::env::var("GPULESS_RING").map_or(true, |v| v != "0") {
                    self.offer_rings()?;
                }
                Ok(*w)
            }
            Message::Refused { code, message } | Message::Error { code, message } => {
                Err(ProtocolError::Server(format!("refused the session (code {code}): {message}")))
            }
            m => Err(ProtocolError::Unexpected { expected: "Welcome", got: m.name() }),
        }
    }

    /// Asks which of `hashes` the server holds; one flag per hash.
    pub fn query_blobs(&mut self, hashes: &[Hash128]) -> Result<Vec<bool>, ProtocolError> {
        self.send(&Message::BlobQuery(hashes.to_vec()))?;
        self.traffic.round_trips += 1;
        match self.recv()? {
            Message::BlobHave(h) if h.len() == hashes.len() => {
                let hits = h.iter().filter(|x| **x).count() as u64;
                self.traffic.blob_hits += hits;
                self.traffic.blob_misses += h.len() as u64 - hits;
                Ok(h)
            }
            Message::Error { code, message } => {
                Err(ProtocolError::Server(format!("ended the session (code {code}): {message}")))
            }
            m => Err(ProtocolError::Unexpected { expected: "BlobHave", got: m.name() }),
        }
    }

    /// Waits for the answer to the last segment sent with `want_answer`. The wait polls for
    /// about as long as the last one took (up to `GPULESS_SPIN_US`), then blocks: a loop of
    /// similar segments gets its answers without a wake-up.
    pub fn answer(&mut self) -> Result<Answer, ProtocolError> {
        self.traffic.round_trips += 1;
        self.flush()?;
        let t0 = std::time::Instant::now();
        let m = self.recv();
        let took = t0.elapsed();
        if let ReadHalf::Plain(p) = self.reader.get_mut() {
            p.spin = (took + took / 2 + Duration::from_micros(50)).min(self.spin_max);
        }
        // Results too large for the answer's frame come first, in parts.
        let mut parts: Vec<(u64, u64, Vec<u8>)> = Vec::new();
        let mut m = m?;
        loop {
            match m {
                Message::OutputPart { seq, total, offset, bytes } => {
                    add_part(&mut parts, seq, total, offset, &bytes)?;
                    m = self.recv()?;
                }
                Message::Answer(mut a) => {
                    for (seq, total, bytes) in parts {
                        if bytes.len() as u64 != total {
                            return Err(ProtocolError::Frame(format!(
                                "the result of call #{seq} came in parts of {} bytes, not {total}",
                                bytes.len()
                            )));
                        }
                        a.outputs.push((seq, bytes));
                    }
                    if self.host_calls.is_some() {
                        // Host calls the server sent right after the answer: run now, not
                        // left in the buffer where a poller of the socket would not see them.
                        self.pump_host_calls()?;
                    }
                    return Ok(a);
                }
                Message::Error { code, message } => {
                    return Err(ProtocolError::Server(format!("ended the session (code {code}): {message}")))
                }
                m => return Err(ProtocolError::Unexpected { expected: "Answer", got: m.name() }),
            }
        }
    }

    /// Registers the function file held by the server as blob `hash` (`len` bytes) under
    /// `name` and waits for it; returns the function's manifest (JSON).
    pub fn deploy(&mut self, name: &str, hash: Hash128, len: u64) -> Result<String, ProtocolError> {
        self.send(&Message::Deploy { name: name.to_string(), hash, len })?;
        self.traffic.round_trips += 1;
        match self.recv()? {
            Message::Deployed { manifest, .. } => Ok(manifest),
            Message::Error { code, message } => {
                Err(ProtocolError::Server(format!("ended the session (code {code}): {message}")))
            }
            m => Err(ProtocolError::Unexpected { expected: "Deployed", got: m.name() }),
        }
    }

    /// Invokes the function deployed as `name` once on `inputs` (back to back; empty: the
    /// recorded inputs) and waits for its outputs.
    pub fn invoke(&mut self, name: &str, verify: bool, inputs: &[u8]) -> Result<Outputs, ProtocolError> {
        let mut p = super::codec::Put::default();
        p.str(name).u8(u8::from(verify));
        let len = p.0.len() + inputs.len();
        if len > super::MAX_FRAME {
            return Err(ProtocolError::Frame(format!(
                "{} bytes of input do not fit in one frame (at most {} bytes)",
                inputs.len(),
                super::MAX_FRAME - p.0.len()
            )));
        }
        // The inputs go from the caller's buffer to the socket, without a copy into a message.
        let h = super::FrameHeader { len: len as u32, kind: kind::INVOKE, flags: 0 }.encode();
        self.writer.write_all(&h)?;
        self.writer.write_all(&p.0)?;
        self.writer.write_all(inputs)?;
        self.traffic.bytes_up += (len + super::FRAME_HEADER_LEN) as u64;
        self.traffic.round_trips += 1;
        match self.recv()? {
            Message::Outputs(o) => Ok(o),
            Message::Error { code, message } => {
                Err(ProtocolError::Server(format!("ended the session (code {code}): {message}")))
            }
            m => Err(ProtocolError::Unexpected { expected: "Outputs", got: m.name() }),
        }
    }

    /// Ends the session; returns the server's totals.
    pub fn close(&mut self) -> Result<super::SessionStats, ProtocolError> {
        self.send(&Message::Close)?;
        match self.recv()? {
            Message::Closed(s) => Ok(s),
            Message::Error { code, message } => {
                Err(ProtocolError::Server(format!("ended the session (code {code}): {message}")))
            }
            m => Err(ProtocolError::Unexpected { expected: "Closed", got: m.name() }),
        }
    }
}

/// The largest result that may come in parts (a device-to-host copy of a whole GPU's memory).
const MAX_PARTED: u64 = 1 << 40;

/// Adds a part of call `seq`'s result (`total` bytes) at `offset`.
fn add_part(
    parts: &mut Vec<(u64, u64, Vec<u8>)>,
    seq: u64,
    total: u64,
    offset: u64,
    bytes: &[u8],
) -> Result<(), ProtocolError> {
    if total > MAX_PARTED {
        return Err(ProtocolError::Frame(format!("a result of {total} bytes announced for call #{seq}")));
    }
    let i = match parts.iter().position(|p| p.0 == seq) {
        Some(i) => i,
        None => {
            parts.push((seq, total, Vec::new()));
            parts.len() - 1
        }
    };
    let (_, want, buf) = &mut parts[i];
    let end = offset + bytes.len() as u64; // checked against `total` by the decoder
    if *want != total || offset != buf.len() as u64 || end > total {
        return Err(ProtocolError::Frame(format!("part at {offset} of call #{seq}'s result out of order")));
    }
    buf.extend_from_slice(bytes);
    Ok(())
}

#[cfg(test)]
mod part_tests {
    /// Parts are put back in order; a part out of order, past the end or of a changed length
    /// is an error, never a panic.
    #[test]
    fn parts_join_in_order_and_bad_ones_are_errors() {
        let mut parts = Vec::new();
        super::add_part(&mut parts, 7, 6, 0, &[1, 2, 3]).unwrap();
        super::add_part(&mut parts, 8, 1, 0, &[9]).unwrap();
        super::add_part(&mut parts, 7, 6, 3, &[4, 5, 6]).unwrap();
        assert_eq!(parts, vec![(7, 6, vec![1, 2, 3, 4, 5, 6]), (8, 1, vec![9])]);
        assert!(super::add_part(&mut parts, 9, 4, 2, &[1]).is_err(), "a gap");
        assert!(super::add_part(&mut parts, 7, 7, 6, &[1]).is_err(), "another length");
        assert!(super::add_part(&mut parts, 10, 1 << 50, 0, &[1]).is_err(), "an absurd length");
    }
}

#[cfg(test)]
mod host_call_tests {
    use super::*;

    /// A host call that arrives while nobody waits runs through `pump_host_calls`; a late read
    /// larger than a frame goes back in parts (data-only frames, then the ids), in order.
    #[test]
    fn host_calls_run_and_large_late_reads_travel_in_parts() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut conn = Connection::new(Stream::Unix(a)).unwrap();
        let big: Vec<u8> = (0..(40usize << 20)).map(|i| (i % 251) as u8).collect();
        let want = big.clone();
        conn.set_host_calls(Box::new(move |c| {
            assert_eq!(c.ids, vec![5, 9]);
            assert_eq!(c.outputs, vec![(3, vec![1, 2])]);
            vec![(9, big.clone()), (5, vec![7])]
        }));
        let server = std::thread::spawn(move || {
            let mut w = b.try_clone().unwrap();
            let m = Message::HostCall(HostCall { ids: vec![5, 9], outputs: vec![(3, vec![1, 2])] });
            write_frame(&mut w, m.kind(), m.flags(), &m.encode()).unwrap();
            let mut r = std::io::BufReader::new(b);
            let (mut joined, mut payload, mut frames) =
                (std::collections::HashMap::<u64, Vec<u8>>::new(), Vec::new(), 0);
            loop {
                let h = read_frame(&mut r, &mut payload).unwrap();
                frames += 1;
                let Message::HostReturned { ids, data } = Message::decode(h.kind, h.flags, &payload).unwrap() else {
                    panic!("not a HostReturned")
                };
                for (id, off, bytes) in data {
                    let v = joined.entry(id).or_default();
                    assert_eq!(v.len() as u64, off, "parts in order");
                    v.extend_from_slice(&bytes);
                }
                if !ids.is_empty() {
                    assert_eq!(ids, vec![5, 9]);
                    return (joined, frames);
                }
            }
        });
        // Wait until the call is readable, then run it.
        let mut ran = 0;
        for _ in 0..200 {
            ran = conn.pump_host_calls().unwrap();
            if ran > 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(ran, 1);
        let (joined, frames) = server.join().unwrap();
        assert_eq!(joined[&5], vec![7]);
        assert!(joined[&9] == want, "the 40 MiB read arrives whole");
        assert_eq!(frames, 3, "two 16 MiB parts, then the rest with the ids");
    }
}
