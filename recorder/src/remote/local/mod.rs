//! The client's own part of each call: what it answers without the server, by the API table's
//! class of the function — handles are client numbers ([`super::handles`]), device queries come
//! from the session's device description ([`super::devices`]), contexts are tracked per thread
//! ([`contexts`] over [`super::context_books`]), kernels are known from the code images the
//! program loaded ([`super::modules`]). Calls whose result only the GPU has are [`Step::Wait`];
//! what only the session can do is named, not done ([`Step::Link`], [`Step::Import`]: the call's
//! trip does it); calls the client mode does not cover yet fail with `CUDA_ERROR_NOT_SUPPORTED`
//! and one `gpuless:` line naming the call (never a silent wrong answer). Below the session: this
//! module never calls into it.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use gpuless_analyzer::api::{
    errors, structs, ApiFunction, ArgKind, Direction, Disposition, HandleKind, LocalRule, SyncClass,
};

use gpuless_analyzer::occupancy;

use super::context_books::{self, current_context, current_device};
use super::handles::{is_client_handle, new_handle};
use super::step::{put, refused, unsupported, Step};
use super::{attributes, devices, graph_mem, modules, pci, streams};
use crate::arena;
use crate::capture;
use crate::slots::Slot;

mod arrays;
mod contexts;
mod device;
mod graphs;
mod pools;

use arrays::{array_descriptor, remember_array};
pub(crate) use device::bad_device;
use graphs::{conditional_node, graph_memory};
pub(crate) use graphs::{graph_update_failed, write_capture_info};

const INVALID_VALUE: u32 = 1;
const INVALID_DEVICE: u32 = 101;
const INVALID_CONTEXT: u32 = 201;
const INVALID_HANDLE: u32 = 400;
const NOT_FOUND: u32 = 500;
/// `CUDA_ERROR_NOT_INITIALIZED`: a device query before `cuInit` connected.
const NOT_INITIALIZED: u32 = 3;

thread_local! {
    /// The thread's stream capture mode (`CU_STREAM_CAPTURE_MODE_GLOBAL`, 0, at first).
    static CAPTURE_MODE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The client's part of one call.
///
/// # Safety
/// `raw` are the program's arguments, in the API table's order.
pub(crate) unsafe fn run(s: &Slot, raw: &[u64]) -> Step {
    let f = s.func;
    if let Some(st) = bad_device(f, raw) {
        return Step::Done(st);
    }
    // SAFETY: forwarded from the caller.
    if let Some(st) = unsafe { super::checks::check(f, raw) } {
        return Step::Done(st);
    }
    if f.disposition == Disposition::Local(LocalRule::Link) {
        // The JIT linker runs on the server's driver (`jit.rs`).
        return Step::Link;
    }
    if f.name == "cuMemFree" && super::shared::active() {
        super::shared::remove(raw.first().copied().unwrap_or(0));
    }
    if matches!(f.name, "cuMemAdvise" | "cuMemPrefetchAsync") && super::shared::active() {
        // The CUDA 12.2 forms take a CUmemLocation where the first took a device.
        let v2 = f.args.iter().any(|a| a.name == "location");
        // SAFETY: forwarded from the caller.
        unsafe { super::shared::note_hint(f.name, v2, raw) };
    }
    if let Some(op) = s.arena {
        // SAFETY: forwarded from the caller.
        if let Some(st) = unsafe { arena::before(op, raw, s.per_thread) } {
            return Step::Done(st);
        }
    }
    // SAFETY: forwarded from the caller.
    if let Some(step) = unsafe { super::vmm::call(f, raw) } {
        return step;
    }
    if f.disposition == Disposition::Local(LocalRule::Share) {
        // Shared with the program's other processes, through the server (`ipc.rs`).
        return Step::Share;
    }
    // SAFETY: forwarded from the caller.
    match unsafe { conditional_node(f, raw) } {
        // Its body graphs placed: the node is made as any handle.
        // SAFETY: forwarded from the caller.
        Some(Ok(())) => return unsafe { create(f, raw) },
        Some(Err(st)) => return Step::Done(st),
        None => {}
    }
    if f.name == "cuGraphAddMemAllocNode" {
        // SAFETY: forwarded from the caller.
        return unsafe { alloc_node(f, raw) };
    }
    // SAFETY: forwarded from the caller.
    if let Some(step) = unsafe { graph_memory(f, raw) } {
        return step;
    }
    // SAFETY (all arms): forwarded from the caller.
    let step = unsafe {
        match f.sync {
            SyncClass::Local => local_fn(f, raw),
            SyncClass::DeviceQuery => query(f, raw),
            SyncClass::CreatesHandle => create(f, raw),
            SyncClass::StateQuery if f.name.starts_with("cuPointerGetAttribute") => {
                super::host::pointer_query(f, raw).unwrap_or(Step::Wait)
            }
            SyncClass::StateQuery if f.name == "cuMemRangeGetAttribute" => super::shared::range_attribute(raw),
            SyncClass::DeviceToHost | SyncClass::StateQuery => Step::Wait,
            SyncClass::StreamSync | SyncClass::EventSync | SyncClass::CtxSync => Step::Wait,
            SyncClass::CopyAnyDirection | SyncClass::CopyAnyDirectionAsync => super::copies::plan(f, raw),
            SyncClass::AllocatesDevice if f.name == "cuMemAllocManaged" => super::shared::alloc_managed(raw),
            SyncClass::AllocatesDevice => unsupported(f, "only cuMemAlloc-style allocations from the arena are"),
            SyncClass::HostMemory => super::host::memory(f, raw),
            SyncClass::AddressLookup => address_lookup(f, raw),
            _ => state_change(f, raw),
        }
    };
    if matches!(step, Step::Done(0)) {
        // SAFETY: forwarded from the caller.
        unsafe { graph_mem::after(f, raw) };
    }
    step
}

/// `cuGraphAddMemAllocNode`: its address placed in the arena ([`graph_mem::place`]), then the
/// node made as any handle, and the allocation noted for its graph once made.
///
/// # Safety
/// `raw` are the program's arguments to `f`.
unsafe fn alloc_node(f: &ApiFunction, raw: &[u64]) -> Step {
    // SAFETY: forwarded from the caller.
    let addr = match unsafe { graph_mem::place(raw) } {
        Ok(addr) => addr,
        Err(st) => return Step::Done(st),
    };
    // SAFETY: forwarded from the caller.
    let step = unsafe { create(f, raw) };
    if matches!(step, Step::Done(0)) {
        // SAFETY: forwarded from the caller: the call succeeded.
        unsafe { graph_mem::placed(raw, addr) };
    }
    step
}

/// Writes `values` to the out arguments of `f` in table order (a server's query answer).
///
/// # Safety
/// `raw` are the program's arguments to `f`.
pub(crate) unsafe fn write_outs(f: &ApiFunction, raw: &[u64], values: &[u64]) {
    for ((i, _), &v) in f.out_args().zip(values) {
        // SAFETY: forwarded.
        unsafe { put(f, raw, i, v) };
    }
}

/// Writes the server's answer to a query only the GPU answers (`gpu` in the API table): the
/// values follow the out arguments in order — a node array's entries (as many as the
/// program's count asked for, when it passed an array), edge data as zeros (the default edge,
/// no value sent), then single values (a count, a handle, an enum); a struct (a kernel node's
/// parameters, [`super::nodes`]) takes the rest. The call's status.
///
/// # Safety
/// `raw` are the program's arguments to `f`, their out-pointers valid for its declared types.
pub(crate) unsafe fn write_answer(f: &ApiFunction, raw: &[u64], values: &[u64]) -> u32 {
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    let mut next = values.iter().copied();
    for (i, a) in f.out_args() {
        let p = w(i);
        match a.kind {
            ArgKind::Struct(ty) if structs::is_kernel_node(ty) => {
                let node = f.args.iter().position(|a| a.dir == Direction::In && a.kind == GRAPH_NODE);
                let rest: Vec<u64> = next.collect();
                // SAFETY: the program's struct of type `ty`.
                return unsafe { super::nodes::write_kernel_node(f, ty, p, node.map_or(0, w), &rest) };
            }
            ArgKind::Struct(_) => return refused(f, "no struct of this type is written from a server's answer"),
            ArgKind::Structs { ty, count_arg } => {
                if p == 0 {
                    continue;
                }
                let cp = w(usize::from(count_arg));
                // SAFETY: the program's count, read before the answer overwrites it.
                let n = if cp == 0 { 0 } else { unsafe { *(cp as *const usize) } };
                for k in 0..n {
                    // SAFETY: the program's array of `n` entries of `ty`.
                    unsafe {
                        if ty == "CUgraphNode" {
                            *(p as *mut u64).add(k) = next.next().unwrap_or(0);
                        } else {
                            *(p as *mut u64).add(k) = 0; // CUgraphEdgeData: 8 bytes
                        }
                    }
                }
            }
            _ => {
                if let Some(v) = next.next() {
                    // SAFETY: forwarded.
                    unsafe { put(f, raw, i, v) };
                }
            }
        }
    }
    0
}

/// A graph node handle argument.
const GRAPH_NODE: ArgKind = ArgKind::Handle(HandleKind::GraphNode);

/// Copies `s` (and a NUL) into the out buffer of argument `i` of at most `len` bytes.
unsafe fn put_str(raw: &[u64], i: usize, len: u64, s: &str) {
    let p = raw.get(i).copied().unwrap_or(0);
    if p == 0 || len == 0 {
        return;
    }
    let n = s.len().min(len as usize - 1);
    // SAFETY: the program's buffer of `len` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), p as *mut u8, n);
        *(p as *mut u8).add(n) = 0;
    }
}

/// Error strings, export tables.
unsafe fn local_fn(f: &ApiFunction, raw: &[u64]) -> Step {
    match f.name {
        "cuGetErrorString" | "cuGetErrorName" => {
            // The driver's own words (analyzer/src/api/cuda-13.0-errors.tsv); a code it does not
            // name gets a null string and CUDA_ERROR_INVALID_VALUE, as from the driver.
            let code = raw.first().copied().unwrap_or(0) as u32;
            let text = if f.name == "cuGetErrorName" { errors::error_name(code) } else { errors::error_string(code) };
            // SAFETY: the out-pointer for a `const char*`; the string lives for the process.
            unsafe { put(f, raw, 1, text.map_or(0, |t| static_cstr(t) as u64)) };
            Step::Done(if text.is_some() { 0 } else { INVALID_VALUE })
        }
        "cuGetExportTable" => {
            let st = super::tables::get(raw.first().copied().unwrap_or(0), raw.get(1).copied().unwrap_or(0));
            Step::Done(st)
        }
        _ => unsupported(f, "not answered by the client"),
    }
}

/// A NUL-terminated copy of `s` that lives as long as the process (one per distinct string).
pub(crate) fn static_cstr(s: &str) -> *const u8 {
    static STRS: Mutex<Option<HashMap<String, &'static [u8]>>> = Mutex::new(None);
    let mut g = STRS.lock().unwrap_or_else(|e| e.into_inner());
    let m = g.get_or_insert_with(HashMap::new);
    if let Some(b) = m.get(s) {
        return b.as_ptr();
    }
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    let leaked: &'static [u8] = Vec::leak(v);
    m.insert(s.to_string(), leaked);
    leaked.as_ptr()
}

/// Device, context, function and stream queries.
unsafe fn query(f: &ApiFunction, raw: &[u64]) -> Step {
    if devices::first().is_none() {
        return Step::Done(NOT_INITIALIZED);
    }
    // SAFETY: forwarded from the caller.
    if let Some(st) = unsafe { contexts::query(f, raw) } {
        return Step::Done(st);
    }
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    let dev_ok = |i: usize| devices::valid(w(i));
    // The device the query names (its first device argument), else the current one.
    let dev = f
        .args
        .iter()
        .position(|a| a.dir == Direction::In && a.kind == ArgKind::Handle(HandleKind::Device))
        .map_or_else(current_device, |i| w(i) as u32);
    let Some(d) = devices::description(dev).or_else(devices::first) else {
        return Step::Done(NOT_INITIALIZED);
    };
    // SAFETY (whole match): out-pointers of the program, written at their declared widths.
    unsafe {
        let st = match f.name {
            "cuDriverGetVersion" => {
                put(f, raw, 0, d.driver_version as u32 as u64);
                0
            }
            "cuDeviceGet" if dev_ok(1) => {
                put(f, raw, 0, w(1) as u32 as u64);
                0
            }
            "cuDeviceGet" => INVALID_DEVICE,
            "cuDeviceGetCount" => {
                put(f, raw, 0, u64::from(devices::count()));
                0
            }
            // The flags the stream was created with; the default streams' are 0.
            "cuStreamGetFlags" => match streams::with(|c| c.stream_flags.get(&w(0)).copied()) {
                Some(fl) => {
                    put(f, raw, 1, fl);
                    0
                }
                None if w(0) <= 2 => {
                    put(f, raw, 1, 0);
                    0
                }
                None => INVALID_HANDLE,
            },
            _ if f.args.iter().enumerate().any(|(i, a)| {
                a.dir == Direction::In && a.kind == ArgKind::Handle(HandleKind::Device) && !dev_ok(i)
            }) =>
            {
                INVALID_DEVICE
            }
            "cuDeviceGetName" => {
                put_str(raw, 0, w(1), &d.name);
                0
            }
            "cuDeviceGetUuid" => {
                if w(0) != 0 {
                    std::ptr::copy_nonoverlapping(d.uuid.as_ptr(), w(0) as *mut u8, 16);
                }
                0
            }
            "cuDeviceTotalMem" => {
                put(f, raw, 0, d.total_mem);
                0
            }
            "cuDeviceGetAttribute" => match attributes::attr_of(dev, w(1) as u32) {
                Some(v) => {
                    put(f, raw, 0, v as u32 as u64);
                    0
                }
                None => INVALID_VALUE,
            },
            "cuDeviceComputeCapability" => {
                put(f, raw, 0, attributes::attr_of(dev, 75).unwrap_or(0) as u32 as u64);
                put(f, raw, 1, attributes::attr_of(dev, 76).unwrap_or(0) as u32 as u64);
                0
            }
            "cuDeviceGetPCIBusId" => {
                let (domain, bus, device) = pci::pci_location(d);
                put_str(raw, 0, w(1), &pci::bus_id(domain, bus, device));
                0
            }
            "cuDeviceGetDefaultMemPool" => {
                put(f, raw, 0, super::driver::pool(dev));
                0
            }
            "cuDeviceGetMemPool" => {
                put(f, raw, 0, super::driver::current_pool(dev));
                0
            }
            // As the server's driver answered; a device "cannot access" itself.
            "cuDeviceCanAccessPeer" => {
                let (a, b) = (w(1) as u32, w(2) as u32);
                put(f, raw, 0, u64::from(devices::can_access(a, b)));
                0
            }
            // ... and a P2P attribute between a device and itself is refused.
            "cuDeviceGetP2PAttribute" => {
                let (a, b) = (w(2) as u32, w(3) as u32);
                match devices::peer(a, b, w(1) as u32).filter(|_| a != b) {
                    Some(v) => {
                        put(f, raw, 0, v as u32 as u64);
                        0
                    }
                    None if a == b || devices::count() < 2 => INVALID_DEVICE,
                    None => INVALID_VALUE,
                }
            }
            "cuDeviceGetByPCIBusId" => {
                // SAFETY: the program's NUL-terminated bus id (null: invalid).
                let asked = if w(1) == 0 { String::new() } else { cstr(w(1)) };
                let parsed = pci::parse_bus_id(&asked);
                let found = (0..devices::count())
                    .find(|&k| devices::description(k).is_some_and(|d| parsed == Some(pci::pci_location(d))));
                if w(1) == 0 || w(0) == 0 || parsed.is_none() {
                    INVALID_VALUE
                } else if let Some(k) = found {
                    put(f, raw, 0, u64::from(k));
                    0
                } else {
                    INVALID_DEVICE
                }
            }
            // The context a stream was created in (the default streams: the current one).
            "cuStreamGetCtx" | "cuStreamGetDevice" => {
                let ctx = if w(0) <= 2 {
                    Some(current_context())
                } else {
                    streams::with(|c| c.stream_ctx.get(&w(0)).copied())
                };
                match ctx {
                    None => INVALID_HANDLE,
                    Some(0) => INVALID_CONTEXT,
                    Some(ctx) if f.name == "cuStreamGetDevice" => {
                        put(f, raw, 1, u64::from(context_books::device_of(ctx)));
                        0
                    }
                    Some(ctx) => {
                        put(f, raw, 1, ctx);
                        put(f, raw, 2, 0); // `_v2`: no green context
                        0
                    }
                }
            }
            "cuMemPoolGetAccess" => {
                let (st, fl) = pools::get_access(w(1), w(2));
                put(f, raw, 0, fl);
                st
            }
            "cuStreamIsCapturing" => {
                put(f, raw, 1, u64::from(streams::is_capturing(w(0))));
                0
            }
            "cuStreamGetCaptureInfo" => {
                if !streams::is_capturing(w(0)) {
                    put(f, raw, 1, 0); // CU_STREAM_CAPTURE_STATUS_NONE
                    0
                } else if (3..f.args.len()).any(|i| w(i) != 0) {
                    // The graph and dependencies of a capture in progress are the server's.
                    return Step::Wait;
                } else {
                    put(f, raw, 1, 1); // CU_STREAM_CAPTURE_STATUS_ACTIVE
                    put(f, raw, 2, streams::with(|c| c.capture_ids.get(&w(0)).copied().unwrap_or(0)));
                    0
                }
            }
            "cuThreadExchangeStreamCaptureMode" => {
                // Swaps the thread's mode: the new one is read, the previous one written back.
                if w(0) == 0 {
                    INVALID_VALUE
                } else {
                    let new = capture::read_scalar(gpuless_analyzer::api::CScalar::U32, w(0));
                    let old = CAPTURE_MODE.with(|m| m.replace(new));
                    put(f, raw, 0, old);
                    0
                }
            }
            "cuMemGetAllocationGranularity" => {
                put(f, raw, 0, gpuless_traces::arena::CHUNK);
                0
            }
            "cuFuncGetParamInfo" | "cuKernelGetParamInfo" => match modules::param(w(0), w(1) as usize) {
                Some((off, size)) => {
                    put(f, raw, 2, u64::from(off));
                    put(f, raw, 3, u64::from(size));
                    0
                }
                None if modules::kernel(w(0)).is_some() => INVALID_VALUE,
                None => return unsupported(f, "the function's code image could not be analyzed"),
            },
            "cuFuncGetAttribute" | "cuKernelGetAttribute" => match modules::kernel(w(2)) {
                Some(k) => match modules::attribute(&k, w(1) as u32) {
                    Some(v) => {
                        put(f, raw, 0, v as u32 as u64);
                        0
                    }
                    // Not derived from the cubin: the executor asks its driver.
                    None => return Step::Wait,
                },
                None => INVALID_VALUE,
            },
            "cuOccupancyMaxActiveBlocksPerMultiprocessor"
            | "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags"
            | "cuOccupancyMaxPotentialBlockSize"
            | "cuOccupancyAvailableDynamicSMemPerBlock" => {
                let fi = if f.name == "cuOccupancyMaxPotentialBlockSize" { 2 } else { 1 };
                let Some(k) = modules::kernel(w(fi)) else { return Step::Done(INVALID_VALUE) };
                let (Some(facts), Some(lim)) = (modules::facts(&k), modules::limits()) else {
                    // Registers unknown here (a PTX-only kernel, an image not analyzed): the
                    // executor asks the driver, unless a callback must size the shared memory.
                    if f.name == "cuOccupancyMaxPotentialBlockSize" && w(3) != 0 {
                        return unsupported(f, "the kernel's registers are known only from a cubin");
                    }
                    return Step::Wait;
                };
                match f.name {
                    "cuOccupancyMaxPotentialBlockSize" => {
                        type B2D = unsafe extern "C" fn(std::ffi::c_int) -> usize;
                        let cb = w(3);
                        let fixed = w(4);
                        let dynamic = |b: u32| {
                            if cb == 0 {
                                return fixed;
                            }
                            // SAFETY: the program's callback, with a block size as it expects.
                            std::mem::transmute::<u64, B2D>(cb)(b as std::ffi::c_int) as u64
                        };
                        let (grid, block) = occupancy::potential_block_size(&facts, &lim, dynamic, w(5) as u32);
                        put(f, raw, 0, u64::from(grid));
                        put(f, raw, 1, u64::from(block));
                    }
                    "cuOccupancyAvailableDynamicSMemPerBlock" => {
                        let n = occupancy::available_dynamic_smem(&facts, &lim, w(2) as u32, w(3) as u32);
                        put(f, raw, 0, n);
                    }
                    _ => {
                        let n = occupancy::active_blocks(&facts, &lim, w(2) as u32, w(3));
                        put(f, raw, 0, u64::from(n));
                    }
                }
                0
            }
            "cuFuncGetName" | "cuKernelGetName" => match modules::kernel(w(1)) {
                Some(k) => {
                    put(f, raw, 0, static_cstr(&k.name) as u64);
                    0
                }
                None => INVALID_VALUE,
            },
            "cuMemHostGetFlags" => match super::host::flags(w(1)) {
                Some(v) => {
                    put(f, raw, 0, v);
                    0
                }
                None => INVALID_VALUE,
            },
            "cuArrayGetDescriptor" => array_descriptor(w(0), w(1), false),
            "cuArray3DGetDescriptor" => array_descriptor(w(0), w(1), true),
            _ if f.server_answers() => return Step::Wait,
            _ => return unsupported(f, "no local answer for this query yet"),
        };
        Step::Done(st)
    }
}

/// Calls that return new handles: client numbers, with what later answers need about them.
unsafe fn create(f: &ApiFunction, raw: &[u64]) -> Step {
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    let outs: Vec<(usize, HandleKind)> = f
        .args
        .iter()
        .enumerate()
        .filter_map(|(i, a)| match (a.dir, a.kind) {
            (Direction::Out, ArgKind::Handle(k)) => Some((i, k)),
            _ => None,
        })
        .collect();
    let code_image = f.args.iter().any(|a| matches!(a.kind, ArgKind::Image | ArgKind::ImageFile));
    for (i, kind) in outs {
        let h = match (f.name, kind) {
            ("cuDevicePrimaryCtxRetain", _) => context_books::retain_primary(w(1) as u32),
            (_, HandleKind::Module | HandleKind::Library) if code_image => {
                let h = new_handle();
                modules::loaded(h);
                h
            }
            ("cuModuleGetFunction" | "cuLibraryGetKernel", _) => {
                // SAFETY: the program's NUL-terminated kernel name.
                let name = unsafe { cstr(w(2)) };
                let h = new_handle();
                if !modules::function(h, w(1), &name) {
                    return Step::Done(NOT_FOUND);
                }
                h
            }
            ("cuKernelGetFunction", _) => {
                // A handle of its own (the executor maps kernels and functions apart), the same
                // every time, as the driver's.
                match modules::kernel_function(w(1), new_handle) {
                    Some(h) => h,
                    None => return Step::Done(INVALID_VALUE),
                }
            }
            ("cuLibraryGetModule", _) => w(1),
            // A capture into an existing graph ends in that graph.
            ("cuStreamEndCapture", _) => streams::with(|c| c.capture_into.remove(&w(0))).unwrap_or_else(new_handle),
            ("cuArrayCreate" | "cuArray3DCreate", _) => {
                let h = new_handle();
                // SAFETY: the program's descriptor (2D: 24 bytes, 3D: 40 bytes).
                unsafe { remember_array(h, w(1), f.name == "cuArray3DCreate") };
                h
            }
            _ => new_handle(),
        };
        // SAFETY: the program's out-pointer for the handle.
        unsafe { put(f, raw, i, h) };
        if kind == HandleKind::Context && f.name != "cuDevicePrimaryCtxRetain" {
            context_books::created(f, raw, h); // pushed onto the thread's stack: current
        }
        if f.name == "cuStreamEndCapture" {
            streams::with(|c| c.capturing.remove(&w(0)));
        }
        if kind == HandleKind::Stream && f.name.starts_with("cuStreamCreate") {
            let fl = f.args.iter().position(|a| a.name.eq_ignore_ascii_case("flags")).map_or(0, w);
            let ctx = current_context();
            streams::with(|c| {
                c.stream_flags.insert(h, fl);
                c.stream_ctx.insert(h, ctx);
            });
        }
        if f.name == "cuMemPoolCreate" {
            // SAFETY: the program's pool properties.
            unsafe { pools::created(h, w(1)) };
        }
    }
    Step::Done(0)
}

unsafe fn cstr(p: u64) -> String {
    if p == 0 {
        return String::new();
    }
    // SAFETY: the caller's NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(p as *const std::ffi::c_char) }.to_string_lossy().into_owned()
}

/// Addresses the driver chooses: module globals (from the cubin's symbols).
unsafe fn address_lookup(f: &ApiFunction, raw: &[u64]) -> Step {
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    match f.name {
        "cuModuleGetGlobal" | "cuLibraryGetGlobal" => {
            // SAFETY: the program's NUL-terminated name.
            let name = unsafe { cstr(w(3)) };
            match modules::global(w(2), &name) {
                Some((addr, size)) => {
                    // SAFETY: the program's out-pointers (either may be null).
                    unsafe {
                        put(f, raw, 0, addr);
                        put(f, raw, 1, size);
                    }
                    Step::Done(0)
                }
                // A kernel's name is no variable's: the driver says the value is invalid.
                None if modules::is_module(w(2)) && modules::has_kernel(w(2), &name) => Step::Done(INVALID_VALUE),
                None if modules::is_module(w(2)) => Step::Done(NOT_FOUND),
                None => unsupported(f, "the module's code image could not be analyzed"),
            }
        }
        "cuMemHostGetDevicePointer" if super::host::is_pinned(w(1)) => {
            // With unified addressing the device address of pinned memory is its host address;
            // the program asks for it to use it on the device: shared with the server from now.
            if !super::host::promote_containing(w(1)) {
                return Step::Done(2); // CUDA_ERROR_OUT_OF_MEMORY
            }
            // SAFETY: the program's out-pointer.
            unsafe { put(f, raw, 0, w(1)) };
            Step::Done(0)
        }
        "cuMemHostGetDevicePointer" => Step::Done(INVALID_VALUE),
        _ => unsupported(f, "no local answer for this address yet"),
    }
}

/// Calls that change state the client keeps (contexts: [`contexts::state_change`]; captures,
/// the memory pool, kernel attributes) or none at all.
unsafe fn state_change(f: &ApiFunction, raw: &[u64]) -> Step {
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    // SAFETY: forwarded from the caller.
    if let Some(step) = unsafe { contexts::state_change(f, raw) } {
        return step;
    }
    match f.name {
        "cuDeviceSetMemPool" => {
            if !super::driver::is_default_pool(w(1)) && !is_client_handle(w(1)) {
                return Step::Done(INVALID_VALUE);
            }
            super::driver::set_current_pool(w(0) as u32, w(1));
        }
        "cuMemPoolDestroy" if super::driver::is_default_pool(w(0)) => return Step::Done(INVALID_VALUE),
        "cuMemPoolDestroy" => super::driver::pool_destroyed(w(0)),
        // SAFETY: the program's access descriptors.
        "cuMemPoolSetAccess" => return Step::Done(unsafe { pools::set_access(w(0), w(1), w(2)) }),
        // Arena memory's attributes are the arena's (`arena::before` answered them); any
        // other address is no allocation of the session.
        "cuPointerSetAttribute" => return Step::Done(INVALID_VALUE),
        "cuStreamBeginCapture" | "cuStreamBeginCaptureToGraph" => {
            super::hostfn::began_capture(w(0));
            streams::with(|c| {
                c.capturing.insert(w(0));
                if f.name == "cuStreamBeginCaptureToGraph" {
                    c.capture_into.insert(w(0), w(1));
                } else {
                    c.capture_into.remove(&w(0));
                }
                let id = c.capture_ids.len() as u64 + 1;
                c.capture_ids.insert(w(0), id);
            });
        }
        // Kept so that attribute queries stay local; the call goes to the server too.
        "cuFuncSetAttribute" | "cuKernelSetAttribute" => {
            let (h, attr, value) = if f.name == "cuFuncSetAttribute" { (w(0), w(1), w(2)) } else { (w(2), w(0), w(1)) };
            // CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: cluster sizes are the server's.
            if attr == 14 && value != 0 {
                super::checks::NON_PORTABLE_SEEN.store(true, Ordering::Relaxed);
            }
            if let Some(k) = modules::kernel(h) {
                if !modules::set_attribute(&k, attr as u32, value as u32 as i32) {
                    return Step::Done(INVALID_VALUE);
                }
            }
        }
        // The update runs on the server and the call waits for its status (`checked`): the
        // result written here is success, and the session writes the failure's result if the
        // server's driver refuses it (`session::settle`). The runtime reads the result it passes
        // down, so it is written as the driver writes it.
        "cuGraphExecUpdate" => {
            let v2 = f.args.iter().any(|a| a.name == "resultInfo");
            // SAFETY: the program's out-pointers (null skipped): v2 a
            // `CUgraphExecUpdateResultInfo` (result, error node, error-from node: 24 bytes), v1
            // a node handle and a result enum.
            unsafe {
                if v2 {
                    if w(2) != 0 {
                        std::ptr::write_bytes(w(2) as *mut u8, 0, 24);
                    }
                } else {
                    put(f, raw, 2, 0);
                    put(f, raw, 3, 0);
                }
            }
        }
        // Sent: the server does what the driver does (replay/handled.rs lists every one).
        _ if f.sent_by_client() => {}
        // A local function without a rule here would be a success that did nothing.
        _ => return unsupported(f, "no client rule answers it"),
    }
    Step::Done(0)
}
