//! The server's HTTP endpoint (`--metrics`): one request per connection, read within limits,
//! answered from the manager's readiness and metrics ([`super::metrics::answer`]).

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::manager::Manager;
use super::metrics::{answer, head_complete, Readiness};

/// Serves one HTTP request on `s` ([`answer`]), then closes it.
pub(super) async fn serve_http(m: Arc<Manager>, mut s: tokio::net::TcpStream) {
    // However the client's writes arrive: the request line (and for a `/metrics` that needs a
    // token, the headers), up to 8 KiB or 5 s.
    let token = Some(m.cfg.metrics_token.as_str()).filter(|t| !t.is_empty());
    let mut req = vec![0u8; 8192];
    let mut n = 0;
    let read = async {
        while n < req.len() && !head_complete(&req[..n], token.is_some()) {
            match s.read(&mut req[n..]).await {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k,
            }
        }
    };
    // A request line without the headers a token needs, after 5 s: answered (401).
    let timed_out = tokio::time::timeout(std::time::Duration::from_secs(5), read).await.is_err();
    if n == 0 || (timed_out && !req[..n].contains(&b'\n')) {
        return;
    }
    let text = String::from_utf8_lossy(&req[..n]);
    let readiness = || {
        let r = m.readiness();
        if r == Readiness::Starting {
            // The pool's executor may have failed (a busy or resetting GPU): try again now.
            let m = m.clone();
            tokio::task::spawn_blocking(move || m.fill_pool());
        }
        r
    };
    let metrics = || {
        m.refresh_metrics();
        m.metrics.render()
    };
    let a = answer(&text, token, readiness, metrics);
    if a.challenge {
        m.metrics.metrics_unauthorized.inc();
    }
    let head = format!(
        "HTTP/1.1 {}\r\n{}Content-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        a.status,
        if a.challenge { "WWW-Authenticate: Bearer\r\n" } else { "" },
        a.content_type,
        a.body.len()
    );
    let _ = s.write_all(head.as_bytes()).await;
    let _ = s.write_all(a.body.as_bytes()).await;
    let _ = s.shutdown().await;
}
