//! What the clients of `gpuless serve` share (`replay --remote`, `deploy`, `invoke --remote`):
//! opening a session — the endpoint, the CA file of a TLS server, the token, `Hello` and
//! `Welcome` — and sending the bytes of blobs the server lacks, through the socket in parts or,
//! on the server's host, through shared memory.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use gpuless_traces::protocol::{self, Connection, Endpoint, Hello, PartitionRequest, Priority, Welcome};
use gpuless_traces::{BlobBytes, Hash128};

/// Bytes of missing blobs from which they travel through shared memory (below, the socket
/// costs less than making a memfd and waiting for the server to take it).
const SHM_MIN: usize = 1 << 20;

/// How to open a session.
#[derive(Debug, Default)]
pub struct SessionSpec<'a> {
    /// The server: `HOST:PORT`, `tcp://HOST:PORT`, `tls://HOST:PORT` or `unix:PATH`.
    pub addr: &'a str,
    /// The server's token (else `GPULESS_TOKEN`).
    pub token: Option<&'a str>,
    /// The CA file for a `tls://` server (else `GPULESS_TLS_CA`).
    pub tls_ca: Option<&'a Path>,
    /// The partition: a profile, `sms:N` or `whole` (the default).
    pub partition: Option<&'a str>,
    /// Ask for the best-effort priority class.
    pub best_effort: bool,
    /// The client's arena (base, size); (0, 0): none.
    pub arena: (u64, u64),
    /// SM of the GPU the client's code was chosen for (0: not known).
    pub recorded_sm: u32,
    /// What the client runs, for the server's log.
    pub program: String,
    /// The client sends each synchronization's records in one segment (`Hello::whole_segments`).
    pub whole_segments: bool,
    /// The server's GPU to ask for (`--gpu`); `None`: the server places the session.
    pub gpu: Option<u32>,
}

/// Connects to the server and opens a session: the connection (reads time out after 600 s),
/// the server's `Welcome`, and the endpoint (to name it in messages).
pub fn open(spec: &SessionSpec<'_>) -> anyhow::Result<(Connection, Welcome, Endpoint)> {
    let mut endpoint = Endpoint::parse(spec.addr);
    match (&mut endpoint, spec.tls_ca) {
        (Endpoint::Tls { ca, .. }, Some(file)) => *ca = Some(file.to_path_buf()),
        (_, None) => {}
        (_, Some(_)) => bail!("--tls-ca applies to TLS servers: give the address as tls://HOST:PORT"),
    }
    let mut conn = protocol::connect(&endpoint, Duration::from_secs(10))
        .with_context(|| format!("connecting to the gpuless server at {endpoint}"))?;
    conn.set_timeout(Some(Duration::from_secs(600)))?;
    let token = spec.token.map(str::to_string).or_else(|| std::env::var("GPULESS_TOKEN").ok()).unwrap_or_default();
    let hello = Hello {
        protocol: protocol::PROTOCOL_VERSION,
        tool: format!("gpuless {}", env!("CARGO_PKG_VERSION")),
        token,
        partition: PartitionRequest::parse(spec.partition.unwrap_or("whole")),
        priority: if spec.best_effort { Priority::BestEffort } else { Priority::LatencyCritical },
        arena_base: spec.arena.0,
        arena_size: spec.arena.1,
        recorded_sm: spec.recorded_sm,
        program: spec.program.clone(),
        whole_segments: spec.whole_segments,
        gpu: spec.gpu,
        devices: 0,
        more_gpus: Vec::new(),
    };
    let w = conn.handshake(&hello).with_context(|| format!("opening a session on {endpoint}"))?;
    Ok((conn, w, endpoint))
}

/// Whether blobs may go through shared memory on `conn`: a Unix socket, and `GPULESS_SHM` is
/// not `0`.
pub fn can_share_memory(conn: &Connection) -> bool {
    conn.can_share_memory() && std::env::var("GPULESS_SHM").map_or(true, |v| v != "0")
}

/// Sends the bytes of blobs the server lacks (pipelined with what follows, except through
/// shared memory, which waits until the server holds them). With `shm` (a same-host server):
/// blobs that already lie in one sealed memfd go as its descriptor (no copy); the others
/// through a new memfd when they are many bytes, else through the socket.
pub fn send_blobs(conn: &mut Connection, missing: Vec<(Hash128, &BlobBytes)>, shm: bool) -> anyhow::Result<()> {
    if !shm {
        for (h, bytes) in missing {
            conn.send_blob(h, bytes)?;
        }
        return Ok(());
    }
    let (in_arena, rest): (Vec<_>, Vec<_>) = missing.into_iter().partition(|(_, b)| b.memfd().is_some());
    if !in_arena.is_empty() {
        conn.send_blobs_shm(&in_arena)?;
    }
    if rest.iter().map(|(_, b)| b.len()).sum::<usize>() >= SHM_MIN {
        conn.send_blobs_shm(&rest)?;
    } else {
        for (h, bytes) in rest {
            conn.send_blob(h, bytes)?;
        }
    }
    Ok(())
}
