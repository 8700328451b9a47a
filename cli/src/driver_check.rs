//! `gpuless analyze --check-driver`: the correctness oracle. Loads every cubin of the given
//! files that the local GPU can run and compares the analyzer's parameter layouts with what
//! the driver reports (`cuKernelGetParamInfo` and `cuFuncGetParamInfo`), plus kernel counts,
//! register counts and static shared memory, and the function attributes and occupancy answers
//! a GPU-less client computes from the cubin (`gpuless_analyzer::occupancy`). Needs a GPU; part
//! of the project's GPU suite.

use std::ffi::{c_int, c_uint, CString};
use std::path::{Path, PathBuf};
use std::ptr;

use anyhow::{bail, Context};
use cudarc::driver::sys::{self, CUdevice_attribute as DevAttr, CUfunction_attribute as FnAttr, CUresult};
use gpuless_analyzer::attributes::{self, FunctionFacts};
use gpuless_analyzer::cubin::{analyze_cubin, Cubin, Kernel};
use gpuless_analyzer::occupancy::{self, DeviceLimits, KernelFacts};
use gpuless_fatbin::{self as fatbin, EntryKind, Limits, MappedFile};
use serde::Serialize;

/// Upper bound on parameter indices probed through the driver (32,764 bytes of parameters).
const MAX_PARAMS: usize = 32_768;

/// Counts and mismatches found by the check.
#[derive(Debug, Default, Serialize)]
pub struct Summary {
    /// SM of the GPU used.
    pub device_sm: u32,
    /// Files checked.
    pub files: usize,
    /// Cubins loaded into the driver.
    pub cubins: usize,
    /// Cubins skipped because this GPU cannot run them.
    pub cubins_skipped: usize,
    /// Relocatable (`-rdc`) cubins skipped: the driver loads only linked code.
    pub relocatable_skipped: usize,
    /// Kernels whose layout was compared.
    pub kernels: usize,
    /// Parameters compared.
    pub params: usize,
    /// Layout or kernel-count mismatches (goal: none).
    pub mismatches: Vec<String>,
    /// Register / shared-memory differences (informational).
    pub attribute_mismatches: Vec<String>,
    /// Kernels with a `.nv.shared.<kernel>` section, and how its size relates to the
    /// driver's CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES (evidence for the static-smem rule).
    pub smem_sections: usize,
    /// ... equal to the section size.
    pub smem_equal_section: usize,
    /// ... equal to the section size minus 1 KB.
    pub smem_equal_section_minus_1k: usize,
    /// Kernels whose function attributes (max threads per block, local memory, binary
    /// version) computed from the cubin were compared with `cuFuncGetAttribute`.
    pub function_attributes_checked: usize,
    /// Occupancy answers compared: `cuOccupancyMaxActiveBlocksPerMultiprocessor` at several
    /// block sizes and dynamic shared memory sizes, and `cuOccupancyMaxPotentialBlockSize`.
    pub occupancy_checked: usize,
    /// Differences in either (the first 50; goal: none).
    pub occupancy_mismatches: Vec<String>,
    /// How many differences there were in all.
    pub occupancy_mismatch_count: usize,
    /// Every function attribute (`CUfunction_attribute` 0–15), computed from the cubin
    /// (`gpuless_analyzer::attributes`) and compared with `cuFuncGetAttribute`.
    pub attributes: Vec<AttributeCheck>,
    /// The device's limits the computed answers used.
    #[serde(skip)]
    limits: Option<DeviceLimits>,
}

/// How one function attribute's computed answers compared with the driver's.
#[derive(Debug, Default, Serialize)]
pub struct AttributeCheck {
    /// The `CUfunction_attribute` id.
    pub id: u32,
    /// Kernels whose computed answer was compared.
    pub compared: usize,
    /// ... and differed (goal: none).
    pub differ: usize,
    /// The first differences: kernel, computed, driver, cubin flags.
    pub examples: Vec<String>,
    /// Kernels the rules gave no answer for (the client asks the server).
    pub not_computed: usize,
    /// The driver's answers where none was computed: (value, kernels), the 8 most common.
    pub driver_values: Vec<(i64, usize)>,
}

fn check(r: CUresult, what: &str) -> anyhow::Result<()> {
    if r == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        bail!("{what} failed: {r:?}")
    }
}

/// Runs the check over `paths` (host ELF, fatbin or cubin), restricted to `arch` if given.
pub fn run(paths: &[PathBuf], arch: Option<&str>) -> anyhow::Result<Summary> {
    // SAFETY: plain driver calls with valid out-pointers; handles come from the driver.
    unsafe {
        if !sys::is_culib_present() {
            bail!("libcuda.so.1 was not found: --check-driver needs a machine with an NVIDIA GPU and driver");
        }
        check(sys::cuInit(0), "cuInit")?;
        let mut dev = 0;
        check(sys::cuDeviceGet(&mut dev, 0), "cuDeviceGet")?;
        let (mut major, mut minor): (c_int, c_int) = (0, 0);
        check(
            sys::cuDeviceGetAttribute(&mut major, DevAttr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
            "cuDeviceGetAttribute",
        )?;
        check(
            sys::cuDeviceGetAttribute(&mut minor, DevAttr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
            "cuDeviceGetAttribute",
        )?;
        let mut ctx = ptr::null_mut();
        check(sys::cuDevicePrimaryCtxRetain(&mut ctx, dev), "cuDevicePrimaryCtxRetain")?;
        check(sys::cuCtxSetCurrent(ctx), "cuCtxSetCurrent")?;
        let limits = DeviceLimits::from_attributes(|id| {
            let a = limit_attribute(id)?;
            let mut v: c_int = 0;
            // SAFETY: a valid out-pointer.
            (sys::cuDeviceGetAttribute(&mut v, a, dev) == CUresult::CUDA_SUCCESS).then_some(v)
        });
        let attributes = (0..attributes::COUNT).map(|id| AttributeCheck { id, ..AttributeCheck::default() }).collect();
        let mut s = Summary { device_sm: (major * 10 + minor) as u32, limits, attributes, ..Summary::default() };
        for p in paths {
            check_file(p, arch, &mut s).with_context(|| p.display().to_string())?;
            s.files += 1;
        }
        Ok(s)
    }
}

/// The device attributes `DeviceLimits::from_attributes` asks for, by id.
fn limit_attribute(id: u32) -> Option<DevAttr> {
    Some(match id {
        1 => DevAttr::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
        8 => DevAttr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
        10 => DevAttr::CU_DEVICE_ATTRIBUTE_WARP_SIZE,
        12 => DevAttr::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK,
        16 => DevAttr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        39 => DevAttr::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
        81 => DevAttr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
        82 => DevAttr::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR,
        97 => DevAttr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        106 => DevAttr::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR,
        111 => DevAttr::CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK,
        _ => return None,
    })
}

fn check_file(path: &Path, arch: Option<&str>, s: &mut Summary) -> anyhow::Result<()> {
    let file = MappedFile::open(path)?;
    let bytes = file.bytes();
    let limits = Limits::default();
    let wanted = |name: &str| arch.is_none_or(|a| a.eq_ignore_ascii_case(name));
    if bytes.get(18..20) == Some(&fatbin::EM_CUDA.to_le_bytes()[..]) && fatbin::is_elf(bytes) {
        let cubin = analyze_cubin(bytes, None)?;
        if cubin.relocatable {
            s.relocatable_skipped += 1;
        } else if wanted(&format!("sm_{}", cubin.sm)) {
            check_cubin(bytes, &cubin, &format!("{}", path.display()), s)?;
        }
        return Ok(());
    }
    let mut entries = Vec::new();
    if fatbin::is_elf(bytes) {
        for sec in fatbin::fatbin_sections(bytes)? {
            entries.extend(fatbin::all_entries(sec.bytes, sec.file_offset)?);
        }
    } else {
        entries = fatbin::all_entries(bytes, 0)?;
    }
    for e in entries.iter().filter(|e| e.kind == EntryKind::Elf && wanted(&e.arch_name())) {
        if !e.arch.sass_runs_on(s.device_sm) {
            s.cubins_skipped += 1;
            continue;
        }
        let payload = e.payload(&limits)?;
        let cubin = analyze_cubin(&payload, Some(&e.arch_name()))?;
        if cubin.relocatable {
            s.relocatable_skipped += 1;
            continue;
        }
        let label = format!("{}@{:#x}({})", path.display(), e.offset, e.arch_name());
        check_cubin(&payload, &cubin, &label, s)?;
    }
    Ok(())
}

fn check_cubin(image: &[u8], cubin: &Cubin, label: &str, s: &mut Summary) -> anyhow::Result<()> {
    let kernels = &cubin.kernels;
    // The driver reads the image through a pointer; keep an aligned, owned copy.
    let owned: Vec<u64> = {
        let mut v = vec![0u64; image.len().div_ceil(8)];
        // SAFETY: `v` has at least `image.len()` bytes.
        unsafe { ptr::copy_nonoverlapping(image.as_ptr(), v.as_mut_ptr().cast::<u8>(), image.len()) };
        v
    };
    // SAFETY: valid image pointer and out-pointers; the library is unloaded below.
    unsafe {
        let mut lib = ptr::null_mut();
        let r = sys::cuLibraryLoadData(
            &mut lib,
            owned.as_ptr().cast(),
            ptr::null_mut(),
            ptr::null_mut(),
            0,
            ptr::null_mut(),
            ptr::null_mut(),
            0,
        );
        check(r, &format!("cuLibraryLoadData({label})"))?;
        s.cubins += 1;
        let mut count: c_uint = 0;
        if sys::cuLibraryGetKernelCount(&mut count, lib) == CUresult::CUDA_SUCCESS && count as usize != kernels.len() {
            s.mismatches.push(format!("{label}: driver counts {count} kernels, analyzer found {}", kernels.len()));
        }
        for k in kernels {
            check_kernel(lib, k, cubin, label, s)?;
        }
        sys::cuLibraryUnload(lib);
    }
    Ok(())
}

unsafe fn check_kernel(
    lib: sys::CUlibrary,
    k: &Kernel,
    cubin: &Cubin,
    label: &str,
    s: &mut Summary,
) -> anyhow::Result<()> {
    let name = CString::new(k.name.as_bytes())?;
    let mut kernel = ptr::null_mut();
    let r = sys::cuLibraryGetKernel(&mut kernel, lib, name.as_ptr());
    if r != CUresult::CUDA_SUCCESS {
        s.mismatches
            .push(format!("{label}: {}: cuLibraryGetKernel failed ({r:?}): not a kernel to the driver", k.name));
        return Ok(());
    }
    let mut func = ptr::null_mut();
    let r = sys::cuKernelGetFunction(&mut func, kernel);
    if r != CUresult::CUDA_SUCCESS {
        s.mismatches.push(format!("{label}: {}: cuKernelGetFunction failed ({r:?})", k.name));
        return Ok(());
    }
    let ours: Vec<(usize, usize)> = k.params.iter().map(|p| (p.offset as usize, p.size as usize)).collect();
    let by_kernel = probe(|i, o, z| sys::cuKernelGetParamInfo(kernel, i, o, z));
    let by_func = probe(|i, o, z| sys::cuFuncGetParamInfo(func, i, o, z));
    s.kernels += 1;
    s.params += ours.len();
    if by_kernel != ours || by_func != ours {
        s.mismatches.push(format!(
            "{label}: {}: analyzer {ours:?}, cuKernelGetParamInfo {by_kernel:?}, cuFuncGetParamInfo {by_func:?}",
            k.name
        ));
    }
    let attr = |a: FnAttr| {
        let mut v: c_int = 0;
        (sys::cuFuncGetAttribute(&mut v, a, func) == CUresult::CUDA_SUCCESS).then_some(v as i64)
    };
    let regs = attr(FnAttr::CU_FUNC_ATTRIBUTE_NUM_REGS);
    let smem = attr(FnAttr::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
    if let (Some(driver), true) = (smem, k.shared_section_bytes > 0) {
        s.smem_sections += 1;
        s.smem_equal_section += usize::from(driver == k.shared_section_bytes as i64);
        s.smem_equal_section_minus_1k += usize::from(driver == k.shared_section_bytes as i64 - 1024);
    }
    if regs != k.registers.map(i64::from) || smem != Some(k.shared_bytes as i64) {
        s.attribute_mismatches.push(format!(
            "{label}: {}: registers analyzer {:?} driver {regs:?}; shared analyzer {} driver {smem:?}",
            k.name, k.registers, k.shared_bytes
        ));
    }
    // SAFETY: forwarded: a live function handle.
    unsafe {
        check_attributes(func, &FunctionFacts::of(k, cubin), cubin.flags, &format!("{label}: {}", k.name), s);
        check_occupancy(func, k, label, s)
    };
    Ok(())
}

/// Compares the client's computed function attributes and occupancy answers
/// (`gpuless_analyzer::occupancy`) with the driver's for one kernel.
///
/// # Safety
/// `func` is a live function handle of the current context.
unsafe fn check_occupancy(func: sys::CUfunction, k: &Kernel, label: &str, s: &mut Summary) {
    let (Some(lim), Some(registers)) = (s.limits, k.registers) else { return };
    let bound =
        k.required_threads.or(k.max_threads).map(|[x, y, z]| x.saturating_mul(y.max(1)).saturating_mul(z.max(1)));
    let facts = KernelFacts { registers, shared: k.shared_bytes, max_threads: bound };
    let differ = |s: &mut Summary, what: String| {
        s.occupancy_mismatch_count += 1;
        if s.occupancy_mismatches.len() < 50 {
            s.occupancy_mismatches.push(format!("{label}: {}: {what}", k.name));
        }
    };
    let attr = |a: FnAttr| {
        let mut v: c_int = 0;
        // SAFETY: a valid out-pointer and the caller's live handle.
        (unsafe { sys::cuFuncGetAttribute(&mut v, a, func) } == CUresult::CUDA_SUCCESS).then_some(i64::from(v))
    };
    let max = occupancy::max_threads_per_block(&facts, &lim);
    for block in [32u32, 64, 96, 128, 192, 256, 384, 512, 640, 768, 1024] {
        for dynamic in [0u64, 4096] {
            if block > max || k.shared_bytes + dynamic > lim.smem_per_block {
                continue;
            }
            let mut n: c_int = 0;
            // SAFETY: a valid out-pointer and the caller's live handle.
            let r = unsafe {
                sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(&mut n, func, block as c_int, dynamic as usize)
            };
            s.occupancy_checked += 1;
            let computed = occupancy::active_blocks(&facts, &lim, block, dynamic);
            if r != CUresult::CUDA_SUCCESS || n as u32 != computed {
                differ(
                    s,
                    format!(
                        "active blocks at {block} threads, {dynamic} B dynamic: computed {computed}, driver {n} ({r:?}); \
                         cubin: {registers} registers, {} B shared, bound {bound:?}, cluster {:?} (explicit {}); driver attributes 0-15: {:?}",
                        k.shared_bytes,
                        k.cluster_dims,
                        k.explicit_cluster,
                        (0..16).map(|a| attr(std::mem::transmute::<u32, FnAttr>(a))).collect::<Vec<_>>()
                    ),
                );
            }
        }
    }
    let (mut grid, mut block): (c_int, c_int) = (0, 0);
    // SAFETY: valid out-pointers, no callback, the caller's live handle.
    let r = unsafe { sys::cuOccupancyMaxPotentialBlockSize(&mut grid, &mut block, func, None, 0, 0) };
    s.occupancy_checked += 1;
    let computed = occupancy::potential_block_size(&facts, &lim, |_| 0, 0);
    if r != CUresult::CUDA_SUCCESS || (grid as u32, block as u32) != computed {
        differ(s, format!("potential block size: computed {computed:?}, driver ({grid}, {block}) ({r:?})"));
    }
}

/// Compares every function attribute computed from the cubin with the driver's answer.
///
/// # Safety
/// `func` is a live function handle of the current context.
unsafe fn check_attributes(func: sys::CUfunction, f: &FunctionFacts, flags: u32, label: &str, s: &mut Summary) {
    s.function_attributes_checked += 1;
    let limits = s.limits;
    for c in &mut s.attributes {
        let mut v: c_int = 0;
        // SAFETY: a valid out-pointer and the caller's live handle; the id is below
        // CU_FUNC_ATTRIBUTE_MAX.
        let r = unsafe { sys::cuFuncGetAttribute(&mut v, std::mem::transmute::<u32, FnAttr>(c.id), func) };
        let driver = (r == CUresult::CUDA_SUCCESS).then_some(i64::from(v));
        match attributes::initial(f, limits.as_ref(), c.id) {
            Some(ours) => {
                c.compared += 1;
                if Some(ours) != driver {
                    c.differ += 1;
                    if c.examples.len() < 5 {
                        c.examples.push(format!("{label}: computed {ours}, driver {driver:?} (e_flags {flags:#x})"));
                    }
                }
            }
            None => {
                c.not_computed += 1;
                let v = driver.unwrap_or(i64::MIN);
                if let Some(e) = c.driver_values.iter_mut().find(|(x, _)| *x == v) {
                    e.1 += 1;
                } else if c.driver_values.len() < 8 {
                    c.driver_values.push((v, 1));
                }
            }
        }
    }
}

/// Asks the driver for parameter i = 0, 1, ... until it refuses.
fn probe(mut f: impl FnMut(usize, *mut usize, *mut usize) -> CUresult) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for i in 0..MAX_PARAMS {
        let (mut off, mut size) = (0usize, 0usize);
        if f(i, &mut off, &mut size) != CUresult::CUDA_SUCCESS {
            break;
        }
        out.push((off, size));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn limit_attributes_have_their_ids() {
        for id in [1u32, 8, 10, 12, 16, 39, 81, 82, 97, 106, 111] {
            assert_eq!(super::limit_attribute(id).map(|a| a as u32), Some(id));
        }
        assert!(super::limit_attribute(2).is_none());
    }
}
