//! Host memory in client mode, and what pointer queries answer about any address.
//!
//! Pinned host memory (`cuMemAllocHost`, `cuMemHostAlloc`, `cuMemHostRegister`) is kept in a
//! registry so that pointer queries answer for it as the driver does.
//! - Memory allocated for the device (`cuMemHostAlloc` with `DEVICEMAP`: `cudaHostAlloc` with
//!   `cudaHostAllocMapped`) is mirrored: an arena address, host pages of
//!   this process there, device memory at the same address on the server, kept coherent as
//!   managed memory is (`shared.rs`: host writes go before the next submission, device writes
//!   come back at waits). Its device address is its host address, so pointers to it work
//!   anywhere, in structs too.
//! - Other pinned memory (`cuMemAllocHost`, `cuMemHostAlloc` without `DEVICEMAP`, registered
//!   memory) is ordinary memory of this process, cheap staging for copies, until the device
//!   uses it: a launch whose parameter words point into it ([`mirror_reached`]), a request for
//!   its device pointer or a registration with `DEVICEMAP` mirrors it from then on
//!   ([`promote`]: its pages adopted by `shared.rs`, `gpulessHostMirror` to the executor, sent
//!   by the session through what it lends here at install, [`lend_mirror`]).
//!
//! Pointer queries: arena memory is device memory (what only the server's driver knows — the
//! mapping's size, handle types, access flags — is asked of it); pinned memory answers from the
//! registry; any other address is pageable host memory, which the driver does not know.

use std::collections::BTreeMap;
use std::sync::Mutex;

use gpuless_analyzer::api::ApiFunction;
use gpuless_traces::Value;

use super::context_books::primary_context;
use super::step::{unsupported, Step};
use super::{route, shared};
use crate::arena;

/// `CU_MEMHOSTALLOC_DEVICEMAP`, `CU_MEMHOSTREGISTER_DEVICEMAP`.
const DEVICEMAP: u64 = 0x2;
const SUCCESS: u32 = 0;
const INVALID_VALUE: u32 = 1;
const OUT_OF_MEMORY: u32 = 2;

#[derive(Clone, Copy)]
struct Pinned {
    len: u64,
    flags: u64,
    /// Allocated here (freed with `cuMemFreeHost`), or the program's memory registered.
    ours: bool,
    /// Mirrored on the server (an arena address, `shared.rs`).
    mirrored: bool,
    id: u64,
}

static PINNED: Mutex<BTreeMap<u64, Pinned>> = Mutex::new(BTreeMap::new());
/// Bounds of every unmirrored allocation there has been: `[LOW, HIGH)` (never narrowed).
static LOW: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(u64::MAX);
static HIGH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// How many unmirrored allocations the registry holds.
static MAPPED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How the session tells the executor to back pinned memory with device memory at its address
/// before the next record (`gpulessHostMirror`): `false` without a session. Lent once, when
/// client mode is installed (`trip::install`).
static MIRROR: std::sync::OnceLock<fn(u64, u64) -> bool> = std::sync::OnceLock::new();

/// Lends [`promote`] the session's way of mirroring pinned memory on the server.
pub(crate) fn lend_mirror(mirror: fn(u64, u64) -> bool) {
    let _ = MIRROR.set(mirror);
}

/// Adds an allocation to the registry (counting the ones the device may use unmirrored, and
/// widening the bounds a launch's words are tested against before any lookup).
fn keep(start: u64, a: Pinned) {
    if !a.mirrored {
        LOW.fetch_min(start, std::sync::atomic::Ordering::Relaxed);
        HIGH.fetch_max(start.saturating_add(a.len), std::sync::atomic::Ordering::Relaxed);
        MAPPED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    if let Some(old) = registry().insert(start, a) {
        forget_one(&old);
    }
}

/// Removes the allocation at `start` from the registry.
fn drop_at(start: u64) -> Option<Pinned> {
    let a = registry().remove(&start)?;
    forget_one(&a);
    Some(a)
}

fn forget_one(a: &Pinned) {
    if !a.mirrored {
        MAPPED.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

fn registry() -> std::sync::MutexGuard<'static, BTreeMap<u64, Pinned>> {
    PINNED.lock().unwrap_or_else(|e| e.into_inner())
}

/// The pinned allocation holding `p`: (start, allocation).
fn find(p: u64) -> Option<(u64, Pinned)> {
    let g = registry();
    let (&start, &a) = g.range(..=p).next_back()?;
    (p < start.saturating_add(a.len.max(1))).then_some((start, a))
}

/// `cuMemAllocHost`, `cuMemHostAlloc`, `cuMemFreeHost`, `cuMemHostRegister`,
/// `cuMemHostUnregister`.
///
/// # Safety
/// `raw` are the program's arguments to `f`.
pub(crate) unsafe fn memory(f: &ApiFunction, raw: &[u64]) -> Step {
    static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    let id = || IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) | (1 << 62);
    match f.name {
        "cuMemAllocHost" | "cuMemHostAlloc" => {
            if w(0) == 0 {
                return Step::Done(INVALID_VALUE);
            }
            let len = w(1).max(1);
            let flags = if f.name == "cuMemHostAlloc" { w(2) } else { 0 };
            // SAFETY: the program's out-pointer (checked non-null) and size.
            let mirrored = if flags & DEVICEMAP != 0 { unsafe { shared::alloc_mirrored(w(0), len) } } else { None };
            if let Some(st) = mirrored {
                if st == SUCCESS {
                    // SAFETY: written just now.
                    let p = unsafe { *(w(0) as *const u64) };
                    keep(p, Pinned { len, flags, ours: true, mirrored: true, id: id() });
                }
                return Step::Done(st);
            }
            // Pages of its own (mirroring it later protects whole pages: `promote`).
            // SAFETY: an anonymous private mapping.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Step::Done(OUT_OF_MEMORY);
            }
            keep(p as u64, Pinned { len, flags, ours: true, mirrored: false, id: id() });
            // SAFETY: the program's out-pointer, checked non-null.
            unsafe { *(w(0) as *mut u64) = p as u64 };
            Step::Done(SUCCESS)
        }
        "cuMemFreeHost" => {
            let Some(a) = registry().get(&w(0)).copied().filter(|a| a.ours) else {
                return Step::Done(INVALID_VALUE);
            };
            drop_at(w(0));
            if a.mirrored && arena::contains(w(0)) {
                shared::free_mirrored(w(0));
            } else {
                if a.mirrored {
                    shared::remove(w(0));
                }
                // SAFETY: pages this module mapped.
                unsafe { libc::munmap(w(0) as *mut libc::c_void, a.len as usize) };
            }
            Step::Done(SUCCESS)
        }
        "cuMemHostRegister" => {
            if w(0) == 0 || w(1) == 0 {
                return Step::Done(INVALID_VALUE);
            }
            keep(w(0), Pinned { len: w(1), flags: w(2), ours: false, mirrored: false, id: id() });
            // Registered for the device: shared with the server from now on.
            if w(2) & DEVICEMAP != 0 && !promote(w(0)) {
                drop_at(w(0));
                return Step::Done(OUT_OF_MEMORY);
            }
            Step::Done(SUCCESS)
        }
        "cuMemHostUnregister" => {
            let Some(a) = registry().get(&w(0)).copied().filter(|a| !a.ours) else {
                return Step::Done(713); // CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
            };
            drop_at(w(0));
            if a.mirrored {
                // The program's pages, writable again.
                shared::remove(w(0));
            }
            Step::Done(SUCCESS)
        }
        _ => Step::Done(SUCCESS),
    }
}

/// `cuMemHostGetFlags`: the flags the memory was allocated or registered with.
pub(crate) fn flags(p: u64) -> Option<u64> {
    find(p).map(|(_, a)| a.flags)
}

/// Whether `p` lies in pinned memory of this process.
pub(crate) fn is_pinned(p: u64) -> bool {
    find(p).is_some()
}

/// Whether `p` lies in pinned memory mirrored on the server.
pub(crate) fn is_mirrored(p: u64) -> bool {
    find(p).is_some_and(|(_, a)| a.mirrored)
}

/// Mirrors every unmirrored pinned allocation a launch's captured arguments point into
/// (8-byte-aligned words of its parameter bytes): with unified addressing the device reads
/// pinned memory directly, so from the first launch given a pointer into it, it is shared with
/// the server as managed memory is ([`promote`]). `false` if one could not be mirrored.
pub(crate) fn mirror_reached(args: &[Value]) -> bool {
    // Every launch asks: without such memory, no lock and no scan.
    if MAPPED.load(std::sync::atomic::Ordering::Relaxed) == 0 {
        return true;
    }
    // Device addresses and scalars fall outside the bounds: the lock and the lookups are for
    // words that may point into such memory only.
    let (lo, hi) = (LOW.load(std::sync::atomic::Ordering::Relaxed), HIGH.load(std::sync::atomic::Ordering::Relaxed));
    let word = |c: &[u8]| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
    let near = |v: &u64| *v >= lo && *v < hi;
    let mut starts = Vec::new();
    for v in args {
        let b = match v {
            Value::KernelParams(kp) => &kp.bytes[..],
            Value::Bytes(b) => &b[..],
            _ => continue,
        };
        if !b.chunks_exact(8).map(word).any(|v| near(&v)) {
            continue;
        }
        let g = registry();
        for v in b.chunks_exact(8).map(word).filter(near) {
            if let Some((&s, _)) =
                g.range(..=v).next_back().filter(|(&s, a)| !a.mirrored && v < s.saturating_add(a.len))
            {
                starts.push(s);
            }
        }
    }
    starts.dedup();
    starts.into_iter().all(promote)
}

/// [`promote`] of the pinned allocation holding `p`.
pub(crate) fn promote_containing(p: u64) -> bool {
    find(p).is_some_and(|(start, _)| promote(start))
}

/// Shares the pinned allocation at `start` with the server from now on: its pages are
/// tracked as managed memory's are (`shared::adopt`) and the executor backs the range with
/// device memory at the same address (`gpulessHostMirror`). `false` if that is not possible.
pub(crate) fn promote(start: u64) -> bool {
    let Some(a) = registry().get(&start).copied() else { return false };
    if a.mirrored {
        return true;
    }
    if route::members() > 1 {
        // Which server's kernels would read it? Each would need its own mirror, kept
        // coherent with the others': not done (device-mapped host memory is, by address).
        return false;
    }
    if !shared::adopt(start, a.len) {
        return false;
    }
    if let Some(e) = registry().get_mut(&start) {
        e.mirrored = true;
    }
    MAPPED.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    MIRROR.get().is_some_and(|mirror| mirror(start, a.len))
}

/// Bytes the driver writes for pointer attribute `attr`.
pub(crate) fn attribute_size(attr: u64) -> usize {
    match attr {
        1 | 3 | 4 | 7 | 11 | 12 | 17 | 18 | 19 | 20 => 8,
        5 => 16, // CUDA_POINTER_ATTRIBUTE_P2P_TOKENS
        _ => 4,
    }
}

/// One attribute of `p` as the client knows it: `Some(Ok(value))`, `Some(Err(status))`, or
/// `None` when only the server's driver knows (arena memory's mapping facts).
fn attribute(attr: u64, p: u64) -> Option<Result<u64, u32>> {
    // Mirrored pinned memory lies in the arena but is host memory to the program.
    if arena::contains(p) && !find(p).is_some_and(|(_, a)| a.mirrored) {
        return match attr {
            2 => Some(Ok(u64::from(gpuless_analyzer::api::structs::MEMORYTYPE_DEVICE))),
            3 => Some(Ok(p)),
            // Managed memory: the host address is the device address.
            4 if shared::contains(p) => Some(Ok(p)),
            4 => Some(Err(INVALID_VALUE)),
            8 => Some(Ok(u64::from(shared::contains(p)))),
            // The device whose slice holds it.
            9 => Some(Ok(u64::from(route::device_of_address(p).unwrap_or(0)))),
            13 => Some(Ok(1)),
            _ => None,
        };
    }
    let Some((start, a)) = find(p) else { return Some(Err(INVALID_VALUE)) };
    Some(match attr {
        1 => Ok(primary_context()),
        2 => Ok(u64::from(gpuless_analyzer::api::structs::MEMORYTYPE_HOST)),
        3 | 4 => Ok(p),
        7 => Ok(a.id),
        8 | 9 => Ok(0),
        11 => Ok(start),
        12 => Ok(a.len),
        13 => Ok(1),
        _ => Err(INVALID_VALUE),
    })
}

/// `cuPointerGetAttribute(s)` answered here, or `None` when the server must answer.
///
/// # Safety
/// `raw` are the program's arguments; its out-pointers are valid for each attribute's type.
pub(crate) unsafe fn pointer_query(f: &ApiFunction, raw: &[u64]) -> Option<Step> {
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    let write = |out: u64, attr: u64, v: u64| {
        if out != 0 {
            let n = attribute_size(attr).min(8);
            // SAFETY: the program's value of this attribute's type.
            unsafe { std::ptr::copy_nonoverlapping(v.to_le_bytes().as_ptr(), out as *mut u8, n) };
        }
    };
    match f.name {
        "cuPointerGetAttribute" => match attribute(w(1), w(2))? {
            Ok(v) => {
                write(w(0), w(1), v);
                Some(Step::Done(SUCCESS))
            }
            Err(st) => Some(Step::Done(st)),
        },
        "cuPointerGetAttributes" => {
            let (n, attrs, data, p) = (w(0).min(64) as usize, w(1), w(2), w(3));
            if attrs == 0 || data == 0 {
                return Some(Step::Done(INVALID_VALUE));
            }
            // SAFETY: `n` attribute ids and as many value pointers (the program's arrays).
            let (ids, outs) = unsafe {
                (std::slice::from_raw_parts(attrs as *const u32, n), std::slice::from_raw_parts(data as *const u64, n))
            };
            let answers: Vec<Option<Result<u64, u32>>> = ids.iter().map(|&a| attribute(u64::from(a), p)).collect();
            if answers.iter().any(Option::is_none) {
                return None;
            }
            // Unlike the single query, an address the driver does not know is no error: its
            // attributes read as zero.
            for ((&a, &out), r) in ids.iter().zip(outs).zip(answers) {
                write(out, u64::from(a), r.and_then(Result::ok).unwrap_or(0));
            }
            Some(Step::Done(SUCCESS))
        }
        _ => Some(unsupported(f, "not a pointer query")),
    }
}

/// Writes the server's answer to a pointer query: per attribute asked, the number of bytes
/// its driver wrote and two words of value.
///
/// # Safety
/// As [`pointer_query`].
pub(crate) unsafe fn write_pointer_answer(f: &ApiFunction, raw: &[u64], values: &[u64]) {
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    let outs: Vec<u64> = if f.name == "cuPointerGetAttribute" {
        vec![w(0)]
    } else {
        let n = w(0).min(64) as usize;
        if w(2) == 0 {
            return;
        }
        // SAFETY: the program's `n` value pointers.
        unsafe { std::slice::from_raw_parts(w(2) as *const u64, n) }.to_vec()
    };
    // The attribute asked for each value, and the pointer.
    let (ids, p): (Vec<u64>, u64) = if f.name == "cuPointerGetAttribute" {
        (vec![w(1)], w(2))
    } else if w(1) != 0 {
        // SAFETY: the program's `n` attribute ids.
        let ids = unsafe { std::slice::from_raw_parts(w(1) as *const u32, outs.len()) };
        (ids.iter().map(|&a| u64::from(a)).collect(), w(3))
    } else {
        (Vec::new(), 0)
    };
    let managed = shared::contains(p);
    // The first device of the server that answered (the call's route).
    let first = route::first_of(route::current().member);
    for (k, (out, v)) in outs.into_iter().zip(values.chunks_exact(3)).enumerate() {
        let n = (v[0] as usize).min(16);
        if out == 0 || n == 0 {
            continue;
        }
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&v[1].to_le_bytes());
        b[8..].copy_from_slice(&v[2].to_le_bytes());
        // Managed memory is device memory on the server: what makes it managed is the client's.
        match ids.get(k) {
            Some(8) if managed => b[..8].copy_from_slice(&1u64.to_le_bytes()),
            Some(4) if managed => b[..8].copy_from_slice(&p.to_le_bytes()),
            // A server of a session across several numbers its devices from 0.
            Some(9) if first > 0 && n >= 4 => {
                let d = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                if d >= 0 {
                    b[..4].copy_from_slice(&(d + first as i32).to_le_bytes());
                }
            }
            _ => {}
        }
        // SAFETY: the program's value of the size the server's driver wrote.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), out as *mut u8, n) };
    }
}
