//! Occupancy and function attributes computed from what a cubin says about a kernel and what a
//! device description says about the GPU — the answers a GPU-less client gives for
//! `cuOccupancy*` and `cuFuncGetAttribute` (issue 19). `gpuless analyze --check-driver`
//! compares them with the driver's for every kernel it loads.
//!
//! The model: a block of `B` threads is `ceil(B / warp)` warps. Registers are allocated per
//! warp in units of 256 and the register file is split into four sub-partitions (a warp's
//! registers come from one of them); static plus dynamic shared memory plus the per-block
//! reservation is allocated in 128-byte units from the SM's shared memory. An SM runs as many
//! blocks as every one of its limits (threads, blocks, registers, shared memory) allows.

/// What the occupancy rules need of a device (`cuDeviceGetAttribute` ids in brackets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Threads per warp (10).
    pub warp_size: u32,
    /// Threads per block (1).
    pub max_threads_per_block: u32,
    /// Threads per SM (39).
    pub max_threads_per_sm: u32,
    /// Resident blocks per SM (106).
    pub max_blocks_per_sm: u32,
    /// 32-bit registers per SM (82).
    pub regs_per_sm: u32,
    /// 32-bit registers per block (12).
    pub regs_per_block: u32,
    /// Shared memory per SM in bytes (81).
    pub smem_per_sm: u64,
    /// Shared memory a block may use without opting in (8).
    pub smem_per_block: u64,
    /// Shared memory a block may use after opting in (97).
    pub smem_per_block_optin: u64,
    /// Shared memory the system reserves per block (111).
    pub reserved_smem_per_block: u64,
    /// Multiprocessors (16).
    pub sm_count: u32,
}

/// Register allocation unit, per warp.
const REG_UNIT: u64 = 256;
/// Register-file sub-partitions per SM.
const SUB_PARTITIONS: u64 = 4;
/// Shared-memory allocation unit.
const SMEM_UNIT: u64 = 128;

impl DeviceLimits {
    /// From device attributes (`attr(id)`); `None` when one the rules need is missing.
    pub fn from_attributes(attr: impl Fn(u32) -> Option<i32>) -> Option<Self> {
        let u = |id: u32| attr(id).and_then(|v| u32::try_from(v).ok());
        Some(DeviceLimits {
            warp_size: u(10)?.max(1),
            max_threads_per_block: u(1)?,
            max_threads_per_sm: u(39)?,
            max_blocks_per_sm: u(106)?,
            regs_per_sm: u(82)?,
            regs_per_block: u(12)?,
            smem_per_sm: u64::from(u(81)?),
            smem_per_block: u64::from(u(8)?),
            smem_per_block_optin: u64::from(u(97).unwrap_or(u(8)?)),
            reserved_smem_per_block: u64::from(u(111).unwrap_or(0)),
            sm_count: u(16)?,
        })
    }
}

/// What the rules need of a kernel (from its cubin).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KernelFacts {
    /// Registers per thread.
    pub registers: u32,
    /// Static shared memory in bytes.
    pub shared: u64,
    /// `__launch_bounds__` / `.maxntid` / `.reqntid`: most threads per block, if declared.
    pub max_threads: Option<u32>,
}

fn regs_per_warp(k: &KernelFacts, d: &DeviceLimits) -> u64 {
    (u64::from(k.registers) * u64::from(d.warp_size)).div_ceil(REG_UNIT) * REG_UNIT
}

/// Warps an SM can hold given the kernel's registers (every sub-partition holds whole warps).
fn warps_by_registers(k: &KernelFacts, d: &DeviceLimits) -> u64 {
    let per_warp = regs_per_warp(k, d);
    if per_warp == 0 {
        return u64::MAX;
    }
    (u64::from(d.regs_per_sm) / SUB_PARTITIONS / per_warp) * SUB_PARTITIONS
}

/// `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`: the device's limit, the launch bounds, and what
/// the registers allow, whichever is least (whole warps).
pub fn max_threads_per_block(k: &KernelFacts, d: &DeviceLimits) -> u32 {
    let warp = u64::from(d.warp_size);
    let by_regs = warps_by_registers(k, d).min(u64::from(d.regs_per_block) / regs_per_warp(k, d).max(1)) * warp;
    let limit = u64::from(d.max_threads_per_block).min(by_regs);
    let limit = k.max_threads.map_or(limit, |m| limit.min(u64::from(m)));
    u32::try_from(limit).unwrap_or(u32::MAX)
}

/// Bytes of shared memory one block takes from its SM.
fn smem_per_block(k: &KernelFacts, d: &DeviceLimits, dynamic: u64) -> u64 {
    (k.shared + dynamic + d.reserved_smem_per_block).div_ceil(SMEM_UNIT) * SMEM_UNIT
}

/// `cuOccupancyMaxActiveBlocksPerMultiprocessor`: blocks of `block` threads with `dynamic`
/// bytes of dynamic shared memory that one SM runs at once (0: such a block cannot run).
pub fn active_blocks(k: &KernelFacts, d: &DeviceLimits, block: u32, dynamic: u64) -> u32 {
    if block == 0 || block > max_threads_per_block(k, d) || k.shared + dynamic > d.smem_per_block_optin {
        return 0;
    }
    let warps = u64::from(block.div_ceil(d.warp_size));
    let by_threads = u64::from(d.max_threads_per_sm / d.warp_size) / warps;
    let by_regs = warps_by_registers(k, d) / warps;
    let smem = smem_per_block(k, d, dynamic);
    let by_smem = d.smem_per_sm.checked_div(smem).unwrap_or(u64::MAX);
    let n = by_threads.min(by_regs).min(by_smem).min(u64::from(d.max_blocks_per_sm));
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// `cuOccupancyMaxPotentialBlockSize`: the block size (a multiple of the warp, at most
/// `limit` when not 0) with the most resident threads per SM, the largest on a tie, and the
/// grid that fills the GPU with it: (min grid size, block size). `dynamic(b)` is the dynamic
/// shared memory a block of `b` threads uses.
pub fn potential_block_size(k: &KernelFacts, d: &DeviceLimits, dynamic: impl Fn(u32) -> u64, limit: u32) -> (u32, u32) {
    let mut max = max_threads_per_block(k, d);
    if limit != 0 {
        max = max.min(limit);
    }
    let mut best = (0u32, 0u32, 0u64); // (blocks per SM, block size, threads per SM)
    let mut b = max - max % d.warp_size;
    if b == 0 {
        b = max;
    }
    while b > 0 {
        let blocks = active_blocks(k, d, b, dynamic(b));
        let threads = u64::from(blocks) * u64::from(b);
        if threads > best.2 {
            best = (blocks, b, threads);
        }
        b = b.saturating_sub(d.warp_size);
    }
    (best.0.saturating_mul(d.sm_count), best.1)
}

/// `cuOccupancyAvailableDynamicSMemPerBlock`: the most dynamic shared memory a block of
/// `block` threads may use with `blocks` of them resident per SM.
pub fn available_dynamic_smem(k: &KernelFacts, d: &DeviceLimits, blocks: u32, block: u32) -> u64 {
    if blocks == 0 || active_blocks(k, d, block, 0) < blocks {
        return 0;
    }
    let per_block = (d.smem_per_sm / u64::from(blocks)) / SMEM_UNIT * SMEM_UNIT;
    per_block
        .saturating_sub(d.reserved_smem_per_block)
        .saturating_sub(k.shared)
        .min(d.smem_per_block_optin.saturating_sub(k.shared))
}

/// An H100's limits, as its driver reports them (for tests).
#[cfg(test)]
pub(crate) fn h100_limits() -> DeviceLimits {
    DeviceLimits {
        warp_size: 32,
        max_threads_per_block: 1024,
        max_threads_per_sm: 2048,
        max_blocks_per_sm: 32,
        regs_per_sm: 65_536,
        regs_per_block: 65_536,
        smem_per_sm: 233_472,
        smem_per_block: 49_152,
        smem_per_block_optin: 232_448,
        reserved_smem_per_block: 1024,
        sm_count: 132,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100() -> DeviceLimits {
        super::h100_limits()
    }

    #[test]
    fn registers_limit_threads_per_block() {
        let d = h100();
        let k = |registers| KernelFacts { registers, ..KernelFacts::default() };
        assert_eq!(max_threads_per_block(&k(32), &d), 1024);
        assert_eq!(max_threads_per_block(&k(64), &d), 1024);
        assert_eq!(max_threads_per_block(&k(80), &d), 768);
        assert_eq!(max_threads_per_block(&k(128), &d), 512);
        assert_eq!(max_threads_per_block(&k(255), &d), 256);
        let bounded = KernelFacts { registers: 32, max_threads: Some(256), ..KernelFacts::default() };
        assert_eq!(max_threads_per_block(&bounded, &d), 256);
    }

    #[test]
    fn every_limit_counts() {
        let d = h100();
        let small = KernelFacts { registers: 16, ..KernelFacts::default() };
        assert_eq!(active_blocks(&small, &d, 32, 0), 32, "blocks per SM");
        assert_eq!(active_blocks(&small, &d, 256, 0), 8, "threads per SM");
        let regs = KernelFacts { registers: 128, ..KernelFacts::default() };
        assert_eq!(active_blocks(&regs, &d, 128, 0), 4, "registers: 16 warps of 128");
        let smem = KernelFacts { registers: 16, shared: 48 * 1024, ..KernelFacts::default() };
        assert_eq!(active_blocks(&smem, &d, 128, 0), 4, "shared memory: 49 KB per block");
        assert_eq!(active_blocks(&small, &d, 2048, 0), 0, "too many threads");
        assert_eq!(active_blocks(&small, &d, 128, 300_000), 0, "too much shared memory");
    }

    #[test]
    fn potential_block_size_prefers_the_largest_of_the_best() {
        let d = h100();
        let k = KernelFacts { registers: 32, ..KernelFacts::default() };
        assert_eq!(potential_block_size(&k, &d, |_| 0, 0), (2 * 132, 1024));
        assert_eq!(potential_block_size(&k, &d, |_| 0, 100), (32 * 132, 64), "2 warps: 32 blocks beat 21 of 3");
        let dynamic = available_dynamic_smem(&k, &d, 2, 1024);
        assert_eq!(dynamic, 233_472 / 2 - 1024);
        assert_eq!(active_blocks(&k, &d, 1024, dynamic), 2);
    }

    #[test]
    fn missing_attributes_give_no_limits() {
        assert_eq!(DeviceLimits::from_attributes(|_| None), None);
        let d = DeviceLimits::from_attributes(|id| match id {
            10 => Some(32),
            1 => Some(1024),
            39 => Some(2048),
            106 => Some(32),
            82 | 12 => Some(65_536),
            81 => Some(233_472),
            8 => Some(49_152),
            97 => Some(232_448),
            111 => Some(1024),
            16 => Some(132),
            _ => None,
        });
        assert_eq!(d, Some(h100()));
    }
}
