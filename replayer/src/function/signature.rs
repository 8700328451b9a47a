//! A function's signature and the comparison of two recordings' bodies.

use std::collections::HashMap;

use gpuless_analyzer::api::{ArgKind, HandleKind};
use gpuless_traces::{CallRecord, Value};
use serde::{Deserialize, Serialize};

use crate::replay::{hot, LoadedTrace};

/// One input or output of a function: a copy in its body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Port {
    /// The copy's sequence number in the recording.
    pub seq: u64,
    /// The driver call (`cuMemcpyHtoDAsync_v2`, ...).
    pub call: String,
    /// Device address written (an input) or read (an output).
    pub address: u64,
    /// Bytes.
    pub bytes: u64,
}

/// What a function file says about its function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format of the function file (1).
    pub format: u32,
    /// SM of the GPU it was recorded on (the code images hold that GPU's code).
    pub sm: u32,
    /// The recorded command.
    pub command: String,
    /// Records replayed once, then every invocation's (after the code it does not run is left
    /// out).
    pub setup_records: usize,
    /// See `setup_records`.
    pub body_records: usize,
    /// Kernels the body launches, by name, in first-launch order.
    pub kernels: Vec<String>,
    /// The body's host-to-device copies, in order.
    pub inputs: Vec<Port>,
    /// The body's device-to-host copies, in order.
    pub outputs: Vec<Port>,
    /// Recordings whose bodies were compared (1: no check of input independence).
    pub recordings_compared: usize,
    /// Code images (module and library loads) the function keeps, and those it leaves out
    /// (none of their kernels is launched or used).
    #[serde(default)]
    pub images: usize,
    /// See `images`.
    #[serde(default)]
    pub images_left_out: usize,
}

/// The records of `t` a function keeps (set-up then body, in trace order), and its manifest.
/// With `others`, each other recording's body must equal `t`'s but for host-to-device bytes.
pub fn compile(t: &LoadedTrace, others: &[&LoadedTrace]) -> Result<(Vec<usize>, Manifest), String> {
    let split = hot::split(&t.calls);
    if split.body.is_empty() {
        return Err("the trace launches no kernel: there is no body to make a function of".into());
    }
    // Set-up copies whose bytes differ between the recordings are inputs too (a model's input
    // is often uploaded before its first launch).
    let mut varying = std::collections::HashSet::new();
    for (n, o) in others.iter().enumerate() {
        let so = hot::split(&o.calls);
        if let Some(d) = differ(t, &split, o, &so) {
            return Err(format!("recording {} differs from the first: {d}", n + 2));
        }
        for (&i, &j) in split.setup.iter().zip(&so.setup) {
            if blobs(&t.calls[i]) != blobs(&o.calls[j]) {
                varying.insert(i);
            }
        }
    }
    let (mut inputs, mut outputs) = (Vec::new(), Vec::new());
    let mut varying: Vec<usize> = varying.into_iter().collect();
    varying.sort_unstable();
    for &i in varying.iter().chain(&split.body) {
        let r = &t.calls[i];
        if let Some(p) = port(r, true) {
            inputs.push(p);
        } else if let Some(p) = port(r, false) {
            outputs.push(p);
        }
    }
    let names = function_names(&t.calls);
    let mut kernels: Vec<String> = Vec::new();
    for &i in &split.body {
        if let Some(name) = launched(&t.calls[i]).and_then(|h| names.get(&h)) {
            if !kernels.contains(name) {
                kernels.push(name.clone());
            }
        }
    }
    let mut keep: Vec<usize> = split.setup.iter().chain(&split.body).copied().collect();
    keep.sort_unstable();
    let (keep, pruned) = super::prune(&t.calls, &keep);
    let body: std::collections::HashSet<usize> = split.body.iter().copied().collect();
    let body_kept = keep.iter().filter(|i| body.contains(i)).count();
    let manifest = Manifest {
        format: 1,
        sm: t.meta.sm,
        command: t.meta.command_line.join(" "),
        setup_records: keep.len() - body_kept,
        body_records: body_kept,
        kernels,
        inputs,
        outputs,
        recordings_compared: 1 + others.len(),
        images: keep.iter().filter(|&&i| loads_code(&t.calls[i])).count(),
        images_left_out: pruned.images,
    };
    Ok((keep, manifest))
}

/// Whether `r` loads a code image (its results hold a module or library handle).
pub(crate) fn loads_code(r: &CallRecord) -> bool {
    r.function.api().is_some_and(|f| f.sync == gpuless_analyzer::api::SyncClass::CreatesHandle)
        && r.results.iter().any(|v| matches!(v, Value::Handle(HandleKind::Module | HandleKind::Library, _)))
        && r.args.iter().any(|v| matches!(v, Value::Blob(_)))
}

/// The hashes of the bytes a record carries.
fn blobs(r: &CallRecord) -> Vec<gpuless_traces::Hash128> {
    r.args.iter().filter_map(|v| if let Value::Blob(b) = v { Some(b.hash) } else { None }).collect()
}

/// A copy of host bytes to the device (`input`), or of device bytes to the host: its port.
fn port(r: &CallRecord, input: bool) -> Option<Port> {
    let f = r.function.api()?;
    // The device side: the destination an input writes, the source an output reads.
    let dev = |prefix: &str| {
        f.args.iter().zip(&r.args).find_map(|(a, v)| match v {
            Value::DevPtr(p) | Value::U64(p) if a.name.starts_with(prefix) => Some(*p),
            _ => None,
        })
    };
    if input {
        let len = r.args.iter().find_map(|v| match v {
            Value::Blob(b) => Some(b.len),
            _ => None,
        })?;
        Some(Port { seq: r.seq, call: f.name.to_string(), address: dev("dst")?, bytes: len })
    } else {
        let len = r.results.iter().find_map(|v| match v {
            Value::Digest(b) | Value::Blob(b) => Some(b.len),
            _ => None,
        })?;
        Some(Port { seq: r.seq, call: f.name.to_string(), address: dev("src")?, bytes: len })
    }
}

/// Function and kernel handles to kernel names: every record that hands one out for a name.
fn function_names(calls: &[CallRecord]) -> HashMap<u64, String> {
    let mut names = HashMap::new();
    for r in calls {
        let Some(name) = r.args.iter().find_map(|v| if let Value::Str(s) = v { Some(s.clone()) } else { None }) else {
            continue;
        };
        for v in &r.results {
            if let Value::Handle(HandleKind::Function | HandleKind::Kernel, h) = v {
                names.insert(*h, name.clone());
            }
        }
    }
    names
}

/// The function or kernel handle a launch runs.
fn launched(r: &CallRecord) -> Option<u64> {
    let f = r.function.api()?;
    if !f.name.starts_with("cuLaunch") {
        return None;
    }
    f.args.iter().zip(&r.args).find_map(|(a, v)| match (a.kind, v) {
        (ArgKind::Handle(HandleKind::Function | HandleKind::Kernel), Value::Handle(_, h)) => Some(*h),
        _ => None,
    })
}

/// The first way `b`'s body differs from `a`'s, other than the bytes it copies to the device;
/// `None` when they are the same function.
pub fn first_difference(a: &LoadedTrace, b: &LoadedTrace) -> Option<String> {
    differ(a, &hot::split(&a.calls), b, &hot::split(&b.calls))
}

/// [`first_difference`] of recordings already split.
fn differ(a: &LoadedTrace, sa: &hot::Split, b: &LoadedTrace, sb: &hot::Split) -> Option<String> {
    if sa.setup.len() != sb.setup.len() {
        return Some(format!("its set-up has {} records, the first's {}", sb.setup.len(), sa.setup.len()));
    }
    for (k, (&i, &j)) in sa.setup.iter().zip(&sb.setup).enumerate() {
        let (na, nb) = (a.calls[i].function.name(), b.calls[j].function.name());
        if na != nb {
            return Some(format!("set-up record {k}: {nb} where the first calls {na}"));
        }
    }
    if sa.body.len() != sb.body.len() {
        return Some(format!("its body has {} records, the first's {}", sb.body.len(), sa.body.len()));
    }
    for (k, (&i, &j)) in sa.body.iter().zip(&sb.body).enumerate() {
        let (ra, rb) = (&a.calls[i], &b.calls[j]);
        let (na, nb) = (ra.function.name(), rb.function.name());
        if na != nb {
            return Some(format!("body record {k}: {nb} (seq {}) where the first calls {na} (seq {})", rb.seq, ra.seq));
        }
        let arg_names: Vec<&str> =
            ra.function.api().map(|f| f.args.iter().map(|a| a.name).collect()).unwrap_or_default();
        for (n, (va, vb)) in ra.args.iter().zip(&rb.args).enumerate() {
            // The bytes copied to the device are the function's input.
            if matches!((va, vb), (Value::Blob(x), Value::Blob(y)) if x.len == y.len) {
                continue;
            }
            if va != vb {
                let arg = arg_names.get(n).copied().unwrap_or("?");
                let show = |v: &Value| format!("{v:?}").chars().take(120).collect::<String>();
                return Some(format!(
                    "body record {k} ({na}, seq {} / {}): argument `{arg}` is {} where the first's is {}",
                    ra.seq,
                    rb.seq,
                    show(vb),
                    show(va)
                ));
            }
        }
        if ra.args.len() != rb.args.len() {
            return Some(format!(
                "body record {k} ({na}): {} arguments recorded where the first has {}",
                rb.args.len(),
                ra.args.len()
            ));
        }
    }
    None
}
