//! Device memory at replay: allocations re-created at their recorded addresses with the VMM
//! API when possible, else allocated anywhere and translated.

use std::collections::BTreeMap;

use cudarc::driver::sys;

use super::{check, ReplayError};

/// One live allocation.
#[derive(Debug, Clone, Copy)]
pub struct Allocation {
    /// Recorded base address.
    pub recorded: u64,
    /// Size in bytes.
    pub size: u64,
    /// Address at replay.
    pub live: u64,
    /// VMM handle and mapped size when re-created exactly.
    vmm: Option<(sys::CUmemGenericAllocationHandle, usize)>,
}

/// All allocations, keyed by recorded base address.
#[derive(Default)]
pub struct Memory {
    allocs: BTreeMap<u64, Allocation>,
    granularity: usize,
    /// Allocations re-created at their recorded address.
    pub exact: u64,
    /// Allocations that had to move (their pointers are translated).
    pub translated: u64,
}

fn prop() -> sys::CUmemAllocationProp {
    // SAFETY: a plain C struct for which all-zero is a valid starting value.
    let mut p: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    p.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    p
}

impl Memory {
    /// Re-creates an allocation of `size` bytes recorded at `recorded`; returns its live address.
    pub fn alloc(&mut self, recorded: u64, size: u64, seq: u64) -> Result<u64, ReplayError> {
        // SAFETY: driver calls with valid out-pointers; the context is current.
        unsafe {
            if self.granularity == 0 {
                let p = prop();
                let mut g = 0usize;
                check(
                    sys::cuMemGetAllocationGranularity(
                        &mut g,
                        &p,
                        sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
                    ),
                    seq,
                    "cuMemGetAllocationGranularity",
                )?;
                self.granularity = g.max(1);
            }
            let g = self.granularity as u64;
            if recorded != 0 && recorded % g == 0 {
                if let Some(a) = self.exact_at(recorded, size.max(1).div_ceil(g) * g) {
                    self.exact += 1;
                    self.allocs.insert(recorded, Allocation { recorded, size, live: recorded, vmm: Some(a) });
                    return Ok(recorded);
                }
            }
            let mut live = 0u64;
            check(sys::cuMemAlloc_v2(&mut live, size.max(1) as usize), seq, "cuMemAlloc")?;
            self.translated += u64::from(live != recorded);
            self.exact += u64::from(live == recorded);
            self.allocs.insert(recorded, Allocation { recorded, size, live, vmm: None });
            Ok(live)
        }
    }

    /// Tries reserve + create + map + set-access at exactly `addr`.
    unsafe fn exact_at(&self, addr: u64, size: u64) -> Option<(sys::CUmemGenericAllocationHandle, usize)> {
        let size = size as usize;
        let mut got = 0u64;
        // SAFETY: VMM calls with valid arguments; every failure path undoes what succeeded.
        unsafe {
            if sys::cuMemAddressReserve(&mut got, size, 0, addr, 0) != sys::CUresult::CUDA_SUCCESS {
                return None;
            }
            if got != addr {
                sys::cuMemAddressFree(got, size);
                return None;
            }
            let p = prop();
            let mut h = 0;
            if sys::cuMemCreate(&mut h, size, &p, 0) != sys::CUresult::CUDA_SUCCESS {
                sys::cuMemAddressFree(addr, size);
                return None;
            }
            if sys::cuMemMap(addr, size, 0, h, 0) != sys::CUresult::CUDA_SUCCESS {
                sys::cuMemRelease(h);
                sys::cuMemAddressFree(addr, size);
                return None;
            }
            let desc = sys::CUmemAccessDesc {
                location: p.location,
                flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            };
            if sys::cuMemSetAccess(addr, size, &desc, 1) != sys::CUresult::CUDA_SUCCESS {
                sys::cuMemUnmap(addr, size);
                sys::cuMemRelease(h);
                sys::cuMemAddressFree(addr, size);
                return None;
            }
            Some((h, size))
        }
    }

    /// Records that `recorded..recorded+size` (a module global) lives at `live` now.
    pub fn alias(&mut self, recorded: u64, size: u64, live: u64) {
        if recorded != 0 && recorded != live {
            self.allocs.insert(recorded, Allocation { recorded, size, live, vmm: None });
        }
    }

    /// Frees the allocation recorded at `recorded`.
    pub fn free(&mut self, recorded: u64) {
        let Some(a) = self.allocs.remove(&recorded) else { return };
        // SAFETY: releasing what `alloc` created.
        unsafe {
            match a.vmm {
                Some((h, size)) => {
                    sys::cuMemUnmap(a.live, size);
                    sys::cuMemRelease(h);
                    sys::cuMemAddressFree(a.live, size);
                }
                None => {
                    sys::cuMemFree_v2(a.live);
                }
            }
        }
    }

    /// The allocation containing recorded address `p`.
    pub fn find(&self, p: u64) -> Option<&Allocation> {
        self.allocs.range(..=p).next_back().map(|(_, a)| a).filter(|a| p < a.recorded + a.size.max(1))
    }

    /// The live address for recorded address `p` (unchanged when outside every allocation:
    /// module globals, memory the trace did not allocate).
    pub fn translate(&self, p: u64) -> u64 {
        self.find(p).map_or(p, |a| a.live + (p - a.recorded))
    }

    /// Rewrites every 8-byte-aligned word of a kernel parameter buffer that points into a
    /// moved allocation. Returns how many words changed.
    pub fn translate_params(&self, bytes: &mut [u8]) -> usize {
        if self.translated == 0 {
            return 0;
        }
        let mut n = 0;
        for w in bytes.chunks_exact_mut(8) {
            let v = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
            if let Some(a) = self.find(v) {
                if a.live != a.recorded {
                    w.copy_from_slice(&(a.live + (v - a.recorded)).to_le_bytes());
                    n += 1;
                }
            }
        }
        n
    }
}
