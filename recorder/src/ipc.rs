//! Device memory shared between processes under `gpuless record` (`cuIpcGetMemHandle`,
//! `cuIpcOpenMemHandle`, `cuIpcCloseMemHandle`): the arena's memory is VMM memory, on which the
//! driver's legacy IPC fails, so the recorder shares it itself — the recorder never changes
//! what the program it records can do.
//!
//! The exporting process exports the allocation's mapping (its arena chunk, or its own range:
//! the arena creates them exportable) as a POSIX descriptor and keeps it under a token; the
//! handle names the token (`gpuless_traces::protocol::share::IpcMemHandle`, as client mode's).
//! Its high 64 bits name the process: a thread of the exporter answers on the abstract Unix
//! socket `gpuless-ipc-<those bits>`, giving the descriptor (`SCM_RIGHTS`) to a process of the
//! same user that sends the whole token. The opening process imports the descriptor and maps it
//! in a range of its own arena; the pointer is the allocation's start in it. A stream-ordered
//! pool's pointers the same way (`cuMemPoolExportPointer` / `cuMemPoolImportPointer`: the arena
//! serves the pool's allocations): the pools themselves are the driver's, exported and imported
//! by it, and a pointer's export data names its pool by the identity (device and inode) of the
//! pool's exported descriptor, which the importing process sees on the descriptor it imports;
//! freeing an imported pointer unmaps it. Events pass through to the driver (its IPC events need
//! no arena). Client mode shares through the server instead (`remote/ipc.rs`).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys;
use gpuless_analyzer::api::ApiFunction;
use gpuless_traces::arena::{backing, Backing, CHUNK};
use gpuless_traces::protocol::share::{token, IpcMemHandle, IPC_HANDLE_BYTES};

use crate::arena;
use crate::driver::libcuda_symbol;

const INVALID_VALUE: u32 = 1;
const OUT_OF_MEMORY: u32 = 2;
/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
const POSIX_FD: sys::CUmemAllocationHandleType =
    sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;

type Retain = unsafe extern "C" fn(*mut sys::CUmemGenericAllocationHandle, *mut std::ffi::c_void) -> sys::CUresult;
type Export = unsafe extern "C" fn(
    *mut std::ffi::c_void,
    sys::CUmemGenericAllocationHandle,
    sys::CUmemAllocationHandleType,
    u64,
) -> sys::CUresult;
type Import = unsafe extern "C" fn(
    *mut sys::CUmemGenericAllocationHandle,
    *mut std::ffi::c_void,
    sys::CUmemAllocationHandleType,
) -> sys::CUresult;
type Map =
    unsafe extern "C" fn(sys::CUdeviceptr, usize, usize, sys::CUmemGenericAllocationHandle, u64) -> sys::CUresult;
type Unmap = unsafe extern "C" fn(sys::CUdeviceptr, usize) -> sys::CUresult;
type SetAccess = unsafe extern "C" fn(sys::CUdeviceptr, usize, *const sys::CUmemAccessDesc, usize) -> sys::CUresult;
type Release = unsafe extern "C" fn(sys::CUmemGenericAllocationHandle) -> sys::CUresult;
type Device = unsafe extern "C" fn(*mut sys::CUdevice) -> sys::CUresult;
type CtxSync = unsafe extern "C" fn() -> sys::CUresult;

/// The driver functions this needs, resolved when first used.
struct Fns {
    retain: Retain,
    export: Export,
    import: Import,
    map: Map,
    unmap: Unmap,
    set_access: SetAccess,
    release: Release,
    device: Device,
    sync: CtxSync,
}

fn fns() -> Option<&'static Fns> {
    static F: OnceLock<Option<Fns>> = OnceLock::new();
    F.get_or_init(|| {
        let get = |name: &str| {
            let p = libcuda_symbol(name);
            (!p.is_null()).then_some(p)
        };
        type P = *mut std::ffi::c_void;
        // SAFETY: libcuda's exports of these names have these C signatures.
        unsafe {
            Some(Fns {
                retain: std::mem::transmute::<P, Retain>(get("cuMemRetainAllocationHandle\0")?),
                export: std::mem::transmute::<P, Export>(get("cuMemExportToShareableHandle\0")?),
                import: std::mem::transmute::<P, Import>(get("cuMemImportFromShareableHandle\0")?),
                map: std::mem::transmute::<P, Map>(get("cuMemMap\0")?),
                unmap: std::mem::transmute::<P, Unmap>(get("cuMemUnmap\0")?),
                set_access: std::mem::transmute::<P, SetAccess>(get("cuMemSetAccess\0")?),
                release: std::mem::transmute::<P, Release>(get("cuMemRelease\0")?),
                device: std::mem::transmute::<P, Device>(get("cuCtxGetDevice\0")?),
                sync: std::mem::transmute::<P, CtxSync>(get("cuCtxSynchronize\0")?),
            })
        }
    })
    .as_ref()
}

/// A handle this process opened.
struct Opened {
    base: u64,
    len: u64,
    handle: sys::CUmemGenericAllocationHandle,
    count: u32,
    token: u128,
}

#[derive(Default)]
struct Books {
    /// Descriptors this process offers, by token.
    offers: HashMap<u128, OwnedFd>,
    /// Allocations exported: start → handle.
    exported: HashMap<u64, IpcMemHandle>,
    /// Handles opened: the pointer handed out → the mapping.
    opened: HashMap<u64, Opened>,
    /// Pools exported or imported (the driver's handles) → the identity of their descriptor.
    pools: HashMap<u64, u128>,
}

static BOOKS: Mutex<Option<Books>> = Mutex::new(None);

fn with<T>(f: impl FnOnce(&mut Books) -> T) -> T {
    let mut g = BOOKS.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(Books::default))
}

/// The name of the socket of the process whose tokens start with `process`.
fn socket_name(process: u64) -> String {
    format!("gpuless-ipc-{process:016x}")
}

/// This process's token prefix, its listener started on first use (`None`: no socket).
fn process() -> Option<u64> {
    static P: OnceLock<Option<u64>> = OnceLock::new();
    *P.get_or_init(|| {
        let p = (token() >> 64) as u64;
        let addr = SocketAddr::from_abstract_name(socket_name(p)).ok()?;
        let listener = UnixListener::bind_addr(&addr).ok()?;
        std::thread::Builder::new().name("gpuless-ipc".into()).spawn(move || serve(listener)).ok()?;
        Some(p)
    })
}

/// Answers requests for descriptors: a connection sends a token (16 bytes), gets one byte (1:
/// here it is, with the descriptor; 0: none) — only from a process of this user.
fn serve(listener: UnixListener) {
    for conn in listener.incoming() {
        let Ok(mut c) = conn else { continue };
        let mut t = [0u8; 16];
        if c.read_exact(&mut t).is_err() || !same_user(&c) {
            continue;
        }
        let fd = with(|b| b.offers.get(&u128::from_le_bytes(t)).and_then(|fd| fd.try_clone().ok()));
        match fd {
            Some(fd) => {
                let _ = gpuless_traces::protocol::shm::send_with_fd(c.as_raw_fd(), &[1], fd.as_raw_fd());
            }
            None => {
                let _ = c.write_all(&[0]);
            }
        }
    }
}

/// Whether the peer of `c` runs as this process's user.
fn same_user(c: &UnixStream) -> bool {
    let mut cred = libc::ucred { pid: 0, uid: u32::MAX, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: a valid socket and out-buffer of the option's size.
    let r = unsafe {
        libc::getsockopt(c.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, (&raw mut cred).cast(), &mut len)
    };
    // SAFETY: no arguments.
    r == 0 && cred.uid == unsafe { libc::geteuid() }
}

/// The descriptor another process offers under `t`.
fn take(t: u128) -> Option<OwnedFd> {
    let addr = SocketAddr::from_abstract_name(socket_name((t >> 64) as u64)).ok()?;
    let mut c = UnixStream::connect_addr(&addr).ok()?;
    c.write_all(&t.to_le_bytes()).ok()?;
    let mut b = [0u8; 1];
    let mut fds = std::collections::VecDeque::new();
    let n = gpuless_traces::protocol::shm::recv_with_fds(c.as_raw_fd(), &mut b, 0, &mut fds).ok()?;
    (n == 1 && b[0] == 1).then(|| fds.pop_front()).flatten()
}

/// The recorder's part of an IPC call under `gpuless record`: `Some(status)` where it shares
/// arena memory itself; `None` where the driver answers (a pointer outside the arena, a handle
/// the driver made, the events).
///
/// # Safety
/// `raw` are the program's arguments to `f`.
pub unsafe fn call(f: &ApiFunction, raw: &[u64]) -> Option<u32> {
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    // SAFETY (all arms): the program's arguments.
    unsafe {
        match f.name {
            "cuIpcGetMemHandle" => arena::allocation(w(1)).map(|(start, size)| get(w(0), start, size)),
            "cuIpcOpenMemHandle" => {
                let h = (w(1) != 0).then(|| handle(w(1))).flatten()?;
                Some(open(w(0), h))
            }
            "cuIpcCloseMemHandle" => close(w(0)),
            "cuMemPoolExportPointer" => {
                let (start, size) = arena::allocation(w(1))?;
                let pool = with(|b| b.pools.get(&arena::pool_of(start)?).copied()).unwrap_or(0);
                Some(get_in(w(0), start, size, pool))
            }
            "cuMemPoolImportPointer" => {
                let h = (w(2) != 0).then(|| handle(w(2))).flatten()?;
                let pool = with(|b| b.pools.get(&w(1)).copied());
                Some(if pool.is_some_and(|p| p == h.pool) { open(w(0), h) } else { INVALID_VALUE })
            }
            _ => None,
        }
    }
}

/// The 64 bytes at `at` as a handle of gpuless's, if they are one.
///
/// # Safety
/// `at` is the address of 64 readable bytes.
unsafe fn handle(at: u64) -> Option<IpcMemHandle> {
    // SAFETY: the caller's contract.
    let b = unsafe { std::slice::from_raw_parts(at as *const u8, IPC_HANDLE_BYTES) };
    IpcMemHandle::from_bytes(b)
}

/// `cuIpcGetMemHandle(handle*, dptr)` of the arena allocation `[start, start + size)`.
///
/// # Safety
/// `out` is null or the program's 64-byte handle.
unsafe fn get(out: u64, start: u64, size: u64) -> u32 {
    // SAFETY: the caller's contract.
    unsafe { get_in(out, start, size, 0) }
}

/// [`get`], naming the allocation's pool (`cuMemPoolExportPointer`; 0: none).
///
/// # Safety
/// As [`get`].
unsafe fn get_in(out: u64, start: u64, size: u64, pool: u128) -> u32 {
    if out == 0 {
        return INVALID_VALUE;
    }
    let (Some(fns), Some(p)) = (fns(), process()) else { return OUT_OF_MEMORY };
    let h = match with(|b| b.exported.get(&start).copied()) {
        Some(h) => IpcMemHandle { pool, ..h },
        None => {
            let (base, len) = match backing(start, size) {
                Backing::Shared { chunk } => (chunk, CHUNK),
                Backing::Own { addr, len } => (addr, len),
            };
            let mut mem: sys::CUmemGenericAllocationHandle = 0;
            let mut fd: std::ffi::c_int = -1;
            // SAFETY: an address the arena mapped; valid out-pointers.
            unsafe {
                let r = (fns.retain)(&mut mem, start as *mut std::ffi::c_void);
                if r != sys::CUresult::CUDA_SUCCESS {
                    return r as u32;
                }
                let r = (fns.export)((&raw mut fd).cast(), mem, POSIX_FD, 0);
                (fns.release)(mem);
                if r != sys::CUresult::CUDA_SUCCESS {
                    return r as u32;
                }
            }
            let t = (u128::from(p) << 64) | (token() & u128::from(u64::MAX));
            let h = IpcMemHandle { token: t, len, offset: start - base, size, pool };
            // SAFETY: the driver's new descriptor.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            with(|b| {
                b.offers.insert(t, fd);
                b.exported.insert(start, h);
            });
            h
        }
    };
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(h.to_bytes().as_ptr(), out as *mut u8, IPC_HANDLE_BYTES) };
    0
}

/// `cuIpcOpenMemHandle(dptr*, handle, flags)` of a handle of gpuless's.
///
/// # Safety
/// `out` is null or the program's out-pointer.
unsafe fn open(out: u64, h: IpcMemHandle) -> u32 {
    if out == 0 || h.len % CHUNK != 0 {
        return INVALID_VALUE;
    }
    let again = with(|b| {
        let o = b.opened.values_mut().find(|o| o.token == h.token)?;
        o.count += 1;
        Some(o.base + h.offset)
    });
    let ptr = match again {
        Some(p) => p,
        None => {
            let Some(fns) = fns() else { return OUT_OF_MEMORY };
            // A token no process of this user offers: the driver's answer to a handle it does
            // not know.
            let Some(fd) = take(h.token) else { return INVALID_VALUE };
            let Some(base) = arena::reserve_range(h.len) else { return OUT_OF_MEMORY };
            let mut mem: sys::CUmemGenericAllocationHandle = 0;
            let mut dev: sys::CUdevice = 0;
            // SAFETY: the descriptor another process exported; a range of our arena, unmapped.
            let r = unsafe {
                let mut r = (fns.import)(&mut mem, fd.as_raw_fd() as usize as *mut std::ffi::c_void, POSIX_FD);
                if r == sys::CUresult::CUDA_SUCCESS {
                    r = (fns.map)(base, h.len as usize, 0, mem, 0);
                    if r != sys::CUresult::CUDA_SUCCESS {
                        (fns.release)(mem);
                    }
                }
                if r == sys::CUresult::CUDA_SUCCESS {
                    (fns.device)(&mut dev);
                    let desc = sys::CUmemAccessDesc {
                        location: sys::CUmemLocation {
                            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                            id: dev,
                        },
                        flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
                    };
                    r = (fns.set_access)(base, h.len as usize, &desc, 1);
                    if r != sys::CUresult::CUDA_SUCCESS {
                        (fns.unmap)(base, h.len as usize);
                        (fns.release)(mem);
                    }
                }
                r
            };
            if r != sys::CUresult::CUDA_SUCCESS {
                arena::free_range(base, h.len);
                return r as u32;
            }
            let p = base + h.offset;
            with(|b| b.opened.insert(p, Opened { base, len: h.len, handle: mem, count: 1, token: h.token }));
            p
        }
    };
    // SAFETY: the caller's contract.
    unsafe { *(out as *mut u64) = ptr };
    0
}

/// `cuIpcCloseMemHandle(dptr)` of a pointer [`open`] handed out (`None`: not one).
fn close(ptr: u64) -> Option<u32> {
    let last = with(|b| {
        let o = b.opened.get_mut(&ptr)?;
        o.count -= 1;
        if o.count > 0 {
            return Some(None);
        }
        b.opened.remove(&ptr).map(Some)
    })?;
    let Some(o) = last else { return Some(0) };
    let fns = fns()?;
    // SAFETY: the mapping `open` made; the program's work on it is its own to have finished
    // (natively the driver synchronizes here too).
    unsafe {
        (fns.sync)();
        (fns.unmap)(o.base, o.len as usize);
        (fns.release)(o.handle);
    }
    arena::free_range(o.base, o.len);
    Some(0)
}

/// The identity of descriptor `fd`'s file (device and inode), the same in every process it
/// was passed to.
fn identity(fd: i32) -> Option<u128> {
    // SAFETY: all-zero is a valid `stat`; fstat writes it or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer.
    (fd >= 0 && unsafe { libc::fstat(fd, &mut st) } == 0).then(|| (u128::from(st.st_dev) << 64) | u128::from(st.st_ino))
}

/// After the driver exported or imported a pool as a POSIX descriptor: the pool is known by
/// the descriptor's identity (`cuMemPoolExportToShareableHandle(fd*, pool, type, flags)`,
/// `cuMemPoolImportFromShareableHandle(pool*, fd, type, flags)`).
///
/// # Safety
/// `raw` are the program's arguments to `f`, which succeeded.
pub unsafe fn after(f: &ApiFunction, raw: &[u64]) {
    let w = |i: usize| raw.get(i).copied().unwrap_or(0);
    if w(2) != 1 {
        // Not CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.
        return;
    }
    let (pool, fd) = match f.name {
        // SAFETY: the program's out-pointer, written by the export.
        "cuMemPoolExportToShareableHandle" if w(0) != 0 => (w(1), unsafe { *(w(0) as *const i32) }),
        // SAFETY: the program's out-pointer, written by the import.
        "cuMemPoolImportFromShareableHandle" if w(0) != 0 => (unsafe { *(w(0) as *const u64) }, w(1) as i32),
        _ => return,
    };
    if let Some(id) = identity(fd) {
        with(|b| b.pools.insert(pool, id));
    }
}

/// A free of a pointer [`open`] handed out (`cuMemFree`, `cuMemFreeAsync` of an imported pool
/// pointer): unmapped; `None` for every other pointer.
pub fn freed(ptr: u64) -> Option<u32> {
    if BOOKS.lock().ok()?.as_ref()?.opened.is_empty() {
        return None;
    }
    close(ptr)
}
