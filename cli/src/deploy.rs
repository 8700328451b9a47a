//! `gpuless deploy FILE.gfn --remote ADDR --name NAME`: registers a function file on a
//! `gpuless serve` under a name, for `gpuless invoke NAME --remote ADDR`. The file is checked
//! here first (a damaged one is not sent), travels as one blob by content hash — its bytes
//! only when the server's cache lacks them, in parts, or through shared memory on the server's
//! host — and the server checks it again before it registers the name.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use gpuless_replayer::function::{self, Manifest};
use gpuless_replayer::server::functions::check_name;
use gpuless_traces::{BlobBytes, Hash128};

use crate::session;

/// What `gpuless deploy` was asked.
#[derive(Debug, Default)]
pub struct DeployArgs {
    /// The function file.
    pub function: PathBuf,
    /// The server.
    pub addr: String,
    /// The name to register it under.
    pub name: String,
    /// The server's token (else `GPULESS_TOKEN`).
    pub token: Option<String>,
    /// The CA file for a `tls://` server.
    pub tls_ca: Option<PathBuf>,
}

/// The signature in a line: inputs and outputs with their sizes.
fn signature(m: &Manifest) -> String {
    let sizes =
        |ports: &[function::Port]| ports.iter().map(|p| format!("{} B", p.bytes)).collect::<Vec<_>>().join(", ");
    format!(
        "{} input(s) ({}), {} output(s) ({}); {} kernels",
        m.inputs.len(),
        sizes(&m.inputs),
        m.outputs.len(),
        sizes(&m.outputs),
        m.kernels.len()
    )
}

/// `gpuless deploy`: exit 0, or 2 (a bad name or file, the server's refusal).
pub fn run(a: &DeployArgs) -> anyhow::Result<ExitCode> {
    check_name(&a.name).map_err(anyhow::Error::msg)?;
    // The whole file is checked (every chunk of its trace) before anything is sent.
    function::open(&a.function)?;
    let bytes = BlobBytes::from(std::fs::read(&a.function).with_context(|| a.function.display().to_string())?);
    let (hash, len) = (Hash128::of(&bytes), bytes.len() as u64);
    let (mut conn, w, endpoint) = session::open(&session::SessionSpec {
        addr: &a.addr,
        token: a.token.as_deref(),
        tls_ca: a.tls_ca.as_deref(),
        program: format!("deploy {}", a.name),
        whole_segments: false,
        gpu: None,
        ..session::SessionSpec::default()
    })?;
    let what = || format!("deploying {} as `{}` on {endpoint}", a.function.display(), a.name);
    let held = conn.query_blobs(&[hash]).with_context(what)?.first().copied().unwrap_or(false);
    if !held {
        let shm = session::can_share_memory(&conn);
        session::send_blobs(&mut conn, vec![(hash, &bytes)], shm).with_context(what)?;
    }
    let manifest = conn.deploy(&a.name, hash, len).with_context(what)?;
    conn.close().with_context(|| format!("closing the session on {endpoint}"))?;
    println!("deployed     {} on {endpoint} (session {})", a.name, w.session);
    let sent =
        if held { "already on the server".to_string() } else { format!("{} bytes sent", conn.traffic.blob_bytes) };
    println!("file         {}: {len} bytes, blob {hash} ({sent})", a.function.display());
    match serde_json::from_str::<Manifest>(&manifest) {
        Ok(m) => println!("signature    {}", signature(&m)),
        Err(e) => eprintln!("gpuless: warning: the server's manifest of `{}` does not read: {e}", a.name),
    }
    println!("invoke with  gpuless invoke {} --remote {}", a.name, a.addr);
    Ok(ExitCode::SUCCESS)
}
