//! TLS for the blocking client (`tls://HOST:PORT`, docs/PROTOCOL.md "TLS"): rustls on the
//! `ring` provider, the server checked against the trust roots of a PEM file (the `--tls-ca`
//! flag or `GPULESS_TLS_CA`) and the host part of the address as its name.
//!
//! [`Connection`](super::Connection) reads and writes through separate halves of one stream;
//! a TLS session is one state machine, so both halves share it behind a mutex (a connection is
//! used by one thread at a time — the client-mode library's threads take it under its own
//! lock — so the mutex is never contended). A reader that waits on the socket (the client
//! library's host-call poller) asks [`TlsStream::ready`] whether a read would return at once:
//! the session may hold decrypted bytes the socket no longer shows, and the socket may hold
//! bytes that decrypt to nothing yet. Without the crate's `tls` feature the stream type is
//! empty and connecting fails with a [`ProtocolError::Tls`].

use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use super::ProtocolError;

/// The environment variable naming the CA file when the endpoint names none.
pub const CA_ENV: &str = "GPULESS_TLS_CA";

/// The CA file to trust for `addr`: `ca`, else `$GPULESS_TLS_CA`, else an error that says
/// how to give one.
fn ca_file(addr: &str, ca: Option<&Path>) -> Result<std::path::PathBuf, ProtocolError> {
    match ca {
        Some(p) => Ok(p.to_path_buf()),
        None => std::env::var_os(CA_ENV).filter(|v| !v.is_empty()).map(Into::into).ok_or_else(|| {
            ProtocolError::Tls(format!(
                "tls://{addr}: no CA certificate to check the server with: pass --tls-ca FILE (a PEM file of the CA \
                 that signed the server's certificate, or the certificate itself) or set {CA_ENV}"
            ))
        }),
    }
}

/// The host part of `HOST:PORT` (`[::1]:7011` gives `::1`).
#[cfg_attr(not(feature = "tls"), allow(dead_code))]
fn host_of(addr: &str) -> &str {
    addr.rsplit_once(':').map_or(addr, |(h, _)| h).trim_start_matches('[').trim_end_matches(']')
}

#[cfg(feature = "tls")]
mod imp {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::os::fd::{AsRawFd, RawFd};
    use std::path::Path;
    use std::sync::{Arc, Mutex, MutexGuard};
    use std::time::Duration;

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    use rustls::{CertificateError, ClientConfig, ClientConnection, RootCertStore, StreamOwned};

    use super::super::ProtocolError;

    /// A client's TLS session over TCP, shared by a connection's reader and writer halves.
    #[derive(Debug, Clone)]
    pub struct TlsStream {
        session: Arc<Mutex<StreamOwned<ClientConnection, Sock>>>,
        /// The TCP socket's descriptor (owned by the session), to poll.
        fd: RawFd,
    }

    /// The TCP socket under a session, written without `SIGPIPE`: rustls writes its records
    /// with `write_vectored`, which `std` does as `writev`, and a program that loaded the
    /// client library (a C program keeps the default action) would be killed by a write to a
    /// server that closed the connection — a plain server that refused the handshake, say —
    /// instead of seeing the error.
    #[derive(Debug)]
    struct Sock(TcpStream);

    impl Read for Sock {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.0.read(buf)
        }
    }

    impl Write for Sock {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.write_vectored(&[std::io::IoSlice::new(buf)])
        }

        fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
            // SAFETY: a zeroed msghdr is valid; its iovecs are `bufs` (IoSlice is an iovec on
            // Unix), alive for the call.
            let n = unsafe {
                let mut msg: libc::msghdr = std::mem::zeroed();
                msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
                msg.msg_iovlen = bufs.len().min(1024) as _;
                libc::sendmsg(self.0.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
            };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(n as usize)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Reads the socket without waiting (`MSG_DONTWAIT`): what [`TlsStream::ready`] feeds the
    /// session with.
    struct NoWait(RawFd);

    impl Read for NoWait {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            // SAFETY: a socket the session owns, alive while its lock is held; a buffer of
            // buf.len() writable bytes.
            let n = unsafe { libc::recv(self.0, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(n as usize)
        }
    }

    impl TlsStream {
        fn lock(&self) -> std::io::Result<MutexGuard<'_, StreamOwned<ClientConnection, Sock>>> {
            self.session.lock().map_err(|_| std::io::Error::other("the TLS session was poisoned by a panic"))
        }

        /// Whether a read would return without waiting: the session holds decrypted bytes, or
        /// the socket holds whole records that decrypt to some (read now, without waiting), or
        /// the connection ended or failed (the read then says how). Records that carry no data
        /// (session tickets) and a record only partly arrived do not count.
        pub fn ready(&self) -> std::io::Result<bool> {
            let mut g = self.lock()?;
            let s = &mut *g;
            loop {
                match s.conn.process_new_packets() {
                    Ok(io) if io.plaintext_bytes_to_read() > 0 || io.peer_has_closed() => return Ok(true),
                    Ok(_) => {}
                    Err(_) => return Ok(true),
                }
                match s.conn.read_tls(&mut NoWait(self.fd)) {
                    Ok(0) => return Ok(true),
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => return Ok(true),
                }
            }
        }

        /// Another handle on the same session.
        pub fn try_clone(&self) -> std::io::Result<TlsStream> {
            Ok(self.clone())
        }

        /// Sets the read timeout of the TCP stream underneath.
        pub fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
            self.lock()?.sock.0.set_read_timeout(t)
        }
    }

    impl Read for TlsStream {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.lock()?.read(buf)
        }
    }

    impl Write for TlsStream {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.lock()?.write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.lock()?.flush()
        }
    }

    /// The trust roots in the PEM file `ca`.
    fn roots(ca: &Path) -> Result<RootCertStore, ProtocolError> {
        let what = |e: &dyn std::fmt::Display| {
            ProtocolError::Tls(format!("cannot read the CA certificates in {}: {e}", ca.display()))
        };
        let mut store = RootCertStore::empty();
        let mut n = 0usize;
        for c in CertificateDer::pem_file_iter(ca).map_err(|e| what(&e))? {
            let c = c.map_err(|e| what(&e))?;
            n += 1;
            store.add(c).map_err(|e| {
                ProtocolError::Tls(format!("{}: certificate {n} cannot be a trust root: {e}", ca.display()))
            })?;
        }
        if n == 0 {
            return Err(ProtocolError::Tls(format!(
                "{} holds no certificate (expected PEM `-----BEGIN CERTIFICATE-----` blocks)",
                ca.display()
            )));
        }
        Ok(store)
    }

    /// A handshake error in words, with the fix where there is one.
    fn explain(e: &std::io::Error, addr: &str, host: &str, ca: &Path, timeout: Duration) -> ProtocolError {
        let peer = format!("the TLS handshake with {addr}");
        if let Some(r) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            return ProtocolError::Tls(match r {
                rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => format!(
                    "{peer} failed: the server's certificate is not trusted: no CA in {} signed it; pass the CA of \
                     the server's certificate with --tls-ca FILE (or {})",
                    ca.display(),
                    super::CA_ENV
                ),
                rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
                ) => format!(
                    "{peer} failed: the server's certificate is not valid for `{host}` ({r}): connect by a name or \
                     address the certificate lists"
                ),
                rustls::Error::InvalidCertificate(CertificateError::Other(o))
                    if o.to_string().contains("CaUsedAsEndEntity") =>
                {
                    format!(
                        "{peer} failed: the server's certificate is a CA certificate (basic constraints CA:TRUE, \
                         as `openssl req -x509` makes by default): give the server a certificate without CA:TRUE \
                         (openssl: -addext basicConstraints=critical,CA:FALSE), or one signed by a CA in {}",
                        ca.display()
                    )
                }
                rustls::Error::InvalidCertificate(CertificateError::Other(o)) => format!(
                    "{peer} failed: the server's certificate is not trusted ({o}); check it and the CA given with \
                     --tls-ca ({})",
                    ca.display()
                ),
                rustls::Error::InvalidCertificate(c) => format!(
                    "{peer} failed: the server's certificate is not trusted ({c}); check it and the CA given with \
                     --tls-ca ({})",
                    ca.display()
                ),
                other => format!("{peer} failed: {other} (does the server speak TLS on this port?)"),
            });
        }
        match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => ProtocolError::Tls(format!(
                "{peer}: no answer within {:.1} s (does the server speak TLS on this port?)",
                timeout.as_secs_f64()
            )),
            std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => ProtocolError::Tls(format!(
                "{peer}: the server closed the connection ({e}); does it speak TLS on this port (gpuless serve \
                 --tls-cert)?"
            )),
            _ => ProtocolError::Tls(format!("{peer} failed: {e}")),
        }
    }

    /// Runs the TLS handshake over a connected `tcp` to `addr`, checking the server against the
    /// roots in `ca` and the host part of `addr`, within `timeout`.
    pub fn connect(tcp: TcpStream, addr: &str, ca: &Path, timeout: Duration) -> Result<TlsStream, ProtocolError> {
        let host = super::host_of(addr);
        let name = ServerName::try_from(host.to_string()).map_err(|_| {
            ProtocolError::Tls(format!("tls://{addr}: `{host}` is neither a DNS name nor an IP address"))
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ProtocolError::Tls(format!("TLS configuration: {e}")))?
            .with_root_certificates(roots(ca)?)
            .with_no_client_auth();
        let mut conn = ClientConnection::new(Arc::new(config), name)
            .map_err(|e| ProtocolError::Tls(format!("TLS with {addr}: {e}")))?;
        let t = (!timeout.is_zero()).then_some(timeout);
        tcp.set_read_timeout(t)?;
        tcp.set_write_timeout(t)?;
        let mut tcp = Sock(tcp);
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp).map_err(|e| explain(&e, addr, host, ca, timeout))?;
        }
        tcp.0.set_read_timeout(None)?;
        tcp.0.set_write_timeout(None)?;
        let fd = tcp.0.as_raw_fd();
        Ok(TlsStream { session: Arc::new(Mutex::new(StreamOwned::new(conn, tcp))), fd })
    }

    impl AsRawFd for TlsStream {
        fn as_raw_fd(&self) -> RawFd {
            self.fd
        }
    }
}

#[cfg(not(feature = "tls"))]
mod imp {
    use std::net::TcpStream;
    use std::path::Path;
    use std::time::Duration;

    use super::super::ProtocolError;

    /// A client's TLS session: none in a build without the `tls` feature.
    #[derive(Debug)]
    pub enum TlsStream {}

    impl TlsStream {
        /// Another handle on the same session.
        pub fn try_clone(&self) -> std::io::Result<TlsStream> {
            match *self {}
        }
        /// Sets the read timeout of the TCP stream underneath.
        pub fn set_read_timeout(&self, _: Option<Duration>) -> std::io::Result<()> {
            match *self {}
        }
        /// Whether a read would return without waiting.
        pub fn ready(&self) -> std::io::Result<bool> {
            match *self {}
        }
    }

    impl std::os::fd::AsRawFd for TlsStream {
        fn as_raw_fd(&self) -> std::os::fd::RawFd {
            match *self {}
        }
    }

    impl std::io::Read for TlsStream {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            match *self {}
        }
    }

    impl std::io::Write for TlsStream {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            match *self {}
        }
        fn flush(&mut self) -> std::io::Result<()> {
            match *self {}
        }
    }

    /// Fails: this build has no TLS.
    pub fn connect(_: TcpStream, addr: &str, _: &Path, _: Duration) -> Result<TlsStream, ProtocolError> {
        Err(ProtocolError::Tls(format!("tls://{addr}: this build of gpuless has no TLS support (feature `tls`)")))
    }
}

pub use imp::TlsStream;

/// Opens a TLS session with the server at `addr` over `tcp` (already connected), trusting the
/// CAs in `ca` (else in `$GPULESS_TLS_CA`), within `timeout`.
pub fn connect(tcp: TcpStream, addr: &str, ca: Option<&Path>, timeout: Duration) -> Result<TlsStream, ProtocolError> {
    let ca = ca_file(addr, ca)?;
    imp::connect(tcp, addr, &ca, timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_endpoints_parse_and_print() {
        use super::super::Endpoint;
        let e = Endpoint::parse("tls://gpu1:7011");
        assert_eq!(e, Endpoint::Tls { addr: "gpu1:7011".into(), ca: None, at: None });
        assert_eq!(e.to_string(), "tls://gpu1:7011");
        // One server of several the name resolves to: connect there, check the name.
        let e = Endpoint::parse("tls://gpus:7011#10.0.0.5:7011");
        assert_eq!(e, Endpoint::Tls { addr: "gpus:7011".into(), ca: None, at: Some("10.0.0.5:7011".into()) });
        assert_eq!(e.to_string(), "tls://gpus:7011#10.0.0.5:7011");
        assert_eq!(Endpoint::parse("tcp://gpu1:7011"), Endpoint::Tcp("gpu1:7011".into()));
        assert_eq!(Endpoint::parse("gpu1:7011"), Endpoint::Tcp("gpu1:7011".into()));
    }

    #[test]
    fn hosts_and_missing_cas() {
        assert_eq!(host_of("127.0.0.1:7011"), "127.0.0.1");
        assert_eq!(host_of("[::1]:7011"), "::1");
        assert_eq!(host_of("gpu.example:1"), "gpu.example");
        assert_eq!(ca_file("h:1", Some(Path::new("/x.pem"))).unwrap(), Path::new("/x.pem"));
    }

    #[cfg(feature = "tls")]
    #[test]
    fn an_unreadable_or_empty_ca_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let tcp_pair = || {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            (l, c)
        };
        let missing = dir.path().join("missing.pem");
        let (_l, c) = tcp_pair();
        let e = connect(c, "127.0.0.1:1", Some(&missing), Duration::from_secs(1)).unwrap_err().to_string();
        assert!(e.contains("missing.pem") && e.contains("cannot read"), "{e}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let (_l, c) = tcp_pair();
        let e = connect(c, "127.0.0.1:1", Some(&empty), Duration::from_secs(1)).unwrap_err().to_string();
        assert!(e.contains("empty.pem") && e.contains("no certificate"), "{e}");
    }
}

/// A host call over TLS reaches a client that is not waiting for a reply: the session's
/// tickets (records without data) wake the socket but are no call, and calls whose bytes the
/// session already decrypted run though the socket shows nothing more.
#[cfg(all(test, feature = "tls"))]
mod ready_tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    use rustls::{ServerConfig, ServerConnection, StreamOwned};

    use super::super::frame::{read_frame, write_frame};
    use super::super::{Connection, HostCall, Message};

    /// Whether `fd` becomes readable within `ms` milliseconds.
    fn readable(fd: i32, ms: i32) -> bool {
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, ms) > 0 }
    }

    #[test]
    fn host_calls_over_tls_run_without_a_waiter_and_tickets_are_not_calls() {
        let dir = tempfile::tempdir().unwrap();
        let c = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, c.cert.pem()).unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(c.signing_key.serialize_der()));
        let config = ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![c.cert.der().clone()], key)
            .unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let (go, went) = std::sync::mpsc::channel::<()>();
        let server = std::thread::spawn(move || {
            let (tcp, _) = l.accept().unwrap();
            let mut s = StreamOwned::new(ServerConnection::new(Arc::new(config)).unwrap(), tcp);
            while s.conn.is_handshaking() {
                s.conn.complete_io(&mut s.sock).unwrap();
            }
            s.flush().unwrap(); // the tickets
            went.recv().unwrap();
            // A call with 100 KiB of results (more than the client's read buffer), then a small
            // one, in one write: the client decrypts part of the second with the first.
            let mut bytes = Vec::new();
            for m in [
                Message::HostCall(HostCall { ids: vec![1], outputs: vec![(9, vec![7; 100 << 10])] }),
                Message::HostCall(HostCall { ids: vec![2], outputs: Vec::new() }),
            ] {
                write_frame(&mut bytes, m.kind(), m.flags(), &m.encode()).unwrap();
            }
            s.write_all(&bytes).unwrap();
            s.flush().unwrap();
            let (mut payload, mut returned) = (Vec::new(), Vec::new());
            while returned.len() < 2 {
                let h = read_frame(&mut s, &mut payload).unwrap();
                match Message::decode(h.kind, h.flags, &payload).unwrap() {
                    Message::HostReturned { ids, .. } => returned.extend(ids),
                    m => panic!("not a HostReturned: {}", m.name()),
                }
            }
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest);
            returned
        });
        let addr = format!("localhost:{port}");
        let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let tls = super::connect(tcp, &addr, Some(&ca), Duration::from_secs(5)).unwrap();
        let fd = tls.as_raw_fd();
        let mut conn = Connection::tls(tls).unwrap();
        // A read that waited would fail after this instead of hanging the test.
        conn.set_timeout(Some(Duration::from_secs(2))).unwrap();
        assert_eq!(conn.poll_fd(), fd);
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s2 = Arc::clone(&seen);
        conn.set_host_calls(Box::new(move |c| {
            s2.lock().unwrap().push((c.ids.clone(), c.outputs.iter().map(|(_, b)| b.len()).sum::<usize>()));
            Vec::new()
        }));
        // The tickets: the socket wakes up, no call runs, nothing waits.
        if readable(fd, 2000) {
            assert_eq!(conn.pump_host_calls().unwrap(), 0);
        }
        assert!(!readable(fd, 0), "the tickets were read");
        go.send(()).unwrap();
        let (mut ran, t0) = (0, Instant::now());
        while ran < 2 {
            assert!(t0.elapsed() < Duration::from_secs(10), "ran {ran} of 2 host calls");
            readable(fd, 20); // as the client library's poller waits
            ran += conn.pump_host_calls().unwrap();
        }
        assert_eq!(ran, 2);
        assert_eq!(*seen.lock().unwrap(), vec![(vec![1], 100 << 10), (vec![2], 0)]);
        drop(conn);
        assert_eq!(server.join().unwrap(), vec![1, 2]);
    }
}
