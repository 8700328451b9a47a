//! Turning raw argument words into trace values, driven by the API table's argument kinds.
//! Inputs are read before the real call, outputs after it.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use cudarc::driver::sys;
use gpuless_analyzer::api::structs::{self, Dims, KernelNode};
use gpuless_analyzer::api::{ApiArg, ApiFunction, ArgKind, BufLen, CScalar, Direction, HandleKind, SyncClass};
use gpuless_traces::{BlobKind, Dim3, KernelParams, LaunchAttr, LaunchConfig, Value};

use crate::driver::libcuda_symbol;
use crate::hooks::struct_size;
use crate::lane::{Lane, LAYOUTS};
pub(crate) use crate::lane::{Layout, Packing};
use crate::{sink, state};

/// Longest C string read from an argument.
const MAX_CSTR: usize = 4096;
/// Most elements read from a struct array or option list.
const MAX_ELEMS: usize = 4096;

/// How an argument's value is read, from its C type as the API table declares it
/// ([`ApiArg::value_type`], [`ApiArg::pointee_type`]); computed once per argument so the hot
/// path does no string work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Prim {
    /// Passed by value: the word is the value, of this type when the table says it (the
    /// hook took it at that type, `build.rs`).
    Value(Option<CScalar>),
    /// A pointer: to one value of this type when the table says so (what an `out` or `inout`
    /// argument's callee writes), read at the type's width.
    Ref(Option<CScalar>),
}

pub(crate) fn prim(a: &ApiArg) -> Prim {
    if a.is_pointer() {
        Prim::Ref(a.pointee_type())
    } else {
        Prim::Value(a.value_type())
    }
}

/// Reads the value of type `t` at `p`: its [`CScalar::width`] bytes, widened to a word as
/// [`CScalar::widen`] says (the bytes after it are not the value's).
///
/// # Safety
/// `p` points at a readable value of type `t`.
#[inline]
pub(crate) unsafe fn read_scalar(t: CScalar, p: u64) -> u64 {
    // SAFETY: the caller's contract; unaligned reads of plain integers.
    let raw = unsafe {
        match t.width() {
            1 => u64::from(std::ptr::read_unaligned(p as *const u8)),
            2 => u64::from(std::ptr::read_unaligned(p as *const u16)),
            4 => u64::from(std::ptr::read_unaligned(p as *const u32)),
            _ => std::ptr::read_unaligned(p as *const u64),
        }
    };
    t.widen(raw)
}

/// Writes the value `v` of type `t` at `p`: its [`CScalar::width`] bytes, nothing after them.
///
/// # Safety
/// `p` points at a writable value of type `t`.
#[inline]
pub(crate) unsafe fn write_scalar(t: CScalar, p: u64, v: u64) {
    // SAFETY: the caller's contract; unaligned writes of plain integers.
    unsafe {
        match t.width() {
            1 => std::ptr::write_unaligned(p as *mut u8, v as u8),
            2 => std::ptr::write_unaligned(p as *mut u16, v as u16),
            4 => std::ptr::write_unaligned(p as *mut u32, v as u32),
            _ => std::ptr::write_unaligned(p as *mut u64, v),
        }
    }
}

/// The argument plans of a function, indexed like its arguments.
pub(crate) fn plans(f: &ApiFunction) -> &'static [Prim] {
    static PLANS: std::sync::OnceLock<Vec<Vec<Prim>>> = std::sync::OnceLock::new();
    let all = PLANS
        .get_or_init(|| gpuless_analyzer::api::functions().iter().map(|f| f.args.iter().map(prim).collect()).collect());
    all.get(usize::from(f.id.0)).map(Vec::as_slice).unwrap_or(&[])
}

fn prim_of(f: &ApiFunction, i: usize) -> Prim {
    plans(f).get(i).copied().unwrap_or(Prim::Ref(None))
}

/// The values of every argument before the call (out-only pointers as their address).
pub unsafe fn inputs(f: &ApiFunction, raw: &[u64]) -> Vec<Value> {
    let plans = plans(f);
    f.args
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let v = raw.get(i).copied().unwrap_or(0);
            if a.dir == Direction::Out {
                return if v == 0 { Value::Null } else { Value::HostPtr(v) };
            }
            // SAFETY: the caller passed these arguments to the driver, which reads them too.
            unsafe { input(f, a, plans.get(i).copied().unwrap_or(Prim::Value(None)), v, raw) }
        })
        .collect()
}

/// The values the callee wrote to `out`/`inout` arguments (only on success).
pub unsafe fn outputs(f: &ApiFunction, raw: &[u64], status: u32) -> Vec<Value> {
    let plans = plans(f);
    let mut out: Vec<Value> = f
        .out_args()
        .map(|(i, a)| {
            let v = raw.get(i).copied().unwrap_or(0);
            if status != 0 || v == 0 {
                return Value::Null;
            }
            if deferred(f) && matches!(a.kind, ArgKind::HostBuf(_)) {
                // An async copy's bytes reach the host only later: `pending` hashes them then.
                return Value::Null;
            }
            // SAFETY: the driver succeeded, so it wrote a value of the argument's type there.
            unsafe { output(f, a, plans.get(i).copied().unwrap_or(Prim::Ref(None)), v, raw) }
        })
        .collect();
    if status == 0 {
        // SAFETY: the program's node parameters, which the driver read and wrote.
        if let Some(bodies) = unsafe { conditional_bodies(f, raw) } {
            out.push(bodies);
        }
    }
    out
}

/// The body graphs the driver created for a conditional node (`cuGraphAddNode` of a
/// `CU_GRAPH_NODE_TYPE_CONDITIONAL`: it writes them to `phGraph_out`), recorded after the out
/// arguments: `List(Handle(Graph))`. `None` for any other call.
///
/// # Safety
/// `raw` are the program's arguments to `f`, after the call succeeded.
pub(crate) unsafe fn conditional_bodies(f: &ApiFunction, raw: &[u64]) -> Option<Value> {
    if f.name != "cuGraphAddNode" {
        return None;
    }
    let p = *raw.get(f.args.iter().position(|a| a.name == "nodeParams")?)?;
    if p == 0 {
        return None;
    }
    // SAFETY: the caller's contract: a CUgraphNodeParams.
    let b = unsafe { std::slice::from_raw_parts(p as *const u8, gpuless_analyzer::api::structs::NODE_PARAMS_SIZE) };
    let (n, arr) = gpuless_analyzer::api::structs::conditional_bodies(b)?;
    if arr == 0 || n > 64 {
        return None;
    }
    // SAFETY: the driver wrote `n` graph handles there.
    let hs = unsafe { std::slice::from_raw_parts(arr as *const u64, n) };
    Some(Value::List(hs.iter().map(|&h| Value::Handle(gpuless_analyzer::api::HandleKind::Graph, h)).collect()))
}

fn buf_len(len: BufLen, raw: &[u64]) -> u64 {
    match len {
        BufLen::Arg(i) => raw.get(i as usize).copied().unwrap_or(0),
        BufLen::Fixed(n) => n as u64,
    }
}

/// The value of an argument whose word is all there is to it (no memory behind it is read);
/// `None` for the kinds that read memory. A by-value word is taken at its C type's width
/// ([`CScalar::widen`]): what a register holds above a 4-byte argument is not the argument's.
pub(crate) fn word_value(kind: ArgKind, p: Prim, v: u64) -> Option<Value> {
    let w = match p {
        Prim::Value(Some(t)) => t.widen(v),
        _ => v,
    };
    Some(match kind {
        ArgKind::Scalar | ArgKind::Flags | ArgKind::Enum | ArgKind::Count | ArgKind::Grid | ArgKind::Block => match p {
            Prim::Value(Some(CScalar::F32)) => Value::F64(f32::from_bits(w as u32) as f64),
            Prim::Value(Some(CScalar::F64)) => Value::F64(f64::from_bits(w)),
            _ => Value::U64(w),
        },
        ArgKind::Size => Value::Size(w),
        ArgKind::DevPtr => Value::DevPtr(w),
        ArgKind::HostPtr | ArgKind::FnPtr | ArgKind::UserData => Value::HostPtr(w),
        ArgKind::Handle(k) => Value::Handle(k, w),
        _ => return None,
    })
}

/// Whether an argument of this kind is one plain value (read behind the pointer of an `out` or
/// `inout` argument at its C type's width).
fn plain(kind: ArgKind) -> bool {
    matches!(
        kind,
        ArgKind::Scalar
            | ArgKind::Flags
            | ArgKind::Enum
            | ArgKind::Count
            | ArgKind::Size
            | ArgKind::DevPtr
            | ArgKind::Handle(_)
    )
}

unsafe fn input(f: &ApiFunction, a: &ApiArg, p: Prim, v: u64, raw: &[u64]) -> Value {
    if let (Direction::InOut, Prim::Ref(Some(t))) = (a.dir, p) {
        if plain(a.kind) {
            // What the callee reads behind an `inout` pointer (a capture mode, a capacity).
            if v == 0 {
                return Value::Null;
            }
            // SAFETY: the driver reads a value of this type there.
            let w = unsafe { read_scalar(t, v) };
            return word_value(a.kind, Prim::Value(Some(t)), w).unwrap_or(Value::U64(w));
        }
    }
    if let Some(w) = word_value(a.kind, p, v) {
        return w;
    }
    match a.kind {
        ArgKind::CStr => unsafe { cstr(v) },
        // SAFETY: the copy reads its source.
        ArgKind::AnyBuf(len) => unsafe { crate::unified::input(a.dir, len, v, raw) },
        ArgKind::HostBuf(len) => {
            let n = buf_len(len, raw);
            if v == 0 {
                return Value::Null;
            }
            // A device address where host memory belongs (a copy's direction given wrong): the
            // driver refuses the call without reading it; so does the recording.
            if crate::arena::contains(v) {
                return Value::HostPtr(v);
            }
            if let BufLen::Fixed(n) = len {
                // A value behind a pointer (an attribute's: 4 or 8 bytes, the function decides):
                // read as far as it is readable.
                return sink::blob(BlobKind::HostToDevice, &read_small(v, n as usize));
            }
            // SAFETY: the driver reads `n` bytes from here for this call.
            let bytes = unsafe { std::slice::from_raw_parts(v as *const u8, n as usize) };
            sink::blob(BlobKind::HostToDevice, bytes)
        }
        ArgKind::Image => unsafe { image(v) },
        ArgKind::ImageFile => unsafe { image_file(v) },
        ArgKind::Struct("CUlaunchConfig") => unsafe { launch_config(v) },
        ArgKind::Struct(ty) if structs::is_kernel_node(ty) => unsafe { kernel_node(ty, v) },
        ArgKind::Struct(ty) if Dims::of(ty).is_some() => unsafe { copy_nd(ty, v) },
        ArgKind::Struct(ty) if structs::is_tagged(ty) => unsafe { tagged(f, a, ty, v, raw) },
        ArgKind::Struct(ty) => unsafe { struct_bytes(ty, v, 1) },
        ArgKind::Structs { ty, count_arg } => {
            let n = raw.get(count_arg as usize).copied().unwrap_or(0) as usize;
            unsafe { struct_bytes(ty, v, n.min(MAX_ELEMS)) }
        }
        ArgKind::KernelParams => unsafe { kernel_params(f, v, raw) },
        ArgKind::Extra => unsafe { extra(v) },
        _ => Value::U64(v),
    }
}

/// Up to `n` bytes at `p`, fewer (the first 4, then none) where they are not all readable:
/// `process_vm_readv` of this process reports a fault instead of taking it.
fn read_small(p: u64, n: usize) -> Vec<u8> {
    for want in [n, n.min(4)] {
        let mut buf = vec![0u8; want];
        let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: want };
        let remote = libc::iovec { iov_base: p as *mut libc::c_void, iov_len: want };
        // SAFETY: `local` is this buffer; the kernel checks `remote` and fails with EFAULT.
        let got = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        if got == want as isize {
            return buf;
        }
    }
    Vec::new()
}

unsafe fn output(f: &ApiFunction, a: &ApiArg, prim: Prim, p: u64, raw: &[u64]) -> Value {
    let ty = match prim {
        Prim::Ref(t) => t,
        Prim::Value(_) => None,
    };
    // SAFETY (all reads): the driver succeeded and wrote a value of the argument's type at
    // `p`, `ty`'s width of bytes (and no more: the bytes after it are the program's).
    let read = |t: CScalar| unsafe { read_scalar(t, p) };
    match a.kind {
        // SAFETY: the copy succeeded (a synchronous one has written its destination).
        ArgKind::AnyBuf(len) => unsafe { crate::unified::output(f, len, p, raw) },
        ArgKind::HostBuf(len) => {
            let n = buf_len(len, raw) as usize;
            // SAFETY: the driver wrote `n` bytes here (synchronous copies complete on return).
            let bytes = unsafe { std::slice::from_raw_parts(p as *const u8, n) };
            if state::capture_outputs() {
                sink::blob(BlobKind::DeviceToHost, bytes)
            } else {
                let h = gpuless_traces::Hash128::of(bytes);
                Value::Digest(gpuless_traces::BlobRef { hash: h, len: n as u64 })
            }
        }
        ArgKind::CStr if ty == Some(CScalar::Ptr) => unsafe { cstr(read(CScalar::Ptr)) },
        ArgKind::HostPtr if ty == Some(CScalar::Ptr) => Value::HostPtr(read(CScalar::Ptr)),
        // An async copy's rows reach the host only later: `pending` gathers them then.
        ArgKind::Struct(ty) if Dims::of(ty).is_some() && f.sync == SyncClass::CopyAnyDirectionAsync => Value::Null,
        ArgKind::Struct(ty) if Dims::of(ty).is_some() => unsafe { copy_nd_result(ty, p) },
        ArgKind::Struct(ty) => unsafe { struct_bytes(ty, p, 1) },
        ArgKind::Structs { ty, count_arg } => {
            // The count after the call: how many elements the driver wrote.
            let n = match (f.args.get(count_arg as usize), raw.get(count_arg as usize)) {
                (Some(c), Some(&v)) if c.dir == Direction::In => v,
                (Some(_), Some(&v)) if v != 0 => match prim_of(f, count_arg as usize) {
                    // SAFETY: the driver wrote the count there.
                    Prim::Ref(Some(t)) => unsafe { read_scalar(t, v) },
                    _ => 0,
                },
                _ => 0,
            };
            unsafe { struct_bytes(ty, p, (n as usize).min(MAX_ELEMS)) }
        }
        // One plain value, at its C type's width: a C enum is 4 bytes, a handle 8, a CUdevice
        // an int.
        kind if plain(kind) => match ty {
            None => Value::HostPtr(p),
            Some(t) => {
                let w = read(t);
                match kind {
                    ArgKind::Handle(k) => Value::Handle(k, w),
                    ArgKind::DevPtr => Value::DevPtr(w),
                    ArgKind::Size => Value::Size(w),
                    _ => match t {
                        CScalar::F32 => Value::F64(f32::from_bits(w as u32) as f64),
                        CScalar::F64 => Value::F64(f64::from_bits(w)),
                        _ if t.is_signed() => Value::I64(w as i64),
                        _ => Value::U64(w),
                    },
                }
            }
        },
        _ => Value::HostPtr(p),
    }
}

unsafe fn cstr(p: u64) -> Value {
    if p == 0 {
        return Value::Null;
    }
    // SAFETY: a NUL-terminated string the driver reads too; bounded by MAX_CSTR.
    let bytes = unsafe { std::slice::from_raw_parts(p as *const u8, strnlen(p as *const u8, MAX_CSTR)) };
    Value::Str(String::from_utf8_lossy(bytes).into_owned())
}

unsafe fn strnlen(p: *const u8, max: usize) -> usize {
    (0..max).find(|&i| unsafe { *p.add(i) } == 0).unwrap_or(max)
}

unsafe fn struct_bytes(ty: &str, p: u64, n: usize) -> Value {
    let Some(size) = struct_size(ty) else { return Value::HostPtr(p) };
    if p == 0 || n == 0 {
        return Value::Null;
    }
    // SAFETY: the driver reads `n` structs of this type from here.
    Value::Bytes(unsafe { std::slice::from_raw_parts(p as *const u8, size * n) }.to_vec())
}

/// End of the mapping that contains `p`, from /proc/self/maps.
fn mapping_end(p: u64) -> Option<u64> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|l| {
        let range = l.split_whitespace().next()?;
        let (a, b) = range.split_once('-')?;
        let (a, b) = (u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?);
        (a <= p && p < b).then_some(b)
    })
}

/// A GPU code image: the fatbin, cubin or PTX bytes stored once as a blob.
unsafe fn image(p: u64) -> Value {
    use gpuless_fatbin::Image;
    let Some(end) = mapping_end(p) else { return Value::HostPtr(p) };
    // SAFETY: [p, end) is mapped (it is one mapping of this process).
    let img = unsafe { Image::from_ptr(p as *const u8, (end - p) as usize) };
    let bytes: &[u8] = match img {
        Ok(Image::Wrapper(w)) => {
            let Some(end) = mapping_end(w.data) else { return Value::HostPtr(p) };
            // SAFETY: as above, for the wrapper's fatbin.
            match unsafe { Image::from_ptr(w.data as *const u8, (end - w.data) as usize) } {
                Ok(Image::Fatbin(b)) => return fatbin_blob(b),
                _ => return Value::HostPtr(p),
            }
        }
        Ok(Image::Fatbin(b)) => return fatbin_blob(b),
        Ok(Image::Cubin(b)) | Ok(Image::Ptx(b)) => b,
        Err(_) => return Value::HostPtr(p),
    };
    sink::blob(BlobKind::CodeImage, bytes)
}

/// A fatbin stored as the code the recording GPU runs (`GPULESS_CODE=all`: every entry).
fn fatbin_blob(bytes: &[u8]) -> Value {
    let sm = state::device_sm();
    if sm != 0 && !state::keep_all_code() {
        if let Ok(kept) = gpuless_fatbin::retain_for_sm(bytes, sm) {
            return sink::blob(BlobKind::CodeImage, &kept);
        }
    }
    sink::blob(BlobKind::CodeImage, bytes)
}

/// A code image loaded from a file: the file's bytes as a blob (the path as well when the
/// file cannot be read: the driver will fail the same way).
unsafe fn image_file(p: u64) -> Value {
    // SAFETY: forwarded: a NUL-terminated path.
    let path = unsafe { cstr(p) };
    let Value::Str(name) = &path else { return path };
    match std::fs::read(name) {
        Ok(bytes) => Value::List(vec![path.clone(), sink::blob(BlobKind::CodeImage, &bytes)]),
        Err(_) => path,
    }
}

unsafe fn launch_config(p: u64) -> Value {
    // SAFETY: forwarded from the caller.
    let mut bytes = Vec::new();
    match unsafe { read_config(p, &mut bytes) } {
        Some(r) => config_value(&r, &bytes),
        None => Value::Null,
    }
}

/// Where a raw call's launch configuration lies in its batch's bytes when it has none
/// (`raw::RawCall::config_at`).
pub const NO_CONFIG: u32 = u32::MAX;

/// A `CUlaunchConfig` as read at the call: its fields and its attribute array's bytes (kept by
/// raw calls, turned into a [`Value::LaunchConfig`] on the writer thread).
#[derive(Clone, Copy)]
pub(crate) struct RawConfig {
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem: u32,
    stream: u64,
    /// Where its `numAttrs` `CUlaunchAttribute`s were appended to the byte buffer.
    attrs: (u32, u32),
}

impl RawConfig {
    /// Reads a configuration with `read` into `bytes`: the struct itself first, its attributes
    /// after it. Returns where it starts, or [`NO_CONFIG`] (nothing kept).
    pub(crate) fn stash(bytes: &mut Vec<u8>, read: impl FnOnce(&mut Vec<u8>) -> Option<RawConfig>) -> u32 {
        let at = bytes.len();
        bytes.resize(at + std::mem::size_of::<RawConfig>(), 0);
        match read(bytes) {
            Some(c) => {
                // SAFETY: `size_of::<RawConfig>()` bytes from `at` were just made part of
                // `bytes`; an unaligned write of a plain-data struct.
                unsafe { std::ptr::write_unaligned(bytes.as_mut_ptr().add(at).cast::<RawConfig>(), c) };
                at as u32
            }
            None => {
                bytes.truncate(at);
                NO_CONFIG
            }
        }
    }

    /// The configuration [`RawConfig::stash`] put at `at` in `bytes`, if any.
    pub(crate) fn unstash(bytes: &[u8], at: u32) -> Option<RawConfig> {
        if at == NO_CONFIG {
            return None;
        }
        let b = bytes.get(at as usize..at as usize + std::mem::size_of::<RawConfig>())?;
        // SAFETY: `b` holds the bytes of a RawConfig written by `stash` (plain data, any bit
        // pattern of its fields is valid).
        Some(unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<RawConfig>()) })
    }
}

/// Reads the `CUlaunchConfig` at `p`, appending its attributes' bytes to `bytes`.
///
/// # Safety
/// `p` is null or points at a `CUlaunchConfig` the driver reads, with `numAttrs` attributes.
pub(crate) unsafe fn read_config(p: u64, bytes: &mut Vec<u8>) -> Option<RawConfig> {
    if p == 0 {
        return None;
    }
    // SAFETY: the driver reads this CUlaunchConfig (plain integers and pointers).
    let c = unsafe { std::ptr::read_unaligned(p as *const sys::CUlaunchConfig) };
    let n = if c.attrs.is_null() { 0 } else { (c.numAttrs as usize).min(MAX_ELEMS) };
    let len = n * std::mem::size_of::<sys::CUlaunchAttribute>();
    let start = bytes.len();
    if n > 0 {
        // SAFETY: `numAttrs` attributes follow `attrs`.
        bytes.extend_from_slice(unsafe { std::slice::from_raw_parts(c.attrs as *const u8, len) });
    }
    let attrs = (start as u32, len as u32);
    Some(RawConfig {
        grid: [c.gridDimX, c.gridDimY, c.gridDimZ],
        block: [c.blockDimX, c.blockDimY, c.blockDimZ],
        shared_mem: c.sharedMemBytes,
        stream: c.hStream as u64,
        attrs,
    })
}

/// The trace value of a launch configuration.
pub(crate) fn config_value(r: &RawConfig, bytes: &[u8]) -> Value {
    let size = std::mem::size_of::<sys::CUlaunchAttribute>();
    let value_at = std::mem::offset_of!(sys::CUlaunchAttribute, value);
    let value_len = std::mem::size_of::<sys::CUlaunchAttributeValue>();
    let (start, len) = (r.attrs.0 as usize, r.attrs.1 as usize);
    let attrs = bytes
        .get(start..start + len)
        .unwrap_or_default()
        .chunks_exact(size)
        .map(|a| LaunchAttr {
            id: u32::from_le_bytes([a[0], a[1], a[2], a[3]]),
            value: a.get(value_at..value_at + value_len).unwrap_or_default().to_vec(),
        })
        .collect();
    Value::LaunchConfig(LaunchConfig {
        grid: Dim3 { x: r.grid[0], y: r.grid[1], z: r.grid[2] },
        block: Dim3 { x: r.block[0], y: r.block[1], z: r.block[2] },
        shared_mem: r.shared_mem,
        stream: r.stream,
        attrs,
    })
}

type ParamInfo = unsafe extern "C" fn(*mut c_void, usize, *mut usize, *mut usize) -> u32;

/// Parameter layout of a function or kernel handle, asked of the driver once per handle and
/// kept in the thread's lane: a launch finds its kernel's in one cache line, without a lock.
fn layout(handle: u64, lane: &Lane) -> Packing {
    let i = (handle.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 55) as usize % LAYOUTS;
    let hit =
        lane.layouts.try_borrow().ok().and_then(|m| m.get(i).filter(|e| e.0 == handle && handle != 0).map(|e| e.1));
    if let Some(l) = hit {
        return l;
    }
    let l = shared_layout(handle);
    if let Ok(mut m) = lane.layouts.try_borrow_mut() {
        if let Some(e) = m.get_mut(i) {
            *e = (handle, l);
        }
    }
    l
}

/// The process-wide layout cache, filled from the driver on a miss.
fn shared_layout(handle: u64) -> Packing {
    type Layouts = HashMap<u64, Packing>;
    static CACHE: Mutex<Option<Layouts>> = Mutex::new(None);
    if let Some(l) = CACHE.lock().ok().and_then(|c| c.as_ref().and_then(|m| m.get(&handle).copied())) {
        return l;
    }
    let mut out = Vec::new();
    for name in ["cuFuncGetParamInfo\0", "cuKernelGetParamInfo\0"] {
        let p = libcuda_symbol(name);
        if p.is_null() {
            continue;
        }
        // SAFETY: the driver's function with this C signature.
        let f: ParamInfo = unsafe { std::mem::transmute::<*mut c_void, ParamInfo>(p) };
        for i in 0..32_768usize {
            let (mut off, mut size) = (0usize, 0usize);
            // SAFETY: valid out-pointers; an invalid index returns an error.
            if unsafe { f(handle as *mut c_void, i, &mut off, &mut size) } != 0 {
                break;
            }
            out.push((off as u32, size as u32));
        }
        if !out.is_empty() {
            break;
        }
    }
    let total = out.iter().map(|&(o, s)| o.saturating_add(s)).max().unwrap_or(0);
    let Ok(mut c) = CACHE.lock() else { return (Vec::leak(out), total) };
    *c.get_or_insert_with(HashMap::new).entry(handle).or_insert_with(|| (Vec::leak(out), total))
}

unsafe fn kernel_params(f: &ApiFunction, p: u64, raw: &[u64]) -> Value {
    if p == 0 {
        return Value::Null;
    }
    let Some(fi) = f.args.iter().position(|a| a.kind == ArgKind::Handle(HandleKind::Function)) else {
        return Value::HostPtr(p);
    };
    // SAFETY: forwarded from the caller.
    unsafe { packed_params(raw.get(fi).copied().unwrap_or(0), p) }
}

/// The parameters behind a `void** kernelParams` of the function or kernel `handle`, packed
/// at the offsets `cuFuncGetParamInfo` gives.
///
/// # Safety
/// As [`pack`]: `p` (not null) holds one pointer per parameter of the kernel.
unsafe fn packed_params(handle: u64, p: u64) -> Value {
    let mut bytes = Vec::new();
    // SAFETY: forwarded from the caller.
    let (_, layout) = crate::lane::with(|lane| unsafe { pack(handle, p, &mut bytes, lane) });
    Value::KernelParams(KernelParams { bytes, layout: layout.to_vec() })
}

/// Appends the packed parameter bytes of a launch of `handle` with `void** kernelParams` at
/// `p` (not null) to `bytes`; returns where they start and their layout.
///
/// # Safety
/// `p` holds one pointer per parameter of the kernel, each to the parameter's bytes.
pub(crate) unsafe fn pack(handle: u64, p: u64, bytes: &mut Vec<u8>, lane: &Lane) -> (usize, Layout) {
    let (layout, total) = layout(handle, lane);
    let total = total as usize;
    let start = bytes.len();
    bytes.resize(start + total, 0);
    // SAFETY: `total` bytes from `start` were just made part of `bytes`.
    let out = unsafe { bytes.as_mut_ptr().add(start) };
    for (i, &(off, size)) in layout.iter().enumerate() {
        // SAFETY: kernelParams holds one pointer per parameter, each to `size` bytes; every
        // (offset, size) of the layout lies inside `total`.
        unsafe {
            let arg = std::ptr::read_unaligned((p as *const *const u8).add(i));
            if arg.is_null() {
                continue;
            }
            let dst = out.add(off as usize);
            // Most parameters are pointers and 32-bit scalars: plain moves, not a memcpy call
            // (cuDNN kernels take dozens of parameters).
            match size {
                8 => std::ptr::write_unaligned(dst.cast::<u64>(), std::ptr::read_unaligned(arg.cast::<u64>())),
                4 => std::ptr::write_unaligned(dst.cast::<u32>(), std::ptr::read_unaligned(arg.cast::<u32>())),
                _ => std::ptr::copy_nonoverlapping(arg, dst, size as usize),
            }
        }
    }
    (start, layout)
}

/// `void** extra`: the `CU_LAUNCH_PARAM_BUFFER_POINTER` / `_SIZE` pairs.
unsafe fn extra(p: u64) -> Value {
    if p == 0 {
        return Value::Null;
    }
    let (mut buf, mut size) = (0usize, 0usize);
    for i in 0..64 {
        // SAFETY: a NULL-terminated (CU_LAUNCH_PARAM_END) list of key/value pointers.
        let key = unsafe { std::ptr::read_unaligned((p as *const usize).add(2 * i)) };
        if key == 0 {
            break;
        }
        let val = unsafe { std::ptr::read_unaligned((p as *const usize).add(2 * i + 1)) };
        match key {
            1 => buf = val,
            2 if val != 0 => size = unsafe { std::ptr::read_unaligned(val as *const usize) },
            _ => {}
        }
    }
    if buf == 0 || size == 0 {
        return Value::HostPtr(p);
    }
    // SAFETY: the driver copies `size` bytes from `buf` for this launch.
    Value::Bytes(unsafe { std::slice::from_raw_parts(buf as *const u8, size.min(1 << 16)) }.to_vec())
}

/// Whether the function's results reach the host only once the stream has synchronized.
pub fn deferred(f: &ApiFunction) -> bool {
    matches!(f.sync, SyncClass::DeviceToHostAsync)
}

/// [`deferred`], or an async copy of unknown direction into host memory: of unified addresses,
/// as the call's captured `args` say (`crate::unified`), or a 2D/3D copy ([`async_host_rows`]).
pub fn deferred_call(f: &ApiFunction, raw: &[u64], args: &[Value]) -> bool {
    deferred(f) || !crate::unified::async_host_outs(f, raw, args).is_empty() || async_host_rows(f, raw).is_some()
}

/// The 2D/3D copy struct of an async copy `f` whose destination is host memory: (its index
/// among the results, the parsed copy).
pub fn async_host_rows(f: &ApiFunction, raw: &[u64]) -> Option<(usize, structs::Copy)> {
    if f.sync != SyncClass::CopyAnyDirectionAsync {
        return None;
    }
    f.out_args().enumerate().find_map(|(k, (i, a))| {
        let ArgKind::Struct(ty) = a.kind else { return None };
        let dims = Dims::of(ty)?;
        let p = raw.get(i).copied().filter(|&p| p != 0)?;
        // SAFETY: the program passed this struct to the driver, which read it.
        let b = unsafe { std::slice::from_raw_parts(p as *const u8, dims.size()) };
        let c = structs::Copy::parse(dims, b)?;
        host_side(&c.dst).then_some((k, c))
    })
}

/// A `CUDA_KERNEL_NODE_PARAMS` (v1 or v2): `[struct bytes, kernel parameters, extra]`, the
/// parameters laid out like a launch's (the struct only holds pointers to them).
unsafe fn kernel_node(ty: &str, p: u64) -> Value {
    // SAFETY: the driver reads this struct.
    let s = unsafe { struct_bytes(ty, p, 1) };
    let Value::Bytes(b) = &s else { return s };
    let Some(k) = KernelNode::parse(b) else { return s };
    let params = if k.kernel_params == 0 {
        Value::Null
    } else {
        // SAFETY: kernelParams holds one pointer per parameter of the kernel, as for a launch.
        unsafe { packed_params(k.handle(), k.kernel_params) }
    };
    // SAFETY: as for a launch's `extra`.
    let extra = unsafe { extra(k.extra) };
    Value::List(vec![s, params, extra])
}

/// A tagged union (`CUgraphNodeParams`): `[union bytes, member]` when the member its tag selects
/// leads to more bytes (a kernel node's parameters, a copy's host rows), the member captured as
/// that struct is when it is an argument of its own (`structs::embedded`); else the bytes alone.
unsafe fn tagged(f: &ApiFunction, a: &ApiArg, ty: &'static str, p: u64, raw: &[u64]) -> Value {
    // SAFETY: the driver reads this struct.
    let s = unsafe { struct_bytes(ty, p, 1) };
    let Value::Bytes(b) = &s else { return s };
    let Some(m) = structs::embedded(ty, b) else { return s };
    let member = ApiArg { kind: ArgKind::Struct(m.c_struct), ..*a };
    // SAFETY: the member lies inside the struct the driver reads.
    let v = unsafe { input(f, &member, Prim::Value(None), p + m.at as u64, raw) };
    Value::List(vec![s, v])
}

fn host_side(s: &structs::Side) -> bool {
    s.memory_type == structs::MEMORYTYPE_HOST
        || (s.memory_type == structs::MEMORYTYPE_UNIFIED && crate::unified::is_host(s.device))
}

/// The host rows a 2D/3D copy reads or wrote, packed (see `gpuless_analyzer::api::structs`).
pub(crate) unsafe fn gather(c: &structs::Copy, side: &structs::Side) -> Option<Vec<u8>> {
    let n = c.packed_len()? as usize;
    if side.pointer() == 0 {
        return None;
    }
    let mut out = Vec::with_capacity(n);
    let w = c.width as usize;
    for row in c.rows(side) {
        // SAFETY: the driver reads (or wrote) these `WidthInBytes` bytes of every row.
        out.extend_from_slice(unsafe { std::slice::from_raw_parts(row as *const u8, w) });
    }
    Some(out)
}

/// A `CUDA_MEMCPY2D` / `CUDA_MEMCPY3D`: `[struct bytes, packed host source or Null]`.
unsafe fn copy_nd(ty: &str, p: u64) -> Value {
    // SAFETY: the driver reads this struct.
    let s = unsafe { struct_bytes(ty, p, 1) };
    let (Value::Bytes(b), Some(dims)) = (&s, Dims::of(ty)) else { return s };
    let Some(c) = structs::Copy::parse(dims, b) else { return s };
    let src = if host_side(&c.src) {
        // SAFETY: the driver reads these rows for this copy.
        match unsafe { gather(&c, &c.src) } {
            Some(bytes) => sink::blob(BlobKind::HostToDevice, &bytes),
            None => Value::Null,
        }
    } else {
        Value::Null
    };
    Value::List(vec![s, src])
}

/// What a synchronous 2D/3D copy brought to host memory: the packed rows' hash (or bytes with
/// `--capture-outputs`); `Null` when the destination is not host memory.
unsafe fn copy_nd_result(ty: &str, p: u64) -> Value {
    let Some(dims) = Dims::of(ty) else { return Value::Null };
    // SAFETY: the struct the driver just read.
    let b = unsafe { std::slice::from_raw_parts(p as *const u8, dims.size()) };
    let Some(c) = structs::Copy::parse(dims, b) else { return Value::Null };
    if !host_side(&c.dst) {
        return Value::Null;
    }
    // SAFETY: a synchronous copy has written these rows when it returns.
    match unsafe { gather(&c, &c.dst) } {
        Some(bytes) if state::capture_outputs() => sink::blob(BlobKind::DeviceToHost, &bytes),
        Some(bytes) => Value::Digest(gpuless_traces::BlobRef {
            hash: gpuless_traces::Hash128::of(&bytes),
            len: bytes.len() as u64,
        }),
        None => Value::Null,
    }
}
