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

/// `CUDA_ERROR_NOT_SUPPORTED`: the executor does not answer this query.
const NOT_SUPPORTED: i32 = 801;

/// The answer to `rec` if it is a state query; `None` for every other call.
pub(crate) fn answer(st: &mut State, rec: &CallRecord) -> Option<QueryResult> {
    let f = rec.function.api()?;
    if !f.server_answers() {
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
                Some(e) => (sys::cuEventQuery(e) as i32, Vec::new()),
                None => (sys::CUresult::CUDA_ERROR_INVALID_HANDLE as i32, Vec::new()),
            },
            "cuStreamQuery" => match c.word("hStream") {
                Ok(s) => (sys::cuStreamQuery(st.stream(s)) as i32, Vec::new()),
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
            "cuCtxGetLimit" => {
                let mut v = 0usize;
                let get: CtxGetLimit = match super::exec::raw_fn(b"cuCtxGetLimit\0", rec.seq) {
                    Ok(g) => g,
                    Err(_) => return Some(QueryResult { seq: rec.seq, status: NOT_SUPPORTED, values: vec![0] }),
                };
                let r = get(&mut v, c.word("limit").unwrap_or(0) as u32);
                (r as i32, vec![v as u64])
            }
            "cuOccupancyMaxActiveClusters" => {
                let func = c.word("func").ok().and_then(|h| st.function(h));
                match (func, c.arg("config")) {
                    (Some(func), Some(gpuless_traces::Value::LaunchConfig(cfg))) => {
                        let mut attrs = Vec::new();
                        let config = super::exec::live_config(st, cfg, &mut attrs);
                        let mut n = 0i32;
                        let r = sys::cuOccupancyMaxActiveClusters(&mut n, func, &config);
                        (r as i32, vec![n as u32 as u64])
                    }
                    _ => (sys::CUresult::CUDA_ERROR_INVALID_HANDLE as i32, vec![0]),
                }
            }
            _ => (NOT_SUPPORTED, Vec::new()),
        }
    };
    Some(QueryResult { seq: rec.seq, status, values })
}
