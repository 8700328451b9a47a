//! The attributes the client answers for each device: the session's description
//! (`devices.rs`) but for what client mode changes — managed memory and pageable access.

/// Attribute `id` of the current device (as [`attr_of`]).
pub(crate) fn attr(id: u32) -> Option<i32> {
    attr_of(super::context_books::current_device(), id)
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
                let _ = cell.set(index(super::devices::description(dev)?));
            }
            cell.get()?.get(id as usize).copied().flatten()
        }
        None => super::devices::description(dev)?.attributes.iter().find(|a| a.0 == id).map(|a| a.1),
    }
}

/// `CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY` and the attributes of pageable access.
const MANAGED_MEMORY: u32 = 83;
const PAGEABLE_MEMORY_ACCESS: u32 = 88;
const CONCURRENT_MANAGED_ACCESS: u32 = 89;
const PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES: u32 = 100;
const DIRECT_MANAGED_MEM_ACCESS_FROM_HOST: u32 = 101;
