//! The arena's answers to pointer attribute queries about a live allocation ([`Found`]): the
//! attributes in which the driver's answers about the arena's VMM memory differ from its
//! answers about `cuMemAlloc` memory ([`answer`]).

use cudarc::driver::sys;

/// What the arena knows of a live allocation, for pointer queries.
#[derive(Clone, Copy)]
pub(super) struct Found {
    pub(super) base: u64,
    pub(super) size: u64,
    pub(super) ctx: u64,
    pub(super) id: u64,
    pub(super) pool: Option<u64>,
    pub(super) sync_memops: u32,
}

/// Writes our answer for `attr` about the allocation to `data`; false if the driver's stands.
/// Measured against `cuMemAlloc` and `cuMemAllocAsync` memory on an H100 (driver 580): the
/// driver's answers about the arena's VMM memory differ in the context, the range, the buffer
/// id, the pool and, for pool memory, the capabilities; the rest (type, device pointer, ordinal,
/// mapped, access flags, handle types, the physical mapping) are the driver's own and the same.
pub(super) unsafe fn answer(attr: u64, data: u64, f: Found) -> bool {
    use sys::CUpointer_attribute as A;
    // SAFETY: `data` points to a value of the attribute's type (the caller's contract).
    unsafe {
        match attr {
            // Pool memory belongs to no context: the driver answers null for it.
            x if x == A::CU_POINTER_ATTRIBUTE_CONTEXT as u64 => {
                *(data as *mut u64) = if f.pool.is_some() { 0 } else { f.ctx }
            }
            x if x == A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR as u64 => *(data as *mut u64) = f.base,
            x if x == A::CU_POINTER_ATTRIBUTE_RANGE_SIZE as u64 => *(data as *mut usize) = f.size as usize,
            // Unique per allocation, as the driver's are (high bit: never equal to one of them).
            x if x == A::CU_POINTER_ATTRIBUTE_BUFFER_ID as u64 => *(data as *mut u64) = (1 << 63) | f.id,
            x if x == A::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS as u64 => *(data as *mut u32) = f.sync_memops,
            x if x == A::CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE as u64 => *(data as *mut u64) = f.pool.unwrap_or(0),
            // Made exportable (`map`), answered as for `cuMemAlloc` memory: no handle types.
            x if x == A::CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES as u64 => *(data as *mut u64) = 0,
            // The arena's memory is created RDMA- and decompression-capable (`map`), as
            // `cuMemAlloc` memory is; the driver's pool memory is neither.
            x if f.pool.is_some()
                && (x == A::CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE as u64 || x == ATTR_HW_DECOMPRESS) =>
            {
                *(data as *mut u32) = 0
            }
            _ => return false,
        }
    }
    true
}

/// `CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE` (CUDA 12.8; newer than the bindings' enum).
const ATTR_HW_DECOMPRESS: u64 = 21;
