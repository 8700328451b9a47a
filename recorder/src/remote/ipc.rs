//! Memory and events shared between the program's processes (`cuIpc*`, and descriptors of
//! `cuMemExportToShareableHandle` that another process imports): each process of a program is a
//! session of its own, with an executor of its own, so the server brokers what the driver would
//! share between them (`gpuless_traces::protocol::share`).
//!
//! - `cuIpcGetMemHandle`: the allocation's mapping (its arena chunk, or its own range) is
//!   offered under a token this process draws; the handle names the token, the mapping's length
//!   and the allocation's place in it ([`IpcMemHandle`]). The same allocation gives the same
//!   handle again.
//! - `cuIpcOpenMemHandle`: a range of this process's arena is reserved and the executor maps the
//!   offered memory there; the pointer is the allocation's start in it. Opening a handle again
//!   gives the same pointer (counted); `cuIpcCloseMemHandle` unmaps at the last close.
//! - A POSIX descriptor exported from a physical allocation is a memfd of the client's holding
//!   the same kind of handle, offered when exported; a process that receives it imports the
//!   token's memory.
//! - Stream-ordered pools shared (`cuMemPoolExportToShareableHandle`, `cuMemPoolExportPointer`
//!   and their imports): a pool's descriptor is a memfd naming the pool's token; a pointer's
//!   export data is a memory handle as above that also names its pool, and its import (into
//!   the imported pool only) maps it as `cuIpcOpenMemHandle` does; freeing the imported pointer
//!   unmaps it. An imported pool exists in this client only (its access is read-write).
//! - `cuIpcGetEventHandle` / `cuIpcOpenEventHandle`: an event other processes see is a slot of
//!   host memory the executors share (the driver's own handles do not open in another confined
//!   executor: `replay/share.rs`). A record of or a wait on such an event reaches the executor
//!   before the program's call returns ([`after`]), as it would be in the stream natively when
//!   another process looks.
//!
//! Every step waits for the server's answer: what another process may use must exist when the
//! call that made it returns.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use gpuless_analyzer::api::{ApiFunction, SyncClass};
use gpuless_traces::arena::{backing, Backing, CHUNK};
use gpuless_traces::protocol::share::{token, IpcMemHandle, ShareAnswer, ShareRequest, IPC_HANDLE_BYTES, SHARE};

use super::{handles, session, vmm};
use crate::arena;

const INVALID_VALUE: u32 = 1;
const OUT_OF_MEMORY: u32 = 2;
const INVALID_HANDLE: u32 = 400;
/// `CUDA_ERROR_UNKNOWN`: the server's answer did not decode.
const UNKNOWN: u32 = 999;

/// A handle this process opened.
#[derive(Clone, Copy)]
struct Opened {
    /// The mapping's start and length in the arena.
    base: u64,
    len: u64,
    /// The client's handle of the imported memory.
    handle: u64,
    /// Opens not closed yet.
    count: u32,
    token: u128,
}

#[derive(Default)]
struct Books {
    /// Allocations exported: allocation start → its handle.
    exported: HashMap<u64, IpcMemHandle>,
    /// Handles opened: the pointer handed out → what it maps.
    opened: HashMap<u64, Opened>,
    /// The pointer a token was opened at.
    by_token: HashMap<u128, u64>,
    /// Events other processes see (exported or opened).
    events: HashSet<u64>,
    /// Pools exported: pool → token.
    pools: HashMap<u64, u128>,
    /// Pools imported: the client's handle → the exporter's token.
    imported_pools: HashMap<u64, u128>,
    /// Allocations made from a pool the program created: start → pool.
    from_pool: HashMap<u64, u64>,
}

static BOOKS: Mutex<Option<Books>> = Mutex::new(None);

/// Whether the program exported an allocation, and whether it shares an event: until then
/// [`after`] costs a call nothing.
static EXPORTED: AtomicBool = AtomicBool::new(false);
static SHARED_EVENTS: AtomicBool = AtomicBool::new(false);
/// Whether the program imported a pool or opened memory: until then [`before`] costs nothing.
static IMPORTED: AtomicBool = AtomicBool::new(false);

/// The first bytes of a pool's descriptor's contents (then the pool's token).
const POOL_MAGIC: &[u8; 8] = b"GLIPCPOL";
/// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`.
const READWRITE: u32 = 3;

fn with<T>(f: impl FnOnce(&mut Books) -> T) -> T {
    let mut g = BOOKS.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(Books::default))
}

/// Sends `req` and waits for its answer: the status, and the bytes it returns.
fn ask(f: &ApiFunction, req: ShareRequest) -> Result<Vec<u8>, u32> {
    let out = session::ask(f, SHARE, req.to_args())?;
    let a = ShareAnswer::decode(&out).map_err(|_| UNKNOWN)?;
    if a.status != 0 {
        return Err(a.status);
    }
    Ok(a.bytes)
}

/// The client's part of a sharing call (`=local(share)` functions other than the in-process
/// import): done here with the server's answers.
///
/// # Safety
/// `raw` are the program's arguments to `f`.
pub(crate) unsafe fn call(f: &ApiFunction, raw: &[u64]) -> u32 {
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    // SAFETY (all arms): the program's arguments.
    unsafe {
        match f.name {
            "cuIpcGetMemHandle" => get_mem(f, w(0), w(1), 0),
            "cuIpcOpenMemHandle" => open_mem(f, w(0), w(1), None),
            "cuIpcCloseMemHandle" => close_mem(f, w(0)),
            "cuIpcGetEventHandle" => get_event(f, w(0), w(1)),
            "cuIpcOpenEventHandle" => open_event(f, w(0), w(1)),
            "cuMemExportToShareableHandle" => export(f, w(0), w(1), w(2)),
            "cuMemImportFromShareableHandle" => import(f, w(0), w(1), w(2)),
            "cuMemPoolExportToShareableHandle" => export_pool(w(0), w(1), w(2)),
            "cuMemPoolImportFromShareableHandle" => import_pool(w(0), w(1), w(2)),
            "cuMemPoolExportPointer" => {
                let pool = with(|b| {
                    let start = arena::allocation(w(1)).map(|(s, _)| s)?;
                    let p = *b.from_pool.get(&start)?;
                    Some(*b.pools.entry(p).or_insert_with(token))
                });
                get_mem(f, w(0), w(1), pool.unwrap_or(0))
            }
            "cuMemPoolImportPointer" => match with(|b| b.imported_pools.get(&w(1)).copied()) {
                Some(pool) => open_mem(f, w(0), w(2), Some(pool)),
                None => INVALID_VALUE,
            },
            _ => INVALID_VALUE,
        }
    }
}

/// Reads the 64 bytes of a handle the program passed by value (its copy's address).
///
/// # Safety
/// `at` is null or the address of 64 readable bytes.
unsafe fn handle_bytes(at: u64) -> Option<[u8; IPC_HANDLE_BYTES]> {
    if at == 0 {
        return None;
    }
    let mut b = [0u8; IPC_HANDLE_BYTES];
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(at as *const u8, b.as_mut_ptr(), IPC_HANDLE_BYTES) };
    Some(b)
}

/// `cuIpcGetMemHandle(handle*, dptr)` (and `cuMemPoolExportPointer(data*, ptr)`: `pool` the
/// pool's token).
///
/// # Safety
/// `out` is null or the program's 64-byte handle.
unsafe fn get_mem(f: &ApiFunction, out: u64, dptr: u64, pool: u128) -> u32 {
    let Some((start, size)) = arena::allocation(dptr) else { return INVALID_VALUE };
    if out == 0 {
        return INVALID_VALUE;
    }
    let known = with(|b| b.exported.get(&start).copied());
    let h = match known {
        Some(h) => IpcMemHandle { pool, ..h },
        None => {
            let (base, len) = match backing(start, size) {
                Backing::Shared { chunk } => (chunk, CHUNK),
                Backing::Own { addr, len } => (addr, len),
            };
            let h = IpcMemHandle { token: token(), len, offset: start - base, size, pool };
            if let Err(st) = ask(f, ShareRequest::OfferMemory { token: h.token, address: start }) {
                return st;
            }
            with(|b| b.exported.insert(start, h));
            EXPORTED.store(true, Ordering::Relaxed);
            h
        }
    };
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(h.to_bytes().as_ptr(), out as *mut u8, IPC_HANDLE_BYTES) };
    0
}

/// The allocation at `ptr` was freed: a later one there is exported anew.
fn freed(ptr: u64) {
    with(|b| {
        b.exported.remove(&ptr);
        b.from_pool.remove(&ptr);
    });
}

/// `cuIpcOpenMemHandle(dptr*, handle, flags)` (and `cuMemPoolImportPointer(ptr*, pool,
/// data*)`: `pool` the imported pool's token, which the data must name).
///
/// # Safety
/// `out` is null or the program's out-pointer; `at` the address of the handle's copy.
unsafe fn open_mem(f: &ApiFunction, out: u64, at: u64, pool: Option<u128>) -> u32 {
    // SAFETY: the caller's contract.
    let Some(h) = (unsafe { handle_bytes(at) }).and_then(|b| IpcMemHandle::from_bytes(&b)) else {
        return INVALID_VALUE;
    };
    if out == 0 || pool.is_some_and(|p| p != h.pool) {
        return INVALID_VALUE;
    }
    let again = with(|b| {
        let p = *b.by_token.get(&h.token)?;
        b.opened.get_mut(&p)?.count += 1;
        Some(p)
    });
    let ptr = match again {
        Some(p) => p,
        None => {
            if h.len % CHUNK != 0 {
                return INVALID_VALUE;
            }
            let Some(base) = arena::reserve_range(h.len) else { return OUT_OF_MEMORY };
            let handle = handles::new_handle();
            let req = ShareRequest::MapMemory { token: h.token, handle, address: base, len: h.len };
            if let Err(st) = ask(f, req) {
                arena::free_range(base, h.len);
                return st;
            }
            vmm::adopt(handle, h.len, base);
            let p = base + h.offset;
            with(|b| {
                b.opened.insert(p, Opened { base, len: h.len, handle, count: 1, token: h.token });
                b.by_token.insert(h.token, p);
            });
            IMPORTED.store(true, Ordering::Relaxed);
            p
        }
    };
    // SAFETY: the caller's contract.
    unsafe { *(out as *mut u64) = ptr };
    0
}

/// `cuIpcCloseMemHandle(dptr)`.
fn close_mem(f: &ApiFunction, ptr: u64) -> u32 {
    let last = with(|b| {
        let o = b.opened.get_mut(&ptr)?;
        o.count -= 1;
        if o.count > 0 {
            return Some(None);
        }
        let o = b.opened.remove(&ptr)?;
        b.by_token.remove(&o.token);
        Some(Some(o))
    });
    let o = match last {
        None => return INVALID_VALUE,
        Some(None) => return 0,
        Some(Some(o)) => o,
    };
    vmm::unmap(o.base, o.len);
    vmm::release(o.handle);
    let st = ask(f, ShareRequest::Unmap { handle: o.handle, address: o.base, len: o.len }).err().unwrap_or(0);
    arena::free_range(o.base, o.len);
    st
}

/// `cuIpcGetEventHandle(handle*, event)`.
///
/// # Safety
/// `out` is null or the program's 64-byte handle.
unsafe fn get_event(f: &ApiFunction, out: u64, event: u64) -> u32 {
    if out == 0 {
        return INVALID_VALUE;
    }
    let bytes = match ask(f, ShareRequest::EventHandle { event }) {
        Ok(b) if b.len() == IPC_HANDLE_BYTES => b,
        Ok(_) => return UNKNOWN,
        Err(st) => return st,
    };
    with(|b| b.events.insert(event));
    SHARED_EVENTS.store(true, Ordering::Relaxed);
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), out as *mut u8, IPC_HANDLE_BYTES) };
    0
}

/// `cuIpcOpenEventHandle(event*, handle)`.
///
/// # Safety
/// `out` is null or the program's out-pointer; `at` the address of the handle's copy.
unsafe fn open_event(f: &ApiFunction, out: u64, at: u64) -> u32 {
    // SAFETY: the caller's contract.
    let Some(bytes) = (unsafe { handle_bytes(at) }) else { return INVALID_VALUE };
    if out == 0 {
        return INVALID_VALUE;
    }
    let event = handles::new_handle();
    if let Err(st) = ask(f, ShareRequest::OpenEvent { event, handle: bytes.to_vec() }) {
        return st;
    }
    with(|b| b.events.insert(event));
    SHARED_EVENTS.store(true, Ordering::Relaxed);
    // SAFETY: the caller's contract.
    unsafe { *(out as *mut u64) = event };
    0
}

/// Before the client's part of a call: what concerns a pool imported or memory opened here —
/// its access, its destruction, the free of a pointer imported from it — is answered here
/// (the server knows none of them); `None` for every other call.
pub(crate) fn before(f: &ApiFunction, raw: &[u64]) -> Option<u32> {
    if !IMPORTED.load(Ordering::Relaxed) {
        return None;
    }
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    let imported = |p: u64| with(|b| b.imported_pools.contains_key(&p));
    match f.name {
        "cuMemPoolGetAccess" if imported(w(1)) => {
            if w(0) == 0 {
                return Some(INVALID_VALUE);
            }
            // SAFETY: the program's out-pointer for the flags.
            unsafe { *(w(0) as *mut u32) = READWRITE };
            Some(0)
        }
        // Read-write is what an imported pool has; other access is not served.
        "cuMemPoolSetAccess" if imported(w(0)) => {
            let mut descs = (0..w(2)).map(|i| w(1) + i * 12 + 8);
            // SAFETY: the program's `count` access descriptors (12 bytes; flags at byte 8).
            let all_rw =
                w(1) != 0 && descs.all(|at| unsafe { std::ptr::read_unaligned(at as *const u32) } == READWRITE);
            Some(if all_rw { 0 } else { super::step::refused(f, "an imported pool's access is read-write only") })
        }
        "cuMemPoolDestroy" if imported(w(0)) => {
            with(|b| b.imported_pools.remove(&w(0)));
            Some(0)
        }
        // A pointer imported from a pool, freed (its stream's work first: the executor waits).
        "cuMemFree" | "cuMemFreeAsync" if with(|b| b.opened.contains_key(&w(0))) => Some(close_mem(f, w(0))),
        _ => None,
    }
}

/// After a call: a record of or a wait on an event other processes see reaches the executor
/// before the call returns (`status` is the call's; an error of the wait is the call's then);
/// a freed allocation is no longer exported; an allocation from a pool is noted.
pub(crate) fn after(f: &ApiFunction, raw: &[u64], status: u32) -> u32 {
    // The class first: this runs after every call.
    if status == 0 && f.sync == SyncClass::AllocatesDevice && f.name == "cuMemAllocFromPoolAsync" {
        // SAFETY: the program's out-pointer, written by the allocation that succeeded.
        let start = raw.first().filter(|&&p| p != 0).map(|&p| unsafe { *(p as *const u64) });
        if let (Some(start), Some(&pool)) = (start, raw.get(2)) {
            with(|b| b.from_pool.insert(start, pool));
        }
    }
    if EXPORTED.load(Ordering::Relaxed) && status == 0 && matches!(f.name, "cuMemFree" | "cuMemFreeAsync") {
        freed(raw.first().copied().unwrap_or(0));
    }
    if !SHARED_EVENTS.load(Ordering::Relaxed) {
        return status;
    }
    let event = match f.name {
        "cuEventRecord" | "cuEventRecordWithFlags" => raw.first(),
        "cuStreamWaitEvent" => raw.get(1),
        _ => return status,
    };
    let shared = event.is_some_and(|e| with(|b| b.events.contains(e)));
    if status != 0 || !shared {
        return status;
    }
    ask(f, ShareRequest::Barrier).err().unwrap_or(0)
}

/// `cuMemExportToShareableHandle(shareable*, handle, type, flags)` of a POSIX descriptor: the
/// client's descriptor (`vmm.rs`) holds a handle of the allocation, offered to other processes.
///
/// # Safety
/// `out` is null or the program's `int` out-pointer.
unsafe fn export(f: &ApiFunction, out: u64, h: u64, kind: u64) -> u32 {
    let Some(size) = vmm::size_of(h) else { return INVALID_HANDLE };
    let handle = IpcMemHandle { token: token(), len: size, offset: 0, size, pool: 0 };
    // SAFETY: the caller's contract.
    let st = unsafe { vmm::export(f, out, h, kind, &handle.to_bytes()) };
    if st != 0 {
        return st;
    }
    match ask(f, ShareRequest::OfferHandle { token: handle.token, handle: h }) {
        Ok(_) => 0,
        Err(st) => {
            // SAFETY: the descriptor just written.
            unsafe { libc::close(*(out as *const i32)) };
            st
        }
    }
}

/// `cuMemImportFromShareableHandle(handle*, osHandle, type)` of a descriptor another process
/// exported (one of this process's is imported in `trip.rs`).
///
/// # Safety
/// `out` is null or the program's handle out-pointer.
unsafe fn import(f: &ApiFunction, out: u64, os_handle: u64, kind: u64) -> u32 {
    if kind != vmm::POSIX_FD {
        return INVALID_VALUE;
    }
    let mut b = [0u8; IPC_HANDLE_BYTES];
    // SAFETY: a valid buffer; the descriptor is the program's.
    let n = unsafe { libc::pread(os_handle as i32, b.as_mut_ptr().cast(), b.len(), 0) };
    let Some(h) = (n == IPC_HANDLE_BYTES as isize).then(|| IpcMemHandle::from_bytes(&b)).flatten() else {
        return INVALID_VALUE;
    };
    if out == 0 {
        return INVALID_VALUE;
    }
    let handle = handles::new_handle();
    if let Err(st) = ask(f, ShareRequest::TakeHandle { token: h.token, handle }) {
        return st;
    }
    vmm::adopt(handle, h.size, 0);
    // SAFETY: the caller's contract.
    unsafe { *(out as *mut u64) = handle };
    0
}

/// `cuMemPoolExportToShareableHandle(handle*, pool, type, flags)`: a memfd naming the pool's
/// token (a POSIX descriptor).
///
/// # Safety
/// `out` is null or the program's `int` out-pointer.
unsafe fn export_pool(out: u64, pool: u64, kind: u64) -> u32 {
    // A pool the program created (a default pool has no shareable handle type, as natively).
    if out == 0 || kind != vmm::POSIX_FD || !handles::is_client_handle(pool) {
        return INVALID_VALUE;
    }
    let t = with(|b| *b.pools.entry(pool).or_insert_with(token));
    let mut contents = [0u8; 24];
    contents[..8].copy_from_slice(POOL_MAGIC);
    contents[8..].copy_from_slice(&t.to_le_bytes());
    // SAFETY: a NUL-terminated name; the descriptor is the program's to close.
    let fd = unsafe { libc::memfd_create(c"gpuless-mempool".as_ptr(), libc::MFD_CLOEXEC) };
    // SAFETY: our descriptor and a valid buffer.
    if fd < 0 || unsafe { libc::write(fd, contents.as_ptr().cast(), contents.len()) } != contents.len() as isize {
        return OUT_OF_MEMORY;
    }
    // SAFETY: the caller's contract.
    unsafe { *(out as *mut i32) = fd };
    0
}

/// `cuMemPoolImportFromShareableHandle(pool*, handle, type, flags)`: a pool of this client's
/// standing for the exporter's.
///
/// # Safety
/// `out` is null or the program's out-pointer.
unsafe fn import_pool(out: u64, fd: u64, kind: u64) -> u32 {
    if out == 0 || kind != vmm::POSIX_FD {
        return INVALID_VALUE;
    }
    let mut b = [0u8; 24];
    // SAFETY: a valid buffer; the descriptor is the program's.
    let n = unsafe { libc::pread(fd as i32, b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize || &b[..8] != POOL_MAGIC {
        return INVALID_VALUE;
    }
    let t = u128::from_le_bytes(b[8..24].try_into().unwrap_or([0; 16]));
    let pool = handles::new_handle();
    with(|b| b.imported_pools.insert(pool, t));
    IMPORTED.store(true, Ordering::Relaxed);
    // SAFETY: the caller's contract.
    unsafe { *(out as *mut u64) = pool };
    0
}
