//! Running a function without its program: the set-up once (code loaded, memory allocated at
//! the recorded addresses, constants uploaded), the body captured once into a CUDA graph
//! (the replayer's lowering: every recorded stream mapped to one capturing stream), and then
//! each invocation: the inputs written into the pinned buffers the graph's copies read (or,
//! for inputs uploaded before the first launch, copied ahead of the graph on its stream), one
//! `cuGraphLaunch`, one synchronization, the outputs read from the pinned buffers the graph's
//! device-to-host copies write.
//!
//! A body the graph cannot hold runs eagerly record by record instead ([`Mode::Eager`]), its
//! inputs substituted for the recorded bytes.

use cudarc::driver::sys;
use gpuless_traces::{BlobBytes, Hash128, Value};
use serde::Serialize;

use super::{Function, Manifest, Port};
use crate::replay::objects::SyncPoint;
use crate::replay::{
    self, compat, exec, hot, lower, results, Device, LoadedTrace, Memory, Options, ReplayError, Report, State,
};

/// Threads that load a function's code images at once.
const PRELOAD_THREADS: usize = 8;

/// Why a function cannot be invoked.
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    /// Setting up or running the function on the GPU failed.
    #[error(transparent)]
    Replay(#[from] ReplayError),
    /// The function's records do not describe a runnable function (a damaged compile).
    #[error("the function is not runnable: {0}")]
    Function(String),
}

/// How the body runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// One CUDA graph per invocation.
    Graph,
    /// Record by record (the body could not be captured; see [`Invoker::refused`]).
    Eager,
}

/// One input: where the invocation's bytes go.
struct Input {
    port: Port,
    /// Pinned host buffer of `port.bytes` bytes holding the next invocation's bytes.
    host: *mut u8,
    /// The graph's own copy reads `host` (a body input captured into the graph); otherwise the
    /// bytes are copied to `dev` before the body.
    in_graph: bool,
    /// Live device address.
    dev: u64,
    /// The body record that uploads it (eager mode substitutes the bytes there), if any.
    record: Option<usize>,
}

/// One output: the device-to-host copy and where its bytes land.
struct Output {
    seq: u64,
    what: &'static str,
    /// Pinned buffer the graph's copy writes (graph mode); eager results are kept in `eager`.
    host: *const u8,
    len: usize,
    /// The recorded result (a digest), to verify against.
    want: Option<Value>,
    eager: Vec<u8>,
}

/// The executable graph and its stream, destroyed with the invoker.
struct Graph {
    stream: sys::CUstream,
    graph: sys::CUgraph,
    exe: sys::CUgraphExec,
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: objects created by `capture` (null where not created); the invoker
        // synchronizes before it is dropped.
        unsafe {
            if !self.exe.is_null() {
                sys::cuGraphExecDestroy(self.exe);
            }
            if !self.graph.is_null() {
                sys::cuGraphDestroy(self.graph);
            }
            if !self.stream.is_null() {
                sys::cuStreamDestroy_v2(self.stream);
            }
        }
    }
}

/// A function set up on the GPU, ready to be invoked any number of times.
pub struct Invoker {
    graph: Option<Graph>,
    st: State,
    trace: LoadedTrace,
    manifest: Manifest,
    body: Vec<usize>,
    report: Report,
    inputs: Vec<Input>,
    outputs: Vec<Output>,
    refused: Option<String>,
    setup_s: f64,
    /// The set-up's slowest functions: (name, calls, seconds).
    profile: Vec<(String, u64, f64)>,
    capture_s: f64,
    /// The body is to be captured before the next invocation (after the first).
    capture_pending: bool,
    /// Whether it has run once.
    invoked: bool,
}

impl Invoker {
    /// Sets `f` up on `device`: code this GPU cannot run is refused before anything runs; the
    /// arena is reserved at the recorded base, the set-up replayed, the body captured.
    pub fn prepare(device: Device, f: Function) -> Result<Invoker, InvokeError> {
        Self::prepare_limited(device, f, None)
    }

    /// [`Invoker::prepare`], the function's device memory held to `memory_limit` bytes (a
    /// server's partition with a memory limit).
    pub fn prepare_limited(device: Device, f: Function, memory_limit: Option<u64>) -> Result<Invoker, InvokeError> {
        let t0 = std::time::Instant::now();
        device.make_current()?;
        let Function { manifest, trace } = f;
        let sm = replay::device_sm();
        if sm != 0 {
            let problems = compat::incompatible_code(&trace, sm);
            if !problems.is_empty() {
                return Err(
                    ReplayError::IncompatibleCode { device_sm: sm, recorded_sm: trace.meta.sm, problems }.into()
                );
            }
        }
        let mut st = State::new(Memory::with_limit(memory_limit), Options { memory_limit, ..Options::default() });
        let mut report = Report::default();
        report.warnings.extend(st.mem.reserve_arena(trace.meta.arena_base, trace.meta.arena_size));
        let split = hot::split(&trace.calls);
        // Code images load on several threads at once while the set-up's other records replay.
        st.preloaded = crate::replay::preload::Preloads::start(device, &trace, &split.setup, PRELOAD_THREADS);
        let mut spent: std::collections::HashMap<&'static str, (u64, f64)> = std::collections::HashMap::new();
        for &i in &split.setup {
            let t = std::time::Instant::now();
            let r = &trace.calls[i];
            exec::call(&mut st, &trace, r, &mut report)?;
            let e = spent.entry(r.function.api().map_or("?", |f| f.name)).or_default();
            e.0 += 1;
            e.1 += t.elapsed().as_secs_f64();
        }
        let t = std::time::Instant::now();
        st.synchronize()?;
        spent.insert("(synchronize after the set-up)", (1, t.elapsed().as_secs_f64()));
        let mut profile: Vec<(String, u64, f64)> = spent.into_iter().map(|(k, (n, s))| (k.to_string(), n, s)).collect();
        profile.sort_by(|a, b| b.2.total_cmp(&a.2));
        profile.truncate(8);
        let mut inv = Invoker {
            graph: None,
            st,
            trace,
            manifest,
            body: split.body,
            report,
            inputs: Vec::new(),
            outputs: Vec::new(),
            refused: None,
            setup_s: 0.0,
            profile,
            capture_s: 0.0,
            capture_pending: false,
            invoked: false,
        };
        // The first invocation runs eagerly (its result does not wait for the capture); the
        // body is captured at the second.
        match lower::refusal(&inv.trace, &inv.body) {
            Some(why) => inv.refused = Some(why),
            None => inv.capture_pending = true,
        }
        inv.ports()?;
        inv.setup_s = t0.elapsed().as_secs_f64();
        Ok(inv)
    }

    /// Captures the body and moves the inputs' next bytes into the buffers the graph reads;
    /// a body the graph cannot hold stays eager, with the reason.
    fn lower(&mut self) -> Result<(), InvokeError> {
        self.capture_pending = false;
        let t = std::time::Instant::now();
        let saved: Vec<Vec<u8>> =
            (0..self.inputs.len()).map(|n| self.input_mut(n).map(|b| b.to_vec()).unwrap_or_default()).collect();
        match self.capture() {
            Ok(g) => self.graph = Some(g),
            Err(why) => {
                self.refused = Some(why);
                return Ok(());
            }
        }
        self.inputs.clear();
        self.outputs.clear();
        self.ports()?;
        for (n, bytes) in saved.iter().enumerate() {
            if let Some(b) = self.input_mut(n).filter(|b| b.len() == bytes.len()) {
                b.copy_from_slice(bytes);
            }
        }
        self.capture_s = t.elapsed().as_secs_f64();
        Ok(())
    }

    /// Captures the body into one graph on a new stream (synchronizations left out: the
    /// graph's end is the one wait).
    fn capture(&mut self) -> Result<Graph, String> {
        let e = |what: &str, r: sys::CUresult| format!("{what} failed with {r:?}");
        let mut g = Graph { stream: std::ptr::null_mut(), graph: std::ptr::null_mut(), exe: std::ptr::null_mut() };
        // SAFETY: driver calls on a stream and graph created here (destroyed with `g`).
        unsafe {
            let r = sys::cuStreamCreate(&mut g.stream, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32);
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(e("cuStreamCreate", r));
            }
            let r = sys::cuStreamBeginCapture_v2(g.stream, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED);
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(e("cuStreamBeginCapture", r));
            }
            self.st.stream_override = Some(g.stream);
            let mut failed = None;
            for &i in &self.body {
                let rec = &self.trace.calls[i];
                if rec.function.api().is_some_and(|f| lower::waits(f.sync)) {
                    continue;
                }
                if let Err(err) = exec::call(&mut self.st, &self.trace, rec, &mut self.report) {
                    failed = Some(err.to_string());
                    break;
                }
            }
            self.st.stream_override = None;
            let r = sys::cuStreamEndCapture(g.stream, &mut g.graph);
            if let Some(why) = failed {
                return Err(format!("capturing the body: {why}"));
            }
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(e("cuStreamEndCapture", r));
            }
            let r = sys::cuGraphInstantiateWithFlags(&mut g.exe, g.graph, 0);
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(e("cuGraphInstantiateWithFlags", r));
            }
            let r = sys::cuGraphUpload(g.exe, g.stream);
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(e("cuGraphUpload", r));
            }
        }
        Ok(g)
    }

    /// Finds where each input goes and each output comes from, holding the recorded inputs.
    fn ports(&mut self) -> Result<(), InvokeError> {
        let by_seq: std::collections::HashMap<u64, usize> =
            self.trace.calls.iter().enumerate().map(|(i, r)| (r.seq, i)).collect();
        let body: std::collections::HashSet<usize> = self.body.iter().copied().collect();
        for port in self.manifest.inputs.clone() {
            let i = *by_seq
                .get(&port.seq)
                .ok_or_else(|| InvokeError::Function(format!("input #{} has no record", port.seq)))?;
            let staged = self.st.objects.staged.get(&port.seq).copied().filter(|_| self.graph.is_some());
            let (host, in_graph) = match staged {
                Some((p, len)) if len as u64 == port.bytes => (p, true),
                _ => {
                    let p = self.st.objects.pinned(port.bytes as usize, port.seq)?;
                    let data = exec_blob(&self.trace, i)
                        .ok_or_else(|| InvokeError::Function(format!("input #{} holds no bytes", port.seq)))?;
                    if data.len() as u64 != port.bytes {
                        return Err(InvokeError::Function(format!("input #{} holds {} bytes", port.seq, data.len())));
                    }
                    // SAFETY: `p` is a fresh pinned buffer of `port.bytes` bytes.
                    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
                    (p, false)
                }
            };
            let dev = self.st.mem.translate(port.address);
            let record = body.contains(&i).then_some(i);
            if self.graph.is_some() && record.is_some() && !in_graph {
                // A body copy the graph holds reads its own buffer: the input cannot reach it.
                let why = format!("input #{} ({}) is not a copy the graph can be fed", port.seq, port.call);
                self.graph = None;
                self.refused = Some(why);
                self.inputs.clear();
                return self.ports();
            }
            self.inputs.push(Input { port, host, in_graph, dev, record });
        }
        let pending: std::collections::HashMap<u64, _> =
            self.st.objects.complete(SyncPoint::All).into_iter().map(|p| (p.seq, p)).collect();
        for port in &self.manifest.outputs {
            let i = *by_seq
                .get(&port.seq)
                .ok_or_else(|| InvokeError::Function(format!("output #{} has no record", port.seq)))?;
            let rec = &self.trace.calls[i];
            let want = rec.results.iter().find(|v| matches!(v, Value::Digest(_) | Value::Blob(_))).cloned();
            let what = rec.function.api().map_or("?", |f| f.name);
            let host = match (&self.graph, pending.get(&port.seq)) {
                (Some(_), Some(p)) => p.host,
                (Some(_), None) => {
                    let why = format!("output #{} ({}) is not a copy the graph returns", port.seq, port.call);
                    self.graph = None;
                    self.refused = Some(why);
                    self.inputs.clear();
                    self.outputs.clear();
                    return self.ports();
                }
                (None, _) => std::ptr::null(),
            };
            self.outputs.push(Output { seq: port.seq, what, host, len: port.bytes as usize, want, eager: Vec::new() });
        }
        Ok(())
    }

    /// How the body runs.
    pub fn mode(&self) -> Mode {
        if self.graph.is_some() || self.capture_pending {
            Mode::Graph
        } else {
            Mode::Eager
        }
    }

    /// Why the body runs eagerly, when it does.
    pub fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    /// Seconds [`Invoker::prepare`] took.
    pub fn setup_s(&self) -> f64 {
        self.setup_s
    }

    /// Where the set-up's time went: its slowest functions (name, calls, seconds), and the
    /// seconds the body's capture and instantiation took.
    pub fn setup_profile(&self) -> (&[(String, u64, f64)], f64) {
        (&self.profile, self.capture_s)
    }

    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Input `n`'s buffer (pinned), holding the recorded bytes until written: what the next
    /// invocation uploads.
    pub fn input_mut(&mut self, n: usize) -> Option<&mut [u8]> {
        let i = self.inputs.get(n)?;
        // SAFETY: a pinned buffer of `port.bytes` bytes owned by the invoker; no invocation
        // is running while it is borrowed (`invoke` takes `&mut self` and synchronizes).
        Some(unsafe { std::slice::from_raw_parts_mut(i.host, i.port.bytes as usize) })
    }

    /// Output `n`'s bytes from the last invocation.
    pub fn output(&self, n: usize) -> Option<&[u8]> {
        let o = self.outputs.get(n)?;
        if self.graph.is_none() {
            return Some(&o.eager);
        }
        // SAFETY: the pinned buffer the graph's copy writes; the graph has completed.
        Some(unsafe { std::slice::from_raw_parts(o.host, o.len) })
    }

    /// Runs the function once on the inputs' buffers. `verify`: compare each output with the
    /// recorded result (meaningful with the recorded inputs).
    pub fn invoke(&mut self, verify: bool) -> Result<(), InvokeError> {
        if self.capture_pending && self.invoked {
            self.lower()?;
        }
        self.invoked = true;
        match self.graph.as_ref().map(|g| (g.stream, g.exe)) {
            Some((stream, exe)) => {
                // SAFETY: copies from pinned buffers the invoker owns to live allocations, and
                // the graph captured by `capture`, on its stream, waited for.
                unsafe {
                    for i in self.inputs.iter().filter(|i| !i.in_graph) {
                        let r = sys::cuMemcpyHtoDAsync_v2(i.dev, i.host.cast(), i.port.bytes as usize, stream);
                        replay::check(r, i.port.seq, "cuMemcpyHtoDAsync (input)")?;
                    }
                    replay::check(sys::cuGraphLaunch(exe, stream), 0, "cuGraphLaunch (the function's body)")?;
                    replay::check(sys::cuStreamSynchronize(stream), 0, "cuStreamSynchronize (the function's body)")?;
                }
            }
            None => self.invoke_eager()?,
        }
        if verify {
            for o in &self.outputs {
                let host = match self.graph {
                    // SAFETY: as in `output`.
                    Some(_) => unsafe { std::slice::from_raw_parts(o.host, o.len) },
                    None => &o.eager,
                };
                results::verify_value(&self.st, o.seq, o.what, o.want.as_ref(), host, &self.trace, &mut self.report);
            }
        }
        Ok(())
    }

    /// The body record by record, the inputs' bytes in place of the recorded ones.
    fn invoke_eager(&mut self) -> Result<(), InvokeError> {
        for i in &self.inputs {
            // SAFETY: the input's pinned buffer, `port.bytes` long.
            let bytes = unsafe { std::slice::from_raw_parts(i.host, i.port.bytes as usize) };
            match i.record {
                Some(r) => {
                    let hash = Hash128::of(bytes);
                    self.trace.blobs.insert(hash, BlobBytes::from(bytes.to_vec()));
                    for v in self.trace.calls[r].args.iter_mut() {
                        if let Value::Blob(b) = v {
                            b.hash = hash;
                        }
                    }
                }
                None => {
                    // SAFETY: a synchronous copy from the pinned buffer to a live allocation.
                    let r = unsafe { sys::cuMemcpyHtoD_v2(i.dev, i.host.cast(), bytes.len()) };
                    replay::check(r, i.port.seq, "cuMemcpyHtoD (input)")?;
                }
            }
        }
        let mut report = Report { outputs: Some(Vec::new()), ..Report::default() };
        let opts = self.st.opts;
        self.st.opts.no_verify = true;
        let run = (|| {
            for &i in &self.body {
                exec::call(&mut self.st, &self.trace, &self.trace.calls[i], &mut report)?;
            }
            self.st.synchronize()
        })();
        self.st.opts = opts;
        run?;
        let got: std::collections::HashMap<u64, Vec<u8>> =
            report.outputs.take().unwrap_or_default().into_iter().collect();
        for o in &mut self.outputs {
            o.eager = got.get(&o.seq).cloned().unwrap_or_default();
        }
        Ok(())
    }

    /// Results compared with the recording so far, and the differences found.
    pub fn verified(&self) -> (u64, &[String]) {
        (self.report.results_verified, &self.report.mismatches)
    }

    /// Things the user should know (an arena that could not be reserved again, ...).
    pub fn warnings(&self) -> &[String] {
        &self.report.warnings
    }
}

impl Drop for Invoker {
    fn drop(&mut self) {
        // Work in flight finishes before the buffers and graph it uses are freed.
        let _ = self.st.synchronize();
    }
}

/// The bytes record `i` uploads (its first blob).
fn exec_blob(trace: &LoadedTrace, i: usize) -> Option<&[u8]> {
    trace.calls.get(i)?.args.iter().find_map(|v| match v {
        Value::Blob(b) => trace.blobs.get(&b.hash).map(|d| &**d),
        _ => None,
    })
}
