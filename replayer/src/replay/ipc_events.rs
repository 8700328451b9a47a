//! Events a program's processes share (`cuIpcGetEventHandle` / `cuIpcOpenEventHandle` through
//! the client). The driver's own IPC event handles do not open in another executor (each is
//! confined, with a private `/dev/shm`: measured, `cudaErrorMapBufferObjectFailed`), so a shared
//! event is a slot of a page of host memory the executors share — a memfd brokered by the server
//! like exported device memory ([`super::share`]), registered with the driver as mapped memory:
//!
//! - slot word 0 counts the records issued (by any process), word 1 the records completed;
//! - a record of the event on a stream (`cuEventRecord`) takes the next count and has the
//!   stream write it to word 1 once the work before it is done (`cuStreamWriteValue64`);
//! - a wait on a stream (`cuStreamWaitEvent`) has the stream wait until word 1 reaches the
//!   count issued when the wait is made (`cuStreamWaitValue64`, greater or equal);
//! - a synchronization or query on the host compares the two words.
//!
//! Each process also keeps a driver event of its own under the client's handle (for what else
//! a program does with it: destroy, and the records and waits of its own process).
//! What differs from the driver: records made by several processes at once may complete out of
//! order, and a wait is then satisfied by the later count's completion (the program's own
//! ordering between processes, which IPC events require anyway, avoids it).

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cudarc::driver::sys;
use gpuless_traces::protocol::share::{token, IpcEventHandle};

use super::share::Broker;

/// Bytes of a page, and of a slot.
const PAGE_BYTES: usize = 4096;
const SLOT_BYTES: usize = 16;
const SLOTS: u32 = (PAGE_BYTES / SLOT_BYTES) as u32;
/// `CUDA_ERROR_NOT_READY`, `CUDA_ERROR_INVALID_VALUE`, `CUDA_ERROR_OUT_OF_MEMORY`.
const NOT_READY: u32 = 600;
const INVALID_VALUE: u32 = 1;
const OUT_OF_MEMORY: u32 = 2;

/// A page of host memory shared with other executors, mapped here and registered with the
/// driver.
struct Page {
    host: *mut u8,
    dev: sys::CUdeviceptr,
    fd: OwnedFd,
}

// SAFETY: the mapping is shared memory, used through atomics only; the pointers stay valid
// until the page is dropped.
unsafe impl Send for Page {}
unsafe impl Sync for Page {}

impl Page {
    /// Maps `fd` (a memfd of [`PAGE_BYTES`]) and registers it; `Err`: the driver's status.
    fn map(fd: OwnedFd) -> Result<Page, u32> {
        // SAFETY: a shared mapping of a descriptor we own; registered with a current context.
        unsafe {
            let host = libc::mmap(
                std::ptr::null_mut(),
                PAGE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            );
            if host == libc::MAP_FAILED {
                return Err(OUT_OF_MEMORY);
            }
            let flags = sys::CU_MEMHOSTREGISTER_DEVICEMAP | sys::CU_MEMHOSTREGISTER_PORTABLE;
            let r = sys::cuMemHostRegister_v2(host, PAGE_BYTES, flags);
            let mut dev = 0;
            let r =
                if r == sys::CUresult::CUDA_SUCCESS { sys::cuMemHostGetDevicePointer_v2(&mut dev, host, 0) } else { r };
            if r != sys::CUresult::CUDA_SUCCESS {
                libc::munmap(host, PAGE_BYTES);
                return Err(r as u32);
            }
            Ok(Page { host: host.cast(), dev, fd })
        }
    }

    /// A new page of this executor's, zeroed.
    fn create() -> Result<Page, u32> {
        // SAFETY: a NUL-terminated name; the descriptor is ours.
        let raw = unsafe { libc::memfd_create(c"gpuless-ipc-events".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(OUT_OF_MEMORY);
        }
        // SAFETY: just created, owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: our descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), PAGE_BYTES as libc::off_t) } != 0 {
            return Err(OUT_OF_MEMORY);
        }
        Page::map(fd)
    }

    /// Word `w` (0: issued, 1: completed) of `slot`.
    fn word(&self, slot: u32, w: usize) -> &AtomicU64 {
        let at = slot as usize * SLOT_BYTES + w * 8;
        // SAFETY: inside the mapping, 8-byte aligned; shared memory is only used atomically.
        unsafe { &*(self.host.add(at) as *const AtomicU64) }
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        // SAFETY: registered and mapped by `map`; the work that used it is done (the session's end).
        unsafe {
            sys::cuMemHostUnregister(self.host.cast());
            libc::munmap(self.host.cast(), PAGE_BYTES);
        }
    }
}

/// One shared event: its page and slot, and its token (for its handle).
#[derive(Clone)]
struct Shared {
    page: Arc<Page>,
    token: u128,
    slot: u32,
}

/// A session's shared events.
#[derive(Default)]
pub struct IpcEvents {
    /// This executor's pages, the last one filling, by token.
    own: Vec<(u128, Arc<Page>)>,
    /// The next free slot of the last own page.
    next: u32,
    /// Other executors' pages opened here.
    opened: HashMap<u128, Arc<Page>>,
    /// The client's events that are shared.
    events: HashMap<u64, Shared>,
    /// A stream of the executor's own, on which an event's state when it is first exported is
    /// carried into its slot.
    stream: Option<usize>,
}

impl Drop for IpcEvents {
    fn drop(&mut self) {
        if let Some(s) = self.stream.take() {
            // SAFETY: created by `export`, used by nothing else.
            unsafe { sys::cuStreamDestroy_v2(s as sys::CUstream) };
        }
    }
}

impl IpcEvents {
    /// The handle of the client's `event`, the driver's `live` (made shared now, in a slot of
    /// this executor's: what was recorded of it before counts as the slot's first record).
    ///
    /// # Safety
    /// `live` is the client's event, of the current context.
    pub(crate) unsafe fn export(
        &mut self,
        broker: &dyn Broker,
        event: u64,
        live: sys::CUevent,
    ) -> Result<IpcEventHandle, u32> {
        if let Some(s) = self.events.get(&event) {
            return Ok(IpcEventHandle { token: s.token, slot: s.slot });
        }
        if self.own.is_empty() || self.next == SLOTS {
            let page = Page::create()?;
            let t = token();
            broker.offer(t, &page.fd).map_err(|e| {
                eprintln!("gpuless executor: a shared event page could not be offered: {e}");
                OUT_OF_MEMORY
            })?;
            self.own.push((t, Arc::new(page)));
            self.next = 0;
        }
        let Some((t, page)) = self.own.last() else { return Err(OUT_OF_MEMORY) };
        let s = Shared { page: page.clone(), token: *t, slot: self.next };
        self.next += 1;
        let h = IpcEventHandle { token: s.token, slot: s.slot };
        // The event's state now: a record issued, completed when the event is.
        let stream = match self.stream {
            Some(st) => st as sys::CUstream,
            None => {
                let mut st: sys::CUstream = std::ptr::null_mut();
                let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
                // SAFETY: a valid out-pointer; the caller's context is current.
                let r = unsafe { sys::cuStreamCreate(&mut st, flags) };
                if r != sys::CUresult::CUDA_SUCCESS {
                    return Err(r as u32);
                }
                self.stream = Some(st as usize);
                st
            }
        };
        self.events.insert(event, s);
        // SAFETY: the caller's event; our stream.
        let r = unsafe { sys::cuStreamWaitEvent(stream, live, 0) };
        // SAFETY: as above.
        let r = if r == sys::CUresult::CUDA_SUCCESS { unsafe { self.recorded(event, stream) } } else { r };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(r as u32);
        }
        Ok(h)
    }

    /// Opens `h` (another session's event, or this one's) as the client's `event`.
    pub(crate) fn open(&mut self, broker: &dyn Broker, event: u64, h: IpcEventHandle) -> Result<(), u32> {
        if h.slot >= SLOTS {
            return Err(INVALID_VALUE);
        }
        let page = match self.own.iter().find(|(t, _)| *t == h.token) {
            Some((_, p)) => p.clone(),
            None => match self.opened.get(&h.token) {
                Some(p) => p.clone(),
                None => {
                    let fd = broker.take(h.token).map_err(|_| INVALID_VALUE)?;
                    let p = Arc::new(Page::map(fd)?);
                    self.opened.insert(h.token, p.clone());
                    p
                }
            },
        };
        self.events.insert(event, Shared { page, token: h.token, slot: h.slot });
        Ok(())
    }

    /// A record of `event` on `stream` (after the driver's own record): the next count,
    /// written when the stream gets there.
    ///
    /// # Safety
    /// `stream` is a live stream of the current context.
    pub(crate) unsafe fn recorded(&self, event: u64, stream: sys::CUstream) -> sys::CUresult {
        let Some(s) = self.events.get(&event) else { return sys::CUresult::CUDA_SUCCESS };
        let n = s.page.word(s.slot, 0).fetch_add(1, Ordering::SeqCst) + 1;
        let at = s.page.dev + (s.slot as usize * SLOT_BYTES + 8) as u64;
        // SAFETY: mapped, registered host memory; the caller's stream.
        unsafe { sys::cuStreamWriteValue64_v2(stream, at, n, 0) }
    }

    /// A wait of `stream` for `event`: until the count issued by now has completed.
    ///
    /// # Safety
    /// `stream` is a live stream of the current context.
    pub(crate) unsafe fn waited(&self, event: u64, stream: sys::CUstream) -> sys::CUresult {
        let Some(s) = self.events.get(&event) else { return sys::CUresult::CUDA_SUCCESS };
        let n = s.page.word(s.slot, 0).load(Ordering::SeqCst);
        if n == 0 {
            return sys::CUresult::CUDA_SUCCESS;
        }
        let at = s.page.dev + (s.slot as usize * SLOT_BYTES + 8) as u64;
        let geq = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32;
        // SAFETY: mapped, registered host memory; the caller's stream.
        unsafe { sys::cuStreamWaitValue64_v2(stream, at, n, geq) }
    }

    /// `cuEventQuery` of a shared event: `Some(0)` when every record issued has completed,
    /// `Some(CUDA_ERROR_NOT_READY)` when not; `None` for an event that is not shared.
    pub(crate) fn query(&self, event: u64) -> Option<u32> {
        let s = self.events.get(&event)?;
        let done = s.page.word(s.slot, 1).load(Ordering::SeqCst) >= s.page.word(s.slot, 0).load(Ordering::SeqCst);
        Some(if done { 0 } else { NOT_READY })
    }

    /// `cuEventSynchronize` of a shared event: waits until the records issued by now have
    /// completed (any process's).
    pub(crate) fn synchronize(&self, event: u64) {
        let Some(s) = self.events.get(&event) else { return };
        let n = s.page.word(s.slot, 0).load(Ordering::SeqCst);
        let mut pause = std::time::Duration::from_micros(5);
        while s.page.word(s.slot, 1).load(Ordering::SeqCst) < n {
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(1));
        }
    }

    /// The client's `event` is destroyed.
    pub(crate) fn destroyed(&mut self, event: u64) {
        self.events.remove(&event);
    }
}
