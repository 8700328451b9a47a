//! The session's devices as calls name them: a device argument that is not one of the
//! session's, and the attributes the client answers for each device (from the session's
//! description, [`super::super::devices`], but for what client mode changes: managed memory
//! and pageable access).

use gpuless_analyzer::api::{ApiFunction, ArgKind, Direction, HandleKind};

use super::{current_device, INVALID_DEVICE, INVALID_VALUE};

/// A call naming a device that is not one of the session's ([`super::devices`]) gets the
/// driver's `CUDA_ERROR_INVALID_DEVICE` (before anything else, refusals included, as the
/// driver checks the device first).
pub(crate) fn bad_device(f: &ApiFunction, raw: &[u64]) -> Option<u32> {
    // Managed memory's hints name the host as CU_DEVICE_CPU (-1).
    let cpu_ok = matches!(f.name, "cuMemAdvise" | "cuMemPrefetchAsync");
    let bad = f.args.iter().enumerate().any(|(i, a)| {
        a.dir == Direction::In
            && a.kind == ArgKind::Handle(HandleKind::Device)
            && raw.get(i).is_some_and(|&d| !(super::super::devices::valid(d) || cpu_ok && d as i32 == -1))
    });
    // The driver's own answer: cuDeviceGetMemPool checks the device as a plain value.
    bad.then_some(if f.name == "cuDeviceGetMemPool" { INVALID_VALUE } else { INVALID_DEVICE })
}

/// Attribute `id` of the current device (as [`attr_of`]).
pub(crate) fn attr(id: u32) -> Option<i32> {
    attr_of(current_device(), id)
}

/// Attribute `id` of device `dev` as the client answers it.
pub(crate) fn attr_of(dev: u32, id: u32) -> Option<i32> {
    // Managed memory through the client (`shared.rs`): its kernels cannot read the program's
    // pageable memory, nor the device the program's page tables; and its coherence is that of
    // a device without concurrent managed access (the host's view is made whole at
    // synchronizations, not while kernels run).
    match id {
        MANAGED_MEMORY => return Some(1),
        PAGEABLE_MEMORY_ACCESS
        | PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES
        | DIRECT_MANAGED_MEM_ACCESS_FROM_HOST
        | CONCURRENT_MANAGED_ACCESS => return Some(0),
        _ => {}
    }
    // Indexed once per device (programs ask thousands of times per second).
    const DEVICES: usize = 16;
    static BY_ID: [std::sync::OnceLock<Vec<Option<i32>>>; DEVICES] = [const { std::sync::OnceLock::new() }; DEVICES];
    let index = |d: &gpuless_traces::protocol::DeviceDescription| {
        let n = d.attributes.iter().map(|a| a.0 as usize + 1).max().unwrap_or(0).min(4096);
        let mut v = vec![None; n];
        for &(k, val) in &d.attributes {
            if let Some(slot) = v.get_mut(k as usize) {
                *slot = Some(val);
            }
        }
        v
    };
    match BY_ID.get(dev as usize) {
        Some(cell) => {
            if cell.get().is_none() {
                let _ = cell.set(index(super::super::devices::description(dev)?));
            }
            cell.get()?.get(id as usize).copied().flatten()
        }
        None => super::super::devices::description(dev)?.attributes.iter().find(|a| a.0 == id).map(|a| a.1),
    }
}

/// `CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY` and the attributes of pageable access.
const MANAGED_MEMORY: u32 = 83;
const PAGEABLE_MEMORY_ACCESS: u32 = 88;
const CONCURRENT_MANAGED_ACCESS: u32 = 89;
const PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES: u32 = 100;
const DIRECT_MANAGED_MEM_ACCESS_FROM_HOST: u32 = 101;
