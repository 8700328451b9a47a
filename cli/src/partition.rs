//! `gpuless replay --mig PROFILE [--create | --emulate]`: where a replay runs, and how the run
//! is labelled in text and JSON output.
//!
//! - `--mig PROFILE` (name such as `3g.71gb`, or a profile id): an existing MIG device of that
//!   profile on GPU 0, selected with `CUDA_VISIBLE_DEVICES=MIG-<uuid>` before the driver starts.
//! - `--mig MIG-<uuid>`: that MIG device.
//! - `--mig PROFILE --create`: a GPU instance and compute instance are created through NVML, the
//!   replay runs in a child process (`gpuless replay --mig MIG-<uuid>`) so that its CUDA context
//!   is gone before both instances are destroyed, also when the child fails or crashes.
//! - `--mig PROFILE --emulate` (MIG off): a green context with the profile's SMs and the
//!   profile's memory as the replayer's allocation limit — a soft partition, without memory or
//!   bandwidth isolation, and labelled so everywhere.

use std::path::Path;
use std::process::{Command, ExitCode};

use anyhow::{anyhow, Context};
use cudarc::driver::sys;
use gpuless_replayer::partition::mig::{
    is_mig_uuid, run_on_created, select_by_uuid, select_emulation, select_existing, EmulationTarget, MigTarget,
};
use gpuless_replayer::partition::mig_nvml::NvmlMig;
use gpuless_replayer::partition::nvml::{self, GpuInfo};
use gpuless_replayer::partition::sm_split::{SplitMode, SplitPreference};
use gpuless_replayer::replay::green::init_green_device;
use gpuless_replayer::replay::{init_device, Device};
use serde::Serialize;

/// What `gpuless replay` was asked for, besides the trace and the partition.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions {
    /// Skip comparing device-to-host results.
    pub no_verify: bool,
    /// Hot replay iterations (0: replay once).
    pub iterations: u32,
    /// Print JSON.
    pub json: bool,
    /// Replay a damaged trace up to the damage.
    pub partial: bool,
    /// With `iterations`: GPU time of every launch of the body.
    pub profile: bool,
}

/// The GPU (NVML index) that `--mig` profiles are resolved on and instances are created on:
/// GPU 0, or the one a server's executor is started for (`GPULESS_GPU_NVML`).
fn gpu() -> u32 {
    std::env::var("GPULESS_GPU_NVML").ok().and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// The partition flags of `gpuless replay`.
#[derive(Debug, Clone, Default)]
pub struct PartitionArgs {
    /// `--mig`: profile name, profile id, or MIG device UUID.
    pub mig: Option<String>,
    /// `--create`: create (and destroy) an instance of the profile.
    pub create: bool,
    /// `--emulate`: a green context instead of a MIG instance.
    pub emulate: bool,
    /// `--exact-sms`: with `--emulate`, ask for the profile's exact SM count (a fine split)
    /// instead of rounding up to the co-scheduling alignment.
    pub exact_sms: bool,
    /// Hidden `--mig-created`: set by the parent of a `--create` run.
    pub created: bool,
}

/// Where a replay runs, decided before the driver is initialized.
#[derive(Debug)]
pub enum Prepared {
    /// The whole of device 0.
    Full,
    /// An existing MIG device (`CUDA_VISIBLE_DEVICES` is already set).
    Mig {
        /// The device.
        target: Box<MigTarget>,
        /// Created by a `--create` parent for this run.
        created: bool,
    },
    /// A green context of the profile's SMs.
    Emulate(Box<EmulationTarget>, SplitPreference),
}

/// How a replay's partition is reported (`"partition"` in `--json` output).
#[derive(Debug, Clone, Serialize)]
pub struct PartitionLabel {
    /// `full`, `mig` or `emulated`.
    pub kind: &'static str,
    /// MIG profile name.
    pub profile: Option<String>,
    /// MIG profile id.
    pub profile_id: Option<u32>,
    /// SMs the replay ran on, as the driver reports them.
    pub sms: Option<u32>,
    /// SMs asked for (the profile's SM count).
    pub sms_requested: Option<u32>,
    /// SMs of the whole device.
    pub device_sms: Option<u32>,
    /// How a green context's SMs were split off (emulated only).
    pub sm_split: Option<SplitMode>,
    /// Device memory the replay may allocate (emulated only: the profile's memory size).
    pub memory_limit_bytes: Option<u64>,
    /// What the partition isolates.
    pub isolation: &'static str,
    /// The MIG device's UUID.
    pub mig_uuid: Option<String>,
    /// The MIG instance was created for this run and destroyed afterwards.
    pub created: bool,
}

pub const SOFT: &str = "none: soft partition (SMs only; memory capacity limited by the replayer, memory bandwidth, \
                    L2 and copy engines shared with the rest of the GPU)";

impl PartitionLabel {
    fn full(sms: Option<u32>) -> PartitionLabel {
        PartitionLabel {
            kind: "full",
            profile: None,
            profile_id: None,
            sms,
            sms_requested: None,
            device_sms: sms,
            sm_split: None,
            memory_limit_bytes: None,
            isolation: "whole GPU",
            mig_uuid: None,
            created: false,
        }
    }

    /// One line for the text report.
    pub fn describe(&self) -> String {
        let n = |v: Option<u32>| v.map_or_else(|| "?".to_string(), |x| x.to_string());
        match self.kind {
            "mig" => format!(
                "MIG {} on {}: {} SMs, memory and bandwidth isolated by the hardware{}",
                self.profile.as_deref().unwrap_or("(unknown profile)"),
                self.mig_uuid.as_deref().unwrap_or("?"),
                n(self.sms),
                if self.created { "; instance created for this run and destroyed afterwards" } else { "" }
            ),
            "emulated" => {
                let limit =
                    self.memory_limit_bytes.map_or_else(|| "none".to_string(), |b| format!("{:.2} GiB", gib(b)));
                format!(
                    "EMULATED {} — soft partition, NO memory or bandwidth isolation: green context with {} of {} SMs \
                     (asked {}, split {}), memory limit {limit}",
                    self.profile.as_deref().unwrap_or("?"),
                    n(self.sms),
                    n(self.device_sms),
                    n(self.sms_requested),
                    match self.sm_split {
                        Some(SplitMode::Fine) => "fine (--exact-sms): SM pairs, thread-block clusters may fail",
                        Some(SplitMode::Coscheduled) => "co-scheduled, rounded to the driver's alignment",
                        Some(SplitMode::WholeDevice) => "none: whole device",
                        None => "?",
                    }
                )
            }
            _ => format!("whole GPU ({} SMs)", n(self.sms)),
        }
    }
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

fn query_gpus() -> anyhow::Result<Vec<GpuInfo>> {
    let report = nvml::query().context("--mig needs NVML to find this GPU's MIG profiles and instances")?;
    if report.gpus.is_empty() {
        return Err(anyhow!("NVML reports no GPU"));
    }
    Ok(report.gpus)
}

fn gpu0(gpus: &[GpuInfo]) -> anyhow::Result<&GpuInfo> {
    let n = gpu();
    gpus.iter().find(|g| g.index == n).ok_or_else(|| anyhow!("NVML reports no GPU {n}"))
}

/// Decides where the replay runs. For a MIG target this sets `CUDA_VISIBLE_DEVICES` in this
/// process, so it must run before the driver is initialized (before `init_device` starts).
pub fn prepare(args: &PartitionArgs) -> anyhow::Result<Prepared> {
    let Some(mig) = args.mig.as_deref() else {
        return Ok(Prepared::Full);
    };
    let gpus = query_gpus()?;
    if args.emulate {
        let target = select_emulation(gpu0(&gpus)?, mig)?;
        let prefer = if args.exact_sms { SplitPreference::Exact } else { SplitPreference::Coscheduled };
        return Ok(Prepared::Emulate(Box::new(target), prefer));
    }
    let target = if is_mig_uuid(mig) { select_by_uuid(&gpus, mig)? } else { select_existing(gpu0(&gpus)?, mig)? };
    let uuid = target.uuid().ok_or_else(|| anyhow!("the chosen MIG device has no UUID"))?.to_string();
    if let Ok(previous) = std::env::var("CUDA_VISIBLE_DEVICES") {
        // A server's executor is started with its GPU's UUID there: not worth a note.
        if previous != uuid && std::env::var_os("GPULESS_GPU_NVML").is_none() {
            eprintln!("gpuless: note: CUDA_VISIBLE_DEVICES={previous} replaced by {uuid} for --mig");
        }
    }
    // No thread has started and the driver is not loaded yet: the variable is read by cuInit.
    std::env::set_var("CUDA_VISIBLE_DEVICES", &uuid);
    Ok(Prepared::Mig { target: Box::new(target), created: args.created })
}

/// SMs of CUDA device 0 (after `init_device`).
fn cuda_sm_count() -> Option<u32> {
    let mut dev = 0;
    let mut n = 0;
    // SAFETY: the driver is initialized by init_device; plain out-parameters.
    unsafe {
        if sys::cuDeviceGet(&mut dev, 0) != sys::CUresult::CUDA_SUCCESS {
            return None;
        }
        let attr = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT;
        if sys::cuDeviceGetAttribute(&mut n, attr, dev) != sys::CUresult::CUDA_SUCCESS {
            return None;
        }
    }
    u32::try_from(n).ok()
}

/// Initializes the driver on the prepared partition: the device to replay on, its label, and
/// the memory limit for `Options::memory_limit`.
pub fn init(prepared: &Prepared) -> anyhow::Result<(Device, PartitionLabel, Option<u64>)> {
    match prepared {
        Prepared::Full => {
            let device = init_device()?;
            Ok((device, PartitionLabel::full(cuda_sm_count()), None))
        }
        Prepared::Mig { target, created } => {
            let device = init_device()?;
            let sms = cuda_sm_count().or(target.device.sm_count);
            let label = PartitionLabel {
                kind: "mig",
                profile: target.profile.as_ref().map(|p| p.name.clone()),
                profile_id: target.profile.as_ref().map(|p| p.id),
                sms,
                sms_requested: target.profile.as_ref().map(|p| p.sms),
                device_sms: None,
                sm_split: None,
                memory_limit_bytes: None,
                isolation: "hardware: MIG instance (own SMs, memory, L2 and bandwidth)",
                mig_uuid: target.uuid().map(str::to_string),
                created: *created,
            };
            Ok((device, label, None))
        }
        Prepared::Emulate(target, prefer) => {
            let (device, part) = init_green_device(target.sms, *prefer)
                .with_context(|| format!("creating a green context of {} SMs for --emulate", target.sms))?;
            let label = PartitionLabel {
                kind: "emulated",
                profile: Some(target.profile.name.clone()),
                profile_id: Some(target.profile.id),
                sms: Some(part.granted_sms),
                sms_requested: Some(target.sms),
                device_sms: Some(part.device.sm_count),
                sm_split: Some(part.plan.mode),
                memory_limit_bytes: Some(target.memory_limit_bytes),
                isolation: SOFT,
                mig_uuid: None,
                created: false,
            };
            if part.granted_sms != part.plan.expected {
                eprintln!(
                    "gpuless: note: the green context holds {} SMs; the plan expected {} (device: min partition {}, alignment {})",
                    part.granted_sms, part.plan.expected, part.device.min_partition, part.device.alignment
                );
            }
            Ok((device, label, Some(target.memory_limit_bytes)))
        }
    }
}

/// `--mig PROFILE --create`: creates a GPU instance and a compute instance of the profile on GPU
/// 0, replays in a child `gpuless replay --mig MIG-<uuid>` (with the same `--json`, `--no-verify`,
/// `--iterations` and `--profile`), destroys both instances, and returns the child's exit code (an error when
/// the instances could not be destroyed).
pub fn run_created(path: &Path, opts: &RunOptions, args: &PartitionArgs) -> anyhow::Result<ExitCode> {
    let RunOptions { no_verify, iterations, json, partial, profile } = *opts;
    let mig = args.mig.as_deref().ok_or_else(|| anyhow!("--create needs --mig PROFILE"))?;
    if is_mig_uuid(mig) {
        return Err(anyhow!("--create needs a profile (like 3g.71gb), not a MIG device UUID"));
    }
    let exe = std::env::current_exe().context("finding the gpuless executable for the child replay")?;
    let mut ops = NvmlMig::open(None)?;
    let run = run_on_created(&mut ops, gpu(), mig, |uuid| {
        let mut cmd = Command::new(&exe);
        cmd.arg("replay").arg("--mig").arg(uuid).arg("--mig-created");
        if json {
            cmd.arg("--json");
        }
        if no_verify {
            cmd.arg("--no-verify");
        }
        if partial {
            cmd.arg("--partial");
        }
        if iterations > 0 {
            cmd.arg("--iterations").arg(iterations.to_string());
        }
        if profile {
            cmd.arg("--profile");
        }
        cmd.arg(path).status()
    })?;
    eprintln!(
        "gpuless: created GPU instance {} ({} at placement {}) and compute instance {} on GPU {} for {}",
        run.gi.id,
        run.plan.profile.name,
        run.plan.placement,
        run.ci.id,
        gpu(),
        run.uuid
    );
    let code = match &run.value {
        Ok(status) => match status.code() {
            Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(2)),
            None => {
                eprintln!("gpuless: error: the replay on {} ended by a signal ({status})", run.uuid);
                ExitCode::from(2)
            }
        },
        Err(e) => {
            eprintln!("gpuless: error: could not start the replay on {}: {e}", run.uuid);
            ExitCode::from(2)
        }
    };
    match run.teardown {
        Ok(()) => {
            eprintln!("gpuless: destroyed compute instance {} and GPU instance {}", run.ci.id, run.gi.id);
            Ok(code)
        }
        Err(e) => Err(anyhow!("the replay finished, but destroying the instances created for it failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emulated_label_says_soft_partition() {
        let label = PartitionLabel {
            kind: "emulated",
            profile: Some("3g.71gb".into()),
            profile_id: Some(9),
            sms: Some(60),
            sms_requested: Some(60),
            device_sms: Some(132),
            sm_split: Some(SplitMode::Fine),
            memory_limit_bytes: Some(71424 << 20),
            isolation: SOFT,
            mig_uuid: None,
            created: false,
        };
        let text = label.describe();
        assert!(text.contains("EMULATED 3g.71gb — soft partition, NO memory or bandwidth isolation"), "{text}");
        assert!(text.contains("60 of 132 SMs") && text.contains("69.75 GiB"), "{text}");
        let v = serde_json::to_value(&label).unwrap();
        assert_eq!(v["kind"], "emulated");
        assert_eq!(v["sm_split"], "fine");
        assert!(v["isolation"].as_str().unwrap().starts_with("none: soft partition"));
        assert_eq!(PartitionLabel::full(Some(132)).describe(), "whole GPU (132 SMs)");
    }

    #[test]
    fn no_mig_flag_is_the_full_gpu() {
        assert!(matches!(prepare(&PartitionArgs::default()), Ok(Prepared::Full)));
    }
}
