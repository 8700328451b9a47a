//! Types of the API table: levels, groups, sync classes, argument kinds.

use serde::Serialize;

/// Which library a call belongs to. Stored in traces as its `u8` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[repr(u8)]
pub enum ApiLevel {
    /// The CUDA driver API (`cu*`, libcuda).
    Driver = 0,
    /// The CUDA runtime API (`cuda*`, libcudart), including registration (`__cuda*`).
    Runtime = 1,
    /// cuBLAS.
    Cublas = 2,
    /// cuBLASLt.
    CublasLt = 3,
    /// cuDNN.
    Cudnn = 4,
    /// NVRTC.
    Nvrtc = 5,
    /// NVML.
    Nvml = 6,
    /// Anything else.
    Other = 255,
}

impl ApiLevel {
    /// All levels, for iteration.
    pub const ALL: [ApiLevel; 8] =
        [Self::Driver, Self::Runtime, Self::Cublas, Self::CublasLt, Self::Cudnn, Self::Nvrtc, Self::Nvml, Self::Other];

    /// Decode a stored value; unknown values (from a newer writer) map to [`ApiLevel::Other`].
    pub fn from_u8(v: u8) -> Self {
        Self::ALL.iter().copied().find(|l| *l as u8 == v).unwrap_or(Self::Other)
    }

    /// Lower-case name, as used in `.api` files and reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Driver => "driver",
            Self::Runtime => "runtime",
            Self::Cublas => "cublas",
            Self::CublasLt => "cublaslt",
            Self::Cudnn => "cudnn",
            Self::Nvrtc => "nvrtc",
            Self::Nvml => "nvml",
            Self::Other => "other",
        }
    }
}

/// What a function is about; used for statistics (launches, allocations, copies...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Group {
    /// Initialization, versions, error strings, entry points.
    Init,
    /// Device queries and primary contexts.
    Device,
    /// Contexts.
    Context,
    /// Modules and the JIT linker.
    Module,
    /// Context-independent libraries and kernels.
    Library,
    /// Function attributes and occupancy.
    Function,
    /// Device, host and array memory.
    Memory,
    /// Virtual memory management.
    Vmm,
    /// Stream-ordered allocation and memory pools.
    Pool,
    /// Copies.
    Copy,
    /// Memsets.
    Set,
    /// Kernel launches.
    Launch,
    /// Streams and stream capture.
    Stream,
    /// Events.
    Event,
    /// CUDA graphs.
    Graph,
    /// Texture and surface objects.
    Texture,
    /// Green contexts and device resources.
    Green,
    /// Runtime registration of fat binaries, kernels and variables.
    Registration,
    /// Functions the table knows only from cuda.h (refused ones: legacy, interop, ...).
    Other,
}

/// What reaches the host when a call returns: the input of the synchronization analysis.
///
/// Policies (`analyzer::sync`) decide which classes make a remote client wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum SyncClass {
    /// Answered by the client library itself (error strings, entry points, export tables).
    Local,
    /// Enqueues work or changes state; nothing reaches the host but the status.
    Async,
    /// Sends host bytes to the device (sync or async); nothing comes back.
    HostToDevice,
    /// A blocking copy whose direction is only known at run time (`cuMemcpy`, 2D/3D, peer).
    CopyAnyDirection,
    /// A stream-ordered copy whose direction is only known at run time.
    CopyAnyDirectionAsync,
    /// A blocking copy into host memory.
    DeviceToHost,
    /// A stream-ordered copy into host memory; the host may read it at the next synchronization.
    DeviceToHostAsync,
    /// Returns a device address chosen by the driver (allocation, VMM reservation).
    AllocatesDevice,
    /// Frees device memory or address space.
    FreesDevice,
    /// Allocates, frees, registers or unregisters host memory (pinned memory).
    HostMemory,
    /// Returns a new opaque handle (streams, events, modules, functions, graphs...).
    CreatesHandle,
    /// Destroys a handle; nothing comes back.
    DestroysHandle,
    /// Returns a device address the driver chose at module load (globals, address ranges).
    AddressLookup,
    /// Returns static properties of the device, driver or a function.
    DeviceQuery,
    /// Returns state that changes as the GPU works (stream/event queries, memory info).
    StateQuery,
    /// Waits for a stream.
    StreamSync,
    /// Waits for an event.
    EventSync,
    /// Waits for the whole context.
    CtxSync,
}

impl SyncClass {
    /// All classes, for iteration and reports.
    pub const ALL: [SyncClass; 18] = [
        Self::Local,
        Self::Async,
        Self::HostToDevice,
        Self::CopyAnyDirection,
        Self::CopyAnyDirectionAsync,
        Self::DeviceToHost,
        Self::DeviceToHostAsync,
        Self::AllocatesDevice,
        Self::FreesDevice,
        Self::HostMemory,
        Self::CreatesHandle,
        Self::DestroysHandle,
        Self::AddressLookup,
        Self::DeviceQuery,
        Self::StateQuery,
        Self::StreamSync,
        Self::EventSync,
        Self::CtxSync,
    ];
}

/// Direction of an argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Direction {
    /// Read by the callee.
    In,
    /// Written by the callee.
    Out,
    /// Read and written.
    InOut,
}

/// What kind of object a handle argument designates. Stored in traces as its `u8` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[repr(u8)]
pub enum HandleKind {
    /// `CUdevice` (an ordinal).
    Device = 0,
    /// `CUcontext`.
    Context = 1,
    /// `CUmodule`.
    Module = 2,
    /// `CUfunction`.
    Function = 3,
    /// `CUlibrary`.
    Library = 4,
    /// `CUkernel`.
    Kernel = 5,
    /// `CUstream`.
    Stream = 6,
    /// `CUevent`.
    Event = 7,
    /// `CUgraph`.
    Graph = 8,
    /// `CUgraphNode`.
    GraphNode = 9,
    /// `CUgraphExec`.
    GraphExec = 10,
    /// `CUtexObject`.
    TexObject = 11,
    /// `CUsurfObject`.
    SurfObject = 12,
    /// `CUarray`.
    Array = 13,
    /// `CUmipmappedArray`.
    MipmappedArray = 14,
    /// `CUmemoryPool`.
    MemPool = 15,
    /// `CUmemGenericAllocationHandle`.
    MemHandle = 16,
    /// `CUlinkState`.
    LinkState = 17,
    /// `CUgreenCtx`.
    GreenCtx = 18,
    /// Library handles of other levels (cuBLAS, cuDNN) and anything else.
    Other = 255,
}

impl HandleKind {
    /// All kinds.
    pub const ALL: [HandleKind; 20] = [
        Self::Device,
        Self::Context,
        Self::Module,
        Self::Function,
        Self::Library,
        Self::Kernel,
        Self::Stream,
        Self::Event,
        Self::Graph,
        Self::GraphNode,
        Self::GraphExec,
        Self::TexObject,
        Self::SurfObject,
        Self::Array,
        Self::MipmappedArray,
        Self::MemPool,
        Self::MemHandle,
        Self::LinkState,
        Self::GreenCtx,
        Self::Other,
    ];

    /// Decode a stored value; unknown values map to [`HandleKind::Other`].
    pub fn from_u8(v: u8) -> Self {
        Self::ALL.iter().copied().find(|k| *k as u8 == v).unwrap_or(Self::Other)
    }
}

/// How the byte length of a host buffer is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum BufLen {
    /// Given by the argument at this index.
    Arg(u8),
    /// A fixed number of bytes.
    Fixed(u32),
}

/// What an argument holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum ArgKind {
    /// A plain integer.
    Scalar,
    /// A flags word.
    Flags,
    /// An enumerator.
    Enum,
    /// An element count.
    Count,
    /// A byte count.
    Size,
    /// A device address (`CUdeviceptr`).
    DevPtr,
    /// A host address, recorded for identity only.
    HostPtr,
    /// Host memory whose bytes are transferred (H2D payload or D2H destination).
    HostBuf(BufLen),
    /// A unified address (`CUdeviceptr` of `cuMemcpy`): device memory is recorded as its
    /// address (a [`DevPtr`](Self::DevPtr)); host memory as a [`HostBuf`](Self::HostBuf) of the
    /// length given — a source's bytes, a destination's result (the destination is `inout`).
    AnyBuf(BufLen),
    /// An opaque handle.
    Handle(HandleKind),
    /// A NUL-terminated string.
    CStr,
    /// A GPU code image (fatbin wrapper, fatbin, cubin or PTX); length from its content.
    Image,
    /// A NUL-terminated path of a file holding a GPU code image: the file's bytes are recorded
    /// (the file may be gone or different where the trace is replayed).
    ImageFile,
    /// A pointer to one C struct of the named type.
    Struct(&'static str),
    /// A pointer to an array of C structs; the count is the argument at `count_arg`.
    Structs {
        /// Element C type.
        ty: &'static str,
        /// Index of the argument holding the element count.
        count_arg: u8,
    },
    /// `void** kernelParams`.
    KernelParams,
    /// `void** extra` (the launch config buffer).
    Extra,
    /// A host function pointer (callbacks).
    FnPtr,
    /// Opaque user data passed to a callback.
    UserData,
    /// One component of the grid dimension.
    Grid,
    /// One component of the block dimension.
    Block,
}

/// One argument of a function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ApiArg {
    /// Name as in `cuda.h`.
    pub name: &'static str,
    /// C type as in `cuda.h`.
    pub c_type: &'static str,
    /// Direction.
    pub dir: Direction,
    /// What it holds.
    pub kind: ArgKind,
}

/// A symbol variant: the `_vN` version and the per-thread default stream flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Default)]
pub struct Variant {
    /// 1 for the bare symbol, N for `_vN`.
    pub version: u8,
    /// `_ptsz` / `_ptds`: the per-thread default stream variant.
    pub per_thread: bool,
}

impl Variant {
    /// The bare symbol.
    pub const BASE: Variant = Variant { version: 1, per_thread: false };
}

/// What a function returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Return {
    /// A status code (`CUresult`, `cudaError_t`, ...): a trace record's `status`.
    Status,
    /// Nothing (`void`); records say status 0.
    Void,
    /// A value (`-> KIND: C_TYPE` in the table), recorded as the last of a record's results,
    /// after the `out` arguments'; records say status 0.
    Value {
        /// What it holds.
        kind: ArgKind,
        /// C type.
        c_type: &'static str,
    },
}

/// An exported symbol of a function entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Symbol {
    /// Full symbol name, for example `cuMemcpyHtoD_v2_ptds`.
    pub name: &'static str,
    /// Its variant.
    pub variant: Variant,
    /// The CUDA version (1000 × major + 10 × minor) from which `cuGetProcAddress` hands out
    /// this symbol for its base name (`cudaTypedefs.h`); 0 for symbols outside cuda.h.
    pub since: u32,
}

/// Index of an entry in the API table. Not stable across table versions: traces store names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ApiId(pub u16);

/// One signature of one function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ApiFunction {
    /// This entry's index.
    pub id: ApiId,
    /// Base name, for example `cuMemcpyHtoD`.
    pub name: &'static str,
    /// Library level.
    pub level: ApiLevel,
    /// What it is about.
    pub group: Group,
    /// What reaches the host.
    pub sync: SyncClass,
    /// A query whose answer, for the same arguments, stays the same until a call that
    /// [may change answers](Self::may_change_answers) (`stable` in the table): the recorder
    /// answers repeats itself.
    pub stable: bool,
    /// A device query only the GPU can answer (`gpu` in the table: cluster occupancy depends
    /// on how the GPU groups its SMs): a client waits for the server's answer, as for a
    /// [`SyncClass::StateQuery`].
    pub gpu_answers: bool,
    /// A call stream capture turns into a node of the graph, run again at every launch of it
    /// (`graph` in the table: kernel launches, stream-ordered copies and sets). The server's
    /// cached-trace execution captures repeated runs of such calls on one stream into graphs
    /// (`gpuless_traces::protocol::piece`); every other call ends a run.
    pub capturable: bool,
    /// The driver checks the call's arguments, or synchronizes, when it is made (`checked` in
    /// the table: code loads and unloads, a context's reset and limits): a client of `gpuless
    /// serve` waits for the server's status of the call instead of queueing it.
    pub checked: bool,
    /// Exported symbols with this signature.
    pub symbols: &'static [Symbol],
    /// Arguments in C order.
    pub args: &'static [ApiArg],
    /// What it returns.
    pub ret: Return,
    /// What becomes of a call where no GPU is attached: answered by the client, executed by
    /// the server, or refused (`=...` in the table).
    pub disposition: Disposition,
    /// A line of `driver.api` describes it; `false`: known only from cuda.h's listing (its
    /// pointer arguments are recorded as addresses, nothing behind them). Code that acts on a
    /// function by name (`f.name == "cuMemAlloc"`) must not act on an entry that is not
    /// modeled: the legacy 32-bit `cuMemAlloc` shares the name.
    pub modeled: bool,
}

/// What becomes of a call of a function in client mode and in replay: exactly one of three.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Disposition {
    /// The client answers it itself, by this rule; nothing reaches the server (a query only
    /// the GPU can answer in some cases waits for the server's answer, as the rule says).
    /// Replay has nothing to re-execute for it unless it changed host-visible memory.
    Local(LocalRule),
    /// The server executes it in call order (a query: the server answers it); replay executes
    /// it. An executor without a handler for it ends the session naming the record.
    Server,
    /// Not supported where no GPU is attached: the client returns `CUDA_ERROR_NOT_SUPPORTED`
    /// and says so once on stderr, naming the function and the reason. Recording passes it to
    /// the driver and records it; replay ends at its record unless it is a query.
    Refused(Refusal),
}

/// How the client answers a [`Disposition::Local`] function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum LocalRule {
    /// Error names and strings of every `CUresult` (the driver's own, `error_names.rs`).
    Errors,
    /// Entry points and the driver's private export tables.
    Entry,
    /// The session's device description (attributes, name, UUID, PCI, memory, versions).
    Device,
    /// The context stack, the primary context and contexts made with `cuCtxCreate`: a session
    /// has one context on the server; these are the program's view of it.
    Context,
    /// Facts of the kernels the program loaded, from their cubins (attributes, parameters,
    /// occupancy); what a cubin cannot say is asked of the server.
    Kernel,
    /// Pinned host memory the client allocates or registers itself.
    Host,
    /// Addresses the client chooses or knows: the arena, module globals, pointer attributes,
    /// which devices reach a pool's arena memory (all of the session's that can: the executor
    /// maps every device's slice for them).
    Address,
    /// Stream capture as the client tracks it (status, id, the thread's capture mode).
    Capture,
    /// Facts the client keeps about handles it made (array descriptors).
    Handle,
    /// Runtime registration (`__cudaRegister*`): the program's libcudart, on the client.
    Runtime,
    /// The JIT linker (`cuLink*`), a host-side tool that changes no device state: the client
    /// makes up a link's handle and keeps its options; the server's executor keeps a link state
    /// of its driver per handle, and each add (`cuLinkAddFile` reads the file where the program
    /// runs) and the completion wait for the driver's answer ([`super::jit`]: the options'
    /// kinds; `gpuless_traces::protocol::link`: the requests and their answers, the driver's
    /// status, the linked image and what the driver wrote into the options).
    Link,
    /// Physical memory shared within the process (`cuMemExportToShareableHandle` /
    /// `cuMemImportFromShareableHandle`, as NCCL shares buffers between the devices of one
    /// process): the client's descriptor stands for the handle, and an import sends the
    /// executor a record of its own (`gpulessMemImport`) that takes a new reference of the same
    /// memory there.
    Share,
}

/// Why a [`Disposition::Refused`] function is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Refusal {
    /// A 32-bit entry point from before CUDA 3.2.
    Legacy32,
    /// Texture and surface references, `cuParamSet*`, `cuLaunch[Grid]`: removed APIs.
    TexRef,
    /// Graphics interoperability (OpenGL, Vulkan, EGL resources).
    Graphics,
    /// External memory and semaphores (Vulkan, DirectX, NvSci handles).
    External,
    /// Inter-process handles.
    Ipc,
    /// Multicast objects (NVLink, several GPUs).
    Multicast,
    /// Process checkpoints.
    Checkpoint,
    /// Driver logs and GPU core dumps.
    Logs,
    /// Managed memory.
    Managed,
    /// The program's own virtual memory management and sparse arrays.
    Vmm,
    /// Memory pools other than the device's default pool.
    Pool,
    /// Several devices (peer access, multi-device launches).
    MultiGpu,
    /// Green contexts and device resources.
    Green,
    /// Graph node kinds and graph operations beyond kernel, copy, set and empty nodes.
    GraphNode,
    /// Not implemented in client mode yet.
    NotYet,
}

impl Refusal {
    /// The reason, as said on stderr.
    pub fn why(self) -> &'static str {
        match self {
            Self::Legacy32 => "a 32-bit entry point from before CUDA 3.2; cuda.h 3.2 and later programs call its _v2",
            Self::TexRef => "texture and surface references were removed in CUDA 12; use texture and surface objects",
            Self::Graphics => "graphics interoperability needs the graphics API's resources on the GPU's machine",
            Self::External => "external memory and semaphores are handles of other APIs on the client's machine",
            Self::Ipc => "inter-process handles name another process's memory; sessions share none",
            Self::Multicast => "multicast objects need several GPUs of one session",
            Self::Checkpoint => "the session's device state is on the server, not in this process",
            Self::Logs => "driver logs and core dumps are the server's",
            Self::Managed => "this managed-memory function is not served yet",
            Self::Vmm => "the program's own virtual memory management is not served yet",
            Self::Pool => "only the device's default memory pool is served",
            Self::MultiGpu => "a session has one device",
            Self::Green => "green contexts are not served to clients",
            Self::GraphNode => "this graph node kind or graph operation is not served yet",
            Self::NotYet => "not implemented in client mode yet",
        }
    }
}

impl ApiFunction {
    /// Whether a client of `gpuless serve` needs the server's answer to this call (a state
    /// query, or a query only the GPU can answer): it waits for it.
    pub fn server_answers(&self) -> bool {
        self.sync == SyncClass::StateQuery || self.gpu_answers
    }

    /// Whether a client of `gpuless serve` sends a call of this function to the server: a
    /// driver call that is not answered on the client (local, device, host-memory calls are,
    /// unless the server must answer them). A stable query answered before is not sent again
    /// (the client remembers answers).
    pub fn sent_by_client(&self) -> bool {
        self.level == ApiLevel::Driver && self.disposition == Disposition::Server
    }

    /// Whether the function only reads state (a query of any kind, an address look-up, a
    /// name): a call of it changes nothing that replay would have to re-create.
    pub fn is_query(&self) -> bool {
        matches!(
            self.sync,
            SyncClass::Local | SyncClass::DeviceQuery | SyncClass::StateQuery | SyncClass::AddressLookup
        )
    }

    /// Indices of the output (`out` and `inout`) arguments, in order; results in a trace record
    /// follow this order.
    pub fn out_args(&self) -> impl Iterator<Item = (usize, &'static ApiArg)> {
        self.args.iter().enumerate().filter(|(_, a)| a.dir != Direction::In)
    }

    /// Whether a call of this function may change what a [`stable`](Self::stable) query
    /// answers: everything but queries outside the context group (which changes the current
    /// context) and launches, copies, sets, events, streams, graphs, texture objects, runtime
    /// registration and synchronization, which change device memory and work, not the answers.
    pub fn may_change_answers(&self) -> bool {
        let query = matches!(
            self.sync,
            SyncClass::DeviceQuery | SyncClass::StateQuery | SyncClass::AddressLookup | SyncClass::Local
        );
        let work = matches!(
            self.group,
            Group::Launch
                | Group::Copy
                | Group::Set
                | Group::Event
                | Group::Stream
                | Group::Graph
                | Group::Texture
                | Group::Registration
        );
        let sync = matches!(self.sync, SyncClass::CtxSync | SyncClass::StreamSync | SyncClass::EventSync);
        !(self.stable || query || work || sync)
    }

    /// The symbol name of one of this entry's variants.
    pub fn symbol(&self, variant: Variant) -> Option<&'static str> {
        self.symbols.iter().find(|s| s.variant == variant).map(|s| s.name)
    }
}
