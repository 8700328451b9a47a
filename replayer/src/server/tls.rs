//! TLS on the server's TCP listener (`tls_cert` / `tls_key`, docs/PROTOCOL.md "TLS").
//!
//! A TLS session's state lives in this process and cannot be handed to an executor with the
//! socket. So for a TLS client the server keeps the connection: after admission it creates a
//! Unix socket pair, hands one end to the executor (the executor serves Unix clients already)
//! and proxies bytes between the TLS stream and the other end until either side ends.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

use gpuless_traces::protocol::message::code;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::{TcpStream, UnixStream};
use tokio::time::Instant;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::manager::Manager;
use super::metrics::kind as label;
use super::Handoff;

/// The first byte of a TLS record carrying a handshake message (a client's first record).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// Bytes each direction of the proxy reads at once.
const PROXY_BUF: usize = 64 << 10;

/// The acceptor for the certificate chain in `cert` and the private key in `key_file` (PEM
/// files). Errors name the setting and the file.
pub fn acceptor(cert: &Path, key_file: &Path) -> Result<TlsAcceptor, String> {
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("tls_cert {}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "tls_cert {}: no certificate in it (expected PEM `-----BEGIN CERTIFICATE-----`)",
            cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => {
            format!("tls_key {}: no private key in it (expected a PEM `PRIVATE KEY` block)", key_file.display())
        }
        e => format!("tls_key {}: {e}", key_file.display()),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS configuration: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => format!(
                "tls_key {} is not the key of the certificate in tls_cert {}",
                key_file.display(),
                cert.display()
            ),
            e => format!("tls_cert {} / tls_key {}: {e}", cert.display(), key_file.display()),
        })?;
    // Each client connects once: no resumption tickets.
    config.send_tls13_tickets = 0;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// One client on the TLS listener: the TLS handshake, then [`super::session`] over TLS, all
/// within `handshake_timeout_s`. A client that does not start with a TLS handshake is refused
/// in the clear (it would not understand anything else); a failed handshake is counted and
/// logged and ends only this connection.
pub(super) async fn session(m: Arc<Manager>, acceptor: TlsAcceptor, mut s: TcpStream, peer: String) {
    let deadline = Instant::now() + super::Config::secs(m.cfg.handshake_timeout_s);
    let failed = |kind: &str| {
        m.metrics.tls_handshake_failures.get_or_create(&label(kind)).inc();
    };
    let mut first = [0u8; 1];
    match tokio::time::timeout_at(deadline, s.peek(&mut first)).await {
        Ok(Ok(1..)) if first[0] == TLS_HANDSHAKE_RECORD => {}
        Ok(Ok(1..)) => {
            let e = "this server's TCP listener speaks TLS only: connect with tls://HOST:PORT (and --tls-ca FILE)";
            return super::refuse(&m, &mut s, code::BAD_MESSAGE, e.into(), "refused-not-tls").await;
        }
        Ok(_) => return failed("failed"),
        Err(_) => {
            tracing::info!(peer, "no TLS handshake within the handshake timeout");
            return failed("timeout");
        }
    }
    let tls = match tokio::time::timeout_at(deadline, acceptor.accept(s)).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            tracing::info!(peer, error = %e, "TLS handshake failed");
            return failed("failed");
        }
        Err(_) => {
            tracing::info!(peer, "TLS handshake not done within the handshake timeout");
            return failed("timeout");
        }
    };
    super::session(m, tls, peer, deadline).await
}

impl Handoff for TlsStream<TcpStream> {
    fn is_tls(&self) -> bool {
        true
    }

    /// One end of a new Unix socket pair; a task proxies between the TLS stream and the other.
    fn into_blocking_fd(self) -> std::io::Result<OwnedFd> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        ours.set_nonblocking(true)?;
        let ours = UnixStream::from_std(ours)?;
        tokio::spawn(proxy(self, ours));
        Ok(theirs.into())
    }
}

/// Copies bytes both ways between the client's TLS stream and the executor's socket. When the
/// client's side ends, the executor's socket is shut down for writing (the executor sees the
/// end of its input, ends the session and closes); when the executor's side ends, the client is
/// sent a TLS close and the proxy ends at once.
async fn proxy(tls: TlsStream<TcpStream>, exec: UnixStream) {
    let (tls_r, mut tls_w) = tokio::io::split(tls);
    let (exec_r, mut exec_w) = exec.into_split();
    let (mut tls_r, mut exec_r) =
        (BufReader::with_capacity(PROXY_BUF, tls_r), BufReader::with_capacity(PROXY_BUF, exec_r));
    let up = async {
        let r = tokio::io::copy_buf(&mut tls_r, &mut exec_w).await;
        let _ = exec_w.shutdown().await;
        r
    };
    let down = async {
        let r = tokio::io::copy_buf(&mut exec_r, &mut tls_w).await;
        let _ = tls_w.shutdown().await;
        r
    };
    tokio::pin!(up, down);
    let (up_bytes, down_bytes) = tokio::select! {
        d = &mut down => (None, Some(d)),
        u = &mut up => (Some(u), Some(down.await)),
    };
    tracing::debug!(up = ?up_bytes, down = ?down_bytes, "TLS proxy ends");
}
