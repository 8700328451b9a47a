//! The session's devices as the program sees them: device 0 is the `Welcome`'s device, devices
//! 1.. its further ones (a session of several GPUs, `gpuless run --remote --gpus N`), each with
//! its description and what every pair of them can do ([`gpuless_traces::protocol::MoreDevices`]).
//! Device queries name a device by ordinal; the current device is the device of the calling
//! thread's current context ([`super::local::current_device`]).

use gpuless_traces::protocol::DeviceDescription;

use super::session;

/// How many devices the session has (1 before it is connected).
pub(crate) fn count() -> u32 {
    session::more().map_or(1, |m| m.count())
}

/// Whether `d` (a `CUdevice` argument) is one of the session's devices.
pub(crate) fn valid(d: u64) -> bool {
    let d = d as i32;
    d >= 0 && (d as u32) < count()
}

/// Device `k`'s description.
pub(crate) fn description(k: u32) -> Option<&'static DeviceDescription> {
    match k {
        0 => session::device(),
        k => session::more()?.devices.get(k as usize - 1),
    }
}

/// What the server's driver answered for attribute `attr` of the pair (`src`, `dst`): a
/// `CUdevice_P2PAttribute`, or 0 for `cuDeviceCanAccessPeer`.
pub(crate) fn peer(src: u32, dst: u32, attr: u32) -> Option<i32> {
    session::more()?.peer(src, dst, attr)
}

/// Whether device `src` can access device `dst`'s memory.
pub(crate) fn can_access(src: u32, dst: u32) -> bool {
    src != dst && peer(src, dst, 0) == Some(1)
}
