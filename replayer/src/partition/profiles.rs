//! MIG GPU-instance profile tables, as data.
//!
//! A MIG-capable GPU of these models has 7 compute slices and 8 memory slices. A GPU instance
//! profile takes `compute_slices` of the former and occupies a contiguous range of the latter
//! (its *placement*: start slice and size), which is what NVML's
//! `nvmlDeviceGetGpuInstancePossiblePlacements_v2` reports and what must not overlap between
//! instances. Placements here are in those units: a 7g profile has size 8, a 3g profile size 4.
//!
//! Sources, in order of trust:
//! - **H200** (141 GB): `nvidia-smi mig -lgip` / `-lgipp` on the project's test machine (MIG mode
//!   disabled there), recorded in REFERENCE.md §4. Ids, maximum counts, SMs and placements are
//!   exact; memory is nvidia-smi's GiB with two decimals, converted to MiB.
//! - **A100-40GB, A100-80GB, H100-80GB (SXM5)**: *not* read from hardware. Profile names, SM
//!   counts, copy engines and placements follow the NVIDIA MIG user guide ("Supported MIG
//!   Profiles"; the A100 and H100 tables and placement diagrams), which give the same profile
//!   ids and the same placements for all GA100/GH100 parts (REFERENCE.md §4 says so too).
//!   Memory sizes are approximations: A100 values are the `memorySizeMB` values of NVIDIA's
//!   go-nvml A100 mock (4864 / 9856 / 19968 / 40192 / 80384 MiB); H100 values are from the MIG
//!   user guide's `-lgip` example (9.75 / 19.62 / 39.50 / 79.25 GiB) and are the least certain
//!   numbers here. What the GPU itself reports through NVML always wins over these tables.
//!
//! H100 PCIe, H100 94 GB/96 GB, H20, B200 and A30 are not tabulated: their profiles are taken
//! from NVML only.

use serde::Serialize;

/// Number of memory slices of every tabulated MIG GPU (placements live in `0..8`).
pub const MEMORY_SLICES: u32 = 8;
/// Number of compute slices of every tabulated MIG GPU.
pub const COMPUTE_SLICES: u32 = 7;

/// One placement of a GPU instance: the memory slices `start..start + size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Placement {
    /// First memory slice occupied.
    pub start: u32,
    /// Number of memory slices occupied.
    pub size: u32,
}

impl Placement {
    /// One past the last memory slice occupied (saturating).
    pub fn end(&self) -> u32 {
        self.start.saturating_add(self.size)
    }

    /// Whether two placements share a memory slice.
    pub fn overlaps(&self, other: &Placement) -> bool {
        self.start < other.end() && other.start < self.end()
    }
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.start, self.size)
    }
}

/// A GPU instance profile: what `nvidia-smi mig -lgip` lists, plus its legal placements.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Profile {
    /// NVML profile id (`nvmlGpuInstanceProfileInfo_t::id`), e.g. 9 for the 3g profiles.
    pub id: u32,
    /// Name without the `MIG ` prefix, e.g. `3g.71gb` or `1g.18gb+me`.
    pub name: String,
    /// Compute slices (the `3` of `3g`).
    pub compute_slices: u32,
    /// Memory slices occupied (placement size).
    pub memory_slices: u32,
    /// Streaming multiprocessors of an instance of this profile.
    pub sms: u32,
    /// Memory of an instance, in MiB.
    pub memory_mib: u64,
    /// Copy engines, where known.
    pub copy_engines: Option<u32>,
    /// How many instances of this profile fit on an empty GPU.
    pub max_instances: u32,
    /// Legal placements on an empty GPU, by start slice.
    pub placements: Vec<Placement>,
}

impl Profile {
    /// The compute-slice count encoded in a profile name (`3g.71gb` → 3), if it has that form.
    pub fn slices_from_name(name: &str) -> Option<u32> {
        let (head, _) = name.split_once('g')?;
        head.parse().ok()
    }

    /// Whether this is a media-extension profile (`+me`).
    pub fn is_media_extended(&self) -> bool {
        self.name.ends_with("+me")
    }

    /// Ordering key for "biggest first": memory slices, then compute slices, then SMs, all
    /// descending; then id ascending.
    pub fn size_key(&self) -> (std::cmp::Reverse<u32>, std::cmp::Reverse<u32>, std::cmp::Reverse<u32>, u32) {
        use std::cmp::Reverse;
        (Reverse(self.memory_slices), Reverse(self.compute_slices), Reverse(self.sms), self.id)
    }
}

/// GPU models with a built-in profile table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum GpuModel {
    /// A100 40 GB (SXM4 or PCIe), 108 SMs, 98 of them usable under MIG.
    A100_40GB,
    /// A100 80 GB (SXM4 or PCIe), 108 SMs, 98 of them usable under MIG.
    A100_80GB,
    /// H100 80 GB SXM5 (132 SMs). The PCIe part (114 SMs) is not covered.
    H100_80GB,
    /// H200 141 GB (132 SMs).
    H200,
}

impl GpuModel {
    /// All tabulated models.
    pub const ALL: [GpuModel; 4] = [GpuModel::A100_40GB, GpuModel::A100_80GB, GpuModel::H100_80GB, GpuModel::H200];

    /// Recognizes a model from an NVML device name such as `NVIDIA H200`,
    /// `NVIDIA A100-SXM4-80GB` or `NVIDIA H100 80GB HBM3`. Returns `None` for anything else.
    pub fn from_device_name(name: &str) -> Option<GpuModel> {
        let n = name.to_ascii_uppercase();
        if n.contains("H200") {
            Some(GpuModel::H200)
        } else if n.contains("H100") && n.contains("80GB") && !n.contains("PCIE") {
            Some(GpuModel::H100_80GB)
        } else if n.contains("A100") && n.contains("80GB") {
            Some(GpuModel::A100_80GB)
        } else if n.contains("A100") && n.contains("40GB") {
            Some(GpuModel::A100_40GB)
        } else {
            None
        }
    }

    /// Human-readable model name.
    pub fn label(&self) -> &'static str {
        match self {
            GpuModel::A100_40GB => "A100-40GB",
            GpuModel::A100_80GB => "A100-80GB",
            GpuModel::H100_80GB => "H100-80GB",
            GpuModel::H200 => "H200",
        }
    }

    /// The model's GPU-instance profiles (see the module documentation for sources).
    pub fn profiles(&self) -> Vec<Profile> {
        let (names, sms, mem, ces): (&[&str; 7], [u32; 7], [u64; 7], [u32; 7]) = match self {
            GpuModel::H200 => (
                &["1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"],
                [16, 16, 26, 32, 60, 64, 132],
                [16384, 16384, 33280, 33280, 71424, 71424, 143360],
                HOPPER_COPY_ENGINES,
            ),
            GpuModel::H100_80GB => (
                &["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
                [16, 16, 26, 32, 60, 64, 132],
                [9984, 9984, 20096, 20096, 40448, 40448, 81152],
                HOPPER_COPY_ENGINES,
            ),
            GpuModel::A100_40GB => (
                &["1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"],
                [14, 14, 14, 28, 42, 56, 98],
                [4864, 4864, 9856, 9856, 19968, 19968, 40192],
                AMPERE_COPY_ENGINES,
            ),
            GpuModel::A100_80GB => (
                &["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
                [14, 14, 14, 28, 42, 56, 98],
                [9856, 9856, 19968, 19968, 40192, 40192, 80384],
                AMPERE_COPY_ENGINES,
            ),
        };
        SHAPES
            .iter()
            .enumerate()
            .map(|(i, shape)| Profile {
                id: shape.id,
                name: names[i].to_string(),
                compute_slices: shape.compute_slices,
                memory_slices: shape.size,
                sms: sms[i],
                memory_mib: mem[i],
                copy_engines: Some(ces[i]),
                max_instances: shape.max_instances,
                placements: shape.starts.iter().map(|&start| Placement { start, size: shape.size }).collect(),
            })
            .collect()
    }
}

/// Copy engines per profile on GH100 (MIG user guide, H100 table; H200 assumed identical).
const HOPPER_COPY_ENGINES: [u32; 7] = [1, 1, 1, 2, 3, 4, 8];
/// Copy engines per profile on GA100 (MIG user guide, A100 table).
const AMPERE_COPY_ENGINES: [u32; 7] = [1, 1, 1, 2, 3, 4, 7];

/// The model-independent part of a profile: id, slices, count and placements, shared by
/// A100/H100/H200 (same order as the name/SM/memory arrays in [`GpuModel::profiles`]).
struct Shape {
    id: u32,
    compute_slices: u32,
    size: u32,
    max_instances: u32,
    starts: &'static [u32],
}

const SHAPES: [Shape; 7] = [
    Shape { id: 19, compute_slices: 1, size: 1, max_instances: 7, starts: &[0, 1, 2, 3, 4, 5, 6] },
    Shape { id: 20, compute_slices: 1, size: 1, max_instances: 1, starts: &[0, 1, 2, 3, 4, 5, 6] },
    Shape { id: 15, compute_slices: 1, size: 2, max_instances: 4, starts: &[0, 2, 4, 6] },
    Shape { id: 14, compute_slices: 2, size: 2, max_instances: 3, starts: &[0, 2, 4] },
    Shape { id: 9, compute_slices: 3, size: 4, max_instances: 2, starts: &[0, 4] },
    Shape { id: 5, compute_slices: 4, size: 4, max_instances: 1, starts: &[0] },
    Shape { id: 0, compute_slices: 7, size: 8, max_instances: 1, starts: &[0] },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h200_table_matches_reference() {
        let p = GpuModel::H200.profiles();
        let row = |name: &str| p.iter().find(|x| x.name == name).cloned().unwrap_or_else(|| panic!("{name}"));
        let three = row("3g.71gb");
        assert_eq!((three.id, three.max_instances, three.sms, three.compute_slices), (9, 2, 60, 3));
        assert_eq!(three.placements, vec![Placement { start: 0, size: 4 }, Placement { start: 4, size: 4 }]);
        assert_eq!(row("1g.18gb").sms, 16);
        assert_eq!(row("1g.35gb").placements.len(), 4);
        assert_eq!(row("7g.141gb").placements, vec![Placement { start: 0, size: 8 }]);
        assert_eq!(row("4g.71gb").id, 5);
        assert_eq!(row("1g.18gb+me").max_instances, 1);
    }

    #[test]
    fn every_table_is_consistent() {
        for model in GpuModel::ALL {
            let profiles = model.profiles();
            assert_eq!(profiles.len(), 7);
            for p in &profiles {
                assert_eq!(Profile::slices_from_name(&p.name), Some(p.compute_slices), "{}", p.name);
                assert!(p.placements.iter().all(|pl| pl.end() <= MEMORY_SLICES));
                assert!(p.max_instances as usize <= p.placements.len());
            }
        }
    }

    #[test]
    fn models_from_nvml_names() {
        assert_eq!(GpuModel::from_device_name("NVIDIA H200"), Some(GpuModel::H200));
        assert_eq!(GpuModel::from_device_name("NVIDIA H100 80GB HBM3"), Some(GpuModel::H100_80GB));
        assert_eq!(GpuModel::from_device_name("NVIDIA H100 PCIe"), None);
        assert_eq!(GpuModel::from_device_name("NVIDIA A100-SXM4-80GB"), Some(GpuModel::A100_80GB));
        assert_eq!(GpuModel::from_device_name("NVIDIA A100-PCIE-40GB"), Some(GpuModel::A100_40GB));
        assert_eq!(GpuModel::from_device_name("NVIDIA GeForce RTX 4090"), None);
    }
}
