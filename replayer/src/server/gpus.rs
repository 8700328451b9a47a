//! The GPUs a server owns: which they are (`gpus` in the configuration, the server's own
//! `CUDA_VISIBLE_DEVICES`, NVML), how an executor is pointed at one, and what placement asks of
//! them (free memory).
//!
//! Each GPU gets its own executors (started with `CUDA_VISIBLE_DEVICES` naming only that GPU,
//! so inside them it is device 0), its own warm pool, partitions and priority gate. A GPU is
//! numbered as NVML numbers it (`gpuless devices`, `nvidia-smi`) wherever NVML can tell.

use std::collections::HashMap;

/// One GPU of the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// Its number: what a client's `--gpu` names, the metrics' `gpu` label, NVML's index where
    /// NVML knows the GPU.
    pub index: u32,
    /// What its executors get as `CUDA_VISIBLE_DEVICES` (its UUID where known); `None`: they
    /// inherit the server's (a server that could tell only one GPU).
    pub visible: Option<String>,
    /// NVML's index of it, if NVML knows it (MIG placement, memory queries).
    pub nvml: Option<u32>,
    /// Its device node's minor number (`/dev/nvidiaN`), if NVML says: a confined executor's
    /// view holds only its GPU's node.
    pub minor: Option<u32>,
    /// MIG profile names and ids of this GPU with their SM counts (NVML; empty without it).
    pub profiles: HashMap<String, u32>,
}

impl Gpu {
    /// The only GPU of a server that cannot tell its GPUs apart: device 0 of what the
    /// executors see.
    pub fn sole(profiles: HashMap<String, u32>) -> Gpu {
        Gpu { index: 0, visible: None, nvml: Some(0), minor: None, profiles }
    }
}

/// What NVML says of one of the machine's GPUs.
#[derive(Debug, Clone, Default)]
pub struct NvmlGpu {
    /// NVML's index.
    pub index: u32,
    /// `GPU-…`.
    pub uuid: String,
    /// Its device node's minor number.
    pub minor: Option<u32>,
    /// MIG profile names and ids with their SM counts.
    pub profiles: HashMap<String, u32>,
}

/// What NVML says of the machine's GPUs.
pub type NvmlGpus = Vec<NvmlGpu>;

/// The machine's GPUs as NVML lists them (empty without NVML).
pub fn nvml_gpus() -> NvmlGpus {
    let Ok(report) = crate::partition::nvml::query() else { return Vec::new() };
    report
        .gpus
        .iter()
        .filter_map(|g| {
            let mut profiles = HashMap::new();
            for p in g.effective_profiles() {
                profiles.insert(p.name.clone(), p.sms);
                profiles.insert(p.id.to_string(), p.sms);
            }
            let minor = nvml().and_then(|n| n.device_by_index(g.index).and_then(|d| d.minor_number()).ok());
            Some(NvmlGpu { index: g.index, uuid: g.uuid.clone()?, minor, profiles })
        })
        .collect()
}

/// The GPUs a server with `selection` (`gpus` in the configuration: `all`, or a comma-separated
/// list of NVML indices or UUIDs) owns, given the server's `CUDA_VISIBLE_DEVICES` (`visible`)
/// and what NVML lists (`nvml`).
///
/// - A list: those GPUs, each found in NVML's list by index or UUID (an index NVML does not
///   list is still taken where NVML lists none: a machine without NVML, the stand-in driver).
/// - `all` with `CUDA_VISIBLE_DEVICES` set: its entries, in its order (a UUID or an index, as
///   CUDA reads them).
/// - `all`: every GPU NVML lists; without NVML, one GPU (device 0).
pub fn select(selection: &str, visible: Option<&str>, nvml: &NvmlGpus) -> Result<Vec<Gpu>, String> {
    let by_uuid = |u: &str| nvml.iter().find(|g| g.uuid.eq_ignore_ascii_case(u));
    let by_index = |i: u32| nvml.iter().find(|g| g.index == i);
    let from_nvml = |g: &NvmlGpu| Gpu {
        index: g.index,
        visible: Some(g.uuid.clone()),
        nvml: Some(g.index),
        minor: g.minor,
        profiles: g.profiles.clone(),
    };
    let unknown = |index: u32, visible: String| Gpu {
        index,
        visible: Some(visible),
        nvml: None,
        minor: None,
        profiles: HashMap::new(),
    };
    let selection = selection.trim();
    let mut out: Vec<Gpu> = Vec::new();
    if selection.is_empty() || selection == "all" {
        match visible.map(str::trim).filter(|v| !v.is_empty()) {
            Some(v) => {
                for (n, entry) in v.split(',').map(str::trim).enumerate() {
                    let known = by_uuid(entry);
                    out.push(match known {
                        Some(g) => from_nvml(g),
                        // An index as CUDA reads it (its order need not be NVML's), or a UUID
                        // NVML does not list: numbered by position, passed on as written.
                        None => unknown(n as u32, entry.to_string()),
                    });
                }
            }
            None if nvml.is_empty() => out.push(Gpu::sole(HashMap::new())),
            None => out.extend(nvml.iter().map(from_nvml)),
        }
    } else {
        for entry in selection.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let gpu = match entry.parse::<u32>() {
                Ok(i) => match by_index(i) {
                    Some(g) => from_nvml(g),
                    None if nvml.is_empty() => unknown(i, i.to_string()),
                    None => {
                        return Err(format!(
                            "gpus: GPU {i} is not one of this machine's ({})",
                            nvml.iter().map(|g| g.index.to_string()).collect::<Vec<_>>().join(", ")
                        ))
                    }
                },
                Err(_) => match by_uuid(entry) {
                    Some(g) => from_nvml(g),
                    None => {
                        return Err(format!("gpus: `{entry}` is neither a GPU index nor the UUID of a GPU NVML lists"))
                    }
                },
            };
            if out.iter().any(|g| g.index == gpu.index) {
                return Err(format!("gpus: GPU {} is named twice", gpu.index));
            }
            out.push(gpu);
        }
        if out.is_empty() {
            return Err("gpus: an empty list (`all`, or GPU indices or UUIDs separated by commas)".into());
        }
    }
    // Numbers must tell GPUs apart (positions of a CUDA_VISIBLE_DEVICES mixing UUIDs NVML
    // knows with indices could collide): then every GPU is numbered by position.
    let mut seen: Vec<u32> = out.iter().map(|g| g.index).collect();
    seen.sort_unstable();
    seen.dedup();
    if seen.len() != out.len() {
        for (n, g) in out.iter_mut().enumerate() {
            g.index = n as u32;
        }
    }
    Ok(out)
}

/// The GPUs of this server: [`select`] on this machine.
pub fn discover(selection: &str) -> Result<Vec<Gpu>, String> {
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    select(selection, visible.as_deref(), &nvml_gpus())
}

fn nvml() -> Option<&'static nvml_wrapper::Nvml> {
    static NVML: std::sync::OnceLock<Option<nvml_wrapper::Nvml>> = std::sync::OnceLock::new();
    NVML.get_or_init(|| nvml_wrapper::Nvml::init().ok()).as_ref()
}

/// Free device memory of the GPUs at these NVML indices (absent where NVML cannot tell).
pub fn free_memory(indices: impl Iterator<Item = u32>) -> HashMap<u32, u64> {
    let mut out = HashMap::new();
    if let Some(n) = nvml() {
        for i in indices {
            if let Ok(m) = n.device_by_index(i).and_then(|d| d.memory_info()) {
                out.insert(i, m.free);
            }
        }
    }
    out
}

/// Device memory used per process id on every GPU (NVML; empty without it).
pub fn memory_by_pid() -> HashMap<u32, u64> {
    use nvml_wrapper::enums::device::UsedGpuMemory;
    let mut out = HashMap::new();
    if let Some(n) = nvml() {
        for i in 0..n.device_count().unwrap_or(0) {
            if let Ok(dev) = n.device_by_index(i) {
                for p in dev.running_compute_processes().unwrap_or_default() {
                    if let UsedGpuMemory::Used(b) = p.used_gpu_memory {
                        *out.entry(p.pid).or_insert(0) += b;
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(n: u32) -> NvmlGpus {
        (0..n)
            .map(|i| NvmlGpu {
                index: i,
                uuid: format!("GPU-{i:08x}-0000-0000-0000-000000000000"),
                minor: Some(i),
                ..Default::default()
            })
            .collect()
    }

    #[test]
    fn all_is_every_gpu_nvml_lists_by_uuid() {
        let g = select("all", None, &machine(2)).unwrap();
        assert_eq!(g.iter().map(|g| g.index).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(g[1].visible.as_deref(), Some("GPU-00000001-0000-0000-0000-000000000000"));
    }

    #[test]
    fn without_nvml_all_is_one_gpu_that_inherits_and_a_list_is_taken_as_written() {
        assert_eq!(select("", None, &Vec::new()).unwrap(), vec![Gpu::sole(HashMap::new())]);
        let g = select("0, 1", None, &Vec::new()).unwrap();
        assert_eq!(
            g.iter().map(|g| (g.index, g.visible.clone())).collect::<Vec<_>>(),
            [(0, Some("0".to_string())), (1, Some("1".to_string()))]
        );
    }

    #[test]
    fn the_servers_visible_devices_are_its_gpus_in_their_order() {
        let m = machine(4);
        let g = select(
            "all",
            Some("GPU-00000003-0000-0000-0000-000000000000,GPU-00000001-0000-0000-0000-000000000000"),
            &m,
        )
        .unwrap();
        assert_eq!(g.iter().map(|g| g.index).collect::<Vec<_>>(), [3, 1]);
        // Indices as CUDA reads them are passed on as written.
        let g = select("all", Some("1"), &m).unwrap();
        assert_eq!((g[0].index, g[0].visible.as_deref(), g[0].nvml), (0, Some("1"), None));
    }

    #[test]
    fn a_list_names_gpus_by_index_or_uuid_and_bad_ones_are_refused() {
        let m = machine(2);
        let g = select("GPU-00000001-0000-0000-0000-000000000000", None, &m).unwrap();
        assert_eq!(g[0].index, 1);
        assert!(select("2", None, &m).unwrap_err().contains("not one of this machine's"));
        assert!(select("0,0", None, &m).unwrap_err().contains("twice"));
        assert!(select("GPU-x", None, &m).unwrap_err().contains("neither"));
        assert!(select(",", None, &m).unwrap_err().contains("empty"));
    }
}
