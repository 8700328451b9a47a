//! What the client keeps of the arrays it created: `cuArray(3D)GetDescriptor` answers from it.

use std::collections::HashMap;
use std::sync::Mutex;

const INVALID_VALUE: u32 = 1;
const INVALID_HANDLE: u32 = 400;

/// An array's extent and format as created: width, height, depth, format, channels, flags.
type ArrayShape = [u64; 6];
static ARRAYS: Mutex<Option<HashMap<u64, ArrayShape>>> = Mutex::new(None);

/// Keeps what `cuArray(3D)GetDescriptor` answers for array `h`.
///
/// # Safety
/// `desc` is null or the program's `CUDA_ARRAY_DESCRIPTOR` (`3d`: `CUDA_ARRAY3D_DESCRIPTOR`).
pub(super) unsafe fn remember_array(h: u64, desc: u64, three_d: bool) {
    if desc == 0 {
        return;
    }
    let p = desc as *const u8;
    // SAFETY: the caller's contract; fields read unaligned at their C offsets.
    let shape = unsafe {
        let u64_at = |o: usize| std::ptr::read_unaligned(p.add(o) as *const u64);
        let u32_at = |o: usize| u64::from(std::ptr::read_unaligned(p.add(o) as *const u32));
        if three_d {
            [u64_at(0), u64_at(8), u64_at(16), u32_at(24), u32_at(28), u32_at(32)]
        } else {
            [u64_at(0), u64_at(8), 0, u32_at(16), u32_at(20), 0]
        }
    };
    ARRAYS.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(HashMap::new).insert(h, shape);
}

/// `cuArrayGetDescriptor` / `cuArray3DGetDescriptor` of a client array.
///
/// # Safety
/// `out` is null or the program's descriptor of the function's kind.
pub(super) unsafe fn array_descriptor(out: u64, h: u64, three_d: bool) -> u32 {
    let shape = ARRAYS.lock().unwrap_or_else(|e| e.into_inner()).as_ref().and_then(|m| m.get(&h).copied());
    let Some([w, ht, d, fmt, ch, flags]) = shape else { return INVALID_HANDLE };
    if out == 0 {
        return INVALID_VALUE;
    }
    let p = out as *mut u8;
    // SAFETY: the caller's contract; fields written unaligned at their C offsets.
    unsafe {
        let put64 = |o: usize, v: u64| std::ptr::write_unaligned(p.add(o) as *mut u64, v);
        let put32 = |o: usize, v: u64| std::ptr::write_unaligned(p.add(o) as *mut u32, v as u32);
        if three_d {
            put64(0, w);
            put64(8, ht);
            put64(16, d);
            put32(24, fmt);
            put32(28, ch);
            put32(32, flags);
        } else {
            put64(0, w);
            put64(8, ht);
            put32(16, fmt);
            put32(20, ch);
        }
    }
    0
}
