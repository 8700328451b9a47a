//! The program's own virtual memory at replay and on a server (`cuMemAddressReserve`,
//! `cuMemCreate`, `cuMemMap`, `cuMemSetAccess`, `cuMemUnmap`, `cuMemRelease`,
//! `cuMemAddressFree`). Reservations are the arena's ranges the recorder (or the client) gave
//! the program, so its addresses are the recorded ones ([`super::memory::Memory::reserve_program`]);
//! physical allocations are created here with the recorded properties, and every mapping is
//! made at the recorded (translated) address. What the program leaves mapped or unreleased is
//! let go when its session ends ([`ProgramVmm::release_all`]).

use std::collections::{BTreeMap, HashMap};

use cudarc::driver::sys;
use gpuless_traces::Value;

use super::args::Call;
use super::{check, ReplayError, State};

/// `sizeof(CUmemAllocationProp)`, `sizeof(CUmemAccessDesc)`, `sizeof(CUmemLocation)`.
const PROP_BYTES: usize = 32;
const ACCESS_DESC_BYTES: usize = 12;
const LOCATION_BYTES: usize = 8;

/// The program's physical allocations and mappings.
#[derive(Default)]
pub struct ProgramVmm {
    /// Recorded handle → live handle.
    pub(crate) handles: HashMap<u64, sys::CUmemGenericAllocationHandle>,
    /// Live mapped ranges: address → length.
    pub(crate) maps: BTreeMap<u64, usize>,
}

impl ProgramVmm {
    /// Unmaps what the program left mapped and releases the handles it kept (after the work
    /// that used them: the caller synchronizes).
    pub fn release_all(&mut self) {
        // SAFETY: ranges mapped and handles created here, no longer used.
        unsafe {
            for (a, l) in std::mem::take(&mut self.maps) {
                sys::cuMemUnmap(a, l);
            }
            for (_, h) in self.handles.drain() {
                sys::cuMemRelease(h);
            }
        }
    }
}

/// Bytes of a struct argument (one struct, or an array of them).
fn bytes(c: &Call<'_>, name: &str) -> Result<Vec<u8>, ReplayError> {
    match c.arg(name) {
        Some(Value::Bytes(b)) => Ok(b.clone()),
        Some(Value::List(items)) => {
            let mut out = Vec::new();
            for v in items {
                match v {
                    Value::Bytes(b) => out.extend_from_slice(b),
                    _ => return Err(c.missing(name)),
                }
            }
            Ok(out)
        }
        _ => Err(c.missing(name)),
    }
}

/// Executes `c` if it is one of the program's VMM calls; `Ok(false)` if not.
pub(crate) fn call(st: &mut State, c: &Call<'_>) -> Result<bool, ReplayError> {
    let (seq, name) = (c.rec.seq, c.f.name);
    let handle = |st: &State, arg: &str| -> Result<sys::CUmemGenericAllocationHandle, ReplayError> {
        let h = c.word(arg)?;
        st.mem.vmm.handles.get(&h).copied().ok_or_else(|| c.inconsistent(format!("unknown allocation handle {h:#x}")))
    };
    // SAFETY (whole match): VMM calls with live handles, translated addresses and struct
    // buffers of the sizes the driver reads.
    unsafe {
        match name {
            "cuMemAddressReserve" => {
                let (recorded, size) = (c.out_word("ptr")?, c.word("size")?);
                st.mem.reserve_program(recorded, size, c.word("alignment")?, seq)?;
            }
            "cuMemAddressFree" => st.mem.free(c.word("ptr")?),
            "cuMemCreate" => {
                let prop = bytes(c, "prop")?;
                if prop.len() < PROP_BYTES {
                    return Err(c.inconsistent(format!("{} bytes of allocation properties", prop.len())));
                }
                let mut h: sys::CUmemGenericAllocationHandle = 0;
                let p: *const sys::CUmemAllocationProp = prop.as_ptr().cast();
                check(sys::cuMemCreate(&mut h, c.word("size")? as usize, p, c.word("flags")?), seq, name)?;
                st.mem.vmm.handles.insert(c.out_word("handle")?, h);
            }
            // A new reference of the memory mapped at the address (its own handle to release).
            "cuMemRetainAllocationHandle" => {
                let mut h: sys::CUmemGenericAllocationHandle = 0;
                let at = st.mem.translate(c.word("addr")?);
                check(sys::cuMemRetainAllocationHandle(&mut h, at as *mut std::ffi::c_void), seq, name)?;
                st.mem.vmm.handles.insert(c.out_word("handle")?, h);
            }
            "cuMemRelease" => {
                let h = handle(st, "handle")?;
                st.mem.vmm.handles.remove(&c.word("handle")?);
                check(sys::cuMemRelease(h), seq, name)?;
            }
            "cuMemMap" => {
                let h = handle(st, "handle")?;
                let (ptr, size) = (st.mem.translate(c.word("ptr")?), c.word("size")? as usize);
                check(sys::cuMemMap(ptr, size, c.word("offset")? as usize, h, c.word("flags")?), seq, name)?;
                st.mem.vmm.maps.insert(ptr, size);
            }
            "cuMemUnmap" => {
                let (ptr, size) = (st.mem.translate(c.word("ptr")?), c.word("size")?);
                check(sys::cuMemUnmap(ptr, size as usize), seq, name)?;
                let gone: Vec<u64> = st.mem.vmm.maps.range(ptr..ptr.saturating_add(size)).map(|(&a, _)| a).collect();
                for a in gone {
                    st.mem.vmm.maps.remove(&a);
                }
            }
            "cuMemSetAccess" => {
                let n = c.word("count")? as usize;
                let desc = bytes(c, "desc")?;
                if desc.len() < n * ACCESS_DESC_BYTES {
                    return Err(c.inconsistent(format!("{} bytes recorded for {n} access descriptors", desc.len())));
                }
                let ptr = st.mem.translate(c.word("ptr")?);
                let d: *const sys::CUmemAccessDesc = desc.as_ptr().cast();
                check(sys::cuMemSetAccess(ptr, c.word("size")? as usize, d, n), seq, name)?;
            }
            _ => return Ok(false),
        }
    }
    Ok(true)
}

/// `cuMemGetAccess(flags*, location*, ptr)` for a client: the status and the flags.
/// `gpulessMemImport(new, source)` ([`gpuless_traces::devices::MEM_IMPORT`]): `new` is a
/// reference of `source`'s memory of its own, taken as the program took it — an export to a
/// file descriptor and an import of it.
pub(crate) fn import(st: &mut State, rec: &gpuless_traces::CallRecord) -> Result<(), ReplayError> {
    let what = gpuless_traces::devices::MEM_IMPORT;
    let word = |i: usize| match rec.args.get(i) {
        Some(Value::U64(v) | Value::Size(v)) => Some(*v),
        _ => None,
    };
    let bad = |problem: String| ReplayError::Unsupported { seq: rec.seq, what: what.into(), problem };
    let (Some(new), Some(source)) = (word(0), word(1)) else {
        return Err(bad(format!("expected two handles, found {:?}", rec.args)));
    };
    let Some(&real) = st.mem.vmm.handles.get(&source) else {
        return Err(bad(format!("unknown allocation handle {source:#x}")));
    };
    // 1 = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.
    let posix = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    let mut fd: std::ffi::c_int = -1;
    let mut h: sys::CUmemGenericAllocationHandle = 0;
    // SAFETY: a live handle, valid out-pointers; the descriptor is closed after the import.
    unsafe {
        check(
            sys::cuMemExportToShareableHandle((&mut fd as *mut std::ffi::c_int).cast(), real, posix, 0),
            rec.seq,
            what,
        )?;
        let r = sys::cuMemImportFromShareableHandle(&mut h, fd as usize as *mut std::ffi::c_void, posix);
        libc::close(fd);
        check(r, rec.seq, what)?;
    }
    st.mem.vmm.handles.insert(new, h);
    Ok(())
}

pub(crate) fn get_access(st: &State, c: &Call<'_>) -> (i32, Vec<u64>) {
    let loc = match bytes(c, "location") {
        Ok(b) if b.len() >= LOCATION_BYTES => b,
        _ => return (sys::CUresult::CUDA_ERROR_INVALID_VALUE as i32, vec![0]),
    };
    let Ok(ptr) = c.word("ptr") else { return (sys::CUresult::CUDA_ERROR_INVALID_VALUE as i32, vec![0]) };
    let mut flags = 0u64;
    // SAFETY: a valid out-pointer and an 8-byte CUmemLocation.
    let r = unsafe { sys::cuMemGetAccess(&mut flags, loc.as_ptr().cast(), st.mem.translate(ptr)) };
    (r as i32, vec![flags])
}
