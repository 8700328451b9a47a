//! Choosing where `replay --mig PROFILE` runs: an existing MIG instance of the profile, one
//! created for the run (`--create`), or a soft partition of a GPU with MIG off (`--emulate`).
//!
//! Selection is pure: it reads a [`GpuInfo`] (from [`super::nvml`] or a test) and answers with a
//! target or an error whose text says what to do. Creating and destroying instances goes through
//! the [`MigOps`] trait: [`super::mig_nvml::NvmlMig`] implements it with raw NVML calls, tests with
//! a fake. [`run_on_created`] creates a GPU instance and a compute instance, runs a closure on the
//! resulting MIG device, and destroys both afterwards, also when the closure fails or panics.

use serde::Serialize;

use super::nvml::{GpuInfo, MigDeviceInfo};
use super::placement::{choose_placement, PlacementError};
use super::profiles::{Placement, Profile};
use super::resolve::{resolve_profile, ResolveError};

/// Why no MIG target (or emulation target) could be chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MigSelectError {
    /// The `--mig` argument names no profile of this GPU.
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    /// The GPU does not support MIG at all.
    #[error("GPU {gpu} ({name}) does not support MIG, so --mig has nothing to run on")]
    NotMigCapable {
        /// NVML index.
        gpu: u32,
        /// Device name.
        name: String,
    },
    /// MIG mode is disabled (or only pending) on the GPU.
    #[error("{}", mig_off_text(*gpu, name, *pending, profile))]
    MigOff {
        /// NVML index.
        gpu: u32,
        /// Device name.
        name: String,
        /// MIG mode is enabled but waits for a GPU reset.
        pending: bool,
        /// The resolved profile.
        profile: Box<Profile>,
    },
    /// MIG is on, but no MIG device of the profile exists.
    #[error(
        "GPU {gpu} has no MIG instance of profile {profile} (id {profile_id}); existing MIG devices: {existing}. \
         Create one with `--create` (needs root), or `sudo nvidia-smi mig -i {gpu} -cgi {profile_id} -C`"
    )]
    NoInstance {
        /// NVML index.
        gpu: u32,
        /// Profile name.
        profile: String,
        /// Profile id.
        profile_id: u32,
        /// The MIG devices that exist, `uuid (profile, N SMs)`, or `none`.
        existing: String,
    },
    /// No GPU instance of the profile fits next to the existing ones.
    #[error("cannot create a {profile} instance on GPU {gpu}: {source}")]
    NoCapacity {
        /// NVML index.
        gpu: u32,
        /// Profile name.
        profile: String,
        /// What the placement code found.
        source: PlacementError,
    },
    /// A `MIG-…` UUID that no MIG device of any GPU has.
    #[error("no MIG device has UUID {uuid}; MIG devices here: {known}")]
    UnknownUuid {
        /// The UUID asked for.
        uuid: String,
        /// The MIG devices that exist, or `none`.
        known: String,
    },
    /// `--emulate` on a GPU whose MIG mode is on: CUDA sees only MIG devices there.
    #[error(
        "--emulate splits a whole GPU, but MIG mode is on for GPU {gpu}: run on a MIG instance instead \
         (`--mig PROFILE`, or `--mig PROFILE --create`)"
    )]
    EmulateWithMigOn {
        /// NVML index.
        gpu: u32,
    },
}

fn mig_off_text(gpu: u32, name: &str, pending: bool, p: &Profile) -> String {
    let state = if pending {
        format!(
            "MIG mode on GPU {gpu} ({name}) is enabled but pending: it takes effect after a GPU reset \
             (`sudo nvidia-smi -i {gpu} -r`, with no process using the GPU), or a reboot"
        )
    } else {
        format!(
            "MIG mode is disabled on GPU {gpu} ({name}), so there is no MIG instance of {} to run on. \
             An administrator enables it with `sudo nvidia-smi -i {gpu} -mig 1` (no process may be using \
             the GPU; some systems also need a GPU reset or a reboot); gpuless never changes it",
            p.name
        )
    };
    format!(
        "{state}. Then create an instance with `--create` or `sudo nvidia-smi mig -i {gpu} -cgi {} -C`. \
         Without MIG, add `--emulate`: a soft partition (green context) with the profile's {} SMs and a \
         {:.2} GiB memory limit, with no memory or bandwidth isolation",
        p.id,
        p.sms,
        p.memory_mib as f64 / 1024.0
    )
}

/// An existing MIG device chosen for a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigTarget {
    /// NVML index of the parent GPU.
    pub gpu: u32,
    /// The profile, when known (always for a name or id; for a UUID when its GPU instance is
    /// listed).
    pub profile: Option<Profile>,
    /// The MIG device (UUID for `CUDA_VISIBLE_DEVICES`, GI/CI ids, SMs, memory).
    pub device: MigDeviceInfo,
}

impl MigTarget {
    /// The MIG device's UUID (`MIG-…`), if NVML reported one.
    pub fn uuid(&self) -> Option<&str> {
        self.device.uuid.as_deref()
    }
}

/// A soft partition chosen for `--emulate`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EmulationTarget {
    /// NVML index of the GPU.
    pub gpu: u32,
    /// The profile emulated.
    pub profile: Profile,
    /// The profile's SM count (what the green context is asked for).
    pub sms: u32,
    /// The profile's memory in bytes (enforced by the replayer as a limit).
    pub memory_limit_bytes: u64,
}

fn describe_devices<'a>(gpus: impl IntoIterator<Item = &'a GpuInfo>) -> String {
    let mut parts = Vec::new();
    for g in gpus {
        for d in &g.mig_devices {
            let profile = profile_of(g, d).map_or_else(|| "?".to_string(), |p| p.name);
            let sms = d.sm_count.map_or_else(|| "?".to_string(), |n| n.to_string());
            parts.push(format!("{} ({profile}, {sms} SMs)", d.uuid.as_deref().unwrap_or("?")));
        }
    }
    if parts.is_empty() {
        "none".to_string()
    } else {
        parts.join(", ")
    }
}

/// The profile of a MIG device's GPU instance, when both are listed.
pub fn profile_of(gpu: &GpuInfo, dev: &MigDeviceInfo) -> Option<Profile> {
    let gi = gpu.gpu_instances.iter().find(|g| Some(g.id) == dev.gpu_instance_id)?;
    gpu.effective_profiles().into_iter().find(|p| p.id == gi.profile_id)
}

/// Resolves `requested` against the GPU and checks that MIG is usable: the common first step of
/// [`select_existing`] and [`plan_create`].
fn resolve_with_mig_on(gpu: &GpuInfo, requested: &str) -> Result<Profile, MigSelectError> {
    let profiles = gpu.effective_profiles();
    let name = || gpu.name.clone().unwrap_or_else(|| "?".to_string());
    let Some(mode) = gpu.mig_mode else {
        // Not MIG-capable: the name check first says so in its own terms when there are no
        // profiles at all.
        return Err(MigSelectError::NotMigCapable { gpu: gpu.index, name: name() });
    };
    let profile = resolve_profile(requested, &profiles)?.clone();
    if !mode.current {
        return Err(MigSelectError::MigOff {
            gpu: gpu.index,
            name: name(),
            pending: mode.pending,
            profile: Box::new(profile),
        });
    }
    Ok(profile)
}

/// Whether `requested` is a MIG device UUID rather than a profile.
pub fn is_mig_uuid(requested: &str) -> bool {
    requested.trim().get(..4).is_some_and(|p| p.eq_ignore_ascii_case("MIG-"))
}

/// Finds the MIG device with UUID `uuid` on any of `gpus`.
pub fn select_by_uuid(gpus: &[GpuInfo], uuid: &str) -> Result<MigTarget, MigSelectError> {
    let wanted = uuid.trim();
    for g in gpus {
        if let Some(d) =
            g.mig_devices.iter().find(|d| d.uuid.as_deref().is_some_and(|u| u.eq_ignore_ascii_case(wanted)))
        {
            return Ok(MigTarget { gpu: g.index, profile: profile_of(g, d), device: d.clone() });
        }
    }
    Err(MigSelectError::UnknownUuid { uuid: wanted.to_string(), known: describe_devices(gpus) })
}

/// Chooses an existing MIG device of profile `requested` (name or id) on `gpu`: the first by
/// GPU-instance id, then compute-instance id, among those whose GPU instance has that profile
/// and that have a UUID. Of several compute instances in one GPU instance, the one with the most
/// SMs comes first.
pub fn select_existing(gpu: &GpuInfo, requested: &str) -> Result<MigTarget, MigSelectError> {
    let profile = resolve_with_mig_on(gpu, requested)?;
    let mut candidates: Vec<&MigDeviceInfo> = gpu
        .mig_devices
        .iter()
        .filter(|d| d.uuid.is_some())
        .filter(|d| profile_of(gpu, d).is_some_and(|p| p.id == profile.id))
        .collect();
    candidates.sort_by_key(|d| (d.gpu_instance_id, std::cmp::Reverse(d.sm_count), d.compute_instance_id));
    match candidates.first() {
        Some(d) => Ok(MigTarget { gpu: gpu.index, profile: Some(profile), device: (*d).clone() }),
        None => Err(MigSelectError::NoInstance {
            gpu: gpu.index,
            profile: profile.name.clone(),
            profile_id: profile.id,
            existing: describe_devices([gpu]),
        }),
    }
}

/// Where a server session asks for profile `requested` and the operator allows creating MIG
/// instances: whether one must be created — MIG is on, the profile exists on this GPU, no
/// instance of it exists, and one fits ([`plan_create`] finds a placement). Otherwise the
/// session runs on an existing instance or, with MIG off, on a soft partition.
pub fn needs_instance(gpu: &GpuInfo, requested: &str) -> bool {
    matches!(select_existing(gpu, requested), Err(MigSelectError::NoInstance { .. }))
        && plan_create(gpu, requested).is_ok()
}

/// What `--create` will create: the profile and the placement the placement code chose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreatePlan {
    /// NVML index of the GPU.
    pub gpu: u32,
    /// The profile.
    pub profile: Profile,
    /// The chosen placement (the one that leaves the most room).
    pub placement: Placement,
}

/// Plans the creation of a GPU instance of `requested` on `gpu`: resolves the profile, checks
/// MIG mode, and chooses the placement with [`choose_placement`] next to the existing instances.
pub fn plan_create(gpu: &GpuInfo, requested: &str) -> Result<CreatePlan, MigSelectError> {
    let profile = resolve_with_mig_on(gpu, requested)?;
    let choice = choose_placement(&gpu.effective_profiles(), &gpu.instances(), profile.id)
        .map_err(|source| MigSelectError::NoCapacity { gpu: gpu.index, profile: profile.name.clone(), source })?;
    Ok(CreatePlan { gpu: gpu.index, profile, placement: choice.placement })
}

/// Chooses the soft partition for `--emulate`: the profile's SMs and memory, on a GPU whose MIG
/// mode is off (or that has no MIG at all but whose model is tabulated).
pub fn select_emulation(gpu: &GpuInfo, requested: &str) -> Result<EmulationTarget, MigSelectError> {
    if gpu.mig_mode.is_some_and(|m| m.current) {
        return Err(MigSelectError::EmulateWithMigOn { gpu: gpu.index });
    }
    let profiles = gpu.effective_profiles();
    let profile = resolve_profile(requested, &profiles)?.clone();
    Ok(EmulationTarget {
        gpu: gpu.index,
        sms: profile.sms,
        memory_limit_bytes: profile.memory_mib.saturating_mul(1 << 20),
        profile,
    })
}

/// A GPU instance created through [`MigOps`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CreatedGi {
    /// Opaque handle of the implementation (NVML: the `nvmlGpuInstance_t`).
    #[serde(skip)]
    pub handle: usize,
    /// GPU instance id.
    pub id: u32,
    /// NVML index of the parent GPU.
    pub gpu: u32,
}

/// A compute instance created through [`MigOps`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CreatedCi {
    /// Opaque handle of the implementation (NVML: the `nvmlComputeInstance_t`).
    #[serde(skip)]
    pub handle: usize,
    /// Compute instance id (inside its GPU instance).
    pub id: u32,
}

/// Why an NVML mutation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call} failed: {detail}")]
pub struct MigOpError {
    /// The NVML function (or step).
    pub call: &'static str,
    /// NVML's error text.
    pub detail: String,
}

/// The NVML calls `--create` needs, behind a trait so that tests can use a fake.
///
/// Implementations must not retry or roll back on their own: [`run_on_created`] orders the
/// calls and destroys what it created.
pub trait MigOps {
    /// Read-only state of GPU `gpu`: MIG mode, profiles, GPU instances and MIG devices.
    fn snapshot(&mut self, gpu: u32) -> Result<GpuInfo, MigOpError>;
    /// `nvmlDeviceCreateGpuInstanceWithPlacement`.
    fn create_gpu_instance(&mut self, gpu: u32, profile_id: u32, placement: Placement)
        -> Result<CreatedGi, MigOpError>;
    /// Creates the compute instance that spans the whole GPU instance (`compute_slices`):
    /// `nvmlGpuInstanceGetComputeInstanceProfileInfo`, then `nvmlGpuInstanceCreateComputeInstance`.
    fn create_compute_instance(&mut self, gi: &CreatedGi, compute_slices: u32) -> Result<CreatedCi, MigOpError>;
    /// The UUID (`MIG-…`) of the MIG device of compute instance `ci` in `gi`.
    fn mig_device_uuid(&mut self, gi: &CreatedGi, ci: &CreatedCi) -> Result<String, MigOpError>;
    /// `nvmlComputeInstanceDestroy`.
    fn destroy_compute_instance(&mut self, ci: &CreatedCi) -> Result<(), MigOpError>;
    /// `nvmlGpuInstanceDestroy`.
    fn destroy_gpu_instance(&mut self, gi: &CreatedGi) -> Result<(), MigOpError>;
}

/// Why a `--create` run failed before or after the closure ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CreateError {
    /// Reading the GPU's state failed.
    #[error("reading GPU state: {0}")]
    Snapshot(MigOpError),
    /// Profile, MIG mode or capacity.
    #[error(transparent)]
    Select(#[from] MigSelectError),
    /// A creation step failed (whatever was created before it was destroyed).
    #[error("creating a {profile} instance at placement {placement}: {source}{}", cleanup_suffix(cleanup))]
    Create {
        /// Profile name.
        profile: String,
        /// Placement tried.
        placement: Placement,
        /// The failing call.
        source: MigOpError,
        /// Errors destroying what was created before the failure.
        cleanup: Option<String>,
    },
}

fn cleanup_suffix(cleanup: &Option<String>) -> String {
    cleanup.as_ref().map_or_else(String::new, |c| format!("; cleaning up also failed: {c}"))
}

/// The result of [`run_on_created`]: the closure's value, what was created, and whether
/// destroying it succeeded.
#[derive(Debug)]
pub struct CreatedRun<T> {
    /// What the closure returned.
    pub value: T,
    /// The plan that was carried out.
    pub plan: CreatePlan,
    /// The GPU instance (already destroyed, unless `teardown` says otherwise).
    pub gi: CreatedGi,
    /// The compute instance (likewise).
    pub ci: CreatedCi,
    /// The MIG device's UUID the closure ran on.
    pub uuid: String,
    /// `Ok` when both instances were destroyed; else what failed and how to clean up by hand.
    pub teardown: Result<(), String>,
}

/// Destroys what was created, in reverse order, when released or dropped (a panic included).
struct Lease<'a, O: MigOps> {
    ops: &'a mut O,
    gi: Option<CreatedGi>,
    ci: Option<CreatedCi>,
}

impl<O: MigOps> Lease<'_, O> {
    /// Destroys the compute instance, then the GPU instance; tries both, reports every failure
    /// with the `nvidia-smi` commands that finish the job.
    fn release(&mut self) -> Result<(), String> {
        let mut errors = Vec::new();
        let gpu_gi = self.gi.map(|g| (g.gpu, g.id));
        if let Some(ci) = self.ci.take() {
            if let Err(e) = self.ops.destroy_compute_instance(&ci) {
                let (gpu, gi) = gpu_gi.unwrap_or((0, 0));
                errors.push(format!("{e} (by hand: `sudo nvidia-smi mig -i {gpu} -gi {gi} -ci {} -dci`)", ci.id));
            }
        }
        if let Some(gi) = self.gi.take() {
            if let Err(e) = self.ops.destroy_gpu_instance(&gi) {
                errors.push(format!("{e} (by hand: `sudo nvidia-smi mig -i {} -gi {} -dgi`)", gi.gpu, gi.id));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

impl<O: MigOps> Drop for Lease<'_, O> {
    fn drop(&mut self) {
        if self.gi.is_some() || self.ci.is_some() {
            // Reached only when unwinding from a panic in the closure: report, never panic again.
            if let Err(e) = self.release() {
                eprintln!("gpuless: error: destroying the MIG instance created for this run: {e}");
            }
        }
    }
}

/// Creates a GPU instance of `requested` on GPU `gpu` at the placement [`plan_create`] chooses,
/// then a compute instance spanning it, and calls `run` with the MIG device's UUID. Both
/// instances are destroyed afterwards (compute instance first), also when `run` returns an error
/// value or panics (the panic then continues after the cleanup).
///
/// Errors only for what happens before `run`; the teardown's outcome is in
/// [`CreatedRun::teardown`] so that the caller still gets `run`'s value.
pub fn run_on_created<O: MigOps, T>(
    ops: &mut O,
    gpu: u32,
    requested: &str,
    run: impl FnOnce(&str) -> T,
) -> Result<CreatedRun<T>, CreateError> {
    let info = ops.snapshot(gpu).map_err(CreateError::Snapshot)?;
    let plan = plan_create(&info, requested)?;
    let fail = |lease: &mut Lease<'_, O>, source: MigOpError| CreateError::Create {
        profile: plan.profile.name.clone(),
        placement: plan.placement,
        source,
        cleanup: lease.release().err(),
    };
    let mut lease = Lease { ops, gi: None, ci: None };
    let gi = match lease.ops.create_gpu_instance(gpu, plan.profile.id, plan.placement) {
        Ok(gi) => gi,
        Err(e) => return Err(fail(&mut lease, e)),
    };
    lease.gi = Some(gi);
    let ci = match lease.ops.create_compute_instance(&gi, plan.profile.compute_slices) {
        Ok(ci) => ci,
        Err(e) => return Err(fail(&mut lease, e)),
    };
    lease.ci = Some(ci);
    let uuid = match lease.ops.mig_device_uuid(&gi, &ci) {
        Ok(u) => u,
        Err(e) => return Err(fail(&mut lease, e)),
    };
    let value = run(&uuid);
    let teardown = lease.release();
    Ok(CreatedRun { value, plan, gi, ci, uuid, teardown })
}
