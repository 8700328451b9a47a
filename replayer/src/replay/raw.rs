//! Driver entry points looked up by name (`raw_fn`): functions called with C enums as plain
//! integers (so values newer than cudarc's bindings stay defined), or absent from them.

use cudarc::driver::sys;

use super::ReplayError;

/// A driver entry point typed with integers where cuda.h has enums.
///
/// # Safety
/// `T` must be the function's C signature with enums as `u32`.
pub(crate) unsafe fn raw_fn<T: Copy>(name: &[u8], seq: u64) -> Result<T, ReplayError> {
    // SAFETY: libcuda is loaded (cuInit succeeded); the caller names the right signature.
    unsafe {
        sys::culib().get::<T>(name).map(|s| *s).map_err(|e| ReplayError::Inconsistent {
            seq,
            what: String::from_utf8_lossy(name).trim_end_matches('\0').to_string(),
            problem: format!("not in this driver: {e}"),
        })
    }
}
