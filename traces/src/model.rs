//! Owned, typed trace records: what the writer takes and the reader returns.

use gpuless_analyzer::api::{self, ApiFunction, ApiId, ApiLevel, HandleKind, Variant};

/// A 128-bit content hash (XXH3-128 of the bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Hash128(pub u128);

impl Hash128 {
    /// Hash some bytes.
    pub fn of(bytes: &[u8]) -> Self {
        Hash128(xxhash_rust::xxh3::xxh3_128(bytes))
    }
}

impl std::fmt::Display for Hash128 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// A reference to content by hash and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BlobRef {
    /// Content hash.
    pub hash: Hash128,
    /// Length in bytes.
    pub len: u64,
}

/// What a blob holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum BlobKind {
    /// Anything else.
    Other = 0,
    /// A GPU code image (fatbin wrapper, fatbin, cubin, PTX).
    CodeImage = 1,
    /// A host-to-device payload.
    HostToDevice = 2,
    /// A captured device-to-host output.
    DeviceToHost = 3,
}

impl BlobKind {
    /// Decode; unknown values map to [`BlobKind::Other`].
    pub fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::CodeImage,
            2 => Self::HostToDevice,
            3 => Self::DeviceToHost,
            _ => Self::Other,
        }
    }
}

/// Launch geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Dim3 {
    /// x.
    pub x: u32,
    /// y.
    pub y: u32,
    /// z.
    pub z: u32,
}

/// Kernel parameter bytes with their layout.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KernelParams {
    /// The packed parameter buffer.
    pub bytes: Vec<u8>,
    /// (offset, size) of each parameter in `bytes`.
    pub layout: Vec<(u32, u32)>,
}

/// One `CUlaunchAttribute`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LaunchAttr {
    /// `CUlaunchAttributeID`.
    pub id: u32,
    /// Raw value bytes.
    pub value: Vec<u8>,
}

/// A `CUlaunchConfig`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LaunchConfig {
    /// Grid dimension.
    pub grid: Dim3,
    /// Block dimension.
    pub block: Dim3,
    /// Dynamic shared memory bytes.
    pub shared_mem: u32,
    /// Stream handle.
    pub stream: u64,
    /// Launch attributes.
    pub attrs: Vec<LaunchAttr>,
}

/// A typed argument or result value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Unsigned integer (flags, enums, counts).
    U64(u64),
    /// Signed integer.
    I64(i64),
    /// Floating point (elapsed times).
    F64(f64),
    /// Device address.
    DevPtr(u64),
    /// Host address (identity only).
    HostPtr(u64),
    /// Byte count.
    Size(u64),
    /// Opaque handle.
    Handle(HandleKind, u64),
    /// Launch geometry.
    Dim(Dim3),
    /// String (names, paths).
    Str(String),
    /// Small inline bytes (struct contents, attribute values).
    Bytes(Vec<u8>),
    /// Bytes stored as a blob in this file.
    Blob(BlobRef),
    /// Bytes known only by hash (for example a device-to-host result without `--capture-outputs`).
    Digest(BlobRef),
    /// Kernel parameters.
    KernelParams(KernelParams),
    /// Launch configuration.
    LaunchConfig(LaunchConfig),
    /// A list (arrays of structs, option lists).
    List(Vec<Value>),
    /// Null pointer, absent or not captured.
    Null,
}

impl Value {
    /// Visit this value and nested values.
    pub fn visit(&self, f: &mut impl FnMut(&Value)) {
        f(self);
        if let Value::List(items) = self {
            for v in items {
                v.visit(f);
            }
        }
    }
}

/// Which function a record is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Function {
    /// An entry of the API table.
    Known(ApiId),
    /// A function the table does not model (its arguments are not recorded).
    Other(String),
}

impl Function {
    /// Resolve a base name (and variant) against the API table.
    pub fn resolve(name: &str, variant: Variant) -> Self {
        match api::resolve(name, variant) {
            Some(f) => Function::Known(f.id),
            None => Function::Other(name.to_string()),
        }
    }

    /// The base name.
    pub fn name(&self) -> &str {
        match self {
            Function::Known(id) => api::get(*id).map(|f| f.name).unwrap_or("?"),
            Function::Other(n) => n,
        }
    }

    /// The table entry, if modeled.
    pub fn api(&self) -> Option<&'static ApiFunction> {
        match self {
            Function::Known(id) => api::get(*id),
            Function::Other(_) => None,
        }
    }
}

/// One intercepted call.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRecord {
    /// Sequence number, unique in the trace, increasing in recording order.
    pub seq: u64,
    /// OS thread id of the caller.
    pub thread: u64,
    /// Nanoseconds since the recording started, at call entry.
    pub timestamp_ns: u64,
    /// Nanoseconds spent in the call.
    pub duration_ns: u64,
    /// Library level.
    pub level: ApiLevel,
    /// Sequence number of the intercepted call this one was made from.
    pub parent: Option<u64>,
    /// The function.
    pub function: Function,
    /// Symbol variant used.
    pub variant: Variant,
    /// Return code (`CUresult`, `cudaError_t`, ...).
    pub status: i32,
    /// Every argument as passed, in the API table's (C) order; out-only arguments may be
    /// [`Value::Null`] or the host address passed. Host buffers that are read (H2D payloads)
    /// are [`Value::Blob`]s. Empty for unmodeled calls.
    pub args: Vec<Value>,
    /// Values the callee wrote to the table's `out`/`inout` arguments, in argument order
    /// (device-to-host results as [`Value::Digest`] or [`Value::Blob`]).
    pub results: Vec<Value>,
    /// Further identical calls (same thread, arguments, status and results) this record
    /// stands for: the recorder folds repeated queries. 0 when the record is one call.
    pub repeat: u32,
}

/// The recorder's record of a function handle the program used that no recorded call gave out
/// (taken from a private export table): `args [Handle(Module | Library), Str(name)]`,
/// `results [Handle(Function, h)]`; a replay resolves it as `cuModuleGetFunction` /
/// `cuLibraryGetKernel` would.
pub const FUNCTION_FOUND: &str = "gpulessFunctionFound";

/// Name prefix of the recorder's summary records for calls through the driver's private export
/// tables: `cuGetExportTable:<table UUID>:<slot>`, the count as the only argument.
pub const EXPORT_TABLE_SLOT: &str = "cuGetExportTable:";

impl CallRecord {
    /// A record with no arguments (what unmodeled calls get).
    pub fn new(seq: u64, level: ApiLevel, function: Function) -> Self {
        CallRecord {
            seq,
            thread: 0,
            timestamp_ns: 0,
            duration_ns: 0,
            level,
            parent: None,
            function,
            variant: Variant::BASE,
            status: 0,
            args: Vec::new(),
            results: Vec::new(),
            repeat: 0,
        }
    }

    /// Whether this is one of the recorder's end-of-recording summaries: one record per
    /// function it counted without recording (unmodeled functions, versions newer than its
    /// table), on thread 0, untimed, with the call count as its only argument (`[U64(n)]`;
    /// `[Null]` when the counter overflowed). Its name may resolve to an entry of today's table
    /// (a trace recorded with an older table, or one that counted an unmodeled version under the
    /// modeled base name, `cuCtxGetDevice`): the shape says it is a summary, not a call at a time.
    pub fn is_summary(&self) -> bool {
        match (&self.function, self.args.as_slice()) {
            (Function::Other(_), [Value::U64(_)]) => true,
            (_, [Value::U64(_) | Value::Null]) => {
                self.thread == 0
                    && self.duration_ns == 0
                    && self.parent.is_none()
                    && self.results.is_empty()
                    && self.repeat == 0
            }
            _ => false,
        }
    }

    /// How many calls this record stands for: a summary ([`is_summary`](Self::is_summary)) the
    /// count it carries, whatever function its name resolves to; a folded query `1 + repeat`;
    /// any other record 1.
    pub fn calls_represented(&self) -> u64 {
        match self.args.as_slice() {
            [Value::U64(n)] if self.is_summary() => *n,
            _ => 1 + u64::from(self.repeat),
        }
    }

    /// Every blob this record references (stored blobs only, not digests).
    pub fn blob_refs(&self) -> impl Iterator<Item = BlobRef> + '_ {
        let mut out = Vec::new();
        for v in self.args.iter().chain(self.results.iter()) {
            v.visit(&mut |v| {
                if let Value::Blob(b) = v {
                    out.push(*b);
                }
            });
        }
        out.into_iter()
    }
}

/// One piece of a blob (large blobs are split over several chunks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobPart {
    /// Hash of the whole blob.
    pub hash: Hash128,
    /// What the blob holds.
    pub kind: BlobKind,
    /// Length of the whole blob.
    pub total_len: u64,
    /// Offset of this part in the blob.
    pub offset: u64,
    /// Length of this part.
    pub len: u64,
    /// This part's bytes (empty when the reader was asked to skip blob data).
    pub data: Vec<u8>,
}

/// Recording metadata from the file header.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TraceMeta {
    /// Version of the tool that wrote the trace.
    pub tool_version: String,
    /// `cuDriverGetVersion` (1000*major + 10*minor).
    pub driver_version: i32,
    /// CUDA runtime version the program used (the highest `cudaVersion` its libraries asked
    /// `cuGetProcAddress` for), 0 when unknown.
    pub cuda_version: i32,
    /// GPU name.
    pub gpu_name: String,
    /// Compute capability as 10*major + minor.
    pub sm: u32,
    /// GPU UUID (16 bytes).
    pub uuid: Vec<u8>,
    /// Recorded command line.
    pub command_line: Vec<String>,
    /// Wall-clock start time, nanoseconds since the Unix epoch.
    pub start_time_unix_ns: u64,
    /// Base address of the recorder's device memory arena (0 if none).
    pub arena_base: u64,
    /// Size of the arena.
    pub arena_size: u64,
    /// Process id of the recorded program.
    pub pid: u32,
    /// Host name.
    pub hostname: String,
    /// Free-form key/value pairs.
    pub extra: Vec<(String, String)>,
}

/// One entry of the trailing index: where a chunk is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkEntry {
    /// Chunk kind byte.
    pub kind: u8,
    /// File offset of the chunk header.
    pub offset: u64,
    /// Compressed payload length.
    pub stored_len: u32,
    /// First call sequence number (call chunks).
    pub first_seq: u64,
    /// Number of records or blob parts.
    pub records: u32,
}

/// Where a blob's first part is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobLocation {
    /// Blob hash.
    pub hash: Hash128,
    /// Ordinal of the chunk with its first part.
    pub chunk: u32,
    /// Blob length.
    pub len: u64,
}

/// The trailing index.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TraceIndex {
    /// Every chunk before the index.
    pub chunks: Vec<ChunkEntry>,
    /// Every stored blob.
    pub blobs: Vec<BlobLocation>,
    /// Number of call records.
    pub calls: u64,
    /// Blob submissions dropped because the content was already stored.
    pub dropped_duplicate_blobs: u64,
}
