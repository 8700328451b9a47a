//! A device argument that is not one of the session's (`devices.rs`): the driver's
//! `CUDA_ERROR_INVALID_DEVICE` before anything else.

use gpuless_analyzer::api::{ApiFunction, ArgKind, Direction, HandleKind};

const INVALID_VALUE: u32 = 1;
const INVALID_DEVICE: u32 = 101;

/// A call naming a device that is not one of the session's ([`crate::remote::devices`]) gets the
/// driver's `CUDA_ERROR_INVALID_DEVICE` (before anything else, refusals included, as the
/// driver checks the device first).
pub(crate) fn bad_device(f: &ApiFunction, raw: &[u64]) -> Option<u32> {
    // Managed memory's hints name the host as CU_DEVICE_CPU (-1).
    let cpu_ok = matches!(f.name, "cuMemAdvise" | "cuMemPrefetchAsync");
    let bad = f.args.iter().enumerate().any(|(i, a)| {
        a.dir == Direction::In
            && a.kind == ArgKind::Handle(HandleKind::Device)
            && raw.get(i).is_some_and(|&d| !(crate::remote::devices::valid(d) || cpu_ok && d as i32 == -1))
    });
    // The driver's own answer: cuDeviceGetMemPool checks the device as a plain value.
    bad.then_some(if f.name == "cuDeviceGetMemPool" { INVALID_VALUE } else { INVALID_DEVICE })
}
