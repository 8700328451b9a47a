//! Function attributes (`CUfunction_attribute`, ids 0–15) as the driver answers
//! `cuFuncGetAttribute` / `cuKernelGetAttribute` for a freshly loaded kernel, computed from
//! what its cubin says and the device's limits: the answers a GPU-less client gives without
//! asking the server (issue 19). `gpuless analyze --check-driver` compares every one of them
//! with the driver's, kernel by kernel; an attribute the rules cannot give is `None` and the
//! client asks the server for it.
//!
//! Seven attributes can be changed by the program (`cuFuncSetAttribute`): [`settable`]; the
//! client keeps what the program set and answers with that.

use crate::cubin::{Cubin, Kernel};
use crate::occupancy::{self, DeviceLimits, KernelFacts};

/// Number of function attributes the driver defines (`CU_FUNC_ATTRIBUTE_MAX`).
pub const COUNT: u32 = 16;

/// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`.
pub const MAX_DYNAMIC_SHARED_SIZE_BYTES: u32 = 8;

/// What the attribute rules need of one kernel (from its cubin).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FunctionFacts {
    /// Registers, static shared memory and launch bounds (the occupancy rules' input);
    /// `None` without a register count (PTX: the driver compiles it).
    pub occupancy: Option<KernelFacts>,
    /// Local memory (stack frame) per thread in bytes.
    pub local: Option<u32>,
    /// SM of the code (`sm_90a` → 90); 0 when unknown.
    pub binary: u32,
    /// Virtual architecture it was compiled from, where the cubin says it.
    pub virtual_sm: Option<u32>,
    /// Bytes of the module's user constant bank.
    pub user_constant_bytes: u64,
    /// Compile-time cluster dimensions.
    pub cluster_dims: Option<[u32; 3]>,
    /// Whether the kernel must be launched with a cluster.
    pub explicit_cluster: bool,
}

impl FunctionFacts {
    /// The facts of kernel `k` of cubin `c`.
    pub fn of(k: &Kernel, c: &Cubin) -> FunctionFacts {
        let bound =
            k.required_threads.or(k.max_threads).map(|[x, y, z]| x.saturating_mul(y.max(1)).saturating_mul(z.max(1)));
        FunctionFacts {
            occupancy: k.registers.map(|registers| KernelFacts {
                registers,
                shared: k.shared_bytes,
                max_threads: bound,
            }),
            local: k.local_bytes,
            binary: c.sm,
            virtual_sm: c.virtual_sm,
            user_constant_bytes: c.user_constant_bytes,
            cluster_dims: k.cluster_dims,
            explicit_cluster: k.explicit_cluster,
        }
    }
}

/// Whether a program may set attribute `attr` with `cuFuncSetAttribute` /
/// `cuKernelSetAttribute`: the maximum dynamic shared memory, the preferred carveout, the
/// required cluster dimensions, non-portable cluster sizes and the cluster scheduling policy.
pub fn settable(attr: u32) -> bool {
    matches!(attr, 8 | 9 | 11 | 12 | 13 | 14 | 15)
}

/// The driver's answer for attribute `attr` of a kernel nobody set attributes of; `None`
/// where the cubin and `limits` do not give it.
pub fn initial(f: &FunctionFacts, limits: Option<&DeviceLimits>, attr: u32) -> Option<i64> {
    // Everything below comes from a cubin's analysis; PTX is compiled by the driver.
    let o = f.occupancy?;
    let dim = |i: usize| f.cluster_dims.map_or(0, |d| i64::from(d[i]));
    Some(match attr {
        // MAX_THREADS_PER_BLOCK: the device's limit, launch bounds and what registers allow.
        0 => i64::from(occupancy::max_threads_per_block(&o, limits?)),
        1 => o.shared as i64,              // SHARED_SIZE_BYTES
        2 => f.user_constant_bytes as i64, // CONST_SIZE_BYTES
        3 => i64::from(f.local?),          // LOCAL_SIZE_BYTES
        4 => i64::from(o.registers),       // NUM_REGS
        // PTX_VERSION: the virtual architecture where the flags say it, else (CUDA 13's ELF
        // layout) the binary's (the driver's answer for all 21,495 kernels of libtorch_cuda).
        5 => i64::from(f.virtual_sm.or((f.binary != 0).then_some(f.binary))?),
        6 if f.binary != 0 => i64::from(f.binary), // BINARY_VERSION
        7 => 0,                                    // CACHE_MODE_CA: off unless -dlcm=ca
        // MAX_DYNAMIC_SHARED_SIZE_BYTES: what a block may use without opting in.
        8 => limits?.smem_per_block.saturating_sub(o.shared) as i64,
        9 => -1,                             // PREFERRED_SHARED_MEMORY_CARVEOUT: default
        10 => i64::from(f.explicit_cluster), // CLUSTER_SIZE_MUST_BE_SET
        11 => dim(0),                        // REQUIRED_CLUSTER_WIDTH
        12 => dim(1),                        // REQUIRED_CLUSTER_HEIGHT
        13 => dim(2),                        // REQUIRED_CLUSTER_DEPTH
        14 => 0,                             // NON_PORTABLE_CLUSTER_SIZE_ALLOWED
        15 => 0,                             // CLUSTER_SCHEDULING_POLICY_PREFERENCE
        _ => return None,
    })
}

/// Whether the driver accepts `value` for settable attribute `attr` of a kernel with `f`
/// (the maximum dynamic shared memory may not exceed what the device lets a block opt in to,
/// less the static shared memory); `None` where that cannot be told here.
pub fn accepts(f: &FunctionFacts, limits: Option<&DeviceLimits>, attr: u32, value: i64) -> Option<bool> {
    match attr {
        MAX_DYNAMIC_SHARED_SIZE_BYTES => {
            let (o, l) = (f.occupancy?, limits?);
            Some(value >= 0 && value as u64 + o.shared <= l.smem_per_block_optin)
        }
        _ if settable(attr) => None,
        _ => Some(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100() -> DeviceLimits {
        crate::occupancy::h100_limits()
    }

    #[test]
    fn defaults_follow_the_cubin() {
        let f = FunctionFacts {
            occupancy: Some(KernelFacts { registers: 40, shared: 1024, max_threads: Some(256) }),
            local: Some(16),
            binary: 90,
            virtual_sm: Some(90),
            user_constant_bytes: 64,
            cluster_dims: Some([2, 1, 1]),
            explicit_cluster: true,
        };
        let l = h100();
        let got: Vec<_> = (0..COUNT).map(|a| initial(&f, Some(&l), a)).collect();
        let want = [256, 1024, 64, 16, 40, 90, 90, 0, 48_128, -1, 1, 2, 1, 1, 0, 0];
        assert_eq!(got, want.iter().map(|&v| Some(v)).collect::<Vec<_>>());
        assert_eq!(initial(&f, Some(&l), COUNT), None);
    }

    #[test]
    fn ptx_gives_nothing_the_driver_compiles() {
        let f = FunctionFacts::default();
        let known: Vec<u32> = (0..COUNT).filter(|&a| initial(&f, Some(&h100()), a).is_some()).collect();
        assert!(known.is_empty());
    }

    #[test]
    fn dynamic_shared_memory_is_bounded_by_the_opt_in_limit() {
        let f = FunctionFacts {
            occupancy: Some(KernelFacts { registers: 32, shared: 2048, max_threads: None }),
            ..FunctionFacts::default()
        };
        let l = h100();
        assert_eq!(accepts(&f, Some(&l), 8, 232_448 - 2048), Some(true));
        assert_eq!(accepts(&f, Some(&l), 8, 232_448 - 2047), Some(false));
        assert_eq!(accepts(&f, Some(&l), 9, 50), None);
        assert_eq!(accepts(&f, Some(&l), 0, 128), Some(false));
    }
}
