//! Read-only GPU and MIG discovery over NVML.
//!
//! libnvidia-ml is loaded at run time (nvml-wrapper), so this builds and runs without a GPU:
//! [`query`] then returns [`DiscoveryError::Unavailable`]. Every call here is a query:
//! nothing toggles MIG mode and nothing creates or destroys GPU or compute instances.
//!
//! nvml-wrapper 0.13's safe API is used where it covers the call (device count, name, UUID,
//! memory, MIG mode, core count, attributes, MIG device handles). GPU-instance profile names
//! (`nvmlDeviceGetGpuInstanceProfileInfoV`), placements, remaining capacity and existing GPU
//! instances go through its raw library handle (`Nvml::lib()`): the wrapper's
//! `possible_placements` never sets the length of the vector it fills, so it always returns an
//! empty list, and its `profile_info` uses the v1 struct, which has no profile name.

use super::placement::Instance;
use super::profiles::{GpuModel, Placement, Profile};
use nvml_wrapper::error::{nvml_sym, nvml_try, NvmlError};
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlGpuInstanceInfo_t, nvmlGpuInstancePlacement_t, nvmlGpuInstanceProfileInfo_v2_t,
    nvmlGpuInstance_t, nvmlReturn_t, NVML_GPU_INSTANCE_PROFILE_COUNT,
};
use serde::Serialize;
use std::ffi::OsStr;
use std::os::raw::c_uint;

/// Upper bound on counts NVML reports back (placements, instances, MIG devices); larger values
/// are treated as corrupt.
const MAX_COUNT: u32 = 64;

/// Why discovery failed as a whole.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// libnvidia-ml could not be loaded or initialized (no driver, no GPU, no permission).
    #[error(
        "NVML is not available: {detail}. `gpuless devices` needs the NVIDIA driver's \
         libnvidia-ml.so.1 and a visible NVIDIA GPU"
    )]
    Unavailable {
        /// What loading or `nvmlInit` said.
        detail: String,
    },
    /// A query every report needs (the device count) failed.
    #[error("NVML {call} failed: {source}")]
    Call {
        /// The NVML function.
        call: &'static str,
        /// NVML's error.
        source: NvmlError,
    },
}

/// MIG mode of a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MigModeState {
    /// Enabled now.
    pub current: bool,
    /// Enabled after the next GPU reset.
    pub pending: bool,
}

/// Where [`GpuInfo::sm_count`] came from: NVML has no direct SM count for a full GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SmCountSource {
    /// `nvmlDeviceGetAttributes_v2().multiprocessorCount` (documented for MIG devices).
    NvmlAttributes,
    /// `nvmlDeviceGetNumGpuCores` divided by the FP32 cores per SM of the compute capability.
    CoresPerSm,
    /// The SMs of the full-GPU MIG profile (7g): what MIG can use, possibly fewer than the GPU
    /// has (A100: 98 of 108).
    FullGpuProfile,
    /// Not determined.
    Unknown,
}

/// A GPU-instance profile as the GPU reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReportedProfile {
    /// Id, name, slices, SMs, memory, copy engines, total instances and legal placements.
    #[serde(flatten)]
    pub profile: Profile,
    /// Instances that can still be created (`nvmlDeviceGetGpuInstanceRemainingCapacity`);
    /// `None` when the query failed (e.g. with MIG mode off).
    pub free_instances: Option<u32>,
    /// Decoders, encoders, JPEG and OFA engines of an instance.
    pub media: [u32; 4],
    /// Whether instances of this profile support peer-to-peer.
    pub p2p: bool,
}

/// An existing GPU instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuInstanceInfo {
    /// GPU instance id.
    pub id: u32,
    /// Profile id.
    pub profile_id: u32,
    /// Profile name, when the profile is among the reported ones.
    pub profile_name: Option<String>,
    /// Memory slices occupied.
    pub placement: Placement,
}

/// A MIG device (a compute instance inside a GPU instance), what CUDA sees as `MIG-<uuid>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigDeviceInfo {
    /// Index among the parent's MIG devices.
    pub index: u32,
    /// UUID (`MIG-…`), usable as `CUDA_VISIBLE_DEVICES`.
    pub uuid: Option<String>,
    /// NVML's name for it.
    pub name: Option<String>,
    /// Its GPU instance id.
    pub gpu_instance_id: Option<u32>,
    /// Its compute instance id.
    pub compute_instance_id: Option<u32>,
    /// SMs.
    pub sm_count: Option<u32>,
    /// Memory in bytes.
    pub memory_total_bytes: Option<u64>,
}

/// One physical GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuInfo {
    /// NVML index.
    pub index: u32,
    /// Name, e.g. `NVIDIA H200`.
    pub name: Option<String>,
    /// UUID (`GPU-…`).
    pub uuid: Option<String>,
    /// Total memory in bytes.
    pub memory_total_bytes: Option<u64>,
    /// SM count; see `sm_count_source`.
    pub sm_count: Option<u32>,
    /// How `sm_count` was found.
    pub sm_count_source: SmCountSource,
    /// CUDA compute capability (major, minor).
    pub compute_capability: Option<(i32, i32)>,
    /// MIG mode; `None` when the GPU does not support MIG.
    pub mig_mode: Option<MigModeState>,
    /// The built-in profile table matching this GPU's name, if any.
    pub known_model: Option<GpuModel>,
    /// GPU-instance profiles the GPU reports (empty when not MIG-capable).
    pub profiles: Vec<ReportedProfile>,
    /// Existing GPU instances (only queried with MIG mode on).
    pub gpu_instances: Vec<GpuInstanceInfo>,
    /// Existing MIG devices (only queried with MIG mode on).
    pub mig_devices: Vec<MigDeviceInfo>,
    /// Queries that failed for this GPU, as `call: error`.
    pub warnings: Vec<String>,
}

impl GpuInfo {
    /// The profiles to resolve names and place against: those the GPU reports, else the
    /// built-in table of its model, else none.
    pub fn effective_profiles(&self) -> Vec<Profile> {
        if !self.profiles.is_empty() {
            self.profiles.iter().map(|p| p.profile.clone()).collect()
        } else {
            self.known_model.map(|m| m.profiles()).unwrap_or_default()
        }
    }

    /// Existing GPU instances as placement input.
    pub fn instances(&self) -> Vec<Instance> {
        self.gpu_instances.iter().map(|g| Instance { profile_id: g.profile_id, start: g.placement.start }).collect()
    }
}

/// Everything `gpuless devices` shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceReport {
    /// Driver version.
    pub driver_version: Option<String>,
    /// NVML library version.
    pub nvml_version: Option<String>,
    /// The GPUs, by NVML index.
    pub gpus: Vec<GpuInfo>,
}

/// Loads NVML (`libnvidia-ml.so.1`, then `libnvidia-ml.so`) and queries every GPU.
pub fn query() -> Result<DeviceReport, DiscoveryError> {
    query_with_library(None)
}

/// As [`query`], loading NVML from `library` when given.
pub fn query_with_library(library: Option<&OsStr>) -> Result<DeviceReport, DiscoveryError> {
    let nvml = init(library)?;
    let count = nvml.device_count().map_err(|source| DiscoveryError::Call { call: "nvmlDeviceGetCount", source })?;
    let gpus = (0..count.min(MAX_COUNT)).map(|i| query_gpu(&nvml, i)).collect();
    Ok(DeviceReport {
        driver_version: nvml.sys_driver_version().ok(),
        nvml_version: nvml.sys_nvml_version().ok(),
        gpus,
    })
}

pub(crate) fn init(library: Option<&OsStr>) -> Result<Nvml, DiscoveryError> {
    let unavailable = |e: NvmlError| DiscoveryError::Unavailable { detail: e.to_string() };
    match library {
        Some(path) => Nvml::builder().lib_path(path).init().map_err(unavailable),
        None => match Nvml::builder().lib_path(OsStr::new("libnvidia-ml.so.1")).init() {
            Ok(n) => Ok(n),
            Err(first) => Nvml::init().map_err(|_| unavailable(first)),
        },
    }
}

/// What NVML says of the device with `uuid` (`GPU-…` or `MIG-…`) that CUDA does not: its
/// total memory as NVML counts it, the driver's and NVML's versions. Empty without NVML.
pub fn facts(uuids: &[String]) -> gpuless_traces::protocol::NvmlFacts {
    let mut f = gpuless_traces::protocol::NvmlFacts::default();
    let Ok(nvml) = init(None) else { return f };
    f.driver_version = nvml.sys_driver_version().unwrap_or_default();
    f.nvml_version = nvml.sys_nvml_version().unwrap_or_default();
    if let Some(dev) = uuids.iter().find_map(|u| nvml.device_by_uuid(u.as_str()).ok()) {
        f.total_mem = dev.memory_info().map(|m| m.total).unwrap_or(0);
    }
    f
}

/// The active NVLinks of the device with one of these UUIDs, as NVML answers for each: the PCI
/// bus id at the other end, its capabilities and the remote device's type (`device` 0: the
/// caller says which device it is). Empty without NVML or NVLink.
pub fn nvlinks(uuids: &[String]) -> Vec<gpuless_traces::protocol::NvLinkFact> {
    let Ok(nvml) = init(None) else { return Vec::new() };
    let Some(dev) = uuids.iter().find_map(|u| nvml.device_by_uuid(u.as_str()).ok()) else { return Vec::new() };
    // NVML_NVLINK_MAX_LINKS. Read raw: behind an NVSwitch a virtual machine sees the remote end
    // as `FFFFFFFF:FF:FF.0`, which nvml-wrapper's conversion refuses.
    (0..18u32)
        .filter_map(|link| {
            dev.link_wrapper_for(link).is_active().ok().filter(|&a| a)?;
            let lib = nvml.lib();
            // SAFETY (block): a live device handle, valid out-pointers; all-zero is a valid
            // nvmlPciInfo_t, and NVML writes a NUL-terminated bus id into it.
            unsafe {
                let h = dev.handle();
                let mut pci: nvml_wrapper_sys::bindings::nvmlPciInfo_t = std::mem::zeroed();
                (lib.nvmlDeviceGetNvLinkRemotePciInfo_v2(h, link, &mut pci) == 0).then_some(())?;
                let remote_bus_id = std::ffi::CStr::from_ptr(pci.busId.as_ptr()).to_string_lossy().into_owned();
                let mut capabilities = 0;
                for c in 0..6u32 {
                    let mut v = 0;
                    if lib.nvmlDeviceGetNvLinkCapability(h, link, c, &mut v) == 0 && v == 1 {
                        capabilities |= 1 << c;
                    }
                }
                let mut t = 0;
                let remote_type =
                    if lib.nvmlDeviceGetNvLinkRemoteDeviceType(h, link, &mut t) == 0 { t } else { u32::MAX };
                Some(gpuless_traces::protocol::NvLinkFact { device: 0, link, remote_bus_id, capabilities, remote_type })
            }
        })
        .collect()
}

/// `nvmlGpuP2PCapsIndex_t`: read, write, NVLink, atomics, PCI properties.
pub const P2P_INDICES: [u32; 5] = [0, 1, 2, 3, 4];

/// What NVML answers `nvmlDeviceGetP2PStatus` for every ordered pair of the devices (each named
/// by its UUIDs, first that NVML knows), a device with itself included, at every index of
/// [`P2P_INDICES`]: `(src, dst, index, status)`, where NVML answers. (The driver answers a
/// device with itself OK, and PCI properties between NVLink-connected GPUs NOT_SUPPORTED:
/// the client repeats the server's own answers rather than derive them.)
pub fn p2p_statuses(devices: &[Vec<String>]) -> Vec<(u32, u32, u32, u32)> {
    let Ok(nvml) = init(None) else { return Vec::new() };
    let handles: Vec<_> =
        devices.iter().map(|uuids| uuids.iter().find_map(|u| nvml.device_by_uuid(u.as_str()).ok())).collect();
    let lib = nvml.lib();
    let mut out = Vec::new();
    for (i, a) in handles.iter().enumerate() {
        for (j, b) in handles.iter().enumerate() {
            let (Some(a), Some(b)) = (a, b) else { continue };
            for idx in P2P_INDICES {
                let mut st = 0;
                // SAFETY: live device handles and a valid out-pointer.
                if unsafe { lib.nvmlDeviceGetP2PStatus(a.handle(), b.handle(), idx, &mut st) } == 0 {
                    out.push((i as u32, j as u32, idx, st));
                }
            }
        }
    }
    out
}

/// Records a failed query as a warning and yields `None`.
fn note<T>(warnings: &mut Vec<String>, call: &str, r: Result<T, NvmlError>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            warnings.push(format!("{call}: {e}"));
            None
        }
    }
}

pub(crate) fn query_gpu(nvml: &Nvml, index: u32) -> GpuInfo {
    let mut w = Vec::new();
    let mut info = GpuInfo {
        index,
        name: None,
        uuid: None,
        memory_total_bytes: None,
        sm_count: None,
        sm_count_source: SmCountSource::Unknown,
        compute_capability: None,
        mig_mode: None,
        known_model: None,
        profiles: Vec::new(),
        gpu_instances: Vec::new(),
        mig_devices: Vec::new(),
        warnings: Vec::new(),
    };
    let Some(dev) = note(&mut w, "nvmlDeviceGetHandleByIndex_v2", nvml.device_by_index(index)) else {
        info.warnings = w;
        return info;
    };
    info.name = note(&mut w, "nvmlDeviceGetName", dev.name());
    info.uuid = note(&mut w, "nvmlDeviceGetUUID", dev.uuid());
    info.memory_total_bytes = note(&mut w, "nvmlDeviceGetMemoryInfo_v2", dev.memory_info()).map(|m| m.total);
    info.compute_capability = dev.cuda_compute_capability().ok().map(|c| (c.major, c.minor));
    info.known_model = info.name.as_deref().and_then(GpuModel::from_device_name);
    match dev.mig_mode() {
        Ok(m) => info.mig_mode = Some(MigModeState { current: m.current == 1, pending: m.pending == 1 }),
        Err(NvmlError::NotSupported) => {}
        Err(e) => w.push(format!("nvmlDeviceGetMigMode: {e}")),
    }
    // SAFETY: the handle comes from NVML for this index and `nvml` outlives every use here.
    let handle = unsafe { dev.handle() };
    if info.mig_mode.is_some() {
        info.profiles = query_profiles(nvml, handle, info.known_model, &mut w);
    }
    (info.sm_count, info.sm_count_source) = sm_count(&dev, &info);
    if info.mig_mode.is_some_and(|m| m.current) {
        info.gpu_instances = query_gpu_instances(nvml, handle, &info.profiles, &mut w);
        info.mig_devices = query_mig_devices(nvml, &dev, &mut w);
    }
    info.warnings = w;
    info
}

/// FP32 cores per SM by compute capability (CUDA C Programming Guide, "Arithmetic
/// Instructions" throughput table).
fn cores_per_sm(major: i32, minor: i32) -> Option<u32> {
    match (major, minor) {
        (7, _) | (8, 0) | (6, 0) => Some(64),
        (8, _) | (9, 0) | (10, _) | (11, _) | (12, _) | (6, _) => Some(128),
        _ => None,
    }
}

fn sm_count(dev: &Device<'_>, info: &GpuInfo) -> (Option<u32>, SmCountSource) {
    if let Ok(a) = dev.attributes() {
        if a.multiprocessor_count > 0 {
            return (Some(a.multiprocessor_count), SmCountSource::NvmlAttributes);
        }
    }
    if let (Ok(cores), Some((major, minor))) = (dev.num_cores(), info.compute_capability) {
        if let Some(per) = cores_per_sm(major, minor) {
            if cores > 0 && cores % per == 0 {
                return (Some(cores / per), SmCountSource::CoresPerSm);
            }
        }
    }
    let full = info.profiles.iter().map(|p| &p.profile).find(|p| p.compute_slices == 7).map(|p| p.sms);
    match full {
        Some(sms) => (Some(sms), SmCountSource::FullGpuProfile),
        None => (None, SmCountSource::Unknown),
    }
}

fn c_name(raw: &[std::os::raw::c_char]) -> String {
    let bytes: Vec<u8> = raw.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    let s = String::from_utf8_lossy(&bytes);
    s.strip_prefix("MIG ").unwrap_or(&s).trim().to_string()
}

fn profile_info_v2(nvml: &Nvml, dev: nvmlDevice_t, index: u32) -> Result<nvmlGpuInstanceProfileInfo_v2_t, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetGpuInstanceProfileInfoV.as_ref())?;
    // SAFETY: a plain C struct of integers and a char array: all-zero is a valid value.
    let mut info: nvmlGpuInstanceProfileInfo_v2_t = unsafe { std::mem::zeroed() };
    // NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 2) from nvml.h.
    info.version = (std::mem::size_of::<nvmlGpuInstanceProfileInfo_v2_t>() as u32) | (2 << 24);
    // SAFETY: `dev` is a live handle and `info` a properly versioned out-struct.
    nvml_try(unsafe { sym(dev, index, &mut info) })?;
    Ok(info)
}

fn possible_placements(nvml: &Nvml, dev: nvmlDevice_t, profile_id: u32) -> Result<Vec<Placement>, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetGpuInstancePossiblePlacements_v2.as_ref())?;
    let mut count: c_uint = 0;
    // SAFETY: a null array asks for the count only.
    nvml_try(unsafe { sym(dev, profile_id, std::ptr::null_mut(), &mut count) })?;
    if count > MAX_COUNT {
        return Err(NvmlError::Unknown);
    }
    let mut buf = vec![nvmlGpuInstancePlacement_t { start: 0, size: 0 }; count as usize];
    // SAFETY: `buf` holds `count` elements, which NVML writes at most.
    nvml_try(unsafe { sym(dev, profile_id, buf.as_mut_ptr(), &mut count) })?;
    buf.truncate(count as usize);
    Ok(buf.iter().map(|p| Placement { start: p.start, size: p.size }).collect())
}

fn remaining_capacity(nvml: &Nvml, dev: nvmlDevice_t, profile_id: u32) -> Result<u32, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetGpuInstanceRemainingCapacity.as_ref())?;
    let mut count: c_uint = 0;
    // SAFETY: plain out-parameter.
    nvml_try(unsafe { sym(dev, profile_id, &mut count) })?;
    Ok(count)
}

fn query_profiles(
    nvml: &Nvml,
    dev: nvmlDevice_t,
    model: Option<GpuModel>,
    w: &mut Vec<String>,
) -> Vec<ReportedProfile> {
    let known = model.map(|m| m.profiles()).unwrap_or_default();
    let mut out: Vec<ReportedProfile> = Vec::new();
    for index in 0..NVML_GPU_INSTANCE_PROFILE_COUNT {
        let info = match profile_info_v2(nvml, dev, index) {
            Ok(i) => i,
            // Profiles this GPU does not have.
            Err(NvmlError::NotSupported | NvmlError::InvalidArg | NvmlError::NotFound) => continue,
            Err(e) => {
                w.push(format!("nvmlDeviceGetGpuInstanceProfileInfoV({index}): {e}"));
                continue;
            }
        };
        if out.iter().any(|p| p.profile.id == info.id) {
            continue;
        }
        let mut name = c_name(&info.name);
        if name.is_empty() {
            name = known
                .iter()
                .find(|k| k.id == info.id)
                .map(|k| k.name.clone())
                .unwrap_or_else(|| format!("{}g.{}gb", info.sliceCount, info.memorySizeMB.div_ceil(1024)));
        }
        let placements = match possible_placements(nvml, dev, info.id) {
            Ok(p) => p,
            Err(e) => {
                w.push(format!("nvmlDeviceGetGpuInstancePossiblePlacements_v2({}): {e}", info.id));
                Vec::new()
            }
        };
        let memory_slices = placements.first().map(|p| p.size).unwrap_or(0);
        let free_instances = remaining_capacity(nvml, dev, info.id).ok();
        out.push(ReportedProfile {
            profile: Profile {
                id: info.id,
                name,
                compute_slices: info.sliceCount,
                memory_slices,
                sms: info.multiprocessorCount,
                memory_mib: info.memorySizeMB,
                copy_engines: Some(info.copyEngineCount),
                max_instances: info.instanceCount,
                placements,
            },
            free_instances,
            media: [info.decoderCount, info.encoderCount, info.jpegCount, info.ofaCount],
            p2p: info.isP2pSupported != 0,
        });
    }
    // `nvidia-smi mig -lgip` order: by profile id, descending (1g first).
    out.sort_by_key(|p| std::cmp::Reverse(p.profile.id));
    out
}

fn query_gpu_instances(
    nvml: &Nvml,
    dev: nvmlDevice_t,
    profiles: &[ReportedProfile],
    w: &mut Vec<String>,
) -> Vec<GpuInstanceInfo> {
    let (list, get_info) = match (
        nvml_sym(nvml.lib().nvmlDeviceGetGpuInstances.as_ref()),
        nvml_sym(nvml.lib().nvmlGpuInstanceGetInfo.as_ref()),
    ) {
        (Ok(l), Ok(g)) => (l, g),
        (Err(e), _) | (_, Err(e)) => {
            w.push(format!("nvmlDeviceGetGpuInstances: {e}"));
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for p in profiles {
        let cap = p.profile.max_instances.clamp(1, MAX_COUNT);
        let mut handles: Vec<nvmlGpuInstance_t> = vec![std::ptr::null_mut(); cap as usize];
        let mut count: c_uint = cap;
        // SAFETY: `handles` has room for `count` handles.
        if let Err(e) = nvml_try(unsafe { list(dev, p.profile.id, handles.as_mut_ptr(), &mut count) }) {
            w.push(format!("nvmlDeviceGetGpuInstances({}): {e}", p.profile.id));
            continue;
        }
        for &gi in handles.iter().take((count.min(cap)) as usize) {
            // SAFETY: all-zero is valid for this struct of a pointer and integers.
            let mut gi_info: nvmlGpuInstanceInfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: `gi` was just returned by NVML.
            match nvml_try(unsafe { get_info(gi, &mut gi_info) }) {
                Ok(()) => out.push(GpuInstanceInfo {
                    id: gi_info.id,
                    profile_id: gi_info.profileId,
                    profile_name: profiles
                        .iter()
                        .find(|q| q.profile.id == gi_info.profileId)
                        .map(|q| q.profile.name.clone()),
                    placement: Placement { start: gi_info.placement.start, size: gi_info.placement.size },
                }),
                Err(e) => w.push(format!("nvmlGpuInstanceGetInfo: {e}")),
            }
        }
    }
    out.sort_by_key(|g| (g.placement.start, g.id));
    out
}

/// Signature of NVML's `nvmlDeviceGet{Gpu,Compute}InstanceId`.
type IdFn = unsafe extern "C" fn(nvmlDevice_t, *mut c_uint) -> nvmlReturn_t;

fn raw_id(sym: Result<&IdFn, NvmlError>, dev: nvmlDevice_t) -> Result<u32, NvmlError> {
    let f = sym?;
    let mut id: c_uint = 0;
    // SAFETY: plain out-parameter on a live MIG device handle.
    nvml_try(unsafe { f(dev, &mut id) })?;
    Ok(id)
}

fn query_mig_devices(nvml: &Nvml, dev: &Device<'_>, w: &mut Vec<String>) -> Vec<MigDeviceInfo> {
    let Some(max) = note(w, "nvmlDeviceGetMaxMigDeviceCount", dev.mig_device_count()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for index in 0..max.min(MAX_COUNT) {
        let mig = match dev.mig_device_by_index(index) {
            Ok(m) => m,
            Err(NvmlError::NotFound | NvmlError::InvalidArg) => continue,
            Err(e) => {
                w.push(format!("nvmlDeviceGetMigDeviceHandleByIndex({index}): {e}"));
                continue;
            }
        };
        // SAFETY: the MIG handle comes from NVML and `nvml` outlives its use here.
        let handle = unsafe { mig.handle() };
        out.push(MigDeviceInfo {
            index,
            uuid: note(w, "nvmlDeviceGetUUID(MIG)", mig.uuid()),
            name: mig.name().ok(),
            gpu_instance_id: raw_id(nvml_sym(nvml.lib().nvmlDeviceGetGpuInstanceId.as_ref()), handle).ok(),
            compute_instance_id: raw_id(nvml_sym(nvml.lib().nvmlDeviceGetComputeInstanceId.as_ref()), handle).ok(),
            sm_count: mig.attributes().ok().map(|a| a.multiprocessor_count),
            memory_total_bytes: mig.memory_info().ok().map(|m| m.total),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_is_a_clean_error() {
        let err = query_with_library(Some(OsStr::new("/nonexistent/libnvidia-ml.so.1"))).unwrap_err();
        assert!(matches!(err, DiscoveryError::Unavailable { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.starts_with("NVML is not available:"), "{msg}");
        assert!(msg.contains("libnvidia-ml.so.1"), "{msg}");
    }

    #[test]
    fn default_query_never_panics() {
        // On a machine without a GPU this is `Unavailable`; with one, a report.
        match query() {
            Ok(report) => assert!(report.gpus.iter().all(|g| g.warnings.iter().all(|w| !w.is_empty()))),
            Err(e) => assert!(matches!(e, DiscoveryError::Unavailable { .. }), "{e:?}"),
        }
    }

    #[test]
    fn cores_per_sm_table() {
        assert_eq!(cores_per_sm(8, 0), Some(64));
        assert_eq!(cores_per_sm(9, 0), Some(128));
        assert_eq!(cores_per_sm(8, 6), Some(128));
        assert_eq!(cores_per_sm(5, 0), None);
    }

    #[test]
    fn profile_names_lose_the_mig_prefix() {
        let mut raw = [0 as std::os::raw::c_char; 96];
        for (i, b) in b"MIG 3g.71gb".iter().enumerate() {
            raw[i] = *b as std::os::raw::c_char;
        }
        assert_eq!(c_name(&raw), "3g.71gb");
        assert_eq!(c_name(&[0; 4]), "");
    }
}
