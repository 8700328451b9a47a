//! What a session's `Welcome` says of its device and partition ([`super::Welcome`]).

use super::super::codec::{Get, Put};
use super::super::ProtocolError;

/// Everything a CUDA program can ask of a device, so a client answers device queries itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceDescription {
    /// `cuDeviceGetName`.
    pub name: String,
    /// `cuDeviceGetUuid`.
    pub uuid: [u8; 16],
    /// `cuDeviceTotalMem` (of the session's partition where it has a memory limit).
    pub total_mem: u64,
    /// `cuDriverGetVersion`.
    pub driver_version: i32,
    /// Every `cuDeviceGetAttribute` the driver answered: (attribute id, value).
    pub attributes: Vec<(u32, i32)>,
    /// What the server's NVML says of the device (for a client's `libnvidia-ml` answers;
    /// zero or empty where NVML was not there to ask).
    pub nvml: NvmlFacts,
}

/// The server's NVML's answers about a session's device that CUDA does not give.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NvmlFacts {
    /// `nvmlDeviceGetMemoryInfo`'s total (it counts memory CUDA's total leaves out).
    pub total_mem: u64,
    /// `nvmlSystemGetDriverVersion` (e.g. `580.159.04`).
    pub driver_version: String,
    /// `nvmlSystemGetNVMLVersion`.
    pub nvml_version: String,
}

impl DeviceDescription {
    /// The value of attribute `id`, if the driver answered it.
    pub fn attribute(&self, id: u32) -> Option<i32> {
        self.attributes.iter().find(|(a, _)| *a == id).map(|(_, v)| *v)
    }
    /// Compute capability as 10·major + minor (attributes 75, 76).
    pub fn sm(&self) -> u32 {
        (self.attribute(75).unwrap_or(0) * 10 + self.attribute(76).unwrap_or(0)) as u32
    }
    /// Multiprocessors (attribute 16).
    pub fn sm_count(&self) -> u32 {
        self.attribute(16).unwrap_or(0) as u32
    }
    /// Appends the description's fields (as in `Welcome`).
    pub fn put(&self, p: &mut Put) {
        p.str(&self.name);
        p.0.extend_from_slice(&self.uuid);
        p.u64(self.total_mem).i32(self.driver_version).u32(self.attributes.len() as u32);
        for (a, v) in &self.attributes {
            p.u32(*a).i32(*v);
        }
        p.u64(self.nvml.total_mem).str(&self.nvml.driver_version).str(&self.nvml.nvml_version);
    }

    /// The device's UUID as NVML writes it: `GPU-` (`MIG-` for a MIG instance) and the 16
    /// bytes as 8-4-4-4-12 lowercase hex digits.
    pub fn nvml_uuid(&self, mig: bool) -> String {
        let hex = |r: std::ops::Range<usize>| self.uuid[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
        let prefix = if mig { "MIG" } else { "GPU" };
        format!("{prefix}-{}-{}-{}-{}-{}", hex(0..4), hex(4..6), hex(6..8), hex(8..10), hex(10..16))
    }
    /// Reads the fields [`Self::put`] wrote.
    pub fn get(g: &mut Get<'_>) -> Result<Self, ProtocolError> {
        let name = g.str()?;
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(g.take(16)?);
        let (total_mem, driver_version) = (g.u64()?, g.i32()?);
        let n = g.count(8)?;
        let mut attributes = Vec::with_capacity(n);
        for _ in 0..n {
            attributes.push((g.u32()?, g.i32()?));
        }
        let nvml = NvmlFacts { total_mem: g.u64()?, driver_version: g.str()?, nvml_version: g.str()? };
        Ok(DeviceDescription { name, uuid, total_mem, driver_version, attributes, nvml })
    }
}

/// What the driver says of an ordered pair of a session's devices: `cuDeviceGetP2PAttribute`'s
/// answer for `attr`, or `cuDeviceCanAccessPeer`'s as attribute 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerFact {
    /// The source device's ordinal in the session.
    pub src: u32,
    /// The destination device's ordinal.
    pub dst: u32,
    /// `CUdevice_P2PAttribute` (0: can access).
    pub attr: u32,
    /// The driver's answer.
    pub value: i32,
}

/// An active NVLink of one of a session's devices, as the server's NVML sees it (NCCL reads
/// its topology from these).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvLinkFact {
    /// The device's ordinal in the session.
    pub device: u32,
    /// The link's number.
    pub link: u32,
    /// The PCI bus id of what is at the other end (`nvmlDeviceGetNvLinkRemotePciInfo`).
    pub remote_bus_id: String,
    /// `nvmlDeviceGetNvLinkCapability`'s answers: bit `c` set where capability `c` (0 P2P
    /// supported … 5 valid) answered 1.
    pub capabilities: u32,
    /// `nvmlDeviceGetNvLinkRemoteDeviceType` (0 GPU, 1 IBM NPU, 2 switch; `u32::MAX`: NVML did
    /// not say).
    pub remote_type: u32,
}

/// A [`PeerFact`]'s `attr` at `NVML_P2P_STATUS + i`: what the server's NVML answered
/// `nvmlDeviceGetP2PStatus` for the pair at `nvmlGpuP2PCapsIndex_t` `i` (its status as the value).
pub const NVML_P2P_STATUS: u32 = 0x100;

/// A session's devices after its first (ordinals 1, 2, …): each one's description and the
/// server's GPU it is, and what every ordered pair of the session's devices can do. Empty for
/// a session of one device.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MoreDevices {
    /// Devices 1.. as the session sees them.
    pub devices: Vec<DeviceDescription>,
    /// The server's GPU each of them is (its index; empty where an executor reports them).
    pub gpus: Vec<u32>,
    /// Pairs of devices (0.. included), by attribute.
    pub peers: Vec<PeerFact>,
    /// The active NVLinks of every device of the session (0.. included).
    pub links: Vec<NvLinkFact>,
}

impl MoreDevices {
    /// How many devices the session has (1 + the further ones).
    pub fn count(&self) -> u32 {
        1 + self.devices.len() as u32
    }
    /// The driver's answer for `attr` of the pair (`src`, `dst`), if it gave one.
    pub fn peer(&self, src: u32, dst: u32, attr: u32) -> Option<i32> {
        self.peers.iter().find(|p| p.src == src && p.dst == dst && p.attr == attr).map(|p| p.value)
    }
    /// Appends the fields (trailing fields of `Welcome` and of an executor's `Ready`).
    pub fn put(&self, p: &mut Put) {
        p.u32(self.devices.len() as u32);
        for d in &self.devices {
            d.put(p);
        }
        p.u32(self.gpus.len() as u32);
        for g in &self.gpus {
            p.u32(*g);
        }
        p.u32(self.peers.len() as u32);
        for f in &self.peers {
            p.u32(f.src).u32(f.dst).u32(f.attr).i32(f.value);
        }
        p.u32(self.links.len() as u32);
        for l in &self.links {
            p.u32(l.device).u32(l.link).str(&l.remote_bus_id).u32(l.capabilities).u32(l.remote_type);
        }
    }
    /// Reads the fields [`Self::put`] wrote; none when the payload ends first (an older peer).
    pub fn get(g: &mut Get<'_>) -> Result<Self, ProtocolError> {
        if g.remaining() == 0 {
            return Ok(MoreDevices::default());
        }
        let n = g.count(40)?;
        let mut devices = Vec::with_capacity(n);
        for _ in 0..n {
            devices.push(DeviceDescription::get(g)?);
        }
        let n = g.count(4)?;
        let mut gpus = Vec::with_capacity(n);
        for _ in 0..n {
            gpus.push(g.u32()?);
        }
        let n = g.count(16)?;
        let mut peers = Vec::with_capacity(n);
        for _ in 0..n {
            peers.push(PeerFact { src: g.u32()?, dst: g.u32()?, attr: g.u32()?, value: g.i32()? });
        }
        let n = g.count(20)?;
        let mut links = Vec::with_capacity(n);
        for _ in 0..n {
            let (device, link, remote_bus_id) = (g.u32()?, g.u32()?, g.str()?);
            let (capabilities, remote_type) = (g.u32()?, g.u32()?);
            links.push(NvLinkFact { device, link, remote_bus_id, capabilities, remote_type });
        }
        Ok(MoreDevices { devices, gpus, peers, links })
    }
}

/// The partition a session runs on, as granted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PartitionInfo {
    /// `full`, `mig` or `emulated` (a soft partition: a green context).
    pub kind: String,
    /// Profile name, if any.
    pub profile: String,
    /// SMs the session's context holds.
    pub sms: u32,
    /// Bytes of device memory the session may allocate (0: the device's).
    pub memory_limit: u64,
    /// What isolation it gives, in words.
    pub isolation: String,
}

impl PartitionInfo {
    /// Appends the partition's fields (as in `Welcome`).
    pub fn put(&self, p: &mut Put) {
        p.str(&self.kind).str(&self.profile).u32(self.sms).u64(self.memory_limit).str(&self.isolation);
    }
    /// Reads the fields [`Self::put`] wrote.
    pub fn get(g: &mut Get<'_>) -> Result<Self, ProtocolError> {
        Ok(PartitionInfo {
            kind: g.str()?,
            profile: g.str()?,
            sms: g.u32()?,
            memory_limit: g.u64()?,
            isolation: g.str()?,
        })
    }
}
