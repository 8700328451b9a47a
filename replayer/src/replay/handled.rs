//! The functions this replayer — and so the server's executor — executes or answers: the
//! registry the API table's `=server` disposition is checked against (a test: every function the
//! table sends to the server is here, and nothing else is). A record of a `=server` function
//! missing here ends the replay or session naming it before anything runs.

/// Functions whose records are executed (`exec.rs`, `exec_graph.rs`, `exec_array.rs`,
/// `exec_ops.rs`, `unified.rs`).
pub const EXECUTED: &[&str] = &[
    "cuInit",
    // memory
    "cuMemAlloc",
    "cuMemAllocPitch",
    "cuMemAllocAsync",
    "cuMemAllocFromPoolAsync",
    "cuMemFree",
    "cuMemFreeAsync",
    "cuMemPoolSetAttribute",
    "cuMemPoolTrimTo",
    "cuMemPoolCreate",
    "cuMemPoolDestroy",
    "cuDeviceSetMemPool",
    // the program's own virtual memory (vmm.rs)
    "cuMemAddressReserve",
    "cuMemAddressFree",
    "cuMemCreate",
    "cuMemRelease",
    "cuMemRetainAllocationHandle",
    "cuMemMap",
    "cuMemUnmap",
    "cuMemSetAccess",
    // copies and sets
    "cuMemcpy",
    "cuMemcpyAsync",
    "cuMemcpyHtoD",
    "cuMemcpyHtoDAsync",
    "cuMemcpyDtoH",
    "cuMemcpyDtoHAsync",
    "cuMemcpyDtoD",
    "cuMemcpyDtoDAsync",
    "cuMemcpyPeer",
    "cuMemcpyPeerAsync",
    "cuMemcpy2D",
    "cuMemcpy2DAsync",
    "cuMemcpy2DUnaligned",
    "cuMemcpy3D",
    "cuMemcpy3DAsync",
    "cuMemcpyAtoA",
    "cuMemcpyAtoD",
    "cuMemcpyAtoH",
    "cuMemcpyAtoHAsync",
    "cuMemcpyDtoA",
    "cuMemcpyHtoA",
    "cuMemcpyHtoAAsync",
    "cuMemsetD8",
    "cuMemsetD8Async",
    "cuMemsetD16",
    "cuMemsetD16Async",
    "cuMemsetD32",
    "cuMemsetD32Async",
    "cuMemsetD2D8",
    "cuMemsetD2D8Async",
    "cuMemsetD2D16",
    "cuMemsetD2D16Async",
    "cuMemsetD2D32",
    "cuMemsetD2D32Async",
    // arrays, textures, surfaces
    "cuArrayCreate",
    "cuArray3DCreate",
    "cuArrayDestroy",
    "cuMipmappedArrayCreate",
    "cuMipmappedArrayDestroy",
    "cuMipmappedArrayGetLevel",
    "cuTexObjectCreate",
    "cuTexObjectDestroy",
    "cuSurfObjectCreate",
    "cuSurfObjectDestroy",
    // code
    "cuModuleLoad",
    "cuModuleLoadData",
    "cuModuleLoadDataEx",
    "cuModuleLoadFatBinary",
    "cuModuleUnload",
    "cuModuleGetFunction",
    "cuModuleGetGlobal",
    "cuLibraryGetGlobal",
    "cuLibraryLoadData",
    "cuLibraryLoadFromFile",
    "cuLibraryUnload",
    "cuLibraryGetKernel",
    "cuLibraryGetModule",
    "cuKernelGetFunction",
    "cuFuncLoad",
    "cuFuncSetAttribute",
    "cuFuncSetCacheConfig",
    "cuFuncSetSharedMemConfig",
    "cuKernelSetAttribute",
    "cuKernelSetCacheConfig",
    // launches
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cuLaunchCooperativeKernel",
    // contexts
    "cuCtxSetLimit",
    "cuCtxSetCacheConfig",
    "cuCtxSetFlags",
    "cuDevicePrimaryCtxSetFlags",
    "cuDevicePrimaryCtxReset",
    "cuCtxResetPersistingL2Cache",
    "cuCtxSynchronize",
    // streams and events
    "cuStreamCreate",
    "cuStreamCreateWithPriority",
    "cuStreamDestroy",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
    "cuStreamSetAttribute",
    "cuStreamCopyAttributes",
    "cuStreamWaitValue32",
    "cuStreamWaitValue64",
    "cuStreamWriteValue32",
    "cuStreamWriteValue64",
    "cuStreamBatchMemOp",
    "cuStreamBeginCapture",
    "cuStreamBeginCaptureToGraph",
    "cuStreamEndCapture",
    "cuStreamUpdateCaptureDependencies",
    "cuEventCreate",
    "cuEventDestroy",
    "cuEventRecord",
    "cuEventRecordWithFlags",
    "cuEventSynchronize",
    // graphs
    "cuGraphCreate",
    "cuGraphDestroy",
    "cuGraphClone",
    "cuGraphAddKernelNode",
    "cuGraphAddMemcpyNode",
    "cuGraphAddMemsetNode",
    "cuGraphAddEmptyNode",
    "cuGraphAddMemAllocNode",
    "cuGraphAddMemFreeNode",
    "cuDeviceGraphMemTrim",
    // host functions: run on the client in a session (host_calls.rs); a local replay keeps
    // their place in the stream with no-ops
    "cuLaunchHostFunc",
    "cuStreamAddCallback",
    "cuGraphAddHostNode",
    // managed memory: device memory at the client's address, coherent with the client's host
    // pages at submissions and waits (hostview.rs); the hints have nothing to act on
    "cuMemAllocManaged",
    "cuMemAdvise",
    "cuMemPrefetchAsync",
    "cuStreamAttachMemAsync",
    "cuGraphAddNode",
    "cuGraphKernelNodeSetParams",
    "cuGraphExecKernelNodeSetParams",
    "cuGraphInstantiate",
    "cuGraphInstantiateWithFlags",
    "cuGraphInstantiateWithParams",
    "cuGraphExecUpdate",
    "cuGraphExecDestroy",
    "cuGraphLaunch",
    "cuGraphUpload",
    // the profiler
    "cuProfilerStart",
    "cuProfilerStop",
];

/// Queries the server answers after the calls before them ran (`query.rs`, `graph_answer.rs`);
/// replaying a recording has nothing to re-execute for them.
pub const ANSWERED: &[&str] = &[
    "cuCtxGetApiVersion",
    "cuCtxGetLimit",
    "cuCtxGetStreamPriorityRange",
    "cuModuleGetLoadingMode",
    "cuMemGetInfo",
    "cuMemPoolGetAttribute",
    "cuMemGetAccess",
    "cuGraphConditionalHandleCreate",
    "cuStreamQuery",
    "cuEventQuery",
    "cuEventElapsedTime",
    "cuOccupancyMaxActiveClusters",
    "cuGraphGetNodes",
    "cuGraphGetRootNodes",
    "cuGraphGetEdges",
    "cuGraphNodeGetDependencies",
    "cuGraphNodeGetDependentNodes",
    "cuGraphNodeFindInClone",
    "cuGraphNodeGetType",
    "cuGraphKernelNodeGetParams",
];

/// Whether records of `name` are executed here. (Records of functions the client answers
/// itself — its context stack, the JIT linker's steps, whose product reaches the device through
/// the recorded load of the linked image — are counted, not executed: `exec.rs`.)
pub fn executes(name: &str) -> bool {
    EXECUTED.contains(&name)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use gpuless_analyzer::api::{functions, ApiLevel, Disposition};

    /// The API table sends exactly these functions to the server: every one has a handler or an
    /// answer here, and nothing here is answered on the client or refused.
    #[test]
    fn every_function_the_server_gets_is_executed_or_answered() {
        let server: BTreeSet<&str> = functions()
            .iter()
            .filter(|f| f.level == ApiLevel::Driver && f.disposition == Disposition::Server)
            .map(|f| f.name)
            .collect();
        let here: BTreeSet<&str> = super::EXECUTED.iter().chain(super::ANSWERED).copied().collect();
        let missing: Vec<_> = server.difference(&here).collect();
        let extra: Vec<_> = here.difference(&server).collect();
        assert!(missing.is_empty(), "=server in the table, no handler: {missing:?}");
        assert!(extra.is_empty(), "handled here, not =server in the table: {extra:?}");
        // Address look-ups are executed: the server learns where the client put a global.
        for f in functions().iter().filter(|f| f.disposition == Disposition::Server) {
            let answered = f.is_query() && f.sync != gpuless_analyzer::api::SyncClass::AddressLookup;
            assert_eq!(super::ANSWERED.contains(&f.name), answered, "{}: a query is answered, a call executed", f.name);
        }
        assert!(super::EXECUTED.len() + super::ANSWERED.len() == here.len(), "a name listed twice");
    }
}
