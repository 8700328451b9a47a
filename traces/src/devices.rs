//! A session of several devices (client mode, `gpuless run --remote --gpus N`): how the
//! arena is split among them, and the record that says which device the next records run on.
//!
//! The arena `[base, base + size)` is cut into one slice per device, in ordinal order, each
//! [`slice_size`] bytes: an allocation made while device `k`'s context is current comes from
//! slice `k`, and the executor backs it with device `k`'s memory, accessible to every device of
//! the session that can reach it. So an address says its device, in the client, in the executor
//! and in every pointer a kernel holds.

/// A record of gpuless's own (`Function::Other`): `(Size(ordinal))` — the records after it
/// were made with that device's context current (the client sends it only where the device
/// changes, and only in a session of several devices). The executor makes that device's
/// primary context current.
pub const SET_DEVICE: &str = "gpulessSetDevice";

/// A record of gpuless's own: `(U64(new), U64(source))` — the program imported (in the same
/// process) a shareable handle it exported from its physical allocation `source`
/// (`cuMemExportToShareableHandle`, `cuMemImportFromShareableHandle`: NCCL shares its buffers
/// between the devices of one process so). The executor takes a new reference of the same
/// memory as `new`, through its own export and import.
pub const MEM_IMPORT: &str = "gpulessMemImport";

/// Bytes of the arena each of `devices` devices gets (a multiple of the arena's chunk).
pub fn slice_size(size: u64, devices: u32) -> u64 {
    (size / u64::from(devices.max(1))) & !(crate::arena::CHUNK - 1)
}

/// The device whose slice holds `addr`, for an arena at `base` of `size` bytes split among
/// `devices`; `None` outside the arena.
pub fn device_of(base: u64, size: u64, devices: u32, addr: u64) -> Option<u32> {
    let slice = slice_size(size, devices);
    if addr < base || slice == 0 {
        return None;
    }
    let k = (addr - base) / slice;
    (k < u64::from(devices.max(1))).then_some(k as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_device_owns_a_slice_of_the_arena() {
        let (base, size) = (0x6400_0000_0000u64, 1u64 << 40);
        assert_eq!(slice_size(size, 1), size);
        assert_eq!(slice_size(size, 2), size / 2);
        assert_eq!(slice_size(size, 3) % crate::arena::CHUNK, 0);
        assert_eq!(device_of(base, size, 1, base + 5), Some(0));
        assert_eq!(device_of(base, size, 2, base + size / 2 - 1), Some(0));
        assert_eq!(device_of(base, size, 2, base + size / 2), Some(1));
        assert_eq!(device_of(base, size, 2, base + size), None);
        assert_eq!(device_of(base, size, 2, base - 1), None);
        assert_eq!(device_of(base, 0, 2, base), None);
    }
}
