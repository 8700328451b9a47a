//! Functions on the server (issue 20, docs/FUNCTIONS.md): the registry of deployed functions —
//! a name → the function file's blob (hash, length), one small file per name in the cache's
//! disk directory (`functions/NAME`) — and an executor's handling of `Deploy` and `Invoke`:
//! the function file read from the content cache and set up once per session ([`Invoker`]),
//! then, for each invocation, the inputs written into its buffers, the body run and the
//! outputs returned.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpuless_traces::protocol::message::code;
use gpuless_traces::protocol::{Message, Outputs, MAX_FRAME};
use gpuless_traces::Hash128;

use super::cache::Dirs;
use crate::function::{self, Invoker, Manifest, Mode};
use crate::replay::Device;

/// Longest function name.
pub const MAX_NAME: usize = 64;

/// A refusal: a protocol error code and the message for the client.
pub type Failure = (u16, String);

/// Checks a function name: 1 to [`MAX_NAME`] of `A-Z a-z 0-9 . _ -`, and not `.` or `..`.
pub fn check_name(name: &str) -> Result<(), String> {
    let chars = name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if chars && (1..=MAX_NAME).contains(&name.len()) && name != "." && name != ".." {
        return Ok(());
    }
    let shown: String = name.chars().take(80).collect();
    Err(format!(
        "function name {shown:?}: a name is 1 to {MAX_NAME} of the characters A-Z a-z 0-9 . _ - (and not `.` or `..`)"
    ))
}

/// The deployed functions: `DIR/NAME` holds `HASH LENGTH` (the function file's blob) on one
/// line. Written under a temporary name and renamed, so a reader sees an entry whole or not
/// at all; a later deploy of the same name replaces it.
#[derive(Debug, Clone)]
pub struct Registry {
    dir: PathBuf,
}

impl Registry {
    /// The registry of `tenant`'s functions ([`super::tenants`]) in the cache `dirs` (in its
    /// disk directory, which outlives the memory tier): `functions/` for the tenant `""`,
    /// `functions/@TENANT/` for another (no function is named `@…`, and a tenant's name is a
    /// file name of the same characters as a function's).
    pub fn of(dirs: &Dirs, tenant: &str) -> Registry {
        let dir = dirs.disk.join("functions");
        Registry { dir: if tenant.is_empty() { dir } else { dir.join(format!("@{tenant}")) } }
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Registers `name` as the function file `hash` of `len` bytes.
    pub fn register(&self, name: &str, hash: Hash128, len: u64) -> std::io::Result<()> {
        check_name(name).map_err(std::io::Error::other)?;
        std::fs::create_dir_all(&self.dir)?;
        // `~` is not a name's character: no entry is ever called this.
        let tmp = self.dir.join(format!("{name}.{}~", std::process::id()));
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(format!("{hash} {len}\n").as_bytes())?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, self.dir.join(name))
    }

    /// The function file registered as `name`: `Ok(None)` when none is.
    pub fn lookup(&self, name: &str) -> Result<Option<(Hash128, u64)>, String> {
        check_name(name)?;
        let p = self.dir.join(name);
        let text = match std::fs::read_to_string(&p) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", p.display())),
        };
        let mut words = text.split_whitespace();
        let hash = words.next().and_then(|h| u128::from_str_radix(h, 16).ok()).map(Hash128);
        let len = words.next().and_then(|n| n.parse::<u64>().ok());
        match (hash, len, words.next()) {
            (Some(h), Some(n), None) => Ok(Some((h, n))),
            _ => Err(format!("{}: not a registry entry (`HASH LENGTH`); deploy `{name}` again", p.display())),
        }
    }
}

/// The function a session has set up.
struct Prepared {
    name: String,
    inv: Invoker,
    /// The recorded inputs, back to back (an invocation without inputs runs on them).
    recorded: Vec<u8>,
    /// Whether the input buffers hold other bytes than the recorded ones.
    dirty: bool,
}

/// An executor's functions: the registry, and the one function its session has set up.
pub struct Functions {
    registry: Registry,
    device: Device,
    memory_limit: Option<u64>,
    /// The session announced an arena of its own (a replay or live client): the function's
    /// arena could not be had at its address, so such a session does not invoke.
    client_arena: bool,
    prepared: Option<Prepared>,
    /// Invocations not yet reported to the server: (function, mode) → count.
    counts: HashMap<(String, &'static str), u64>,
    reported: Instant,
    /// Function files found in the cache, for the server's recency order.
    pub hits: Vec<Hash128>,
}

/// The total of `m`'s inputs, and each in words.
fn input_sizes(m: &Manifest) -> (u64, String) {
    let each: Vec<String> = m.inputs.iter().enumerate().map(|(n, p)| format!("input {n}: {} B", p.bytes)).collect();
    (m.inputs.iter().map(|p| p.bytes).sum(), if each.is_empty() { "no inputs".into() } else { each.join(", ") })
}

/// Inputs of `given` bytes for function `name` (0: the recorded ones) must be its inputs' total.
fn check_inputs(name: &str, m: &Manifest, given: usize) -> Result<(), Failure> {
    let (want, each) = input_sizes(m);
    if given == 0 || given as u64 == want {
        return Ok(());
    }
    Err((
        code::FUNCTION,
        format!("function `{name}` takes {want} bytes of input ({each}); {given} bytes were given; nothing was run"),
    ))
}

impl Functions {
    /// The functions `tenant` deployed, for an executor on `device` whose session may allocate
    /// `memory_limit` bytes; `client_arena`: the session announced an arena.
    pub fn new(cache: &Dirs, tenant: &str, device: Device, memory_limit: Option<u64>, client_arena: bool) -> Functions {
        Functions {
            registry: Registry::of(cache, tenant),
            device,
            memory_limit,
            client_arena,
            prepared: None,
            counts: HashMap::new(),
            reported: Instant::now(),
            hits: Vec::new(),
        }
    }

    /// The function set up, if one is.
    pub fn prepared_name(&self) -> Option<&str> {
        self.prepared.as_ref().map(|p| p.name.as_str())
    }

    /// Readies the functions for the next session of the function kept set up: invocations
    /// start counting afresh; the next invocation writes its inputs (or the recorded ones)
    /// over what the last session left.
    pub fn reuse(&mut self) {
        self.counts.clear();
        self.hits.clear();
        self.reported = Instant::now();
    }

    /// `Deploy`: the blob `hash` (`len` bytes) must be in the cache, whole, and a function file;
    /// then `name` is registered. `in_session`: the session holds the blob (it was sent, but
    /// may not have reached the cache); `readable`: the cache's copy may serve this session
    /// (on a server with tenants, its tenant sent the bytes once).
    /// The function is registered by `register` (the server does it for a confined executor:
    /// `Control::Register`).
    #[allow(clippy::too_many_arguments)]
    pub fn deploy(
        &mut self,
        cache: &Dirs,
        name: &str,
        hash: Hash128,
        len: u64,
        in_session: bool,
        readable: bool,
        register: impl FnOnce(&str, Hash128, u64) -> Result<(), String>,
    ) -> End {
        check_name(name).map_err(|e| (code::FUNCTION, e))?;
        let Some(bytes) = cache.read(&hash).filter(|_| readable) else {
            let why = if in_session {
                "the session received it, but it could not be written to the server's cache (see the server's log)"
            } else {
                "the server does not hold it: send the function file's bytes first (BlobQuery, then BlobData), \
                 as `gpuless deploy` does"
            };
            return Err((code::FUNCTION, format!("deploying `{name}`: blob {hash}: {why}")));
        };
        if bytes.len() as u64 != len {
            return Err((
                code::FUNCTION,
                format!("deploying `{name}`: blob {hash} holds {} bytes, the Deploy says {len}", bytes.len()),
            ));
        }
        let f = function::open_blob(&format!("deploying `{name}`: blob {hash}"), &bytes)
            .map_err(|e| (code::FUNCTION, e.to_string()))?;
        let manifest = serde_json::to_string_pretty(&f.manifest)
            .map_err(|e| (code::EXECUTOR, format!("deploying `{name}`: its manifest: {e}")))?;
        register(name, hash, len).map_err(|e| (code::EXECUTOR, format!("deploying `{name}`: {e}")))?;
        Ok(Message::Deployed { name: name.to_string(), manifest })
    }

    /// `Invoke`: runs function `name` once on `inputs` (back to back; empty: the recorded
    /// inputs). The first invocation of the session reads the function from the cache and sets
    /// it up; later ones of the same function run at once.
    pub fn invoke(&mut self, cache: &Dirs, name: &str, verify: bool, inputs: &[u8]) -> End {
        check_name(name).map_err(|e| (code::FUNCTION, e))?;
        if self.client_arena {
            return Err((
                code::FUNCTION,
                "this session announced an arena of its own (a replay or live client): functions are invoked in \
                 sessions without one (arena_base and arena_size 0), as `gpuless invoke --remote` opens them"
                    .into(),
            ));
        }
        let mut prepare_us = 0;
        match &self.prepared {
            Some(p) if p.name == name => {}
            Some(p) => {
                return Err((
                    code::FUNCTION,
                    format!(
                        "this session has set up function `{}`; invoke `{name}` in a session of its own (an \
                         executor sets up one function)",
                        p.name
                    ),
                ))
            }
            None => {
                let t0 = Instant::now();
                let p = self.prepare(cache, name, inputs.len())?;
                self.prepared = Some(p);
                prepare_us = t0.elapsed().as_micros() as u64;
            }
        }
        let p = self.prepared.as_mut().ok_or((code::EXECUTOR, "no function set up".to_string()))?;
        check_inputs(name, p.inv.manifest(), inputs.len())?;
        let source = if inputs.is_empty() {
            (p.dirty).then_some(&p.recorded[..])
        } else {
            p.dirty = true;
            Some(inputs)
        };
        if let Some(mut bytes) = source {
            for n in 0..p.inv.manifest().inputs.len() {
                let buf = p.inv.input_mut(n).ok_or((code::EXECUTOR, format!("function `{name}`: input {n}")))?;
                // The sizes were checked against the signature: each input's bytes fill its buffer.
                let (now, rest) = bytes.split_at(buf.len().min(bytes.len()));
                buf[..now.len()].copy_from_slice(now);
                bytes = rest;
            }
            if inputs.is_empty() {
                p.dirty = false;
            }
        }
        let (v0, m0) = (p.inv.verified().0, p.inv.verified().1.len());
        let t0 = Instant::now();
        unwound(|| p.inv.invoke(verify)).map_err(|e| (code::EXECUTOR, format!("function `{name}`: {e}")))?;
        let run_us = t0.elapsed().as_micros() as u64;
        let (v1, m1) = p.inv.verified();
        let mut outputs = Vec::with_capacity(p.inv.manifest().outputs.iter().map(|o| o.bytes as usize).sum());
        for n in 0..p.inv.manifest().outputs.len() {
            outputs.extend_from_slice(p.inv.output(n).unwrap_or_default());
        }
        let mismatches = m1.get(m0..).unwrap_or_default().to_vec();
        let room = MAX_FRAME.saturating_sub(64 + mismatches.iter().map(|m| m.len() + 4).sum::<usize>());
        if outputs.len() > room {
            return Err((
                code::FUNCTION,
                format!("function `{name}`: {} bytes of outputs do not fit in one frame ({room} bytes)", outputs.len()),
            ));
        }
        let graph = p.inv.mode() == Mode::Graph;
        *self.counts.entry((name.to_string(), if graph { "graph" } else { "eager" })).or_default() += 1;
        Ok(Message::Outputs(Outputs {
            prepare_us,
            run_us,
            graph,
            verified: v1.saturating_sub(v0),
            mismatches,
            outputs,
        }))
    }

    /// Reads function `name` from the cache and sets it up, once inputs of `given` bytes are
    /// known to fit it.
    fn prepare(&mut self, cache: &Dirs, name: &str, given: usize) -> Result<Prepared, Failure> {
        let (hash, len) = self.registry.lookup(name).map_err(|e| (code::EXECUTOR, e))?.ok_or_else(|| {
            (
                code::FUNCTION,
                format!(
                    "no function `{name}` is deployed on this server: deploy it with `gpuless deploy FILE.gfn \
                     --remote ADDR --name {name}`"
                ),
            )
        })?;
        let bytes = cache.read(&hash).filter(|b| b.len() as u64 == len).ok_or_else(|| {
            (
                code::FUNCTION,
                format!(
                    "function `{name}`: its file (blob {hash}) is no longer in the server's cache: deploy it again \
                     with `gpuless deploy`"
                ),
            )
        })?;
        self.hits.push(hash);
        let f = function::open_blob(&format!("function `{name}` (blob {hash})"), &bytes)
            .map_err(|e| (code::FUNCTION, e.to_string()))?;
        drop(bytes);
        check_inputs(name, &f.manifest, given)?;
        let (device, limit) = (self.device, self.memory_limit);
        let mut inv = unwound(|| Invoker::prepare_limited(device, f, limit))
            .map_err(|e| (code::EXECUTOR, format!("function `{name}` could not be set up on this executor: {e}")))?;
        let mut recorded = Vec::new();
        for n in 0..inv.manifest().inputs.len() {
            recorded.extend_from_slice(inv.input_mut(n).map(|b| &*b).unwrap_or_default());
        }
        Ok(Prepared { name: name.to_string(), inv, recorded, dirty: false })
    }

    /// Invocations to report to the server as (function, mode, count): at most once a second,
    /// or now with `all`.
    pub fn take_counts(&mut self, all: bool) -> Vec<(String, String, u64)> {
        if self.counts.is_empty() || (!all && self.reported.elapsed() < Duration::from_secs(1)) {
            return Vec::new();
        }
        self.reported = Instant::now();
        self.counts.drain().map(|((f, m), n)| (f, m.to_string(), n)).collect()
    }
}

/// Runs `f`; its error, or a panic inside it (a driver that lacks a function the work calls,
/// say), as a message: the session then ends with it instead of the executor dying silently.
fn unwound<T, E: std::fmt::Display>(f: impl FnOnce() -> Result<T, E>) -> Result<T, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".into());
            Err(format!("the executor failed: {what}"))
        }
    }
}

/// What a function request answers: the reply, or why the session ends.
pub type End = Result<Message, Failure>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_entries_read_back() {
        for good in ["resnet50", "a", "bert-large_v1.2", &"x".repeat(64)] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", ".", "..", "a/b", "../etc", "white space", "ü", &"x".repeat(65)] {
            let e = check_name(bad).unwrap_err();
            assert!(e.contains("A-Z a-z 0-9 . _ -"), "{e}");
        }
        let t = tempfile::tempdir().unwrap();
        let dirs = Dirs { memory: t.path().join("mem"), disk: t.path().join("disk") };
        let r = Registry::of(&dirs, "");
        assert_eq!(r.lookup("f").unwrap(), None);
        r.register("f", Hash128(0xabc), 42).unwrap();
        assert_eq!(r.lookup("f").unwrap(), Some((Hash128(0xabc), 42)));
        r.register("f", Hash128(7), 9).unwrap();
        assert_eq!(r.lookup("f").unwrap(), Some((Hash128(7), 9)), "a later deploy replaces the entry");
        assert_eq!(std::fs::read_dir(r.dir()).unwrap().count(), 1, "no temporary file left");
        assert!(r.register("../f", Hash128(1), 1).is_err());
        std::fs::write(r.dir().join("g"), "garbage").unwrap();
        assert!(r.lookup("g").unwrap_err().contains("deploy `g` again"));
        // The cache's index skips the registry's directory.
        let ix = super::super::cache::Index::open(dirs, 1 << 20, 1 << 20).unwrap();
        assert!(ix.is_empty());
    }
}
