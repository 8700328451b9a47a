//! Records as people read them: `gpuless dump` (text lines or JSON Lines) and the arguments of
//! the `gpuless analyze --perfetto` timeline.
//!
//! A [`Decoder`] sees every record of a trace in file order ([`Decoder::observe`]): it numbers
//! handles by kind in order of first appearance (`stream#1`, `ctx#1`; `#0` is the null handle,
//! devices keep their ordinal: `dev0`) and learns kernel names from the look-ups
//! (`cuModuleGetFunction`, `cuLibraryGetKernel`, `cuKernelGetFunction`). [`Decoder::describe`]
//! then turns a record into a [`DumpRecord`]: its arguments and results named and shown by the
//! API table's argument kinds, launch geometry gathered, the kernel's name, the status's name.

mod shown;
mod status;

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use gpuless_analyzer::api::{ApiFunction, ArgKind, CScalar, Direction, Group, HandleKind, Return};
use serde::Serialize;

pub use shown::{Fields, Shown};
pub use status::status_name;

use crate::model::{CallRecord, Value};

/// Most handles numbered (further ones are shown by value) and kernel names remembered.
const MAP_MAX: usize = 1 << 22;

/// Short name of a handle kind, as in `stream#2`.
pub fn handle_kind_name(k: HandleKind) -> &'static str {
    match k {
        HandleKind::Device => "dev",
        HandleKind::Context => "ctx",
        HandleKind::Module => "module",
        HandleKind::Function => "func",
        HandleKind::Library => "lib",
        HandleKind::Kernel => "kernel",
        HandleKind::Stream => "stream",
        HandleKind::Event => "event",
        HandleKind::Graph => "graph",
        HandleKind::GraphNode => "node",
        HandleKind::GraphExec => "graphexec",
        HandleKind::TexObject => "tex",
        HandleKind::SurfObject => "surf",
        HandleKind::Array => "array",
        HandleKind::MipmappedArray => "mipmap",
        HandleKind::MemPool => "mempool",
        HandleKind::MemHandle => "memhandle",
        HandleKind::LinkState => "link",
        HandleKind::GreenCtx => "greenctx",
        HandleKind::Other => "handle",
    }
}

/// The numbering space of a handle kind: a `CUkernel` is also passed as a `CUfunction` (cudart
/// launches library kernels so), so functions and kernels share one: `kernel#3` and `func#3`
/// are the same handle.
fn space(k: HandleKind) -> u8 {
    match k {
        HandleKind::Kernel => HandleKind::Function as u8,
        k => k as u8,
    }
}

/// Whether a record is one of the recorder's end-of-recording summaries
/// ([`CallRecord::is_summary`]). Such a record is not a call at a time.
pub fn is_summary(r: &CallRecord) -> bool {
    r.is_summary()
}

/// A recorded integer of C type `t` at the type's width ([`CScalar::widen`]), signed where the
/// type is. Traces recorded before the recorder read `out` values at their C type's width hold
/// the bytes after a 4-byte enum or `int` above it (`mode=5719756450872426498` for 2), and
/// by-value `int`s are recorded as their sign-extended bit pattern in an unsigned word.
fn narrowed(v: &Value, t: Option<CScalar>, kind: ArgKind) -> Cow<'_, Value> {
    let integer = matches!(kind, ArgKind::Scalar | ArgKind::Flags | ArgKind::Enum | ArgKind::Count);
    let x = match v {
        Value::U64(x) => *x,
        Value::I64(x) => *x as u64,
        _ => return Cow::Borrowed(v),
    };
    match t {
        Some(t) if integer && t.width() < 8 && !t.is_float() => {
            let w = t.widen(x);
            Cow::Owned(if t.is_signed() { Value::I64(w as i64) } else { Value::U64(w) })
        }
        _ => Cow::Borrowed(v),
    }
}

/// Kernel names by function or kernel handle, learned from the look-ups that return handles.
#[derive(Debug, Default, Clone)]
pub struct KernelNames {
    names: HashMap<u64, String>,
}

fn handle(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::Handle(_, h) => Some(*h),
        _ => None,
    }
}

impl KernelNames {
    /// Learn from one record (`cuModuleGetFunction`, `cuLibraryGetKernel`: name → handle;
    /// `cuKernelGetFunction`: the kernel's name for the function handle). Failed look-ups
    /// teach nothing.
    pub fn observe(&mut self, r: &CallRecord) {
        let Some(f) = r.function.api() else { return };
        if r.status != 0 || self.names.len() >= MAP_MAX {
            return;
        }
        match f.name {
            "cuModuleGetFunction" | "cuLibraryGetKernel" => {
                let name = r.args.iter().find_map(|v| match v {
                    Value::Str(n) => Some(n.clone()),
                    _ => None,
                });
                if let (Some(h), Some(n)) = (handle(r.results.first()), name) {
                    self.names.insert(h, n);
                }
            }
            "cuKernelGetFunction" => {
                if let (Some(fh), Some(kh)) = (handle(r.results.first()), handle(r.args.get(1))) {
                    if let Some(n) = self.names.get(&kh).cloned() {
                        self.names.insert(fh, n);
                    }
                }
            }
            _ => {}
        }
    }

    /// The name of the kernel behind a function or kernel handle.
    pub fn get(&self, handle: u64) -> Option<&str> {
        self.names.get(&handle).map(String::as_str)
    }

    /// The handle of the kernel a launch record runs (`cuLaunchKernel*`, cooperative launches).
    pub fn launched(r: &CallRecord) -> Option<u64> {
        let f = r.function.api()?;
        if f.group != Group::Launch {
            return None;
        }
        f.args.iter().zip(&r.args).find_map(|(a, v)| match a.kind {
            ArgKind::Handle(HandleKind::Function | HandleKind::Kernel) => handle(Some(v)),
            _ => None,
        })
    }
}

/// One record, decoded for people and scripts.
#[derive(Debug, Clone, Serialize)]
pub struct DumpRecord {
    /// Position of the record in the file (0-based, file order: the recorder writes threads'
    /// records in batches, so this is not always `seq` order).
    pub index: u64,
    /// Sequence number (recording order).
    pub seq: u64,
    /// OS thread id of the caller.
    pub thread: u64,
    /// Call entry, nanoseconds since the recording started.
    pub ts_ns: u64,
    /// Time spent in the call, nanoseconds; `None` for untimed records (runtime registrations
    /// carry their thread's last clock reading and no duration).
    pub dur_ns: Option<u64>,
    /// API level (`driver`, `runtime`, ...).
    pub level: &'static str,
    /// The exported symbol called (`cuMemAlloc_v2`), or the recorded name of an unmodeled
    /// function.
    pub function: String,
    /// Whether the API table models the function (unmodeled records carry no arguments).
    pub modeled: bool,
    /// Whether the record is the recorder's end-of-recording count of calls it did not record
    /// one by one ([`is_summary`]): its only argument is `calls`, it has no status.
    pub summary: bool,
    /// `seq` of the intercepted call this one was made from.
    pub parent: Option<u64>,
    /// Further identical calls this record stands for (folded queries).
    pub repeat: u32,
    /// Return code.
    pub status: i32,
    /// Its name (`CUDA_SUCCESS`, `CUDA_ERROR_OUT_OF_MEMORY`, ...); `None` for functions that
    /// return no status.
    pub status_name: Option<String>,
    /// For launches: the kernel's name, where a look-up named its handle.
    pub kernel: Option<String>,
    /// Input (`in`, `inout`) arguments by name; a launch's grid and block components are
    /// gathered into `grid` and `block`.
    pub args: Fields,
    /// What the callee wrote (`out`, `inout` arguments by name; a returned value as `return`).
    pub results: Fields,
}

impl fmt::Display for DumpRecord {
    /// `INDEX SEQ THREAD TIME_MS DUR_US CALL(ARGS) -> RESULTS = STATUS`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.ts_ns as f64 / 1e6;
        write!(f, "{:>7} {:>7} {:>8} {:>12.6} ", self.index, self.seq, self.thread, ms)?;
        match self.dur_ns {
            Some(d) => write!(f, "{:>10.3}", d as f64 / 1e3)?,
            None => write!(f, "{:>10}", "-")?,
        }
        write!(f, "  {}({})", self.function, self.args)?;
        if !self.results.0.is_empty() {
            write!(f, " -> {}", self.results)?;
        }
        if let Some(s) = &self.status_name {
            write!(f, " = {s}")?;
        }
        if let Some(k) = &self.kernel {
            write!(f, "  kernel {k}")?;
        }
        if self.repeat > 0 {
            write!(f, "  x{}", u64::from(self.repeat) + 1)?;
        }
        if let Some(p) = self.parent {
            write!(f, "  (in seq {p})")?;
        }
        Ok(())
    }
}

/// The header line matching [`DumpRecord`]'s text form.
pub const TEXT_HEADER: &str = "  index     seq   thread      time_ms     dur_us  call";

/// Numbers handles and learns kernel names over a trace; describes records.
#[derive(Debug, Default)]
pub struct Decoder {
    handles: HashMap<(u8, u64), u64>,
    next: HashMap<u8, u64>,
    kernels: KernelNames,
}

impl Decoder {
    /// A decoder that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Learn from a record (handle numbers, kernel names). Call it for every record in file
    /// order, also for records that are not described, so that numbers do not depend on
    /// filters.
    pub fn observe(&mut self, r: &CallRecord) {
        self.kernels.observe(r);
        for v in r.args.iter().chain(&r.results) {
            v.visit(&mut |v| match v {
                Value::Handle(k, h) => self.number(*k, *h),
                Value::LaunchConfig(c) => self.number(HandleKind::Stream, c.stream),
                _ => {}
            });
        }
    }

    fn number(&mut self, k: HandleKind, h: u64) {
        let special = h == 0 || (k == HandleKind::Stream && h <= 2);
        if k == HandleKind::Device || special || self.handles.len() >= MAP_MAX {
            return;
        }
        if let std::collections::hash_map::Entry::Vacant(e) = self.handles.entry((space(k), h)) {
            let n = self.next.entry(space(k)).or_insert(0);
            *n += 1;
            e.insert(*n);
        }
    }

    /// The kernel names learned so far.
    pub fn kernels(&self) -> &KernelNames {
        &self.kernels
    }

    /// A handle as a token: `KIND#N` by first appearance, `KIND#0` for null, `dev0` for a
    /// device ordinal, `stream#legacy` / `stream#per-thread` for the special streams, the value
    /// in hex where the decoder stopped numbering.
    pub fn handle_token(&self, k: HandleKind, h: u64) -> String {
        let name = handle_kind_name(k);
        match (k, h) {
            (HandleKind::Device, _) => format!("{name}{h}"),
            (_, 0) => format!("{name}#0"),
            (HandleKind::Stream, 1) => "stream#legacy".into(),
            (HandleKind::Stream, 2) => "stream#per-thread".into(),
            _ => match self.handles.get(&(space(k), h)) {
                Some(n) => format!("{name}#{n}"),
                None => format!("{name}@{h:#x}"),
            },
        }
    }

    fn show(&self, v: &Value, kind: Option<ArgKind>) -> Shown {
        match v {
            Value::Null => Shown::Null,
            Value::U64(x) if matches!(kind, Some(ArgKind::Flags)) => Shown::Token(format!("{x:#x}")),
            Value::U64(x) => match kind {
                Some(ArgKind::Handle(k)) => Shown::Token(self.handle_token(k, *x)),
                _ => Shown::Uint(*x),
            },
            Value::Size(x) => Shown::Uint(*x),
            Value::I64(x) => Shown::Int(*x),
            Value::F64(x) => Shown::Float(*x),
            Value::DevPtr(x) | Value::HostPtr(x) => Shown::Token(format!("{x:#x}")),
            Value::Handle(k, h) => {
                // A handle stored without its kind gets the table's.
                let k = match (k, kind) {
                    (HandleKind::Other, Some(ArgKind::Handle(t))) => t,
                    _ => *k,
                };
                Shown::Token(self.handle_token(k, *h))
            }
            Value::Dim(d) => Shown::Dim([d.x, d.y, d.z]),
            Value::Str(s) => Shown::Str(s.clone()),
            Value::Bytes(b) => {
                let hex: String = b.iter().take(shown::BYTES_MAX).map(|x| format!("{x:02x}")).collect();
                Shown::Bytes { hex, bytes: b.len() as u64 }
            }
            Value::Blob(b) => Shown::Blob { hash: b.hash.to_string(), bytes: b.len },
            Value::Digest(b) => Shown::Digest { hash: b.hash.to_string(), bytes: b.len },
            Value::KernelParams(p) => Shown::Params { params: p.layout.len(), bytes: p.bytes.len() },
            Value::LaunchConfig(c) => Shown::Launch {
                grid: [c.grid.x, c.grid.y, c.grid.z],
                block: [c.block.x, c.block.y, c.block.z],
                shared_mem: c.shared_mem,
                stream: self.handle_token(HandleKind::Stream, c.stream),
                attrs: c.attrs.len(),
            },
            Value::List(items) => Shown::List {
                items: items.iter().take(shown::LIST_MAX).map(|v| self.show(v, None)).collect(),
                more: items.len().saturating_sub(shown::LIST_MAX),
            },
        }
    }

    fn args(&self, f: &ApiFunction, r: &CallRecord) -> Fields {
        let mut out = Vec::with_capacity(r.args.len());
        let (mut grid, mut block) = ([1u32; 3], [1u32; 3]);
        let (mut gi, mut bi) = (0usize, 0usize);
        for (a, v) in f.args.iter().zip(&r.args) {
            let comp = match v {
                Value::U64(x) | Value::Size(x) => u32::try_from(*x).unwrap_or(u32::MAX),
                _ => 0,
            };
            match a.kind {
                ArgKind::Grid => {
                    if let Some(c) = grid.get_mut(gi) {
                        *c = comp;
                    }
                    gi += 1;
                }
                ArgKind::Block => {
                    if let Some(c) = block.get_mut(bi) {
                        *c = comp;
                    }
                    bi += 1;
                }
                _ => {}
            }
        }
        let (mut grid_done, mut block_done) = (false, false);
        for (i, v) in r.args.iter().enumerate() {
            let Some(a) = f.args.get(i) else {
                out.push((format!("arg{i}"), self.show(v, None)));
                continue;
            };
            match a.kind {
                ArgKind::Grid if !grid_done => {
                    grid_done = true;
                    out.push(("grid".into(), Shown::Dim(grid)));
                }
                ArgKind::Block if !block_done => {
                    block_done = true;
                    out.push(("block".into(), Shown::Dim(block)));
                }
                ArgKind::Grid | ArgKind::Block => {}
                _ if a.dir == Direction::Out => {}
                k => {
                    // A by-value argument at its C type's width (an `inout` one's recorded value
                    // was its address before the recorder read what it points at).
                    let t = if a.dir == Direction::In { a.value_type() } else { None };
                    let v = narrowed(v, t, k);
                    out.push((a.name.to_string(), self.show(&v, Some(k))))
                }
            }
        }
        Fields(out)
    }

    fn results(&self, f: &ApiFunction, r: &CallRecord) -> Fields {
        let mut names: Vec<(&str, Option<ArgKind>, Option<CScalar>)> =
            f.out_args().map(|(_, a)| (a.name, Some(a.kind), a.pointee_type())).collect();
        if let Return::Value { kind, c_type } = f.ret {
            names.push(("return", Some(kind), CScalar::of(c_type, kind)));
        }
        let out = r
            .results
            .iter()
            .enumerate()
            .map(|(j, v)| match names.get(j) {
                Some((n, Some(k), t)) => (n.to_string(), self.show(&narrowed(v, *t, *k), Some(*k))),
                Some((n, None, _)) => (n.to_string(), self.show(v, None)),
                None => (format!("result{j}"), self.show(v, None)),
            })
            .collect();
        Fields(out)
    }

    /// Describe a record (after [`observe`](Self::observe) has seen it and everything before it).
    pub fn describe(&self, index: u64, r: &CallRecord) -> DumpRecord {
        let api = r.function.api();
        let (function, args, results, status_name) = match api {
            _ if is_summary(r) => {
                let calls = match r.args.first() {
                    Some(Value::U64(n)) => Shown::Uint(*n),
                    _ => Shown::Null,
                };
                (r.function.name().to_string(), Fields(vec![("calls".into(), calls)]), Fields::default(), None)
            }
            Some(f) => {
                let symbol = f.symbols.iter().find(|s| s.variant == r.variant).map(|s| s.name.to_string());
                let symbol = symbol.unwrap_or_else(|| match r.variant.version {
                    v if v > 1 => format!("{}_v{v}", f.name),
                    _ => f.name.to_string(),
                });
                let status = (f.ret == Return::Status).then(|| status_name(r.level, r.status));
                (symbol, self.args(f, r), self.results(f, r), status)
            }
            None => {
                let args =
                    Fields(r.args.iter().enumerate().map(|(i, v)| (format!("arg{i}"), self.show(v, None))).collect());
                let results = Fields(
                    r.results.iter().enumerate().map(|(j, v)| (format!("result{j}"), self.show(v, None))).collect(),
                );
                (r.function.name().to_string(), args, results, Some(status_name(r.level, r.status)))
            }
        };
        let untimed = api.is_some_and(|f| f.group == Group::Registration) && r.duration_ns == 0;
        DumpRecord {
            index,
            seq: r.seq,
            thread: r.thread,
            ts_ns: r.timestamp_ns,
            dur_ns: (!untimed).then_some(r.duration_ns),
            level: r.level.name(),
            function,
            modeled: api.is_some(),
            summary: is_summary(r),
            parent: r.parent,
            repeat: r.repeat,
            status: r.status,
            status_name,
            kernel: KernelNames::launched(r).and_then(|h| self.kernels.get(h)).map(str::to_string),
            args,
            results,
        }
    }
}

#[cfg(test)]
mod tests;
