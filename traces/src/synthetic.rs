//! Synthetic traces built through the writer API, until the recorder exists: a vector add and
//! a ResNet-like inference loop. Deterministic for a given seed. Clearly not real recordings.

use gpuless_analyzer::api::{self, ApiLevel, HandleKind, Variant};

use crate::error::TraceError;
use crate::model::{
    BlobKind, BlobRef, CallRecord, Dim3, Function, Hash128, KernelParams, LaunchAttr, LaunchConfig, TraceMeta, Value,
};
use crate::writer::TraceWriter;

/// Metadata for synthetic traces.
pub fn synthetic_meta(name: &str) -> TraceMeta {
    TraceMeta {
        tool_version: format!("gpuless-traces {} (synthetic)", env!("CARGO_PKG_VERSION")),
        driver_version: 13000,
        cuda_version: 13000,
        gpu_name: "SYNTHETIC (no GPU)".into(),
        sm: 90,
        uuid: (0u8..16).collect(),
        command_line: vec!["synthetic".into(), name.into()],
        start_time_unix_ns: 1_763_683_200_000_000_000,
        arena_base: 0x7e00_0000_0000,
        arena_size: 1 << 40,
        pid: 4242,
        hostname: "synthetic".into(),
        extra: vec![("synthetic".into(), "true".into())],
    }
}

/// A small deterministic generator (xorshift64*).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeded generator.
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    /// Next value.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Bytes that look like float32 tensors (compress like real weights: about 10-20%).
    pub fn tensor_bytes(&mut self, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 4);
        while out.len() < len {
            let r = self.next_u64();
            // Small values around zero with a random low mantissa: sign, exponent near 2^-3.
            let mant = (r & 0x7f_ffff) as u32;
            let exp = 120 + ((r >> 23) & 0x7) as u32;
            let sign = ((r >> 30) & 1) as u32;
            out.extend_from_slice(&((sign << 31) | (exp << 23) | mant).to_le_bytes());
        }
        out.truncate(len);
        out
    }

    /// Bytes that look like a code image (repetitive instruction words).
    pub fn code_bytes(&mut self, len: usize) -> Vec<u8> {
        let words: Vec<u64> = (0..64).map(|_| self.next_u64()).collect();
        let mut out = Vec::with_capacity(len + 8);
        while out.len() < len {
            let i = (self.next_u64() % 64) as usize;
            out.extend_from_slice(&words.get(i).copied().unwrap_or(0).to_le_bytes());
        }
        out.truncate(len);
        out
    }
}

/// Builds and writes records with increasing sequence numbers and timestamps.
pub struct Recorder<'w> {
    w: &'w TraceWriter,
    t: u64,
    thread: u64,
}

impl<'w> Recorder<'w> {
    /// Record into `w`.
    pub fn new(w: &'w TraceWriter) -> Self {
        Recorder { w, t: 0, thread: 1000 }
    }

    /// Store a blob.
    pub fn blob(&self, kind: BlobKind, data: &[u8]) -> Result<BlobRef, TraceError> {
        self.w.blob(kind, data)
    }

    /// Record a call by symbol name (`cuMemAlloc_v2`); unknown symbols become unmodeled calls.
    pub fn call(&mut self, symbol: &str, args: Vec<Value>, results: Vec<Value>) -> Result<u64, TraceError> {
        self.call_in(symbol, None, args, results)
    }

    /// Record a call made from inside another intercepted call.
    pub fn call_in(
        &mut self,
        symbol: &str,
        parent: Option<u64>,
        args: Vec<Value>,
        results: Vec<Value>,
    ) -> Result<u64, TraceError> {
        let (function, variant, level) = match api::lookup_symbol(symbol) {
            Some((f, v)) => (Function::Known(f.id), v, f.level),
            None => {
                let level = if symbol.starts_with("cuda") { ApiLevel::Runtime } else { ApiLevel::Driver };
                (Function::Other(symbol.to_string()), Variant::BASE, level)
            }
        };
        let seq = self.w.next_seq();
        self.t += 700 + (seq % 7) * 150;
        let rec = CallRecord {
            seq,
            thread: self.thread,
            timestamp_ns: self.t,
            duration_ns: 300 + (seq % 5) * 40,
            level,
            parent,
            function,
            variant,
            status: 0,
            args,
            results,
            repeat: 0,
        };
        self.w.record(rec)?;
        Ok(seq)
    }
}

/// The arguments of a one-dimensional `cuLaunchKernel` as the recorder stores them: the
/// function (or kernel) handle, grid and block in x, no dynamic shared memory, the stream, the
/// parameters and no `extra` buffer.
pub fn launch_args(func: Value, grid: u64, block: u64, stream: u64, params: Value) -> Vec<Value> {
    vec![
        func,
        Value::U64(grid),
        Value::U64(1),
        Value::U64(1),
        Value::U64(block),
        Value::U64(1),
        Value::U64(1),
        Value::Size(0),
        Value::Handle(HandleKind::Stream, stream),
        params,
        Value::Null,
    ]
}

fn h(kind: HandleKind, v: u64) -> Value {
    Value::Handle(kind, v)
}

fn params(ptrs: &[u64], n: u32) -> Value {
    let mut bytes = Vec::new();
    let mut layout = Vec::new();
    for p in ptrs {
        layout.push((bytes.len() as u32, 8));
        bytes.extend_from_slice(&p.to_le_bytes());
    }
    layout.push((bytes.len() as u32, 4));
    bytes.extend_from_slice(&n.to_le_bytes());
    Value::KernelParams(KernelParams { bytes, layout })
}

fn setup(r: &mut Recorder<'_>) -> Result<(), TraceError> {
    r.call("cuInit", vec![Value::U64(0)], vec![])?;
    r.call("cuDriverGetVersion", vec![Value::Null], vec![Value::I64(13000)])?;
    r.call("cuDeviceGetCount", vec![Value::Null], vec![Value::I64(1)])?;
    r.call("cuDeviceGet", vec![Value::Null, Value::I64(0)], vec![h(HandleKind::Device, 0)])?;
    for attr in [75u64, 76, 16, 1, 8, 39] {
        r.call(
            "cuDeviceGetAttribute",
            vec![Value::Null, Value::U64(attr), h(HandleKind::Device, 0)],
            vec![Value::I64(64)],
        )?;
    }
    r.call(
        "cuDeviceGetName",
        vec![Value::HostPtr(0x5700_0000), Value::Size(256), h(HandleKind::Device, 0)],
        vec![Value::Str("SYNTHETIC (no GPU)".into())],
    )?;
    r.call(
        "cuDevicePrimaryCtxRetain",
        vec![Value::Null, h(HandleKind::Device, 0)],
        vec![h(HandleKind::Context, 0x5550_0000)],
    )?;
    r.call("cuCtxSetCurrent", vec![h(HandleKind::Context, 0x5550_0000)], vec![])?;
    Ok(())
}

/// A vector add: load a library, allocate, copy in, launch, copy out, free.
pub fn vector_add(w: &TraceWriter, n: u32) -> Result<(), TraceError> {
    let mut rng = Rng::new(7);
    let mut r = Recorder::new(w);
    setup(&mut r)?;
    let image = r.blob(BlobKind::CodeImage, &rng.code_bytes(12 * 1024))?;
    r.call("cuLibraryLoadData", library_load_args(image), vec![h(HandleKind::Library, 0x1000)])?;
    r.call(
        "cuLibraryGetKernel",
        vec![Value::Null, h(HandleKind::Library, 0x1000), Value::Str("_Z6vecAddPKfS0_Pfi".into())],
        vec![h(HandleKind::Kernel, 0x2000)],
    )?;
    let bytes = u64::from(n) * 4;
    let base = 0x7e00_0000_0000u64;
    let ptrs = [base, base + 0x20_0000, base + 0x40_0000];
    for p in ptrs {
        r.call("cuMemAlloc_v2", vec![Value::Null, Value::Size(bytes)], vec![Value::DevPtr(p)])?;
    }
    for p in &ptrs[..2] {
        let data = r.blob(BlobKind::HostToDevice, &rng.tensor_bytes(bytes as usize))?;
        r.call("cuMemcpyHtoD_v2", vec![Value::DevPtr(*p), Value::Blob(data), Value::Size(bytes)], vec![])?;
    }
    let grid = n.div_ceil(256);
    r.call(
        "cuLaunchKernel",
        launch_args(h(HandleKind::Kernel, 0x2000), u64::from(grid), 256, 0, params(&ptrs, n)),
        vec![],
    )?;
    r.call("cuCtxSynchronize", vec![], vec![])?;
    let out = rng.tensor_bytes(bytes as usize);
    r.call(
        "cuMemcpyDtoH_v2",
        vec![Value::HostPtr(0x5600_0000), Value::DevPtr(ptrs[2]), Value::Size(bytes)],
        vec![Value::Digest(BlobRef { hash: Hash128::of(&out), len: bytes })],
    )?;
    for p in ptrs {
        r.call("cuMemFree_v2", vec![Value::DevPtr(p)], vec![])?;
    }
    Ok(())
}

/// Sizes of the ResNet-like trace.
#[derive(Debug, Clone, Copy)]
pub struct ResnetScale {
    /// Inference iterations.
    pub iterations: u32,
    /// Launches per iteration.
    pub launches: u32,
    /// Weight tensors uploaded at start.
    pub weights: u32,
    /// Bytes per weight tensor.
    pub weight_bytes: usize,
    /// Bytes per code image.
    pub image_bytes: usize,
}

impl Default for ResnetScale {
    /// About 2,000 calls and a file of a few hundred KB.
    fn default() -> Self {
        ResnetScale { iterations: 10, launches: 188, weights: 40, weight_bytes: 4096, image_bytes: 8 * 1024 }
    }
}

/// A ResNet-like inference trace: device set-up, 18 library loads, weight uploads (H2D
/// payloads), then iterations of input upload, ~188 launches (mostly `cuLaunchKernelEx`, as
/// cuBLAS/cuDNN do), stream-ordered allocations, an async D2H of the result and a sync.
pub fn resnet_like(w: &TraceWriter, scale: ResnetScale) -> Result<(), TraceError> {
    let mut rng = Rng::new(50);
    let mut r = Recorder::new(w);
    setup(&mut r)?;
    let stream = 0x9000u64;
    r.call("cuStreamCreate", vec![Value::Null, Value::U64(1)], vec![h(HandleKind::Stream, stream)])?;
    r.call("cuEventCreate", vec![Value::Null, Value::U64(2)], vec![h(HandleKind::Event, 0xe000)])?;
    let mut kernels = Vec::new();
    for lib in 0..18u64 {
        let image = r.blob(BlobKind::CodeImage, &rng.code_bytes(scale.image_bytes))?;
        // cudart registers the fat binary (its address: the bytes are stored by the load), then
        // loads it through the driver (a nested call).
        let handle = Value::HostPtr(0x6000 + lib);
        let parent =
            r.call("__cudaRegisterFatBinary", vec![Value::HostPtr(0x5000_0000 + lib * 0x100)], vec![handle.clone()])?;
        r.call_in(
            "cuLibraryLoadData",
            Some(parent),
            library_load_args(image),
            vec![h(HandleKind::Library, 0x1000 + lib)],
        )?;
        for k in 0..4u64 {
            // The host stub → kernel name annotation.
            let name = Value::Str(format!("synthetic_kernel_{lib}_{k}"));
            let mut reg = vec![handle.clone(), Value::HostPtr(0x40_0000 + lib * 0x100 + k * 16), Value::Null, name];
            reg.extend([Value::U64(u64::MAX), Value::Null, Value::Null, Value::Null, Value::Null, Value::Null]);
            r.call("__cudaRegisterFunction", reg, vec![])?;
            let kh = 0x10_0000 + lib * 16 + k;
            r.call(
                "cuLibraryGetKernel",
                vec![
                    Value::Null,
                    h(HandleKind::Library, 0x1000 + lib),
                    Value::Str(format!("synthetic_kernel_{lib}_{k}")),
                ],
                vec![h(HandleKind::Kernel, kh)],
            )?;
            kernels.push(kh);
        }
    }
    let base = 0x7e00_0000_0000u64;
    r.call("cuMemAlloc_v2", vec![Value::Null, Value::Size(256 << 20)], vec![Value::DevPtr(base)])?;
    let mut off = 0u64;
    for _ in 0..scale.weights {
        let data = r.blob(BlobKind::HostToDevice, &rng.tensor_bytes(scale.weight_bytes))?;
        r.call(
            "cuMemcpyHtoDAsync_v2",
            vec![Value::DevPtr(base + off), Value::Blob(data), Value::Size(data.len), h(HandleKind::Stream, stream)],
            vec![],
        )?;
        off += data.len.next_multiple_of(512);
    }
    r.call("cuStreamSynchronize", vec![h(HandleKind::Stream, stream)], vec![])?;
    r.call("cuProfilerStart", vec![], vec![])?;
    // The same input every iteration, as benchmark loops do: stored once.
    let input_data = rng.tensor_bytes(3 * 32 * 32 * 4);
    for it in 0..scale.iterations {
        let input = r.blob(BlobKind::HostToDevice, &input_data)?;
        r.call(
            "cuMemcpyHtoDAsync_v2",
            vec![Value::DevPtr(base + off), Value::Blob(input), Value::Size(input.len), h(HandleKind::Stream, stream)],
            vec![],
        )?;
        // The workspace comes from the stream-ordered pool, past the 256 MiB allocation.
        let ws = base + (256 << 20) + u64::from(it) * 0x10_0000;
        r.call(
            "cuMemAllocAsync",
            vec![Value::Null, Value::Size(1 << 20), h(HandleKind::Stream, stream)],
            vec![Value::DevPtr(ws)],
        )?;
        for l in 0..scale.launches {
            let k = kernels.get((l as usize * 7) % kernels.len().max(1)).copied().unwrap_or(0);
            let p = params(&[base + u64::from(l) * 4096, ws], 4096);
            if l % 3 == 0 {
                let args = launch_args(h(HandleKind::Kernel, k), u64::from(1 + l % 64), 256, stream, p);
                r.call("cuLaunchKernel", args, vec![])?;
            } else {
                let cfg = LaunchConfig {
                    grid: Dim3 { x: 1 + l % 128, y: 2, z: 1 },
                    block: Dim3 { x: 128, y: 1, z: 1 },
                    shared_mem: 16 * 1024,
                    stream,
                    attrs: vec![LaunchAttr { id: 4, value: vec![1, 0, 0, 0] }],
                };
                r.call(
                    "cuLaunchKernelEx",
                    vec![Value::LaunchConfig(cfg), h(HandleKind::Kernel, k), p, Value::Null],
                    vec![],
                )?;
            }
        }
        r.call("cuMemFreeAsync", vec![Value::DevPtr(ws), h(HandleKind::Stream, stream)], vec![])?;
        let out = rng.tensor_bytes(4000);
        r.call(
            "cuMemcpyDtoHAsync_v2",
            vec![
                Value::HostPtr(0x5600_0000),
                Value::DevPtr(base + off + 0x10_0000),
                Value::Size(4000),
                h(HandleKind::Stream, stream),
            ],
            vec![Value::Digest(BlobRef { hash: Hash128::of(&out), len: 4000 })],
        )?;
        r.call("cuEventRecord", vec![h(HandleKind::Event, 0xe000), h(HandleKind::Stream, stream)], vec![])?;
        r.call("cuStreamSynchronize", vec![h(HandleKind::Stream, stream)], vec![])?;
    }
    r.call("cuProfilerStop", vec![], vec![])?;
    Ok(())
}

/// Two threads whose records test timelines (`gpuless analyze --perfetto`), written in the
/// order a recorder hands batches over: all of thread 100's records, then thread 200's, then
/// the summary of an unmodeled function. Times are set by hand (ns):
///
/// * an untimed runtime registration (duration 0) with a driver call made from inside it;
/// * a `cuCtxSynchronize` (4,000–5,000) with a nested query starting 10 ns before it (clock
///   skew) and another ending 200 ns after it;
/// * two calls of thread 100 overlapping without being nested (6,000–6,500 and 6,400–6,700);
/// * thread 200 allocates 8 KiB at 6,900 that thread 100 frees at 7,000 — in the file the free
///   comes first; a failed allocation, a failed free of an unknown address, a VMM allocation of 1 MiB
///   and its release.
///
/// Device memory held: 4 KiB from 3,050, 12 KiB from 6,950, 4 KiB again from 7,010; VMM 1 MiB
/// from 7,250 to 7,310.
pub fn two_threads(w: &TraceWriter) -> Result<(), TraceError> {
    let call = |seq: u64, thread: u64, symbol: &str, t: (u64, u64), args: Vec<Value>, results: Vec<Value>| {
        let (function, variant, level) = match api::lookup_symbol(symbol) {
            Some((f, v)) => (Function::Known(f.id), v, f.level),
            None => (Function::Other(symbol.to_string()), Variant::BASE, ApiLevel::Driver),
        };
        CallRecord {
            seq,
            thread,
            timestamp_ns: t.0,
            duration_ns: t.1,
            level,
            parent: None,
            function,
            variant,
            status: 0,
            args,
            results,
            repeat: 0,
        }
    };
    let nested = |mut r: CallRecord, parent: u64| {
        r.parent = Some(parent);
        r
    };
    let failed = |mut r: CallRecord| {
        r.status = 2;
        r
    };
    let (a, b) = (100, 200);
    // The legacy default stream: a replay (or its dry run) knows it without a creation.
    let stream = h(HandleKind::Stream, 0);
    let image = w.blob(BlobKind::CodeImage, &Rng::new(7).code_bytes(512))?;
    w.records(vec![
        call(0, a, "cuInit", (1000, 100), vec![Value::U64(0)], vec![]),
        call(1, a, "__cudaRegisterFatBinary", (2000, 0), vec![Value::HostPtr(0x5000)], vec![Value::HostPtr(0x6000)]),
        nested(
            call(2, a, "cuLibraryLoadData", (2500, 400), library_load_args(image), vec![h(HandleKind::Library, 0x10)]),
            1,
        ),
        call(3, a, "cuMemAlloc_v2", (3000, 50), vec![Value::Null, Value::Size(4096)], vec![Value::DevPtr(0x1000)]),
        call(4, a, "cuCtxSynchronize", (4000, 1000), vec![], vec![]),
        nested(call(5, a, "cuStreamQuery", (3990, 20), vec![stream.clone()], vec![]), 4),
        nested(call(6, a, "cuStreamQuery", (4900, 300), vec![stream.clone()], vec![]), 4),
        call(7, a, "cuStreamSynchronize", (6000, 500), vec![stream.clone()], vec![]),
        call(8, a, "cuStreamQuery", (6400, 300), vec![stream], vec![]),
        call(12, a, "cuMemFree_v2", (7000, 10), vec![Value::DevPtr(0x2000)], vec![]),
    ])?;
    w.records(vec![
        call(10, b, "cuMemAlloc_v2", (6900, 50), vec![Value::Null, Value::Size(8192)], vec![Value::DevPtr(0x2000)]),
        failed(call(11, b, "cuMemAlloc_v2", (6960, 5), vec![Value::Null, Value::Size(1 << 50)], vec![Value::Null])),
        // The driver refuses a free of an address it never gave out.
        failed(call(13, b, "cuMemFree_v2", (7100, 10), vec![Value::DevPtr(0x9999)], vec![])),
        call(
            14,
            b,
            "cuMemCreate",
            (7200, 50),
            vec![Value::Null, Value::Size(1 << 20), Value::Null, Value::U64(0)],
            vec![h(HandleKind::MemHandle, 0x77)],
        ),
        call(15, b, "cuMemRelease", (7300, 10), vec![h(HandleKind::MemHandle, 0x77)], vec![]),
    ])?;
    let mut summary = CallRecord::new(16, ApiLevel::Cudnn, Function::Other("cudnnCreate".into()));
    summary.timestamp_ns = 8000;
    summary.args = vec![Value::U64(3)];
    w.record(summary)
}

/// The arguments of a `cuLibraryLoadData` of `image` with no JIT or library options.
fn library_load_args(image: crate::model::BlobRef) -> Vec<Value> {
    let mut a = vec![Value::Null; 8];
    a[1] = Value::Blob(image);
    a[4] = Value::U64(0);
    a[7] = Value::U64(0);
    a
}
