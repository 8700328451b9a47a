//! The checks the driver makes of a call's arguments before it accepts the call, made by the
//! client from what it knows (the device's limits, the kernels it loaded, the session's
//! allocations): a program's bad launch configuration, a copy or set outside device memory, a
//! free of something never allocated, a function handle the session never made, or a context or
//! event the program destroyed gets the driver's error when it is called — not a success followed by an error at the next
//! synchronization, or the end of the session.

use gpuless_analyzer::api::ApiFunction;

use super::attributes::attr;
use super::context_books::{current_context, destroyed};
use super::handles::is_client_handle;
use super::{host, modules, streams, vmm};
use crate::arena;

const INVALID_VALUE: u32 = 1;
const INVALID_CONTEXT: u32 = 201;
const INVALID_HANDLE: u32 = 400;
const INVALID_CLUSTER_SIZE: u32 = 912;

/// Device attributes: max threads per block, max block dimensions, max grid dimensions.
const MAX_THREADS_PER_BLOCK: u32 = 1;
const MAX_BLOCK_DIM: [u32; 3] = [2, 3, 4];
const MAX_GRID_DIM: [u32; 3] = [5, 6, 7];
/// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`.
const MAX_DYNAMIC_SHARED: u32 = 8;

/// The status the driver returns for `f`'s arguments when it refuses them; `None`: accepted.
///
/// # Safety
/// `raw` are the program's arguments to `f` (a launch configuration's pointer is read).
pub(crate) unsafe fn check(f: &ApiFunction, raw: &[u64]) -> Option<u32> {
    // A context or event the program destroyed (the server no longer knows the handle).
    if let Some(st) = destroyed(f, raw) {
        return Some(st);
    }
    let arg = |name: &str| f.args.iter().position(|a| a.name == name).and_then(|i| raw.get(i).copied());
    // Nowhere to write the answer: every output pointer null (those the driver treats as
    // optional, measured on driver 580: `cuCtxPopCurrent`'s and `cuMemGetInfo`'s).
    let mut outs = f.out_args().map(|(i, _)| raw.get(i).copied().unwrap_or(0)).peekable();
    // A capture into an existing graph may end without asking for the graph.
    let optional = match f.name {
        "cuCtxPopCurrent" | "cuMemGetInfo" => true,
        "cuStreamEndCapture" => streams::captures_into_graph(raw.first().copied().unwrap_or(0)),
        _ => false,
    };
    if outs.peek().is_some() && outs.all(|p| p == 0) && !optional {
        return Some(INVALID_VALUE);
    }
    match f.name {
        // Measured on driver 580: a zero-byte cuMemAlloc is invalid.
        "cuMemAlloc" if arg("bytesize") == Some(0) => Some(INVALID_VALUE),
        "cuLaunchKernel" | "cuLaunchCooperativeKernel" => {
            let v = |n: &str| arg(n).unwrap_or(0) as u32;
            let grid = [v("gridDimX"), v("gridDimY"), v("gridDimZ")];
            let block = [v("blockDimX"), v("blockDimY"), v("blockDimZ")];
            launch(arg("f").unwrap_or(0), grid, block, v("sharedMemBytes"))
        }
        "cuLaunchKernelEx" => {
            let config = arg("config").unwrap_or(0);
            if config == 0 {
                return Some(INVALID_VALUE);
            }
            // SAFETY: the program's CUlaunchConfig: seven 32-bit fields first.
            let w = |i: usize| unsafe { std::ptr::read_unaligned((config as *const u32).add(i)) };
            let grid = [w(0), w(1), w(2)];
            // SAFETY: the same configuration's attribute array.
            let cluster = unsafe { cluster_dims(config) };
            launch(arg("f").unwrap_or(0), grid, [w(3), w(4), w(5)], w(6)).or_else(|| clusters(grid, cluster?))
        }
        "cuCtxSynchronize" if current_context() == 0 => Some(INVALID_CONTEXT),
        "cuMemcpyHtoD" | "cuMemcpyHtoDAsync" => device(arg("dstDevice")?, arg("ByteCount")?),
        "cuMemcpyDtoH" | "cuMemcpyDtoHAsync" => device(arg("srcDevice")?, arg("ByteCount")?),
        "cuMemcpyDtoD" | "cuMemcpyDtoDAsync" | "cuMemcpyPeer" | "cuMemcpyPeerAsync" => {
            let n = arg("ByteCount")?;
            device(arg("dstDevice")?, n).or_else(|| device(arg("srcDevice")?, n))
        }
        "cuMemsetD8" | "cuMemsetD8Async" => device(arg("dstDevice")?, arg("N")?),
        "cuMemsetD16" | "cuMemsetD16Async" => device(arg("dstDevice")?, arg("N")?.saturating_mul(2)),
        "cuMemsetD32" | "cuMemsetD32Async" => device(arg("dstDevice")?, arg("N")?.saturating_mul(4)),
        // The loaders' JIT options are not sent (they tune PTX compilation); options that
        // resolve symbols or name what to keep change what loads (the driver refuses them or
        // fails the kernel's launch), so they are refused, said once, not dropped.
        "cuModuleLoadDataEx" => jit_lists(f, arg("numOptions")?, arg("options")?),
        "cuLibraryLoadData" => jit_lists(f, arg("numJitOptions")?, arg("jitOptions")?),
        // The arena answers frees of its own allocations; anything else was never allocated.
        // (Client mode serves every allocation from the arena.)
        "cuMemFree" | "cuMemFreeAsync" => match arg("dptr")? {
            0 => Some(0),
            p => (!arena::contains(p)).then_some(INVALID_VALUE),
        },
        _ => None,
    }
}

/// A loader's JIT options (`n` ids at `ids`) holding a list option (symbol names and
/// addresses, kept kernel and variable names): refused (`CUDA_ERROR_NOT_SUPPORTED`, said once).
fn jit_lists(f: &ApiFunction, n: u64, ids: u64) -> Option<u32> {
    use gpuless_analyzer::api::jit::{value_of, JitValue};
    if n == 0 || ids == 0 {
        return None;
    }
    // More options than any program passes: not looked through, so not passed on silently.
    if n > 1024 {
        return Some(super::step::refused(f, "more than 1,024 JIT options"));
    }
    // SAFETY: the program's array of `n` option ids (4 bytes each).
    let listed = (0..n as usize).any(|i| {
        let id = unsafe { std::ptr::read_unaligned((ids as *const u32).add(i)) };
        matches!(value_of(id), Some(JitValue::Names { .. } | JitValue::Addresses { .. }))
    });
    listed.then(|| {
        super::step::refused(
            f,
            "JIT list options (symbol names and addresses, kept names) are served by the JIT linker only",
        )
    })
}

/// A launch of function `h` with this grid, block and dynamic shared memory.
fn launch(h: u64, grid: [u32; 3], block: [u32; 3], shared: u32) -> Option<u32> {
    if !is_client_handle(h) {
        return Some(INVALID_HANDLE);
    }
    let limit = |id: u32| attr(id).map(|v| v as u32);
    let threads = block.iter().map(|&b| u64::from(b)).product::<u64>();
    if threads == 0 || limit(MAX_THREADS_PER_BLOCK).is_some_and(|m| threads > u64::from(m)) {
        return Some(INVALID_VALUE);
    }
    for i in 0..3 {
        if block[i] == 0 || limit(MAX_BLOCK_DIM[i]).is_some_and(|m| block[i] > m) {
            return Some(INVALID_VALUE);
        }
        if grid[i] == 0 || limit(MAX_GRID_DIM[i]).is_some_and(|m| grid[i] > m) {
            return Some(INVALID_VALUE);
        }
    }
    // More dynamic shared memory than the kernel is allowed (48 KiB less its static shared
    // memory, unless the program raised the limit with cuFuncSetAttribute).
    let allowed = modules::kernel(h).and_then(|k| modules::attribute(&k, MAX_DYNAMIC_SHARED));
    if allowed.is_some_and(|a| i64::from(shared) > i64::from(a)) {
        return Some(INVALID_VALUE);
    }
    None
}

/// A `CUlaunchConfig`'s cluster dimension (`CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`), if set.
///
/// # Safety
/// `config` is the program's `CUlaunchConfig`.
unsafe fn cluster_dims(config: u64) -> Option<[u32; 3]> {
    const CLUSTER_DIMENSION: u32 = 4;
    // SAFETY: the caller's configuration; its attributes as cuda.h lays them out.
    unsafe {
        let c = &*(config as *const cudarc::driver::sys::CUlaunchConfig);
        if c.attrs.is_null() {
            return None;
        }
        let attrs = std::slice::from_raw_parts(c.attrs, c.numAttrs as usize);
        let a = attrs.iter().find(|a| a.id as u32 == CLUSTER_DIMENSION)?;
        let d = a.value.clusterDim;
        Some([d.x, d.y, d.z])
    }
}

/// A grid in clusters of `cluster` blocks: each dimension a multiple of the cluster's, and
/// clusters of at most 8 blocks (the portable size; a kernel that allows more says so with
/// an attribute the client does not follow, so larger clusters are the server's to judge).
fn clusters(grid: [u32; 3], cluster: [u32; 3]) -> Option<u32> {
    const PORTABLE: u32 = 8;
    let size: u64 = cluster.iter().map(|&c| u64::from(c)).product();
    if cluster.contains(&0) || grid.iter().zip(cluster).any(|(g, c)| g % c != 0) {
        return Some(INVALID_CLUSTER_SIZE);
    }
    (size > u64::from(PORTABLE) && !NON_PORTABLE_SEEN.load(std::sync::atomic::Ordering::Relaxed))
        .then_some(INVALID_CLUSTER_SIZE)
}

/// Whether the program has allowed a kernel non-portable cluster sizes
/// (`CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED`): then no size limit is checked here.
pub(crate) static NON_PORTABLE_SEEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `len` bytes at device address `p`: inside one of the session's allocations, a module
/// global, or pinned host memory (a device address through unified addressing).
fn device(p: u64, len: u64) -> Option<u32> {
    if len == 0 {
        return None;
    }
    let end = p.checked_add(len)?;
    let inside = match arena::allocation(p) {
        Some((base, size)) => end <= base + size,
        None => modules::in_globals(p) || host::is_pinned(p) || vmm::mapped(p, len),
    };
    (!inside || p == 0).then_some(INVALID_VALUE)
}
