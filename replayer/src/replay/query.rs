//! Answers to state queries (the API table's `StateQuery` class) for a client that cannot
//! answer them itself: event timings, whether a stream or an event is done, free memory; and
//! the device queries only the GPU can answer (`gpu` in the API table). The
//! executor asks the driver after the call ran in order and returns the status and the
//! function's out values, so a remote program sees what a local one would.

use cudarc::driver::sys;
use gpuless_traces::protocol::QueryResult;
use gpuless_traces::CallRecord;

use super::args::Call;
use super::State;

/// `cuCtxGetLimit` with the limit as a plain integer (values newer than cudarc's enum).
type CtxGetLimit = unsafe extern "C" fn(*mut usize, u32) -> sys::CUresult;

/// `cuModuleGetLoadingMode` with the mode as a plain integer.
type LoadingMode = unsafe extern "C" fn(*mut u32) -> sys::CUresult;

/// Function attributes with the attribute as a plain integer (values newer than cudarc's enum).
type FuncGetAttribute = unsafe extern "C" fn(*mut i32, u32, *mut std::ffi::c_void) -> sys::CUresult;
type KernelGetAttribute = unsafe extern "C" fn(*mut i32, u32, *mut std::ffi::c_void, i32) -> sys::CUresult;

/// Function attributes sent along with the one asked for: the runtime asks for all of them
/// at once (`cudaFuncGetAttributes`), so one round trip answers the rest from the client's
/// memory. `u64::MAX` for an attribute the driver refused.
pub const FUNCTION_ATTRIBUTES: u32 = 16;

fn all_attributes(mut get: impl FnMut(u32, &mut i32) -> sys::CUresult) -> Vec<u64> {
    (0..FUNCTION_ATTRIBUTES)
        .map(|a| {
            let mut v = 0i32;
            if get(a, &mut v) == sys::CUresult::CUDA_SUCCESS {
                v as u32 as u64
            } else {
                u64::MAX
            }
        })
        .collect()
}

/// `CUDA_ERROR_NOT_SUPPORTED`: the executor does not answer this query.
const NOT_SUPPORTED: i32 = 801;

/// The answer to `rec` if it is a state query; `None` for every other call.
pub(crate) fn answer(st: &mut State, rec: &CallRecord) -> Option<QueryResult> {
    let f = rec.function.api()?;
    // A device query reaches the executor only when its client could not answer it.
    if !f.server_answers() && f.sync != gpuless_analyzer::api::SyncClass::DeviceQuery {
        return None;
    }
    let c = Call { f, rec };
    // SAFETY: driver queries with handles translated from the client's.
    if let Some((status, values)) = unsafe { super::graph_answer::answer(st, &c) } {
        return Some(QueryResult { seq: rec.seq, status, values });
    }
    let event = |name: &str| c.word(name).ok().and_then(|e| st.events.get(&e).copied());
    // SAFETY (whole match): queries with live handles and valid out-pointers.
    let (status, values) = unsafe {
        match f.name {
            "cuEventElapsedTime" => match (event("hStart"), event("hEnd")) {
                (Some(a), Some(b)) => {
                    let mut ms = 0f32;
                    let r = sys::cuEventElapsedTime_v2(&mut ms, a, b);
                    (r as i32, vec![u64::from(ms.to_bits())])
                }
                _ => (sys::CUresult::CUDA_ERROR_INVALID_HANDLE as i32, vec![0]),
            },
            "cuEventQuery" => match event("hEvent") {
                // Shared with the program's other processes: any process's records (`ipc_events`).
                Some(e) => {
                    match (sys::cuEventQuery(e) as i32, c.word("hEvent").ok().and_then(|h| st.ipc_events.query(h))) {
                        (0, Some(shared)) => (shared as i32, Vec::new()),
                        (r, _) => (r, Vec::new()),
                    }
                }
                None => (sys::CUresult::CUDA_ERROR_INVALID_HANDLE as i32, Vec::new()),
            },
            "cuStreamQuery" => match c.word("hStream") {
                Ok(s) => match st.stream(s) {
                    Ok(s) => (sys::cuStreamQuery(s) as i32, Vec::new()),
                    Err(_) => (sys::CUresult::CUDA_ERROR_INVALID_HANDLE as i32, Vec::new()),
                },
                Err(_) => (sys::CUresult::CUDA_ERROR_INVALID_HANDLE as i32, Vec::new()),
            },
            "cuMemGetInfo" => {
                let (mut free, mut total) = (0usize, 0usize);
                let r = sys::cuMemGetInfo_v2(&mut free, &mut total);
                // A partition with a memory limit reports that limit, less what the session holds.
                let (free, total) = match st.mem.limit() {
                    Some(l) => (l.saturating_sub(st.mem.in_use()).min(free as u64), l),
                    None => (free as u64, total as u64),
                };
                (r as i32, vec![free, total])
            }
            "cuPointerGetAttribute" | "cuPointerGetAttributes" => pointer(st, &c),
            "cuMemGetAccess" => super::vmm::get_access(st, &c),
            "cuGraphConditionalHandleCreate" => match st.conditionals.get(&rec.seq) {
                Some(&h) => (0, vec![h]),
                None => (sys::CUresult::CUDA_ERROR_INVALID_VALUE as i32, vec![0]),
            },
            "cuFuncGetAttribute" => match c.word("hfunc").ok().and_then(|h| st.function(h)) {
                Some(func) => {
                    let get: FuncGetAttribute = match super::raw::raw_fn(b"cuFuncGetAttribute\0", rec.seq) {
                        Ok(g) => g,
                        Err(_) => return Some(QueryResult { seq: rec.seq, status: NOT_SUPPORTED, values: vec![0] }),
                    };
                    let mut v = 0i32;
                    let r = get(&mut v, c.word("attrib").unwrap_or(0) as u32, func.cast());
                    let mut values = vec![v as u32 as u64];
                    values.extend(all_attributes(|a, out| get(out, a, func.cast())));
                    (r as i32, values)
                }
                None => (sys::CUresult::CUDA_ERROR_INVALID_HANDLE as i32, vec![0]),
            },
            "cuKernelGetAttribute" => match c.word("kernel").ok().and_then(|k| st.kernels.get(&k).copied()) {
                Some(k) => {
                    let get: KernelGetAttribute = match super::raw::raw_fn(b"cuKernelGetAttribute\0", rec.seq) {
                        Ok(g) => g,
                        Err(_) => return Some(QueryResult { seq: rec.seq, status: NOT_SUPPORTED, values: vec![0] }),
                    };
                    let mut v = 0i32;
                    let r = get(&mut v, c.word("attrib").unwrap_or(0) as u32, k.cast(), 0);
                    let mut values = vec![v as u32 as u64];
                    values.extend(all_attributes(|a, out| get(out, a, k.cast(), 0)));
                    (r as i32, values)
                }
                None => (sys::CUresult::CUDA_ERROR_INVALID_HANDLE as i32, vec![0]),
            },
            // A pool's usage (attributes 4-8) is in its client's books (the arena serves
            // stream-ordered allocations, `recorder/src/pools.rs`): not answered here.
            "cuMemPoolGetAttribute" => match c.word("attr").unwrap_or(u64::MAX) {
                4..=8 => (NOT_SUPPORTED, vec![0]),
                attr => {
                    let mut pool =
                        c.word("pool").ok().and_then(|p| st.pools.get(&p).copied()).unwrap_or(std::ptr::null_mut());
                    let r = if pool.is_null() {
                        sys::cuDeviceGetDefaultMemPool(&mut pool, 0)
                    } else {
                        sys::CUresult::CUDA_SUCCESS
                    };
                    if r != sys::CUresult::CUDA_SUCCESS {
                        (r as i32, vec![0])
                    } else {
                        type Get = unsafe extern "C" fn(sys::CUmemoryPool, u32, *mut std::ffi::c_void) -> sys::CUresult;
                        match super::raw::raw_fn::<Get>(b"cuMemPoolGetAttribute\0", rec.seq) {
                            Ok(get) => {
                                let mut v = 0u64;
                                let r = get(pool, attr as u32, (&mut v as *mut u64).cast());
                                // Attributes 0-2 are ints: only the low word was written.
                                (r as i32, vec![if attr <= 2 { v as u32 as u64 } else { v }])
                            }
                            Err(_) => (NOT_SUPPORTED, vec![0]),
                        }
                    }
                }
            },
            "cuCtxGetStreamPriorityRange" => {
                let (mut least, mut greatest) = (0i32, 0i32);
                let r = sys::cuCtxGetStreamPriorityRange(&mut least, &mut greatest);
                (r as i32, vec![least as u32 as u64, greatest as u32 as u64])
            }
            "cuModuleGetLoadingMode" => {
                let get: LoadingMode = match super::raw::raw_fn(b"cuModuleGetLoadingMode\0", rec.seq) {
                    Ok(g) => g,
                    Err(_) => return Some(QueryResult { seq: rec.seq, status: NOT_SUPPORTED, values: vec![0] }),
                };
                let mut mode = 0u32;
                let r = get(&mut mode);
                (r as i32, vec![u64::from(mode)])
            }
            "cuCtxGetApiVersion" => {
                // The executor's own context stands for every context of its client.
                let mut v = 0u32;
                let r = sys::cuCtxGetApiVersion(std::ptr::null_mut(), &mut v);
                (r as i32, vec![u64::from(v)])
            }
            "cuCtxGetLimit" => {
                let mut v = 0usize;
                let get: CtxGetLimit = match super::raw::raw_fn(b"cuCtxGetLimit\0", rec.seq) {
                    Ok(g) => g,
                    Err(_) => return Some(QueryResult { seq: rec.seq, status: NOT_SUPPORTED, values: vec![0] }),
                };
                let r = get(&mut v, c.word("limit").unwrap_or(0) as u32);
                (r as i32, vec![v as u64])
            }
            "cuOccupancyMaxActiveBlocksPerMultiprocessor"
            | "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags"
            | "cuOccupancyAvailableDynamicSMemPerBlock"
            | "cuOccupancyMaxPotentialBlockSize" => occupancy(st, &c),
            "cuOccupancyMaxActiveClusters" => {
                let func = c.word("func").ok().and_then(|h| st.function(h));
                match (func, c.arg("config")) {
                    (Some(func), Some(gpuless_traces::Value::LaunchConfig(cfg))) => {
                        let mut attrs = Vec::new();
                        match super::launch::live_config(st, cfg, &mut attrs) {
                            Ok(config) => {
                                let mut n = 0i32;
                                let r = sys::cuOccupancyMaxActiveClusters(&mut n, func, &config);
                                (r as i32, vec![n as u32 as u64])
                            }
                            Err(_) => (sys::CUresult::CUDA_ERROR_INVALID_HANDLE as i32, vec![0]),
                        }
                    }
                    _ => (sys::CUresult::CUDA_ERROR_INVALID_HANDLE as i32, vec![0]),
                }
            }
            _ => (NOT_SUPPORTED, Vec::new()),
        }
    };
    Some(QueryResult { seq: rec.seq, status, values })
}

/// An occupancy query for a kernel whose registers its client did not know (the driver's
/// answer; `cuOccupancyMaxPotentialBlockSize` only without a shared-memory callback).
///
/// # Safety
/// Driver queries with a live function.
unsafe fn occupancy(st: &State, c: &Call<'_>) -> (i32, Vec<u64>) {
    let bad = (sys::CUresult::CUDA_ERROR_INVALID_HANDLE as i32, vec![0]);
    let w = |n: &str| c.word(n).unwrap_or(0);
    let Some(func) = c.word("func").ok().and_then(|h| st.function(h)) else { return bad };
    // SAFETY (all arms): the driver's queries with valid out-pointers.
    unsafe {
        match c.f.name {
            // The plain query is the one with default flags.
            "cuOccupancyMaxActiveBlocksPerMultiprocessor" | "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags" => {
                let mut n = 0i32;
                let r = sys::cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
                    &mut n,
                    func,
                    w("blockSize") as i32,
                    w("dynamicSMemSize") as usize,
                    w("flags") as u32,
                );
                (r as i32, vec![n as u32 as u64])
            }
            "cuOccupancyAvailableDynamicSMemPerBlock" => {
                let mut n = 0usize;
                let r = sys::cuOccupancyAvailableDynamicSMemPerBlock(
                    &mut n,
                    func,
                    w("numBlocks") as i32,
                    w("blockSize") as i32,
                );
                (r as i32, vec![n as u64])
            }
            _ => {
                let (mut grid, mut block) = (0i32, 0i32);
                let r = sys::cuOccupancyMaxPotentialBlockSize(
                    &mut grid,
                    &mut block,
                    func,
                    None,
                    w("dynamicSMemSize") as usize,
                    w("blockSizeLimit") as i32,
                );
                (r as i32, vec![grid as u32 as u64, block as u32 as u64])
            }
        }
    }
}

/// A pointer query about an address only this driver knows fully (the arena's memory is at
/// the same addresses here as in the client): per attribute, how many bytes the driver wrote
/// (found by asking twice, into buffers filled with 0x00 and with 0xff) and two words of
/// value.
///
/// # Safety
/// Driver queries with buffers sized here.
unsafe fn pointer(st: &State, c: &Call<'_>) -> (i32, Vec<u64>) {
    let single = c.f.name == "cuPointerGetAttribute";
    let ptr = c.word("ptr").unwrap_or(0);
    let attrs: Vec<u32> = if single {
        vec![c.word("attribute").unwrap_or(0) as u32]
    } else {
        match c.arg("attributes") {
            Some(gpuless_traces::Value::Bytes(b)) => {
                b.chunks_exact(4).map(|x| u32::from_le_bytes(x.try_into().unwrap_or([0; 4]))).take(64).collect()
            }
            _ => return (sys::CUresult::CUDA_ERROR_INVALID_VALUE as i32, Vec::new()),
        }
    };
    type Get = unsafe extern "C" fn(*mut std::ffi::c_void, u32, u64) -> sys::CUresult;
    type GetMany = unsafe extern "C" fn(u32, *mut u32, *mut *mut std::ffi::c_void, u64) -> sys::CUresult;
    let ask = |fill: u8| -> (sys::CUresult, Vec<[u8; 16]>) {
        let mut bufs = vec![[fill; 16]; attrs.len()];
        // SAFETY: buffers of 16 bytes per attribute (the largest attribute value).
        let r = unsafe {
            if single {
                match super::raw::raw_fn::<Get>(b"cuPointerGetAttribute\0", c.rec.seq) {
                    Ok(g) => g(bufs[0].as_mut_ptr().cast(), attrs[0], ptr),
                    Err(_) => sys::CUresult::CUDA_ERROR_NOT_SUPPORTED,
                }
            } else {
                let mut ids = attrs.clone();
                let mut outs: Vec<*mut std::ffi::c_void> = bufs.iter_mut().map(|b| b.as_mut_ptr().cast()).collect();
                match super::raw::raw_fn::<GetMany>(b"cuPointerGetAttributes\0", c.rec.seq) {
                    Ok(g) => g(ids.len() as u32, ids.as_mut_ptr(), outs.as_mut_ptr(), ptr),
                    Err(_) => sys::CUresult::CUDA_ERROR_NOT_SUPPORTED,
                }
            }
        };
        (r, bufs)
    };
    let (r, mut zeros) = ask(0);
    let (_, ones) = ask(0xff);
    // The arena's memory is made exportable here (`memory::map`, for `cuIpcGetMemHandle`);
    // `cuMemAlloc` memory reports no handle types, as the driver's does.
    if st.mem.find(ptr).is_some() {
        for (a, z) in attrs.iter().zip(zeros.iter_mut()) {
            if *a == sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES as u32 {
                *z = [0; 16];
            }
        }
    }
    let mut values = Vec::with_capacity(attrs.len() * 3);
    for (z, o) in zeros.iter().zip(&ones) {
        let written = (0..16).rev().find(|&i| z[i] == o[i]).map_or(0, |i| i + 1);
        values.push(written as u64);
        values.push(u64::from_le_bytes(z[..8].try_into().unwrap_or([0; 8])));
        values.push(u64::from_le_bytes(z[8..].try_into().unwrap_or([0; 8])));
    }
    (r as i32, values)
}
