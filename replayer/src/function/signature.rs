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
    /// Kernel parameter words that differ between the recordings but are no device address in
    /// the arena (host pointers, uninitialized padding of library structures). The first
    /// recording's values are kept; `gpuless invoke --input` with the second recording's input
    /// checks they do not matter.
    #[serde(default)]
    pub host_words: u64,
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
    let mut host_words = 0;
    for (n, o) in others.iter().enumerate() {
        let so = hot::split(&o.calls);
        host_words +=
            differ(t, &split, o, &so).map_err(|d| format!("recording {} differs from the first: {d}", n + 2))?;
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
        images: keep.iter().filter(|&&i| super::prune::loads_code(&t.calls[i])).count(),
        images_left_out: pruned.images,
        host_words,
    };
    Ok((keep, manifest))
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
    differ(a, &hot::split(&a.calls), b, &hot::split(&b.calls)).err()
}

/// [`first_difference`] of recordings already split.
/// `Err` with the first difference, or `Ok` with how many parameter words were taken for host
/// pointers of each process.
fn differ(a: &LoadedTrace, sa: &hot::Split, b: &LoadedTrace, sb: &hot::Split) -> Result<u64, String> {
    if sa.setup.len() != sb.setup.len() {
        return Err(format!("its set-up has {} records, the first's {}", sb.setup.len(), sa.setup.len()));
    }
    for (k, (&i, &j)) in sa.setup.iter().zip(&sb.setup).enumerate() {
        let (na, nb) = (a.calls[i].function.name(), b.calls[j].function.name());
        if na != nb {
            return Err(format!("set-up record {k}: {nb} where the first calls {na}"));
        }
    }
    if sa.body.len() != sb.body.len() {
        return Err(format!("its body has {} records, the first's {}", sb.body.len(), sa.body.len()));
    }
    // Handles are a process's own values: the second recording's handle is the one its
    // corresponding record created (records correspond in order, set-up then body).
    let arena = (a.meta.arena_base, a.meta.arena_base.saturating_add(a.meta.arena_size));
    let mut handles = Handles { arena, ..Handles::default() };
    for (&i, &j) in sa.setup.iter().zip(&sb.setup) {
        handles.created(&a.calls[i], &b.calls[j]);
    }
    for (k, (&i, &j)) in sa.body.iter().zip(&sb.body).enumerate() {
        let (ra, rb) = (&a.calls[i], &b.calls[j]);
        let (na, nb) = (ra.function.name(), rb.function.name());
        if na != nb {
            return Err(format!("body record {k}: {nb} (seq {}) where the first calls {na} (seq {})", rb.seq, ra.seq));
        }
        let arg_names: Vec<&str> =
            ra.function.api().map(|f| f.args.iter().map(|a| a.name).collect()).unwrap_or_default();
        for (n, (va, vb)) in ra.args.iter().zip(&rb.args).enumerate() {
            // The bytes copied to the device are the function's input; host buffers are the
            // program's own (the function reads and writes buffers of its own).
            if matches!((va, vb), (Value::Blob(x), Value::Blob(y)) if x.len == y.len)
                || matches!((va, vb), (Value::HostPtr(_), Value::HostPtr(_)))
                || handles.same(va, vb)
            {
                continue;
            }
            if let (Value::KernelParams(pa), Value::KernelParams(pb)) = (va, vb) {
                if let Some((p, at, x, y)) = handles.param_difference(pa, pb) {
                    return Err(format!(
                        "body record {k} ({na}, seq {} / {}): kernel parameter {p} (byte {at}) is {y:#x} where the \
                         first's is {x:#x} (another device address in the arena, or another count: the body depends on its input)",
                        ra.seq, rb.seq
                    ));
                }
            }
            if let (Value::LaunchConfig(ca), Value::LaunchConfig(cb)) = (va, vb) {
                if let Some(d) = config_difference(&handles, ca, cb) {
                    return Err(format!(
                        "body record {k} ({na}, seq {} / {}): launch configuration: {d}",
                        ra.seq, rb.seq
                    ));
                }
            }
            if va != vb {
                let arg = arg_names.get(n).copied().unwrap_or("?");
                let show = |v: &Value| format!("{v:?}").chars().take(120).collect::<String>();
                return Err(format!(
                    "body record {k} ({na}, seq {} / {}): argument `{arg}` is {} where the first's is {}",
                    ra.seq,
                    rb.seq,
                    show(vb),
                    show(va)
                ));
            }
        }
        handles.created(ra, rb);
        if ra.args.len() != rb.args.len() {
            return Err(format!(
                "body record {k} ({na}): {} arguments recorded where the first has {}",
                rb.args.len(),
                ra.args.len()
            ));
        }
    }
    Ok(handles.host_words.get())
}

/// The correspondence of two recordings' process-specific values, learnt from the records
/// that returned them: handles (the second's value → the first's; keyed by value alone, since
/// the runtime launches a `CUkernel` as a `CUfunction`), and addresses outside the arena
/// (module globals, mapped host memory), which a replay places anew anyway.
#[derive(Default)]
struct Handles {
    handles: HashMap<u64, u64>,
    /// (second's address, first's address) of each pointer returned differently.
    addrs: Vec<(u64, u64)>,
    /// The recorder's arena (start, end): addresses in it must be equal.
    arena: (u64, u64),
    /// Parameter words taken for host pointers of each process ([`Handles::host_words`]).
    host_words: std::cell::Cell<u64>,
}

/// How far past a returned address a corresponding pointer may point.
const REGION: u64 = 1 << 32;

impl Handles {
    /// Records `ra` and `rb` correspond: the handles and addresses they return correspond too.
    fn created(&mut self, ra: &CallRecord, rb: &CallRecord) {
        for (va, vb) in ra.results.iter().zip(&rb.results) {
            match (va, vb) {
                (Value::Handle(_, x), Value::Handle(_, y)) => {
                    self.handles.insert(*y, *x);
                }
                (Value::DevPtr(x) | Value::HostPtr(x), Value::DevPtr(y) | Value::HostPtr(y)) if x != y => {
                    self.addrs.push((*y, *x));
                }
                _ => {}
            }
        }
    }

    /// The first recording's value for handle `y` of the second.
    fn first(&self, y: u64) -> u64 {
        self.handles.get(&y).copied().unwrap_or(y)
    }

    /// Whether pointer `y` of the second recording points where `x` does in the first: at the
    /// same offset from corresponding returned addresses.
    fn same_addr(&self, x: u64, y: u64) -> bool {
        x == y || self.addrs.iter().any(|&(b, a)| y >= b && y - b < REGION && x.checked_sub(a) == Some(y - b))
    }

    /// Whether differing parameter words `x` and `y` are a process's own host values: neither
    /// is a device address in the arena (addresses there must be equal). Libraries pass structures
    /// with host pointers and uninitialized padding; the first recording's values are kept and
    /// counted in the manifest.
    fn host_words(&self, x: u64, y: u64) -> bool {
        // No syntactic rule tells a count from padding (an int beside 4 bytes of a stale
        // pointer reads as 0x4 in one process and 0x7f7c00000004 in another): only device
        // addresses are told apart; `gpuless invoke --input` with another recording's input
        // checks the rest.
        let host = |w: u64| !(self.arena.0..self.arena.1).contains(&w);
        let ok = host(x) && host(y);
        if ok {
            self.host_words.set(self.host_words.get() + 1);
        }
        ok
    }

    /// Whether `va` (first recording) and `vb` (second) are the same but for corresponding
    /// handles and addresses.
    fn same(&self, va: &Value, vb: &Value) -> bool {
        match (va, vb) {
            (Value::Handle(ka, x), Value::Handle(kb, y)) => ka == kb && self.first(*y) == *x,
            (Value::DevPtr(x), Value::DevPtr(y)) => self.same_addr(*x, *y),
            (Value::LaunchConfig(ca), Value::LaunchConfig(cb)) => config_difference(self, ca, cb).is_none(),
            (Value::KernelParams(pa), Value::KernelParams(pb)) => {
                pa.layout == pb.layout && pa.bytes.len() == pb.bytes.len() && self.param_difference(pa, pb).is_none()
            }
            _ => false,
        }
    }

    /// The first parameter word of `pb` that differs from `pa`'s other than as corresponding
    /// addresses: (parameter index, offset, first's word, second's word).
    fn param_difference(
        &self,
        pa: &gpuless_traces::KernelParams,
        pb: &gpuless_traces::KernelParams,
    ) -> Option<(usize, usize, u64, u64)> {
        let slots: Vec<(u32, u32)> =
            if pa.layout.is_empty() { vec![(0, pa.bytes.len() as u32)] } else { pa.layout.clone() };
        let word = |b: &[u8], at: usize, n: usize| {
            let mut w = [0u8; 8];
            w[..n].copy_from_slice(&b[at..at + n]);
            u64::from_le_bytes(w)
        };
        for (k, &(off, size)) in slots.iter().enumerate() {
            let (off, end) = (off as usize, (off + size) as usize);
            let mut at = off;
            while at < end.min(pa.bytes.len()).min(pb.bytes.len()) {
                let n = (end - at).min(8);
                let (x, y) = (word(&pa.bytes, at, n), word(&pb.bytes, at, n));
                if x != y && !((n == 8 && self.same_addr(x, y)) || self.host_words(x, y)) {
                    return Some((k, at, x, y));
                }
                at += n;
            }
        }
        None
    }
}

/// Bytes of a `CUlaunchAttributeValue` that attribute `id` uses (the rest of the union is
/// whatever the program's stack held); `None`: compare all.
fn attr_len(id: u32) -> Option<usize> {
    Some(match id {
        // Access policy window: base, bytes, hit ratio, hit and miss properties.
        1 => 28,
        // Cooperative, synchronization policy, scheduling policy, programmatic serialization,
        // priority, memory synchronization domain, shared-memory carve-out: one int.
        2 | 3 | 5 | 6 | 8 | 10 | 14 => 4,
        // Cluster dimension, preferred cluster dimension: three unsigned ints.
        4 | 11 => 12,
        // Programmatic event, launch completion event: event, flags (an event handle).
        7 | 12 => 16,
        // Memory synchronization domain map: two bytes.
        9 => 2,
        // Device-updatable kernel node: flag, node handle.
        13 => 16,
        _ => return None,
    })
}

/// How launch configuration `cb` (second recording) differs from `ca` (first), but for
/// corresponding streams and the bytes of each attribute its kind does not use.
fn config_difference(
    h: &Handles,
    ca: &gpuless_traces::LaunchConfig,
    cb: &gpuless_traces::LaunchConfig,
) -> Option<String> {
    if (ca.grid, ca.block, ca.shared_mem) != (cb.grid, cb.block, cb.shared_mem) {
        return Some(format!(
            "grid {:?}, block {:?}, shared memory {} where the first's are {:?}, {:?}, {}",
            cb.grid, cb.block, cb.shared_mem, ca.grid, ca.block, ca.shared_mem
        ));
    }
    if h.first(cb.stream) != ca.stream {
        return Some(format!("stream {:#x} where the first's is {:#x}", cb.stream, ca.stream));
    }
    if ca.attrs.len() != cb.attrs.len() {
        return Some(format!("{} attributes where the first has {}", cb.attrs.len(), ca.attrs.len()));
    }
    for (a, b) in ca.attrs.iter().zip(&cb.attrs) {
        let n = attr_len(a.id).unwrap_or(usize::MAX);
        let (va, vb) = (&a.value[..n.min(a.value.len())], &b.value[..n.min(b.value.len())]);
        if a.id != b.id || va != vb {
            return Some(format!(
                "attribute {} is {:02x?} where the first's is attribute {} {:02x?}",
                b.id, vb, a.id, va
            ));
        }
    }
    None
}
