//! [`MigOps`] over the real NVML: the only code in gpuless that creates or destroys GPU and
//! compute instances. It runs only for `gpuless replay --mig PROFILE --create` and for the
//! executors of a server with `mig_create`; no test calls it (tests use a fake `MigOps`), and
//! it never changes MIG mode.
//!
//! nvml-wrapper 0.13 wraps none of these calls, so they go through its raw library handle
//! (`Nvml::lib()`, the nvml-wrapper-sys function table). **Not exercised on hardware**: the
//! project's only GPU has MIG disabled and must stay so (see docs/PARTITIONS.md).

use std::ffi::OsStr;

use nvml_wrapper::error::{nvml_sym, nvml_try, NvmlError};
use nvml_wrapper::Nvml;
use nvml_wrapper_sys::bindings::{
    nvmlComputeInstanceInfo_t, nvmlComputeInstanceProfileInfo_t, nvmlComputeInstance_t, nvmlDevice_t,
    nvmlGpuInstanceInfo_t, nvmlGpuInstancePlacement_t, nvmlGpuInstance_t, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
    NVML_COMPUTE_INSTANCE_PROFILE_COUNT,
};

use super::mig::{CreatedCi, CreatedGi, MigOpError, MigOps};
use super::nvml::{self, DiscoveryError, GpuInfo};
use super::profiles::Placement;

/// NVML, loaded and initialized, for creating and destroying MIG instances.
pub struct NvmlMig {
    nvml: Nvml,
}

fn op(call: &'static str) -> impl Fn(NvmlError) -> MigOpError {
    move |e| MigOpError { call, detail: e.to_string() }
}

impl NvmlMig {
    /// Loads `libnvidia-ml.so.1` (or `library`) and initializes NVML. Nothing is changed yet.
    pub fn open(library: Option<&OsStr>) -> Result<NvmlMig, DiscoveryError> {
        Ok(NvmlMig { nvml: nvml::init(library)? })
    }

    fn device(&self, gpu: u32) -> Result<nvmlDevice_t, MigOpError> {
        let dev = self.nvml.device_by_index(gpu).map_err(op("nvmlDeviceGetHandleByIndex_v2"))?;
        // SAFETY: the handle stays valid while `self.nvml` is initialized.
        Ok(unsafe { dev.handle() })
    }
}

impl MigOps for NvmlMig {
    fn snapshot(&mut self, gpu: u32) -> Result<GpuInfo, MigOpError> {
        let count = self.nvml.device_count().map_err(op("nvmlDeviceGetCount"))?;
        if gpu >= count {
            return Err(MigOpError { call: "nvmlDeviceGetCount", detail: format!("no GPU {gpu}: {count} GPU(s)") });
        }
        Ok(nvml::query_gpu(&self.nvml, gpu))
    }

    fn create_gpu_instance(
        &mut self,
        gpu: u32,
        profile_id: u32,
        placement: Placement,
    ) -> Result<CreatedGi, MigOpError> {
        let dev = self.device(gpu)?;
        let lib = self.nvml.lib();
        let create = nvml_sym(lib.nvmlDeviceCreateGpuInstanceWithPlacement.as_ref())
            .map_err(op("nvmlDeviceCreateGpuInstanceWithPlacement"))?;
        let get_info = nvml_sym(lib.nvmlGpuInstanceGetInfo.as_ref()).map_err(op("nvmlGpuInstanceGetInfo"))?;
        let pl = nvmlGpuInstancePlacement_t { start: placement.start, size: placement.size };
        let mut gi: nvmlGpuInstance_t = std::ptr::null_mut();
        // SAFETY: live device handle, a valid placement struct and out-pointer.
        nvml_try(unsafe { create(dev, profile_id, &pl, &mut gi) })
            .map_err(op("nvmlDeviceCreateGpuInstanceWithPlacement"))?;
        // SAFETY: all-zero is valid for this struct of a pointer and integers.
        let mut info: nvmlGpuInstanceInfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `gi` was just created by NVML.
        let id = match nvml_try(unsafe { get_info(gi, &mut info) }) {
            Ok(()) => info.id,
            Err(e) => {
                // Without an id the instance could not be found again: destroy it now.
                if let Ok(destroy) = nvml_sym(lib.nvmlGpuInstanceDestroy.as_ref()) {
                    // SAFETY: `gi` is live and owned by this call.
                    let _ = unsafe { destroy(gi) };
                }
                return Err(op("nvmlGpuInstanceGetInfo")(e));
            }
        };
        Ok(CreatedGi { handle: gi as usize, id, gpu })
    }

    fn create_compute_instance(&mut self, gi: &CreatedGi, compute_slices: u32) -> Result<CreatedCi, MigOpError> {
        let lib = self.nvml.lib();
        let profile_info = nvml_sym(lib.nvmlGpuInstanceGetComputeInstanceProfileInfo.as_ref())
            .map_err(op("nvmlGpuInstanceGetComputeInstanceProfileInfo"))?;
        let create = nvml_sym(lib.nvmlGpuInstanceCreateComputeInstance.as_ref())
            .map_err(op("nvmlGpuInstanceCreateComputeInstance"))?;
        let get_info =
            nvml_sym(lib.nvmlComputeInstanceGetInfo_v2.as_ref()).map_err(op("nvmlComputeInstanceGetInfo_v2"))?;
        let handle = gi.handle as nvmlGpuInstance_t;
        // The compute-instance profile that spans the GPU instance: the one with its slice count,
        // else the largest one offered.
        let mut best: Option<nvmlComputeInstanceProfileInfo_t> = None;
        for index in 0..NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
            // SAFETY: all-zero is valid for this struct of integers.
            let mut info: nvmlComputeInstanceProfileInfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: live GPU instance handle and out-pointer.
            let r = unsafe { profile_info(handle, index, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &mut info) };
            if nvml_try(r).is_err() {
                continue;
            }
            let better = match &best {
                None => true,
                Some(b) => {
                    (info.sliceCount == compute_slices, info.sliceCount)
                        > (b.sliceCount == compute_slices, b.sliceCount)
                }
            };
            if better {
                best = Some(info);
            }
        }
        let Some(ci_profile) = best else {
            return Err(MigOpError {
                call: "nvmlGpuInstanceGetComputeInstanceProfileInfo",
                detail: "the GPU instance offers no compute-instance profile".into(),
            });
        };
        let mut ci: nvmlComputeInstance_t = std::ptr::null_mut();
        // SAFETY: live GPU instance handle, a profile id NVML reported, and an out-pointer.
        nvml_try(unsafe { create(handle, ci_profile.id, &mut ci) })
            .map_err(op("nvmlGpuInstanceCreateComputeInstance"))?;
        // SAFETY: all-zero is valid for this struct of pointers and integers.
        let mut info: nvmlComputeInstanceInfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `ci` was just created by NVML.
        let id = match nvml_try(unsafe { get_info(ci, &mut info) }) {
            Ok(()) => info.id,
            Err(e) => {
                if let Ok(destroy) = nvml_sym(lib.nvmlComputeInstanceDestroy.as_ref()) {
                    // SAFETY: `ci` is live and owned by this call.
                    let _ = unsafe { destroy(ci) };
                }
                return Err(op("nvmlComputeInstanceGetInfo_v2")(e));
            }
        };
        Ok(CreatedCi { handle: ci as usize, id })
    }

    fn mig_device_uuid(&mut self, gi: &CreatedGi, ci: &CreatedCi) -> Result<String, MigOpError> {
        let info = self.snapshot(gi.gpu)?;
        info.mig_devices
            .iter()
            .find(|d| d.gpu_instance_id == Some(gi.id) && d.compute_instance_id == Some(ci.id))
            .and_then(|d| d.uuid.clone())
            .ok_or_else(|| MigOpError {
                call: "nvmlDeviceGetMigDeviceHandleByIndex",
                detail: format!(
                    "no MIG device with a UUID for GPU instance {} / compute instance {} (warnings: {})",
                    gi.id,
                    ci.id,
                    info.warnings.join("; ")
                ),
            })
    }

    fn destroy_compute_instance(&mut self, ci: &CreatedCi) -> Result<(), MigOpError> {
        let destroy =
            nvml_sym(self.nvml.lib().nvmlComputeInstanceDestroy.as_ref()).map_err(op("nvmlComputeInstanceDestroy"))?;
        // SAFETY: a handle created by `create_compute_instance` and not destroyed yet.
        nvml_try(unsafe { destroy(ci.handle as nvmlComputeInstance_t) }).map_err(op("nvmlComputeInstanceDestroy"))
    }

    fn destroy_gpu_instance(&mut self, gi: &CreatedGi) -> Result<(), MigOpError> {
        let destroy =
            nvml_sym(self.nvml.lib().nvmlGpuInstanceDestroy.as_ref()).map_err(op("nvmlGpuInstanceDestroy"))?;
        // SAFETY: a handle created by `create_gpu_instance` and not destroyed yet.
        nvml_try(unsafe { destroy(gi.handle as nvmlGpuInstance_t) }).map_err(op("nvmlGpuInstanceDestroy"))
    }
}
