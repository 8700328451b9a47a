//! Copies whose direction is in their arguments rather than in their name, as client mode runs
//! them: `cuMemcpy`/`cuMemcpyAsync` between unified addresses (`crate::unified`: outside the
//! arena is host memory), and the 2D/3D copies
//! (`CUDA_MEMCPY2D` / `CUDA_MEMCPY3D`) between host memory, device memory and arrays.
//!
//! A side is host memory when its memory type says so, or when it is unified and outside the
//! arena (the only device memory a client has). A copy from host memory is sent with its rows
//! (the recorder's capture packs them); a synchronous copy into host memory waits for the
//! server, whose answer is the packed rows, scattered here into the program's rows. Unified
//! sides are sent as what they are (host or device), so the executor needs no guess.
//! An asynchronous 2D/3D copy into host memory is sent ahead; its packed rows come back with the
//! next answer and are scattered then (one captured into a graph is refused, saying so).

use gpuless_analyzer::api::structs::{self, Copy, Dims, Side};
use gpuless_analyzer::api::{ApiFunction, ArgKind, Direction, SyncClass};
use gpuless_traces::Value;

use super::step::{unsupported, Step};
use super::streams;
use crate::arena;

/// The 2D/3D copy struct argument of `f` (its index and shape), if it has one.
fn copy_struct(f: &ApiFunction) -> Option<(usize, Dims)> {
    f.args.iter().enumerate().find_map(|(i, a)| match a.kind {
        ArgKind::Struct(ty) => Dims::of(ty).map(|d| (i, d)),
        _ => None,
    })
}

/// The program's copy struct, parsed.
///
/// # Safety
/// Argument `i` of `raw` is null or points at a struct of `dims`' size.
unsafe fn parse(raw: &[u64], i: usize, dims: Dims) -> Option<Copy> {
    let p = raw.get(i).copied().filter(|&p| p != 0)?;
    // SAFETY: the caller's contract.
    let b = unsafe { std::slice::from_raw_parts(p as *const u8, dims.size()) };
    Copy::parse(dims, b)
}

fn is_host(s: &Side) -> bool {
    s.memory_type == structs::MEMORYTYPE_HOST
        || (s.memory_type == structs::MEMORYTYPE_UNIFIED && !arena::contains(s.device))
}

/// What the client does with a copy of class `CopyAnyDirection(Async)`.
///
/// # Safety
/// `raw` are the program's arguments to `f`.
pub(crate) unsafe fn plan(f: &ApiFunction, raw: &[u64]) -> Step {
    let Some((i, dims)) = copy_struct(f) else {
        // Unified addresses (`anybuf`): a host source travels as its bytes (the capture's
        // blob); a host destination is what the server answers.
        if !f.args.iter().any(|a| matches!(a.kind, ArgKind::AnyBuf(_))) {
            return unsupported(f, "copies whose sides the API table does not describe");
        }
        // An asynchronous one into host memory is written there when the server's answer
        // comes, at the latest at the synchronization that covers it, as a
        // `cuMemcpyDtoHAsync` is.
        return match crate::unified::host_destination(f, raw) {
            Some(_) if f.sync == SyncClass::CopyAnyDirection => Step::Wait,
            _ => Step::Done(0),
        };
    };
    if f.name.starts_with("cuMemcpy3DPeer") || f.name.contains("Batch") {
        return unsupported(f, "peer and batched copies are not covered yet");
    }
    // SAFETY: forwarded: the struct argument.
    let Some(c) = (unsafe { parse(raw, i, dims) }) else { return Step::Done(1) };
    if !is_host(&c.dst) {
        return Step::Done(0);
    }
    if f.sync == SyncClass::CopyAnyDirection {
        Step::Wait
    } else if streams::captured(f, raw) {
        unsupported(
            f,
            "asynchronous 2D/3D copies into host memory captured into a graph are not returned to the client yet",
        )
    } else {
        // Its rows are written when the server's answer brings them (`session::Target::Rows`).
        Step::Done(0)
    }
}

/// Rewrites unified sides of a captured 2D/3D copy struct as host or device memory, for the
/// executor (the record sent to the server; a trace keeps what the program passed).
pub(crate) fn normalize(f: &ApiFunction, args: &mut [Value]) {
    let Some((i, dims)) = copy_struct(f) else { return };
    let bytes = match args.get_mut(i) {
        Some(Value::List(l)) => match l.first_mut() {
            Some(Value::Bytes(b)) => b,
            _ => return,
        },
        Some(Value::Bytes(b)) => b,
        _ => return,
    };
    let Some(c) = Copy::parse(dims, bytes) else { return };
    for (dst, mut s) in [(false, c.src), (true, c.dst)] {
        if s.memory_type == structs::MEMORYTYPE_UNIFIED {
            if arena::contains(s.device) {
                s.memory_type = structs::MEMORYTYPE_DEVICE;
            } else {
                s.memory_type = structs::MEMORYTYPE_HOST;
                s.host = s.device;
            }
            Copy::write_side(dims, bytes, dst, &s);
        }
    }
}

/// Writes the packed rows the server returned for a synchronous 2D/3D copy into host memory
/// to the program's rows. Returns whether `f` is such a copy.
///
/// # Safety
/// `raw` are the program's arguments; its destination rows are writable.
pub(crate) unsafe fn scatter(f: &ApiFunction, raw: &[u64], bytes: &[u8]) -> bool {
    let Some((i, dims)) = copy_struct(f) else { return false };
    // SAFETY: forwarded.
    let Some(c) = (unsafe { parse(raw, i, dims) }) else { return true };
    if is_host(&c.dst) {
        // SAFETY: forwarded.
        unsafe { scatter_rows(&c, bytes) };
    }
    true
}

/// Writes `bytes`, the packed rows of copy `c`, to its destination rows in host memory
/// (nothing when their length is not the copy's).
///
/// # Safety
/// `c`'s destination rows are the program's, writable.
pub(crate) unsafe fn scatter_rows(c: &Copy, bytes: &[u8]) {
    if c.packed_len() != Some(bytes.len() as u64) {
        return;
    }
    let w = c.width as usize;
    for (k, row) in c.rows(&c.dst).enumerate() {
        let from = &bytes[k * w..(k + 1) * w];
        // SAFETY: the program's destination row of `w` bytes.
        unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), row as *mut u8, w) };
    }
}

/// A graph's memcpy node (`cuGraphAddMemcpyNode`) as captured for the server (after
/// [`normalize`]: host sides are `MEMORYTYPE_HOST`).
pub(crate) fn memcpy_node(f: &ApiFunction, args: &[Value]) -> Option<Copy> {
    if f.name != "cuGraphAddMemcpyNode" {
        return None;
    }
    let (i, dims) = copy_struct(f)?;
    let bytes = match args.get(i)? {
        Value::List(l) => match l.first()? {
            Value::Bytes(b) => b,
            _ => return None,
        },
        Value::Bytes(b) => b,
        _ => return None,
    };
    Copy::parse(dims, bytes)
}

/// Reads a copy's source rows, packed (what the device reads from host memory).
///
/// # Safety
/// The copy's source rows are readable host memory.
pub(crate) unsafe fn gather_rows(c: &Copy) -> Vec<u8> {
    let w = c.width as usize;
    let mut out = Vec::with_capacity(c.packed_len().unwrap_or(0) as usize);
    for row in c.rows(&c.src) {
        // SAFETY: the caller's contract.
        out.extend_from_slice(unsafe { std::slice::from_raw_parts(row as *const u8, w) });
    }
    out
}

/// Where the bytes of an asynchronous copy into host memory go when they come back.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target {
    /// A host buffer: (address, length).
    Buffer(u64, usize),
    /// A 2D/3D copy's destination rows (the bytes come packed).
    Rows(gpuless_analyzer::api::structs::Copy),
}

/// The host buffer a device-to-host copy writes: its first `out hostbuf` argument, or its
/// unified destination when that is host memory.
pub(crate) fn host_buffer(f: &ApiFunction, raw: &[u64]) -> Option<(u64, usize)> {
    if let Some(d) = crate::unified::host_destination(f, raw) {
        return Some(d);
    }
    let (i, a) =
        f.args.iter().enumerate().find(|(_, a)| a.dir == Direction::Out && matches!(a.kind, ArgKind::HostBuf(_)))?;
    let ArgKind::HostBuf(len) = a.kind else { return None };
    let n = match len {
        gpuless_analyzer::api::BufLen::Arg(j) => raw.get(usize::from(j)).copied()?,
        gpuless_analyzer::api::BufLen::Fixed(n) => u64::from(n),
    };
    Some((raw.get(i).copied()?, usize::try_from(n).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `CUDA_MEMCPY2D` as cuda.h lays it out.
    #[repr(C)]
    #[derive(Default)]
    struct Copy2d {
        src_x: usize,
        src_y: usize,
        src_type: u32,
        src_host: u64,
        src_device: u64,
        src_array: u64,
        src_pitch: usize,
        dst_x: usize,
        dst_y: usize,
        dst_type: u32,
        dst_host: u64,
        dst_device: u64,
        dst_array: u64,
        dst_pitch: usize,
        width: usize,
        height: usize,
    }

    fn memcpy2d() -> &'static ApiFunction {
        gpuless_analyzer::api::functions().iter().find(|f| f.name == "cuMemcpy2D").expect("in the table")
    }

    #[test]
    fn packed_rows_are_scattered_into_the_pitched_host_destination_only() {
        let mut host = [0xeeu8; 16];
        let c = Copy2d {
            src_type: structs::MEMORYTYPE_DEVICE,
            src_device: 0x1000,
            src_pitch: 64,
            dst_type: structs::MEMORYTYPE_UNIFIED, // outside the arena: host memory
            dst_device: host.as_mut_ptr() as u64,
            dst_x: 1,
            dst_pitch: 8,
            width: 3,
            height: 2,
            ..Copy2d::default()
        };
        let raw = [&c as *const Copy2d as u64];
        // SAFETY: the struct and the 16-byte destination above.
        assert!(unsafe { scatter(memcpy2d(), &raw, &[1, 2, 3, 4, 5, 6]) });
        assert_eq!(host, [0xee, 1, 2, 3, 0xee, 0xee, 0xee, 0xee, 0xee, 4, 5, 6, 0xee, 0xee, 0xee, 0xee]);
        // Not the packed size: nothing written.
        // SAFETY: as above.
        assert!(unsafe { scatter(memcpy2d(), &raw, &[9; 5]) });
        assert_eq!(host[1], 1);
    }

    #[test]
    fn unified_sides_are_sent_as_what_they_are() {
        let c = Copy2d {
            src_type: structs::MEMORYTYPE_UNIFIED,
            src_device: 0x7000_1234, // not in the arena: host memory
            dst_type: structs::MEMORYTYPE_DEVICE,
            dst_device: 0x6400_0000_0000,
            width: 4,
            height: 1,
            ..Copy2d::default()
        };
        // SAFETY: a plain C struct read as bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(&c as *const Copy2d as *const u8, std::mem::size_of::<Copy2d>()).to_vec()
        };
        let mut args = vec![Value::List(vec![Value::Bytes(bytes), Value::Null])];
        normalize(memcpy2d(), &mut args);
        let Value::List(l) = &args[0] else { panic!() };
        let Value::Bytes(b) = &l[0] else { panic!() };
        let parsed = Copy::parse(Dims::Two, b).unwrap();
        assert_eq!((parsed.src.memory_type, parsed.src.host), (structs::MEMORYTYPE_HOST, 0x7000_1234));
        assert_eq!(parsed.dst.memory_type, structs::MEMORYTYPE_DEVICE, "a typed side is left as it is");
    }
}
