//! A replay fed record by record: the engine of a server's executor. Records arrive in
//! segments from a client; blobs arrive by hash; device-to-host bytes are kept for the client's
//! next answer instead of (or besides) being compared with a recording.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use cudarc::driver::sys;
use gpuless_traces::{BlobBytes, CallRecord, Hash128, TraceMeta};

use super::resident::{self, Resident};
use super::{check, exec, explain, memory::Memory, query, Device, LoadedTrace, Options, ReplayError, Report, State};
use gpuless_traces::protocol::QueryResult;

/// What one session of a program leaves to the next session of it on the same executor
/// ([`Stream::keep`], [`Stream::new_warm`]).
pub struct Carried {
    mem: Memory,
    kept: BTreeMap<u64, (u64, Hash128)>,
    /// Bytes of uploads kept on the GPU.
    pub resident_bytes: u64,
}

impl Carried {
    /// The arena the memory lies in (base, size), if any.
    pub fn arena(&self) -> Option<(u64, u64)> {
        self.mem.arena_range()
    }

    /// Lets the memory go (the executor ends, or serves another program).
    pub fn give_back(self) {
        self.mem.give_back();
    }
}

/// A replay in progress whose records come one at a time.
pub struct Stream {
    st: State,
    trace: LoadedTrace,
    report: Report,
    queries: Vec<QueryResult>,
    /// The stream cached pieces are captured on (`piece_graph`), made at the first capture.
    capture: sys::CUstream,
    /// The last record was a query that found work unfinished (`CUDA_ERROR_NOT_READY`).
    not_ready: bool,
}

/// `CUDA_ERROR_NOT_READY`.
const NOT_READY: i32 = 600;

impl Drop for Stream {
    fn drop(&mut self) {
        if !self.capture.is_null() {
            // SAFETY: a stream this replay created; work on it finishes before it is freed.
            unsafe { sys::cuStreamDestroy_v2(self.capture) };
        }
    }
}

impl Stream {
    /// Makes `device`'s context current and reserves the client's arena (`meta.arena_base`,
    /// `meta.arena_size`; none when either is 0) so the client's addresses are valid here. A
    /// stream priority in `opts` is clamped to the device's range (`i32::MIN`: the greatest,
    /// `i32::MAX`: the least).
    pub fn new(device: Device, meta: TraceMeta, mut opts: Options) -> Result<Self, ReplayError> {
        // SAFETY: the context was retained by init_device (or is a green context) and lives
        // as long as the process.
        unsafe { check(sys::cuCtxSetCurrent(device.ctx as sys::CUcontext), 0, "cuCtxSetCurrent")? };
        if let Some(p) = opts.stream_priority {
            let (mut least, mut greatest) = (0, 0);
            // SAFETY: valid out-pointers; a current context.
            unsafe {
                check(sys::cuCtxGetStreamPriorityRange(&mut least, &mut greatest), 0, "cuCtxGetStreamPriorityRange")?
            };
            // Greater priorities are lower numbers.
            opts.stream_priority = Some(p.clamp(greatest.min(least), least.max(greatest)));
        }
        let mut st = State::new(Memory::with_limit(opts.memory_limit), opts);
        let mut report = Report { outputs: Some(Vec::new()), ..Report::default() };
        // A session without an arena (a function client: the function's invoker reserves its
        // own) leaves the early reservation of the default arena in place for it.
        if meta.arena_base != 0 && meta.arena_size != 0 {
            report.warnings.extend(st.mem.reserve_arena(meta.arena_base, meta.arena_size));
        }
        let trace = LoadedTrace { meta, calls: Vec::new(), blobs: HashMap::new(), lost: None };
        Ok(Stream { st, trace, report, queries: Vec::new(), capture: std::ptr::null_mut(), not_ready: false })
    }

    /// Makes this a session of `n` devices ([`super::devices`]); device 0 is `device`, the one
    /// it was created on.
    pub fn use_devices(&mut self, device: Device, n: u32) -> Result<(), ReplayError> {
        super::devices::use_devices(&mut self.st, device, n)
    }

    /// Like [`Self::new`], for a session of a program whose executor is kept for its next
    /// session: its uploads are noted ([`super::resident`]), and it takes over what the last
    /// session of the program left (`carried`: the arena, held memory and the ranges that hold
    /// their uploads) when that was for the same arena; otherwise that memory is let go first.
    pub fn new_warm(
        device: Device,
        meta: TraceMeta,
        opts: Options,
        carried: Option<Carried>,
    ) -> Result<Self, ReplayError> {
        let arena = (meta.arena_base, meta.arena_size);
        let carried = match carried {
            Some(c) if c.mem.arena_range() == Some(arena) && c.mem.limit() == opts.memory_limit => Some(c),
            Some(c) => {
                c.mem.give_back();
                None
            }
            None => None,
        };
        let Some(c) = carried else {
            let mut s = Stream::new(device, meta, opts)?;
            s.st.resident = Resident::start(Default::default());
            return Ok(s);
        };
        // The arena is reserved already: a stream without one, then the carried memory.
        let bare = TraceMeta { arena_base: 0, arena_size: 0, ..meta.clone() };
        let mut s = Stream::new(device, bare, opts)?;
        s.trace.meta = meta;
        s.st.mem = c.mem;
        s.st.resident = Resident::start(c.kept);
        Ok(s)
    }

    /// Ends the session, keeping for the next session of its program the uploads that still
    /// hold their blob, with the allocations around them ([`super::resident`]): everything else
    /// the session made is freed, destroyed or unloaded, and every byte of the memory that
    /// stays mapped outside a kept upload is zeroed.
    pub fn keep(mut self) -> Result<Carried, ReplayError> {
        self.synchronize()?;
        let uploads: Vec<(u64, u64, Hash128)> = {
            let mem = &self.st.mem;
            // Only where the recorded address is the live one (arena memory is never moved).
            let inside = |at: u64, len: u64| {
                mem.find(at).is_some_and(|a| a.live == a.recorded && at + len <= a.recorded + a.size)
            };
            self.st.resident.uploads().filter(|&(at, len, _)| inside(at, len)).collect()
        };
        let blobs = &self.trace.blobs;
        let mut kept = resident::verify(uploads.into_iter(), |h| blobs.get(h).map(|b| &**b));
        let allocs: HashSet<u64> = kept.keys().filter_map(|&at| self.st.mem.find(at).map(|a| a.recorded)).collect();
        self.st.release_objects();
        let mapped = self.st.mem.hold(&allocs);
        // Uploads in allocations that were not held (outside the arena) are not kept.
        let held = self.st.mem.held();
        kept.retain(|&at, (len, _)| held.iter().any(|&(a, n)| at >= a && at + *len <= a + n));
        for (lo, hi) in mapped {
            for (at, n) in resident::gaps(lo, hi, &kept) {
                // SAFETY: mapped memory of ours that no live allocation uses.
                let r = unsafe { sys::cuMemsetD8_v2(at, 0, n as usize) };
                check(r, 0, "cuMemsetD8 (clearing memory kept for the next session)")?;
            }
        }
        self.synchronize()?;
        let resident_bytes = kept.values().map(|(len, _)| len).sum();
        Ok(Carried { mem: std::mem::take(&mut self.st.mem), kept, resident_bytes })
    }

    /// Uploads skipped because the last session of the program left their bytes in place:
    /// (copies, bytes).
    pub fn resident_skipped(&self) -> (u64, u64) {
        self.st.resident.skipped
    }

    /// The replay's state, the session's blobs and the report, borrowed together.
    pub(crate) fn parts(&mut self) -> (&mut State, &LoadedTrace, &mut Report) {
        (&mut self.st, &self.trace, &mut self.report)
    }

    /// The stream pieces are captured on (non-blocking, made once).
    pub(crate) fn capture_stream(&mut self) -> Result<sys::CUstream, String> {
        if self.capture.is_null() {
            // SAFETY: a new stream in the current context, owned by this replay.
            let r =
                unsafe { sys::cuStreamCreate(&mut self.capture, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32) };
            if r != sys::CUresult::CUDA_SUCCESS {
                self.capture = std::ptr::null_mut();
                return Err(format!("cuStreamCreate (capture stream) failed with {r:?}"));
            }
        }
        Ok(self.capture)
    }

    /// The bytes of blob `h`, if the session holds it.
    pub(crate) fn blob_bytes(&self, h: &Hash128) -> Option<&[u8]> {
        self.trace.blobs.get(h).map(|b| &**b)
    }

    /// Whether a device-to-host result in flight (not yet returned) satisfies `f`.
    pub(crate) fn pending_any(&self, f: impl Fn(&super::objects::Pending) -> bool) -> bool {
        self.st.objects.pending.any(f)
    }

    /// Whether the session holds blob `h`.
    pub fn has_blob(&self, h: &Hash128) -> bool {
        self.trace.blobs.contains_key(h)
    }

    /// Adds a blob the records may refer to.
    pub fn add_blob(&mut self, h: Hash128, bytes: impl Into<BlobBytes>) {
        self.trace.blobs.insert(h, bytes.into());
    }

    /// Executes one record. A device fault after allocations moved is explained as in a
    /// whole-trace replay.
    /// The live stream a record's work goes to: its `hStream`, or its launch configuration's.
    pub(crate) fn live_stream_of(&self, rec: &CallRecord) -> Option<sys::CUstream> {
        let f = rec.function.api()?;
        let rec_s = match f.args.iter().position(|a| a.name == "hStream").and_then(|i| rec.args.get(i)) {
            Some(v) => super::args::word(v)?,
            None => match f.args.iter().position(|a| a.name == "config").and_then(|i| rec.args.get(i)) {
                Some(gpuless_traces::Value::LaunchConfig(c)) => c.stream,
                _ => return None,
            },
        };
        self.st.stream(rec_s).ok()
    }

    /// A kernel-submitting record's shape: its function, its function (or graph) handle, and
    /// its grid, block and shared memory, hashed; the kernel parameters are not part of it.
    /// What the best-effort budget predicts a duration for (`server/executor/inflight.rs`).
    pub(crate) fn kernel_shape(rec: &CallRecord) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        rec.function.api().map(|f| f.id.0).hash(&mut h);
        for v in &rec.args {
            match v {
                gpuless_traces::Value::Dim(d) => (d.x, d.y, d.z).hash(&mut h),
                gpuless_traces::Value::LaunchConfig(c) => {
                    (c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z, c.shared_mem).hash(&mut h)
                }
                v => super::args::word(v).hash(&mut h),
            }
        }
        h.finish()
    }

    pub fn call(&mut self, rec: &CallRecord) -> Result<(), ReplayError> {
        self.report.calls += 1;
        if std::mem::take(&mut self.not_ready) && rec.function.name() == gpuless_traces::hostview::HOST_PULL {
            // The query this pull follows found the work unfinished: the host may not look at
            // managed memory yet, and comparing it all would make every poll cost its size.
            if let Some(o) = self.report.outputs.as_mut() {
                o.push((rec.seq, Vec::new()));
            }
            return Ok(());
        }
        exec::call(&mut self.st, &self.trace, rec, &mut self.report)
            .map_err(|e| explain(e, self.st.mem.translated, &self.report.warnings))?;
        let q = query::answer(&mut self.st, rec);
        self.not_ready = q.as_ref().is_some_and(|q| q.status == NOT_READY);
        self.queries.extend(q);
        Ok(())
    }

    /// Where the session's host functions run (`None`: no-ops, as in a local replay).
    pub fn set_host_calls(&mut self, calls: Option<std::sync::Arc<super::host_calls::HostCalls>>) {
        self.st.host_calls = calls;
    }

    /// The server that brokers memory between a program's processes (`None`: a local replay).
    pub fn set_broker(&mut self, broker: Option<std::sync::Arc<dyn super::share::Broker>>) {
        self.st.broker = broker;
    }

    /// Answers to the state queries executed since the last call ([`query`]).
    pub fn take_queries(&mut self) -> Vec<QueryResult> {
        std::mem::take(&mut self.queries)
    }

    /// Waits for every call executed so far.
    pub fn synchronize(&mut self) -> Result<(), ReplayError> {
        self.st.synchronize().map_err(|e| explain(e, self.st.mem.translated, &self.report.warnings))
    }

    /// Device-to-host results since the last call: (sequence number of the copy, bytes).
    pub fn take_outputs(&mut self) -> Vec<(u64, Vec<u8>)> {
        self.report.outputs.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// What the replay did so far (peak memory and allocation counts filled in).
    pub fn report(&mut self) -> &Report {
        self.report.allocations_exact = self.st.mem.exact;
        self.report.allocations_translated = self.st.mem.translated;
        self.report.shared_memory = self.st.mem.shared;
        self.report.allocations_in_arena = self.st.mem.in_arena;
        self.report.peak_memory = self.st.mem.peak();
        self.report.replay_s = self.st.start.elapsed().as_secs_f64();
        &self.report
    }

    /// The priority every stream the session creates gets, if one was asked for.
    pub fn stream_priority(&self) -> Option<i32> {
        self.st.opts.stream_priority
    }

    /// When the stream started.
    pub fn started(&self) -> Instant {
        self.st.start
    }
}

impl State {
    /// Destroys what the session created — executable graphs, graphs, texture and surface
    /// objects, arrays, streams, events, JIT links — and
    /// unloads the code images it loaded, so that an executor kept for the next session of the
    /// program holds none of it (the next session loads fresh images: a module's globals are
    /// as its image says, not as the last session left them).
    pub(crate) fn release_objects(&mut self) {
        // SAFETY: handles this replay created, after a synchronization; each is destroyed once
        // (the maps are emptied), and the special stream handles (null, legacy, per-thread) are
        // not destroyed.
        unsafe {
            sys::cuCtxSynchronize();
            self.links.destroy_all();
            for (_, e) in self.objects.execs.drain() {
                sys::cuGraphExecDestroy(e);
            }
            for (_, g) in self.objects.graphs.drain() {
                sys::cuGraphDestroy(g);
            }
            self.objects.nodes.clear();
            // Texture and surface objects share one map: a handle that is not a texture's is
            // a surface's.
            for (_, t) in self.objects.textures.drain() {
                if sys::cuTexObjectDestroy(t) != sys::CUresult::CUDA_SUCCESS {
                    sys::cuSurfObjectDestroy(t);
                }
            }
            for (_, a) in self.objects.arrays.drain() {
                sys::cuArrayDestroy(a);
            }
            for (_, m) in self.objects.mipmapped.drain() {
                sys::cuMipmappedArrayDestroy(m);
            }
            for (_, s) in self.streams.drain() {
                if s as usize > 2 {
                    sys::cuStreamDestroy_v2(s);
                }
            }
            for (_, e) in self.events.drain() {
                sys::cuEventDestroy_v2(e);
            }
            self.functions.clear();
            self.kernels.clear();
            self.modules.clear();
            self.libraries.clear();
            for l in self.loaded.drain(..) {
                match l {
                    super::preload::Preloaded::Module(m) => {
                        sys::cuModuleUnload(m as sys::CUmodule);
                    }
                    super::preload::Preloaded::Library(l) => {
                        sys::cuLibraryUnload(l as sys::CUlibrary);
                    }
                }
            }
        }
    }
}
