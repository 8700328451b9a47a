//! What an executor started for a session of several GPUs says of them in its `Ready` (and
//! so in the session's `Welcome`): devices 1.. described as device 0 is, with their NVML facts,
//! every pair's peer facts (the driver's and NVML's P2P statuses), every device's active NVLinks (the topology NCCL reads from a
//! client's NVML), and the server's numbers of the GPUs.

use gpuless_traces::protocol::{DeviceDescription, MoreDevices, NvLinkFact, PeerFact};

/// The further devices of this executor's process (none where it sees one), `device` being
/// device 0.
pub(super) fn describe(device: &DeviceDescription, memory_limit: Option<u64>) -> MoreDevices {
    let mut more = crate::replay::devices::describe_more(memory_limit);
    for d in &mut more.devices {
        d.nvml = crate::partition::nvml::facts(&[d.nvml_uuid(false), d.nvml_uuid(true)]);
        if memory_limit.is_some() {
            d.nvml.total_mem = 0;
        }
    }
    if !more.devices.is_empty() {
        // NVLinks, for the topology NCCL reads from a client's NVML.
        for (k, d) in std::iter::once(device).chain(&more.devices).enumerate() {
            for l in crate::partition::nvml::nvlinks(&[d.nvml_uuid(false)]) {
                more.links.push(NvLinkFact { device: k as u32, ..l });
            }
        }
        // NVML's own P2P statuses (NCCL reads them from a client's NVML).
        let uuids: Vec<Vec<String>> =
            std::iter::once(device).chain(&more.devices).map(|d| vec![d.nvml_uuid(false), d.nvml_uuid(true)]).collect();
        for (src, dst, index, status) in crate::partition::nvml::p2p_statuses(&uuids) {
            more.peers.push(PeerFact {
                src,
                dst,
                attr: gpuless_traces::protocol::NVML_P2P_STATUS + index,
                value: status as i32,
            });
        }
        eprintln!(
            "gpuless executor: {} devices, {} active NVLinks, {} peer facts",
            more.count(),
            more.links.len(),
            more.peers.len()
        );
    }
    more.gpus = std::env::var("GPULESS_MORE_GPUS")
        .unwrap_or_default()
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    more
}

/// Whether this executor's contexts are clients of an MPS server an operator runs (the
/// current device's `CU_DEVICE_ATTRIBUTE_MPS_ENABLED`): then sessions' kernels run concurrently
/// through it rather than time-sliced, which the server reports (docs/SCHEDULING.md).
pub(super) fn mps_enabled() -> bool {
    use cudarc::driver::sys;
    let (mut dev, mut v) = (0, 0);
    // SAFETY: valid out-pointers; the driver is initialized.
    unsafe {
        sys::cuCtxGetDevice(&mut dev) == sys::CUresult::CUDA_SUCCESS
            && sys::cuDeviceGetAttribute(&mut v, sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MPS_ENABLED, dev)
                == sys::CUresult::CUDA_SUCCESS
            && v == 1
    }
}
