//! What the executor's handling of a client's shared memory (`managed.rs`) keeps per context:
//! a non-blocking stream, the pinned buffer its copies go through, the block-hash kernel and
//! its list of changed blocks. A session of several devices has a context per device; an
//! allocation's work runs in the context it was made in ([`Entered`] makes it current for the
//! while), so its stream, kernel and memory belong together.

use cudarc::driver::sys;

use super::blockhash::{Kernel, BLOCK};

/// Bytes of the pinned buffer copies go through (larger copies go in pieces).
const STAGING: usize = 8 << 20;

pub(super) fn ok(what: &str, r: sys::CUresult) -> Result<(), String> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what}: {r:?}"))
    }
}

/// The current context, as an address (0: none).
pub(super) fn current() -> usize {
    let mut c = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    unsafe { sys::cuCtxGetCurrent(&mut c) };
    c as usize
}

/// Context `ctx` made current until dropped (the one before restored); nothing when it was.
pub(super) struct Entered(Option<usize>);

impl Entered {
    pub(super) fn new(ctx: usize) -> Entered {
        let before = current();
        if ctx == 0 || ctx == before {
            return Entered(None);
        }
        // SAFETY: a context of this session, alive for the process.
        unsafe { sys::cuCtxSetCurrent(ctx as sys::CUcontext) };
        Entered(Some(before))
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        if let Some(before) = self.0 {
            // SAFETY: the context that was current before.
            unsafe { sys::cuCtxSetCurrent(before as sys::CUcontext) };
        }
    }
}

/// One context's resources (made at first use, with the context current).
#[derive(Default)]
pub(super) struct Bound {
    /// The kernel, loaded at the first allocation (`Err`: it could not be; host comparison).
    pub(super) kernel: Option<Result<Kernel, String>>,
    /// The kernel's list of changed blocks (a count, then room for `list_blocks` blocks).
    pub(super) list: sys::CUdeviceptr,
    list_blocks: u64,
    /// The stream of all of the above.
    stream: Option<Stream>,
    /// Pinned host memory every copy goes through: a copy from or to pageable memory is staged
    /// by the driver in ways that may wait for other streams' work.
    staging: Option<Staging>,
}

/// Pinned host memory of ours (freed when dropped).
struct Staging {
    ptr: *mut u8,
    len: usize,
}

impl Drop for Staging {
    fn drop(&mut self) {
        // SAFETY: our pinned buffer; every copy through it was waited for.
        unsafe { sys::cuMemFreeHost(self.ptr.cast()) };
    }
}

/// A stream of ours that waits for no other (destroyed when dropped).
struct Stream(sys::CUstream);

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: our stream; its work was waited for by each step.
        unsafe { sys::cuStreamDestroy_v2(self.0) };
    }
}

impl Bound {
    /// The stream of shared memory's work, created at first use.
    pub(super) fn stream(&mut self) -> Result<sys::CUstream, String> {
        if let Some(s) = &self.stream {
            return Ok(s.0);
        }
        let mut s = std::ptr::null_mut();
        // SAFETY: an out-pointer; a stream of the current context.
        ok("cuStreamCreate", unsafe {
            sys::cuStreamCreate(&mut s, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
        })?;
        self.stream = Some(Stream(s));
        Ok(s)
    }

    /// Waits for this context's shared-memory work.
    pub(super) fn finish(&mut self) -> Result<(), String> {
        let s = self.stream()?;
        // SAFETY: our stream.
        ok("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(s) })
    }

    /// The pinned buffer ([`STAGING`] bytes), allocated once: freeing pinned memory may wait
    /// for the device, and a kernel polling a flag would keep it waiting.
    fn staging(&mut self) -> Result<(*mut u8, usize), String> {
        if let Some(b) = &self.staging {
            return Ok((b.ptr, b.len));
        }
        let mut p = std::ptr::null_mut();
        // SAFETY: an out-pointer for pinned memory of STAGING bytes.
        ok("cuMemAllocHost", unsafe { sys::cuMemAllocHost_v2(&mut p, STAGING) })?;
        self.staging = Some(Staging { ptr: p.cast(), len: STAGING });
        Ok((p.cast(), STAGING))
    }

    /// Copies `data` to device memory at `live`, through the pinned buffer, on our stream
    /// (waited for).
    pub(super) fn upload(&mut self, live: sys::CUdeviceptr, data: &[u8]) -> Result<(), String> {
        let s = self.stream()?;
        let (buf, cap) = self.staging()?;
        for (i, piece) in data.chunks(cap).enumerate() {
            // SAFETY: our pinned buffer of `cap` bytes, free (the last copy was waited for);
            // device memory of the shared range; our stream.
            unsafe {
                std::ptr::copy_nonoverlapping(piece.as_ptr(), buf, piece.len());
                let at = live + (i * cap) as u64;
                ok("cuMemcpyHtoDAsync", sys::cuMemcpyHtoDAsync_v2(at, buf.cast(), piece.len(), s))?;
                ok("cuStreamSynchronize", sys::cuStreamSynchronize(s))?;
            }
        }
        Ok(())
    }

    /// Copies device memory at `live` into `out`, through the pinned buffer, on our stream.
    pub(super) fn download(&mut self, out: &mut [u8], live: sys::CUdeviceptr) -> Result<(), String> {
        let s = self.stream()?;
        let (buf, cap) = self.staging()?;
        for (i, piece) in out.chunks_mut(cap).enumerate() {
            // SAFETY: as in `upload`, the other way.
            unsafe {
                let at = live + (i * cap) as u64;
                ok("cuMemcpyDtoHAsync", sys::cuMemcpyDtoHAsync_v2(buf.cast(), at, piece.len(), s))?;
                ok("cuStreamSynchronize", sys::cuStreamSynchronize(s))?;
                std::ptr::copy_nonoverlapping(buf, piece.as_mut_ptr(), piece.len());
            }
        }
        Ok(())
    }

    /// Zeroes the `len` bytes at `live` on our stream (not waited for).
    pub(super) fn zero(&mut self, live: sys::CUdeviceptr, len: u64) -> Result<(), String> {
        let s = self.stream()?;
        // SAFETY: device memory of the shared range; our stream.
        ok("cuMemsetD8Async", unsafe { sys::cuMemsetD8Async(live, 0, len as usize, s) })
    }

    /// Device hashes of the `len` bytes at `live`, as they are now (after our stream's work);
    /// `None` without the kernel.
    pub(super) fn hashed(&mut self, len: u64, live: sys::CUdeviceptr) -> Option<sys::CUdeviceptr> {
        let s = self.stream().ok()?;
        let kernel = self.kernel.get_or_insert_with(Kernel::load).as_ref().ok()?;
        let blocks = len.div_ceil(BLOCK).max(1);
        let mut hashes = 0;
        // SAFETY (block): a new buffer of ours; our list grown to room for every block of this
        // allocation (the old one freed after our stream's work); one pass of the kernel over
        // the allocation (its baseline), on our stream.
        unsafe {
            if sys::cuMemAlloc_v2(&mut hashes, (blocks * 8) as usize) != sys::CUresult::CUDA_SUCCESS {
                return None;
            }
            // Stream-ordered: a plain free waits for the whole device, a polling kernel too.
            if blocks > self.list_blocks {
                if self.list != 0 {
                    sys::cuMemFreeAsync(self.list, s);
                }
                self.list = 0;
                if sys::cuMemAllocAsync(&mut self.list, ((blocks + 1) * 8) as usize, s) != sys::CUresult::CUDA_SUCCESS {
                    self.list_blocks = 0;
                    sys::cuMemFree_v2(hashes);
                    return None;
                }
                self.list_blocks = blocks;
            }
            // The list's count restarts: a pass appends from it, and the list has room for one
            // allocation's blocks only.
            if sys::cuMemsetD8Async(self.list, 0, 8, s) != sys::CUresult::CUDA_SUCCESS
                || kernel.pass(live, len, hashes, 0, self.list, s).is_err()
            {
                sys::cuStreamSynchronize(s);
                sys::cuMemFree_v2(hashes);
                return None;
            }
        }
        Some(hashes)
    }

    /// Hashes again blocks `[lo, hi)` of an allocation of `live` whose hashes start at `hashes`
    /// (the client holds what the device holds there now), on our stream after the copy. The
    /// list's count is reset first (room for every block of one allocation; reset again before
    /// every pull, so these blocks are not reported): without the reset, passes between two
    /// pulls appended past the list's end (found on the H200: mapped_mem's values corrupted).
    pub(super) fn rehash(&mut self, live: sys::CUdeviceptr, lo: u64, hi: u64, hashes: sys::CUdeviceptr) {
        let Ok(s) = self.stream() else { return };
        let Some(Ok(kernel)) = &self.kernel else { return };
        // SAFETY: the blocks of the allocation, their slice of its hashes and our list.
        let _ = unsafe {
            if sys::cuMemsetD8Async(self.list, 0, 8, s) != sys::CUresult::CUDA_SUCCESS {
                return;
            }
            kernel.pass(live + lo, hi - lo, hashes + (lo / BLOCK) * 8, lo / BLOCK, self.list, s)
        };
    }

    /// The blocks of the `len` bytes at `live` whose hash changed since the last pass, on our
    /// stream (the memory as it is now: after the program's wait before the pull, not after
    /// every stream's work).
    pub(super) fn changed_blocks(
        &mut self,
        live: sys::CUdeviceptr,
        len: u64,
        hashes: sys::CUdeviceptr,
    ) -> Result<Vec<u64>, String> {
        let s = self.stream()?;
        let Some(Ok(kernel)) = &self.kernel else { return Err("no block-hash kernel".into()) };
        let total = len.div_ceil(BLOCK);
        // SAFETY: our list (room for every block of the allocation), reset; the pass, on our
        // stream; the count and the list read after it on the same stream.
        unsafe {
            ok("cuMemsetD8Async", sys::cuMemsetD8Async(self.list, 0, 8, s))?;
            kernel.pass(live, len, hashes, 0, self.list, s)?;
        }
        let mut n = [0u8; 8];
        self.download(&mut n, self.list)?;
        let n = u64::from_le_bytes(n).min(total) as usize;
        let mut raw = vec![0u8; n * 8];
        if n > 0 {
            self.download(&mut raw, self.list + 8)?;
        }
        Ok(raw.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default())).collect())
    }

    /// Gives back the list (stream-ordered) and waits for this context's work (the context
    /// current).
    pub(super) fn release(&mut self) {
        if let Some(s) = &self.stream {
            // SAFETY: our stream and our buffer, allocated on it.
            unsafe {
                if self.list != 0 {
                    sys::cuMemFreeAsync(self.list, s.0);
                }
                sys::cuStreamSynchronize(s.0);
            }
        }
        self.list = 0;
    }
}
