//! `gpuless analyze --check-driver`: the correctness oracle. Loads every cubin of the given
//! files that the local GPU can run and compares the analyzer's parameter layouts with what
//! the driver reports (`cuKernelGetParamInfo` and `cuFuncGetParamInfo`), plus kernel counts,
//! register counts and static shared memory. Needs a GPU; part of the project's GPU suite.

use std::ffi::{c_int, c_uint, CString};
use std::path::{Path, PathBuf};
use std::ptr;

use anyhow::{bail, Context};
use cudarc::driver::sys::{self, CUdevice_attribute as DevAttr, CUfunction_attribute as FnAttr, CUresult};
use gpuless_analyzer::cubin::{analyze_cubin, Kernel};
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
        let mut s = Summary { device_sm: (major * 10 + minor) as u32, ..Summary::default() };
        for p in paths {
            check_file(p, arch, &mut s).with_context(|| p.display().to_string())?;
            s.files += 1;
        }
        Ok(s)
    }
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
            check_cubin(bytes, &cubin.kernels, &format!("{}", path.display()), s)?;
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
        check_cubin(&payload, &cubin.kernels, &label, s)?;
    }
    Ok(())
}

fn check_cubin(image: &[u8], kernels: &[Kernel], label: &str, s: &mut Summary) -> anyhow::Result<()> {
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
            check_kernel(lib, k, label, s)?;
        }
        sys::cuLibraryUnload(lib);
    }
    Ok(())
}

unsafe fn check_kernel(lib: sys::CUlibrary, k: &Kernel, label: &str, s: &mut Summary) -> anyhow::Result<()> {
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
    Ok(())
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
