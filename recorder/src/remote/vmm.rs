//! The program's own virtual memory in client mode (`cuMemAddressReserve`, `cuMemCreate`,
//! `cuMemMap`, `cuMemSetAccess`, `cuMemUnmap`, `cuMemRelease`, `cuMemAddressFree`).
//!
//! Reservations are ranges of the arena (`arena.rs`: the client chooses the address, as for
//! every allocation); the executor maps the program's physical memory there on the server. The
//! client keeps books so that it answers what the driver would without asking: a map into no
//! reservation, of an unknown handle or past the handle's size is the driver's
//! `CUDA_ERROR_INVALID_VALUE` at the call, copies into mapped ranges are accepted
//! (`checks.rs`), and a handle's properties are the ones it was created with.
//!
//! Sharing within the process (what NCCL does between the devices of one process): a handle
//! retained from an address is a new reference the executor takes from its own mapping there;
//! a handle exported as a POSIX file descriptor is a memfd of the client's standing for it, and
//! importing that descriptor makes a new handle the executor takes as its own export and import
//! of the same memory ([`gpuless_traces::devices::MEM_IMPORT`], sent by the call's trip: this
//! module answers [`Step::Import`], keeps the books of [`import_source`] and [`imported`]).
//! Descriptors of other processes, and fabric handles, are refused.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use gpuless_analyzer::api::ApiFunction;

use super::attributes::attr;
use super::handles::new_handle;
use super::step::{refused, Step};
use crate::arena;

const INVALID_VALUE: u32 = 1;
const INVALID_HANDLE: u32 = 400;

/// `sizeof(CUmemAllocationProp)`.
const PROP_BYTES: usize = 32;
/// Offset of `allocFlags.compressionType` in `CUmemAllocationProp`.
const COMPRESSION_AT: usize = 24;
/// `CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED`.
const GENERIC_COMPRESSION_SUPPORTED: u32 = 107;

#[derive(Default)]
struct Books {
    /// Physical allocations: client handle → (size, properties as created).
    handles: HashMap<u64, (u64, [u8; PROP_BYTES])>,
    /// Mapped ranges: address → (length, handle).
    maps: BTreeMap<u64, (u64, u64)>,
    /// Handles exported as file descriptors: the memfd's inode → handle.
    exported: HashMap<u64, u64>,
}

/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
pub(crate) const POSIX_FD: u64 = 1;

static BOOKS: Mutex<Option<Books>> = Mutex::new(None);

fn with<T>(f: impl FnOnce(&mut Books) -> T) -> T {
    let mut g = BOOKS.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(Books::default))
}

/// The client's part of a call of the program's own virtual memory: the books decide what the
/// driver would refuse; accepted calls go to the server (`local::run`); an import is the
/// session's to tell ([`Step::Import`]). `None` for every other function.
///
/// # Safety
/// `raw` are the program's arguments to `f`.
pub(crate) unsafe fn call(f: &ApiFunction, raw: &[u64]) -> Option<Step> {
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    let refused = |st: Option<u32>| Some(st.map_or(Step::Done(0), Step::Done));
    match f.name {
        "cuMemCreate" => {
            if let Some(st) = create_refused(w(1), w(2)) {
                return Some(Step::Done(st));
            }
            let h = new_handle();
            // SAFETY: the program's out-pointer (checked non-null) and properties.
            unsafe {
                *(w(0) as *mut u64) = h;
                created(h, w(1), w(2));
            }
            Some(Step::Done(0))
        }
        "cuMemRelease" => refused(release(w(0))),
        "cuMemMap" => refused(map(w(0), w(1), w(2), w(3))),
        "cuMemUnmap" => refused(unmap(w(0), w(1))),
        "cuMemSetAccess" => refused((!mapped(w(0), w(1)) || w(2) == 0 || w(3) == 0).then_some(INVALID_VALUE)),
        // SAFETY: the program's out-pointer for the properties.
        "cuMemGetAllocationPropertiesFromHandle" => Some(Step::Done(unsafe { properties(w(0), w(1)) })),
        // SAFETY (two arms): the program's out-pointers.
        "cuMemRetainAllocationHandle" => Some(Step::Done(unsafe { retain(w(0), w(1)) })),
        // Offered to the program's other processes too (`ipc.rs`).
        "cuMemExportToShareableHandle" => Some(Step::Share),
        // One of this process's descriptors, or another process's (`ipc.rs`).
        "cuMemImportFromShareableHandle" if is_own(w(1)) => Some(Step::Import),
        "cuMemImportFromShareableHandle" => Some(Step::Share),
        _ => None,
    }
}

/// `cuMemRetainAllocationHandle(handle*, addr)`: a new handle of the memory mapped at `addr`
/// (the executor retains it there when the record arrives).
///
/// # Safety
/// `out` is null or the program's handle out-pointer.
unsafe fn retain(out: u64, addr: u64) -> u32 {
    let found = with(|b| {
        let (&a, &(l, h)) = b.maps.range(..=addr).next_back()?;
        (addr < a + l).then(|| b.handles.get(&h).copied()).flatten()
    });
    let Some((size, prop)) = found else { return INVALID_VALUE };
    if out == 0 {
        return INVALID_VALUE;
    }
    let h = new_handle();
    with(|b| b.handles.insert(h, (size, prop)));
    // SAFETY: the caller's contract.
    unsafe { *(out as *mut u64) = h };
    0
}

/// `cuMemExportToShareableHandle(shareable*, handle, type, flags)`: a POSIX file descriptor
/// (a memfd of the client's, holding `contents`: what another process that receives it reads,
/// `ipc.rs`) standing for the handle, for an import in this process.
///
/// # Safety
/// `out` is null or the program's `int` out-pointer.
pub(crate) unsafe fn export(f: &ApiFunction, out: u64, h: u64, kind: u64, contents: &[u8]) -> u32 {
    if !with(|b| b.handles.contains_key(&h)) {
        return INVALID_HANDLE;
    }
    if kind != POSIX_FD {
        return refused(f, "only POSIX file descriptors are shared, within the process");
    }
    if out == 0 {
        return INVALID_VALUE;
    }
    // SAFETY: a NUL-terminated name; the descriptor is the program's to close.
    let fd = unsafe { libc::memfd_create(c"gpuless-memhandle".as_ptr(), libc::MFD_CLOEXEC) };
    let Some(ino) = inode(fd) else { return 2 }; // CUDA_ERROR_OUT_OF_MEMORY: no descriptor
                                                 // SAFETY: a descriptor of ours and a valid buffer.
    if unsafe { libc::write(fd, contents.as_ptr().cast(), contents.len()) } != contents.len() as isize {
        // SAFETY: ours, not handed out.
        unsafe { libc::close(fd) };
        return 2;
    }
    with(|b| b.exported.insert(ino, h));
    // SAFETY: the caller's contract.
    unsafe { *(out as *mut i32) = fd };
    0
}

/// Whether descriptor `fd` is one this process exported (an import of it stays in the process).
fn is_own(fd: u64) -> bool {
    inode(fd as i32).is_some_and(|ino| with(|b| b.exported.contains_key(&ino)))
}

/// The size of physical allocation `h`, if it is one.
pub(crate) fn size_of(h: u64) -> Option<u64> {
    with(|b| b.handles.get(&h).map(|&(size, _)| size))
}

/// Memory of another process the executor imported as handle `h` (`ipc.rs`): device memory of
/// `size` bytes of the session's device, exportable as a descriptor; mapped at `at` for all of
/// it unless `at` is 0.
pub(crate) fn adopt(h: u64, size: u64, at: u64) {
    let mut prop = [0u8; PROP_BYTES];
    prop[0] = 1; // CU_MEM_ALLOCATION_TYPE_PINNED
    prop[4] = POSIX_FD as u8; // requestedHandleTypes
    prop[8] = 1; // CU_MEM_LOCATION_TYPE_DEVICE
    prop[12..16].copy_from_slice(&(super::context_books::current_device() as i32).to_le_bytes());
    with(|b| {
        b.handles.insert(h, (size, prop));
        if at != 0 {
            b.maps.insert(at, (size, h));
        }
    });
}

/// What an import brings: the handle a descriptor this process exported stands for, and the
/// memory's size and properties.
pub(crate) struct Import {
    /// The exported handle.
    pub(crate) source: u64,
    facts: (u64, [u8; PROP_BYTES]),
}

/// `cuMemImportFromShareableHandle(handle*, osHandle, type)`: what a descriptor this process
/// exported stands for, before the import is told to the executor; `Err`: the call's status.
pub(crate) fn import_source(f: &ApiFunction, out: u64, os_handle: u64, kind: u64) -> Result<Import, u32> {
    if kind != POSIX_FD {
        return Err(refused(f, "only POSIX file descriptors are shared, within the process"));
    }
    let source = inode(os_handle as i32).and_then(|ino| with(|b| b.exported.get(&ino).copied()));
    let Some(source) = source else {
        return Err(refused(f, "the descriptor is not one this process exported (sessions share no memory)"));
    };
    let Some(facts) = with(|b| b.handles.get(&source).copied()) else { return Err(INVALID_VALUE) };
    if out == 0 {
        return Err(INVALID_VALUE);
    }
    Ok(Import { source, facts })
}

/// The import of `import` made handle `h` (told to the executor): a new handle of the same
/// memory, written to the program's `out`.
///
/// # Safety
/// `out` is the program's handle out-pointer (non-null: [`import_source`] checked it).
pub(crate) unsafe fn imported(h: u64, import: Import, out: u64) {
    with(|b| b.handles.insert(h, import.facts));
    // SAFETY: the caller's contract.
    unsafe { *(out as *mut u64) = h };
}

/// The inode of descriptor `fd` (`None`: not an open descriptor).
fn inode(fd: i32) -> Option<u64> {
    if fd < 0 {
        return None;
    }
    // SAFETY: all-zero is a valid `stat`; fstat writes it or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st.st_ino)
}

/// `cuMemCreate(handle*, size, prop*, flags)` made handle `h`: its size and properties, as the
/// driver reports them (no compression where the device has none).
///
/// # Safety
/// `prop` is null or the program's `CUmemAllocationProp`.
pub(crate) unsafe fn created(h: u64, size: u64, prop: u64) {
    let mut p = [0u8; PROP_BYTES];
    if prop != 0 {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(prop as *const u8, p.as_mut_ptr(), PROP_BYTES) };
    }
    if attr(GENERIC_COMPRESSION_SUPPORTED).unwrap_or(0) == 0 {
        p[COMPRESSION_AT] = 0;
    }
    with(|b| b.handles.insert(h, (size, p)));
}

/// `cuMemCreate`'s arguments the driver refuses: a size that is not a whole number of
/// granules (the arena's chunk), no properties.
pub(crate) fn create_refused(size: u64, prop: u64) -> Option<u32> {
    (size == 0 || size % gpuless_traces::arena::CHUNK != 0 || prop == 0).then_some(INVALID_VALUE)
}

/// `cuMemRelease(h)`: the handle goes; what is mapped stays until unmapped, as the driver's.
pub(crate) fn release(h: u64) -> Option<u32> {
    with(|b| b.handles.remove(&h).is_none().then_some(INVALID_HANDLE))
}

/// `cuMemMap(ptr, size, offset, h, flags)`: accepted (and noted) where the driver accepts it.
pub(crate) fn map(ptr: u64, size: u64, offset: u64, h: u64) -> Option<u32> {
    let Some((base, len)) = arena::reservation(ptr) else { return Some(INVALID_VALUE) };
    let end = ptr.checked_add(size)?;
    with(|b| {
        let Some(&(hsize, _)) = b.handles.get(&h) else { return Some(INVALID_HANDLE) };
        let inside = size != 0 && end <= base + len && offset.checked_add(size).is_some_and(|e| e <= hsize);
        let taken = b.maps.range(..end).next_back().is_some_and(|(&a, &(l, _))| a + l > ptr);
        if !inside || taken || ptr % gpuless_traces::arena::CHUNK != 0 {
            return Some(INVALID_VALUE);
        }
        b.maps.insert(ptr, (size, h));
        None
    })
}

/// `cuMemUnmap(ptr, size)`: every mapping inside the range goes; a range with none is invalid.
pub(crate) fn unmap(ptr: u64, size: u64) -> Option<u32> {
    let end = ptr.saturating_add(size);
    with(|b| {
        let gone: Vec<u64> = b.maps.range(ptr..end).map(|(&a, _)| a).collect();
        for a in &gone {
            b.maps.remove(a);
        }
        gone.is_empty().then_some(INVALID_VALUE)
    })
}

/// Whether every byte of `[p, p + len)` is mapped by the program (across adjacent mappings).
pub(crate) fn mapped(p: u64, len: u64) -> bool {
    let end = p.saturating_add(len.max(1));
    with(|b| {
        let mut at = p;
        while at < end {
            match b.maps.range(..=at).next_back() {
                Some((&a, &(l, _))) if at < a + l => at = a + l,
                _ => return false,
            }
        }
        true
    })
}

/// `cuMemGetAllocationPropertiesFromHandle(prop*, h)`: the properties it was created with.
///
/// # Safety
/// `out` is null or the program's `CUmemAllocationProp`.
pub(crate) unsafe fn properties(out: u64, h: u64) -> u32 {
    let Some((_, p)) = with(|b| b.handles.get(&h).copied()) else { return INVALID_HANDLE };
    if out == 0 {
        return INVALID_VALUE;
    }
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), out as *mut u8, PROP_BYTES) };
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_need_a_known_handle_and_a_free_range_within_its_size() {
        // Without an arena there is no reservation: every map is invalid.
        assert_eq!(map(0x6400_0000_0000, 2 << 20, 0, 1), Some(INVALID_VALUE));
        assert_eq!(release(12345), Some(INVALID_HANDLE));
        assert_eq!(create_refused(3, 8), Some(INVALID_VALUE));
        assert_eq!(create_refused(2 << 20, 8), None);
        with(|b| {
            b.maps.insert(0x1000_0000, (2 << 20, 7));
        });
        assert!(mapped(0x1000_0000 + 5, 100));
        assert!(!mapped(0x1000_0000 + (2 << 20) - 4, 8));
        with(|b| {
            b.maps.insert(0x1000_0000 + (2 << 20), (2 << 20, 8));
        });
        assert!(mapped(0x1000_0000 + (2 << 20) - 4, 8), "adjacent mappings cover a range together");
        assert_eq!(unmap(0x1000_0000 + (2 << 20), 2 << 20), None);
        assert_eq!(unmap(0x2000_0000, 2 << 20), Some(INVALID_VALUE));
        assert_eq!(unmap(0x1000_0000, 2 << 20), None);
        assert!(!mapped(0x1000_0000, 1));
    }
}
