//! Kernels loaded with the first lookup in their module or library.
//!
//! The driver loads a kernel's code at its first launch (lazy loading, CUDA's default), and
//! loading "may require a context synchronization" (CUDA programming guide, lazy loading): in an
//! executor it did — a kernel queued behind a kernel that polls a flag the host sets later
//! (`testdata/cuda/suite/polling.cu`) kept the executor waiting until the poller gave up, where
//! natively it did not wait (H200, driver 580: 3 s against 0.3 ms; with `CUDA_MODULE_LOADING=
//! EAGER` in the server's environment the executor did not wait either). So at the first lookup
//! of a kernel in an image — before the program runs anything of it — every kernel of that
//! image is loaded, up to [`MOST`] of them: a program's own modules hold few kernels; the larger
//! images of libraries (PyTorch's, cuBLAS's) stay lazy, kernel by kernel. Client sessions only
//! (a local replay or `gpuless invoke` keeps its cold start as it was).
//!
//! Best effort: a driver without these functions, or a load that fails, leaves the kernels to
//! load lazily as before.

use std::collections::HashSet;

use cudarc::driver::sys;

use super::raw::raw_fn;

/// Most kernels of one image loaded at its first lookup.
pub const MOST: u32 = 16;

type Count<H> = unsafe extern "C" fn(*mut u32, H) -> sys::CUresult;
type Enumerate<T, H> = unsafe extern "C" fn(*mut T, u32, H) -> sys::CUresult;
type KernelGetFunction = unsafe extern "C" fn(*mut sys::CUfunction, sys::CUkernel) -> sys::CUresult;
type FuncLoad = unsafe extern "C" fn(sys::CUfunction) -> sys::CUresult;

const OK: sys::CUresult = sys::CUresult::CUDA_SUCCESS;

/// The images whose kernels were loaded (or looked at), by handle.
#[derive(Default)]
pub(crate) struct Warmed(HashSet<usize>);

impl Warmed {
    /// A kernel was looked up in library `l`.
    pub fn library(&mut self, l: sys::CUlibrary) {
        if l.is_null() || !self.0.insert(l as usize) {
            return;
        }
        // SAFETY: the driver's functions by their C signatures; a live library; buffers of
        // the count the driver gave.
        unsafe {
            let (Ok(count), Ok(all), Ok(get), Ok(load)) = (
                raw_fn::<Count<sys::CUlibrary>>(b"cuLibraryGetKernelCount\0", 0),
                raw_fn::<Enumerate<sys::CUkernel, sys::CUlibrary>>(b"cuLibraryEnumerateKernels\0", 0),
                raw_fn::<KernelGetFunction>(b"cuKernelGetFunction\0", 0),
                raw_fn::<FuncLoad>(b"cuFuncLoad\0", 0),
            ) else {
                return;
            };
            let mut n = 0u32;
            if count(&mut n, l) != OK || n == 0 || n > MOST {
                return;
            }
            let mut kernels = vec![std::ptr::null_mut(); n as usize];
            if all(kernels.as_mut_ptr(), n, l) != OK {
                return;
            }
            for k in kernels {
                let mut f = std::ptr::null_mut();
                if get(&mut f, k) == OK {
                    load(f);
                }
            }
        }
    }

    /// A function was looked up in module `m`.
    pub fn module(&mut self, m: sys::CUmodule) {
        if m.is_null() || !self.0.insert(m as usize) {
            return;
        }
        // SAFETY: as in `library`.
        unsafe {
            let (Ok(count), Ok(all), Ok(load)) = (
                raw_fn::<Count<sys::CUmodule>>(b"cuModuleGetFunctionCount\0", 0),
                raw_fn::<Enumerate<sys::CUfunction, sys::CUmodule>>(b"cuModuleEnumerateFunctions\0", 0),
                raw_fn::<FuncLoad>(b"cuFuncLoad\0", 0),
            ) else {
                return;
            };
            let mut n = 0u32;
            if count(&mut n, m) != OK || n == 0 || n > MOST {
                return;
            }
            let mut functions = vec![std::ptr::null_mut(); n as usize];
            if all(functions.as_mut_ptr(), n, m) != OK {
                return;
            }
            for f in functions {
                load(f);
            }
        }
    }

    /// Module or library `h` was unloaded (a later one may get its handle).
    pub fn forget(&mut self, h: usize) {
        self.0.remove(&h);
    }
}
