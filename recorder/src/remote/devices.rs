//! The session's devices as the program sees them: device 0 is the `Welcome`'s device, devices
//! 1.. its further ones (a session of several GPUs, `gpuless run --remote --gpus N`), each with
//! its description and what every pair of them can do ([`gpuless_traces::protocol::MoreDevices`]).
//! Set once when `cuInit` connects (`session/connect.rs`), read without a lock. Device queries
//! name a device by ordinal; the current device is the device of the calling thread's current
//! context ([`super::context_books::current_device`]).

use std::sync::OnceLock;

use gpuless_traces::protocol::{DeviceDescription, MoreDevices};

/// The device description, readable without the session's lock.
static DEVICE: OnceLock<DeviceDescription> = OnceLock::new();
/// The session's further devices (a session of several GPUs).
static MORE: OnceLock<MoreDevices> = OnceLock::new();

/// Sets the session's devices once connected: its device 0 and the further ones.
pub(crate) fn set(first: DeviceDescription, more: MoreDevices) {
    let _ = DEVICE.set(first);
    let _ = MORE.set(more);
}

/// The session's device (device 0), once connected.
pub(crate) fn first() -> Option<&'static DeviceDescription> {
    DEVICE.get()
}

/// The session's further devices, once connected.
pub(crate) fn more() -> Option<&'static MoreDevices> {
    MORE.get()
}

/// How many devices the session has (1 before it is connected).
pub(crate) fn count() -> u32 {
    more().map_or(1, |m| m.count())
}

/// Whether `d` (a `CUdevice` argument) is one of the session's devices.
pub(crate) fn valid(d: u64) -> bool {
    let d = d as i32;
    d >= 0 && (d as u32) < count()
}

/// Device `k`'s description.
pub(crate) fn description(k: u32) -> Option<&'static DeviceDescription> {
    match k {
        0 => first(),
        k => more()?.devices.get(k as usize - 1),
    }
}

/// What the server's driver answered for attribute `attr` of the pair (`src`, `dst`): a
/// `CUdevice_P2PAttribute`, or 0 for `cuDeviceCanAccessPeer`.
pub(crate) fn peer(src: u32, dst: u32, attr: u32) -> Option<i32> {
    more()?.peer(src, dst, attr)
}

/// Whether device `src` can access device `dst`'s memory.
pub(crate) fn can_access(src: u32, dst: u32) -> bool {
    src != dst && peer(src, dst, 0) == Some(1)
}
