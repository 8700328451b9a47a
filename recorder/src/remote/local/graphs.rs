//! A graph update the server's driver refused, as the program's out-arguments say it.

use gpuless_analyzer::api::ApiFunction;

/// `cuGraphExecUpdate`'s result after the server's driver refused the update:
/// `CU_GRAPH_EXEC_UPDATE_ERROR` (the driver's reason stays in the server's log).
///
/// # Safety
/// `raw` are the program's arguments to `f` (a `cuGraphExecUpdate` variant).
pub(crate) unsafe fn graph_update_failed(f: &ApiFunction, raw: &[u64]) {
    const UPDATE_ERROR: u64 = 1;
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    // SAFETY: as `state_change` writes them: v2 a `CUgraphExecUpdateResultInfo` (its result
    // first), v1 a node handle and a result enum.
    unsafe {
        if f.args.iter().any(|a| a.name == "resultInfo") {
            if w(2) != 0 {
                std::ptr::write_unaligned(w(2) as *mut u32, UPDATE_ERROR as u32);
            }
        } else {
            super::put(f, raw, 3, UPDATE_ERROR);
        }
    }
}
