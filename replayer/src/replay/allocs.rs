//! Device allocations at their recorded addresses: plain ones (clean for uploads where they take
//! over memory the program's last session held), graph memory (mapped once, kept for every
//! launch), and the empty nodes that stand for a capture's memory allocation and free nodes.

use cudarc::driver::sys;

use super::{check, ReplayError, State};

/// A device allocation at its recorded address; one that takes over memory the last session
/// of the program held is clean for its uploads ([`super::resident`]).
pub(super) fn alloc(st: &mut State, recorded: u64, size: u64, seq: u64) -> Result<(), ReplayError> {
    let before = st.mem.adopted;
    st.mem.alloc(recorded, size, seq)?;
    if st.mem.adopted != before {
        st.resident.adopted(recorded);
    }
    Ok(())
}

/// Graph memory at `recorded` (`State::graph_memory`): mapped the first time, the same memory
/// when a graph allocates that address again.
pub(super) fn graph_alloc(st: &mut State, recorded: u64, size: u64, seq: u64) -> Result<(), ReplayError> {
    if st.graph_memory.contains(&recorded) {
        if st.mem.find(recorded).is_some_and(|a| a.recorded == recorded && a.size >= size) {
            return Ok(());
        }
        // A larger allocation at that address now: the old one goes (`cuMemFree` waits for
        // the work that may use it).
        st.mem.free(recorded);
    }
    alloc(st, recorded, size, seq)?;
    st.graph_memory.insert(recorded);
    Ok(())
}

/// An empty node added to the capture in progress on `s` after its current dependencies (which
/// it then replaces), standing for the memory node the driver's capture of the recorded call
/// made (`what`: its type, address and size; `State::memory_nodes`).
///
/// # Safety
/// `s` is a live stream.
pub(super) unsafe fn memory_node(
    st: &mut State,
    s: sys::CUstream,
    what: (sys::CUgraphNodeType, u64, u64),
    seq: u64,
    name: &str,
) -> Result<(), ReplayError> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let (mut id, mut g, mut n) = (0u64, std::ptr::null_mut(), 0usize);
    let (mut deps, mut edges) = (std::ptr::null(), std::ptr::null());
    // SAFETY (block): driver calls with a live stream, valid out-pointers, and the driver's
    // own dependency array (valid until the next capture call on the stream).
    unsafe {
        check(
            sys::cuStreamGetCaptureInfo_v3(s, &mut status, &mut id, &mut g, &mut deps, &mut edges, &mut n),
            seq,
            name,
        )?;
        if status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE || g.is_null() {
            return Ok(());
        }
        let mut node = std::ptr::null_mut();
        check(sys::cuGraphAddEmptyNode(&mut node, g, deps, n), seq, name)?;
        // 1 = CU_STREAM_SET_CAPTURE_DEPENDENCIES.
        check(sys::cuStreamUpdateCaptureDependencies_v2(s, &mut node, std::ptr::null(), 1, 1), seq, name)?;
        st.memory_nodes.insert(node as usize, what);
    }
    Ok(())
}
