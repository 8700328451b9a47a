//! Records the recorder adds for memory that both the host and the device use directly —
//! managed memory (`cuMemAllocManaged`) and host memory mapped for the device
//! (`cuMemHostAlloc` / `cuMemHostRegister` with `DEVICEMAP`). The program reads and writes
//! such memory without a driver call, so the recorder mirrors it at the points where the other
//! side may look:
//!
//! - [`HOST_MEMORY`] before work is submitted, when the host changed the memory since the
//!   recorder last looked: `(DevPtr(address), Blob(contents))`. A replay writes the bytes to
//!   the address (its device memory there) before the next call.
//! - [`HOST_VIEW`] after the program synchronized, when the device changed it:
//!   `(DevPtr(address), Size(len))` → `[Digest(contents)]`. A replay copies the range back
//!   and verifies it as it verifies a device-to-host copy.
//!
//! Both are `Function::Other` records at level `Other`: not calls of the program, and no
//! driver function of the API table.

/// Host-side contents of managed or mapped memory, written by the host before a submission.
pub const HOST_MEMORY: &str = "gpulessHostMemory";

/// Contents of managed or mapped memory the host may read after a synchronization.
pub const HOST_VIEW: &str = "gpulessHostView";

/// Client mode's managed memory: at the end of a wait, what the device changed in managed
/// memory since the client last saw it. No arguments; the executor answers with an output for
/// the record's sequence number: `[u64 address, u32 length, bytes]…` of every changed block.
pub const HOST_PULL: &str = "gpulessHostPull";

/// Client mode's pinned memory the device uses (plain pinned memory a kernel is given, memory
/// registered or asked a device pointer for): `(DevPtr(address), Size(len))`. From here on it
/// is shared as managed memory is — the executor backs the range with device memory (zeroed;
/// what the host holds follows as [`HOST_MEMORY`] records) and pulls answer for it too.
pub const HOST_MIRROR: &str = "gpulessHostMirror";

/// Whether `name` is one of the recorder's own records of this module.
pub fn is_hostview(name: &str) -> bool {
    name == HOST_MEMORY || name == HOST_VIEW || name == HOST_PULL || name == HOST_MIRROR
}
