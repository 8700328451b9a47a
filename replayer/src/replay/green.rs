//! Green contexts: a soft SM partition of device 0 for `gpuless replay --emulate` (issue 6).
//!
//! A green context runs kernels on a subset of the GPU's SMs; everything else (memory, copy
//! engines, L2, memory bandwidth) stays shared with the rest of the GPU. It is **not** an
//! isolation boundary: the replayer enforces the emulated profile's memory size as a limit
//! ([`super::Options::memory_limit`]), but nothing limits bandwidth or protects other tenants.
//!
//! Steps (CUDA driver API, "Green Contexts", CUDA 12.4+): `cuDeviceGetDevResource(SM)`, a
//! single-group `cuDevSmResourceSplitByCount` as [`plan_split`] chooses (or no split for the
//! whole device), `cuDevResourceGenerateDesc`, `cuGreenCtxCreate(CU_GREEN_CTX_DEFAULT_STREAM)`,
//! `cuCtxFromGreenCtx`. The SMs actually granted are read back with `cuGreenCtxGetDevResource`.
//! The green context lives as long as the process, like the primary context of [`init_device`].
//!
//! [`init_device`]: super::init_device

use std::ffi::c_int;

use cudarc::driver::sys;
use serde::Serialize;

use super::Device;
use crate::partition::sm_split::{plan_split, SmPlan, SmShape, SmSplitError, SplitMode, SplitPreference};

/// Why a green context could not be made.
#[derive(Debug, thiserror::Error)]
pub enum GreenError {
    /// No driver or no device.
    #[error("no GPU to replay on: {0}")]
    NoGpu(String),
    /// The driver has no green-context API (older than CUDA 12.4).
    #[error("the CUDA driver has no {0} (green contexts need a CUDA 12.4 or newer driver)")]
    Unsupported(&'static str),
    /// A driver call failed.
    #[error("{call} failed with {code:?}")]
    Driver {
        /// The driver function.
        call: &'static str,
        /// Its result.
        code: sys::CUresult,
    },
    /// The requested SM count cannot be planned.
    #[error(transparent)]
    Plan(#[from] SmSplitError),
    /// The split created no group.
    #[error("cuDevSmResourceSplitByCount(minCount {min_count}, flags {flags}) created no group from {available} SMs")]
    NoGroup {
        /// The minimum count asked for.
        min_count: u32,
        /// The flags passed.
        flags: u32,
        /// SMs of the device.
        available: u32,
    },
}

/// The soft partition a replay runs in, as created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GreenPartition {
    /// The device's SM resource (`cuDeviceGetDevResource`).
    pub device: SmShape,
    /// What was asked for and what the plan expected.
    pub plan: SmPlan,
    /// SMs the green context actually holds (`cuGreenCtxGetDevResource`).
    pub granted_sms: u32,
}

fn call(r: sys::CUresult, name: &'static str) -> Result<(), GreenError> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(GreenError::Driver { call: name, code: r })
    }
}

/// The functions this module needs beyond `cuInit`; checked before the first call because
/// cudarc's lazily loaded entry points panic when a symbol is missing.
const GREEN_API: [&str; 6] = [
    "cuDeviceGetDevResource",
    "cuDevSmResourceSplitByCount",
    "cuDevResourceGenerateDesc",
    "cuGreenCtxCreate",
    "cuCtxFromGreenCtx",
    "cuGreenCtxGetDevResource",
];

fn init_driver() -> Result<sys::CUdevice, GreenError> {
    // SAFETY: plain driver calls with valid out-pointers; symbol lookups only read the library.
    unsafe {
        if !sys::is_culib_present() {
            return Err(GreenError::NoGpu("libcuda.so.1 not found (is the NVIDIA driver installed?)".into()));
        }
        for name in GREEN_API {
            if sys::culib().get::<*const ()>(name.as_bytes()).is_err() {
                return Err(GreenError::Unsupported(name));
            }
        }
        call(sys::cuInit(0), "cuInit").map_err(|e| GreenError::NoGpu(e.to_string()))?;
        super::memory::reserve_early();
        let mut dev: c_int = 0;
        call(sys::cuDeviceGet(&mut dev, 0), "cuDeviceGet")?;
        Ok(dev)
    }
}

fn sm_of(res: &sys::CUdevResource) -> sys::CUdevSmResource {
    // SAFETY: the resource was filled by the driver for CU_DEV_RESOURCE_TYPE_SM, whose union
    // member is `sm`.
    unsafe { res.__bindgen_anon_1.sm }
}

fn zeroed_resource() -> sys::CUdevResource {
    // SAFETY: a plain C struct (enum tag 0 = INVALID, bytes, a union of integers): all-zero is a
    // valid value, and the driver overwrites it.
    unsafe { std::mem::zeroed() }
}

/// Device 0's SM resource: SM count, minimum partition size and co-scheduling alignment.
pub fn device_sm_shape() -> Result<SmShape, GreenError> {
    let dev = init_driver()?;
    Ok(shape_of(&device_resource(dev)?))
}

fn device_resource(dev: sys::CUdevice) -> Result<sys::CUdevResource, GreenError> {
    let mut res = zeroed_resource();
    // SAFETY: valid device and out-pointer.
    call(
        unsafe { sys::cuDeviceGetDevResource(dev, &mut res, sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM) },
        "cuDeviceGetDevResource",
    )?;
    Ok(res)
}

fn shape_of(res: &sys::CUdevResource) -> SmShape {
    let sm = sm_of(res);
    SmShape { sm_count: sm.smCount, min_partition: sm.minSmPartitionSize, alignment: sm.smCoscheduledAlignment }
}

/// Creates a green context on device 0 holding `sms` SMs (as [`plan_split`] with `prefer`
/// rounds them) and returns it as a [`Device`] for [`super::replay_on`], with what was granted.
pub fn init_green_device(sms: u32, prefer: SplitPreference) -> Result<(Device, GreenPartition), GreenError> {
    let dev = init_driver()?;
    let whole = device_resource(dev)?;
    let shape = shape_of(&whole);
    let plan = plan_split(sms, shape, prefer)?;
    let mut part = whole;
    if plan.mode != SplitMode::WholeDevice {
        let mut groups: u32 = 1;
        let mut result = zeroed_resource();
        let mut remainder = zeroed_resource();
        // SAFETY: `result` has room for the one group asked for; input and remainder are valid.
        call(
            unsafe {
                sys::cuDevSmResourceSplitByCount(
                    &mut result,
                    &mut groups,
                    &whole,
                    &mut remainder,
                    plan.split_flags(),
                    plan.requested,
                )
            },
            "cuDevSmResourceSplitByCount",
        )?;
        if groups == 0 || sm_of(&result).smCount == 0 {
            return Err(GreenError::NoGroup {
                min_count: plan.requested,
                flags: plan.split_flags(),
                available: shape.sm_count,
            });
        }
        part = result;
    }
    let mut desc: sys::CUdevResourceDesc = std::ptr::null_mut();
    // SAFETY: one valid resource; the descriptor is an out-handle.
    call(unsafe { sys::cuDevResourceGenerateDesc(&mut desc, &mut part, 1) }, "cuDevResourceGenerateDesc")?;
    let mut green: sys::CUgreenCtx = std::ptr::null_mut();
    // SAFETY: a descriptor from the driver, a valid device, a documented flag.
    call(
        unsafe {
            sys::cuGreenCtxCreate(
                &mut green,
                desc,
                dev,
                sys::CUgreenCtxCreate_flags::CU_GREEN_CTX_DEFAULT_STREAM as u32,
            )
        },
        "cuGreenCtxCreate",
    )?;
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: a live green context and an out-pointer.
    call(unsafe { sys::cuCtxFromGreenCtx(&mut ctx, green) }, "cuCtxFromGreenCtx")?;
    let mut held = zeroed_resource();
    // SAFETY: a live green context and an out-pointer.
    call(
        unsafe { sys::cuGreenCtxGetDevResource(green, &mut held, sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM) },
        "cuGreenCtxGetDevResource",
    )?;
    let granted_sms = sm_of(&held).smCount;
    Ok((Device { ctx: ctx as usize }, GreenPartition { device: shape, plan, granted_sms }))
}
