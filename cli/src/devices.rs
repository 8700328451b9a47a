//! `gpuless devices [--json]`: every GPU NVML sees, its MIG mode, the GPU-instance profiles it
//! offers (with legal placements and free/total instances) and the MIG instances that exist.
//!
//! Read-only: nothing here changes MIG mode or creates instances. Without NVML (no driver, no
//! GPU) the error from [`gpuless_replayer::partition::nvml::query`] is returned (exit code 2).

use std::io::Write;

use gpuless_replayer::partition::nvml::{self, DeviceReport, GpuInfo, ReportedProfile};

/// Query NVML and print a table per GPU on stdout, or the whole report as JSON.
pub fn run(json: bool) -> anyhow::Result<()> {
    let report = nvml::query()?;
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        render(&mut out, &report)?;
    }
    out.flush()?;
    Ok(())
}

fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "?".to_string(), |x| x.to_string())
}

fn on_off(b: bool) -> &'static str {
    if b {
        "enabled"
    } else {
        "disabled"
    }
}

/// Writes the readable form of `report`.
fn render(out: &mut impl Write, report: &DeviceReport) -> std::io::Result<()> {
    writeln!(
        out,
        "driver {} · NVML {} · {} GPU(s)",
        opt(&report.driver_version),
        opt(&report.nvml_version),
        report.gpus.len()
    )?;
    for gpu in &report.gpus {
        writeln!(out)?;
        render_gpu(out, gpu)?;
    }
    Ok(())
}

fn render_gpu(out: &mut impl Write, g: &GpuInfo) -> std::io::Result<()> {
    writeln!(out, "GPU {}: {}  {}", g.index, opt(&g.name), opt(&g.uuid))?;
    let sms = match g.sm_count {
        Some(n) => format!("{n} SMs ({})", sm_source(g)),
        None => "SM count unknown".to_string(),
    };
    let cc = g.compute_capability.map_or_else(|| "?".to_string(), |(a, b)| format!("{a}.{b}"));
    let mem = g.memory_total_bytes.map_or_else(|| "?".to_string(), gib);
    writeln!(out, "  memory {mem} · {sms} · compute capability {cc}")?;
    match g.mig_mode {
        None => writeln!(out, "  MIG: not supported")?,
        Some(m) => {
            writeln!(out, "  MIG mode: current {}, pending {}", on_off(m.current), on_off(m.pending))?;
            if !m.current {
                writeln!(
                    out,
                    "  (MIG is off: an administrator enables it with `sudo nvidia-smi -i {} -mig 1`, with no process \
                     on the GPU, sometimes followed by a GPU reset; gpuless never changes it. Without MIG, \
                     `gpuless replay --mig PROFILE --emulate` runs on a soft SM partition.)",
                    g.index
                )?;
            }
        }
    }
    if let Some(model) = g.known_model {
        writeln!(out, "  built-in profile table: {}", model.label())?;
    }
    if !g.profiles.is_empty() {
        writeln!(out, "  GPU instance profiles (reported by the GPU):")?;
        writeln!(
            out,
            "    {:<12} {:>3} {:>6} {:>4} {:>11} {:>3} {:>10}  placements (start:size)",
            "profile", "id", "slices", "SMs", "memory GiB", "CE", "free/total"
        )?;
        for p in &g.profiles {
            render_profile(out, p)?;
        }
    }
    if g.mig_mode.is_some_and(|m| m.current) {
        if g.gpu_instances.is_empty() {
            writeln!(out, "  GPU instances: none")?;
        } else {
            writeln!(out, "  GPU instances:")?;
            for gi in &g.gpu_instances {
                writeln!(
                    out,
                    "    GI {:<3} {:<12} profile {:<3} placement {}",
                    gi.id,
                    gi.profile_name.as_deref().unwrap_or("?"),
                    gi.profile_id,
                    gi.placement
                )?;
            }
        }
        if g.mig_devices.is_empty() {
            writeln!(out, "  MIG devices: none")?;
        } else {
            writeln!(out, "  MIG devices (CUDA_VISIBLE_DEVICES=<uuid>):")?;
            for d in &g.mig_devices {
                writeln!(
                    out,
                    "    {:<2} {}  GI {} CI {}  {} SMs  {}",
                    d.index,
                    opt(&d.uuid),
                    opt(&d.gpu_instance_id),
                    opt(&d.compute_instance_id),
                    opt(&d.sm_count),
                    d.memory_total_bytes.map_or_else(|| "?".to_string(), gib)
                )?;
            }
        }
    }
    for w in &g.warnings {
        writeln!(out, "  warning: {w}")?;
    }
    Ok(())
}

fn sm_source(g: &GpuInfo) -> &'static str {
    use gpuless_replayer::partition::nvml::SmCountSource::*;
    match g.sm_count_source {
        NvmlAttributes => "NVML attributes",
        CoresPerSm => "NVML cores / cores per SM",
        FullGpuProfile => "full-GPU MIG profile; the chip may have more",
        Unknown => "unknown",
    }
}

fn render_profile(out: &mut impl Write, r: &ReportedProfile) -> std::io::Result<()> {
    let p = &r.profile;
    let placements = if p.placements.is_empty() {
        "?".to_string()
    } else {
        p.placements.iter().map(|pl| pl.to_string()).collect::<Vec<_>>().join(" ")
    };
    let free = format!("{}/{}", r.free_instances.map_or_else(|| "-".to_string(), |f| f.to_string()), p.max_instances);
    writeln!(
        out,
        "    {:<12} {:>3} {:>6} {:>4} {:>11.2} {:>3} {:>10}  {}",
        p.name,
        p.id,
        p.compute_slices,
        p.sms,
        p.memory_mib as f64 / 1024.0,
        p.copy_engines.map_or_else(|| "?".to_string(), |c| c.to_string()),
        free,
        placements
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuless_replayer::partition::nvml::{MigModeState, SmCountSource};
    use gpuless_replayer::partition::GpuModel;

    fn h200() -> GpuInfo {
        GpuInfo {
            index: 0,
            name: Some("NVIDIA H200".into()),
            uuid: Some("GPU-00000000-0000-0000-0000-000000000000".into()),
            memory_total_bytes: Some(150_754_820_096),
            sm_count: Some(132),
            sm_count_source: SmCountSource::CoresPerSm,
            compute_capability: Some((9, 0)),
            mig_mode: Some(MigModeState { current: false, pending: false }),
            known_model: Some(GpuModel::H200),
            profiles: GpuModel::H200
                .profiles()
                .into_iter()
                .map(|profile| ReportedProfile { profile, free_instances: None, media: [0; 4], p2p: false })
                .collect(),
            gpu_instances: Vec::new(),
            mig_devices: Vec::new(),
            warnings: Vec::new(),
        }
    }

    #[test]
    fn table_shows_profiles_and_mig_off() {
        let report = DeviceReport { driver_version: Some("580.0".into()), nvml_version: None, gpus: vec![h200()] };
        let mut buf = Vec::new();
        render(&mut buf, &report).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(text.contains("GPU 0: NVIDIA H200"), "{text}");
        assert!(text.contains("MIG mode: current disabled, pending disabled"), "{text}");
        assert!(text.contains("3g.71gb"), "{text}");
        assert!(text.contains("0:4 4:4"), "{text}");
        assert!(text.contains("69.75"), "{text}");
        assert!(text.contains("-/2"), "{text}");
    }

    #[test]
    fn json_has_flattened_profiles() {
        let report = DeviceReport { driver_version: None, nvml_version: None, gpus: vec![h200()] };
        let v = serde_json::to_value(&report).unwrap();
        assert_eq!(v["gpus"][0]["profiles"][4]["name"], "3g.71gb");
        assert_eq!(v["gpus"][0]["profiles"][4]["sms"], 60);
        assert_eq!(v["gpus"][0]["mig_mode"]["current"], false);
    }
}
