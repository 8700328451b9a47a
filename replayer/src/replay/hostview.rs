//! Replay of the recorder's records for memory the host and the device share
//! ([`gpuless_traces::hostview`]): what the host wrote is copied to the memory's address
//! before the next call, and what the host could read after a synchronization is copied back
//! and verified like a device-to-host result.

use cudarc::driver::sys;
use gpuless_traces::hostview::{HOST_MEMORY, HOST_MIRROR, HOST_PULL, HOST_VIEW};
use gpuless_traces::{CallRecord, Value};

use super::blockhash::{Kernel, BLOCK};
use super::results::{first_result, verify_value};
use super::{check, LoadedTrace, ReplayError, Report, State};

/// `CU_MEMHOSTALLOC_DEVICEMAP` and `CU_MEMHOSTREGISTER_DEVICEMAP`.
pub(crate) const DEVICEMAP: u64 = 0x02;

fn bad(rec: &CallRecord, problem: &str) -> ReplayError {
    ReplayError::Inconsistent { seq: rec.seq, what: rec.function.name().to_string(), problem: problem.into() }
}

/// Executes a `gpulessHostMemory` or `gpulessHostView` record.
pub(crate) fn call(
    st: &mut State,
    trace: &LoadedTrace,
    rec: &CallRecord,
    report: &mut Report,
) -> Result<(), ReplayError> {
    let name = rec.function.name();
    if name == HOST_PULL {
        st.last_call = Some((rec.seq, HOST_PULL));
        let changed = pull(st, rec)?;
        if let Some(o) = report.outputs.as_mut() {
            o.push((rec.seq, changed));
        }
        report.executed += 1;
        return Ok(());
    }
    let Some(&Value::DevPtr(addr)) = rec.args.first() else { return Err(bad(rec, "no address recorded")) };
    if name == HOST_MIRROR {
        st.last_call = Some((rec.seq, HOST_MIRROR));
        let Some(&Value::Size(len)) = rec.args.get(1) else { return Err(bad(rec, "no length recorded")) };
        let live = st.mem.alloc_shared(addr, len, rec.seq)?;
        // SAFETY: device memory just created for the range.
        check(unsafe { sys::cuMemsetD8_v2(live, 0, len as usize) }, rec.seq, HOST_MIRROR)?;
        st.managed.add(addr, len, live);
        report.executed += 1;
        return Ok(());
    }
    let live = st.mem.translate(addr);
    st.last_call = Some((rec.seq, if name == HOST_MEMORY { HOST_MEMORY } else { HOST_VIEW }));
    if name == HOST_MEMORY {
        let Some(Value::Blob(b)) = rec.args.get(1) else { return Err(bad(rec, "no contents recorded")) };
        let data = trace.blobs.get(&b.hash).ok_or_else(|| bad(rec, "its contents are not in the trace"))?;
        // Pointers the host stored in shared memory (a linked structure) name recorded
        // addresses: where an allocation lives elsewhere now, they are rewritten to it, as a
        // launch's parameters are.
        let moved;
        let data: &[u8] = if st.mem.may_translate() && addr % 8 == 0 {
            let mut m = data.to_vec();
            st.mem.translate_params(&mut m);
            moved = m;
            &moved
        } else {
            data
        };
        // SAFETY: a copy into device memory this replay created for the range, from blob bytes.
        check(unsafe { sys::cuMemcpyHtoD_v2(live, data.as_ptr().cast(), data.len()) }, rec.seq, name)?;
        st.copied_in();
        st.managed.wrote(addr, data, live);
    } else {
        let Some(&Value::Size(len)) = rec.args.get(1) else { return Err(bad(rec, "no length recorded")) };
        let mut host = vec![0u8; usize::try_from(len).map_err(|_| bad(rec, "length out of range"))?];
        // SAFETY: a copy out of device memory this replay created for the range.
        check(unsafe { sys::cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), live, host.len()) }, rec.seq, name)?;
        // Pointers into moved allocations read back as the recorded addresses they stand for.
        if st.mem.may_translate() && addr % 8 == 0 {
            st.mem.untranslate_words(&mut host);
        }
        first_result(report);
        verify_value(st, rec.seq, HOST_VIEW, rec.results.first(), &host, trace, report);
    }
    report.executed += 1;
    Ok(())
}

/// Bytes compared at a time when looking for what the device changed in managed memory
/// without the block-hash kernel.
const PULL_BLOCK: usize = 4096;

/// What the client last saw of one allocation.
enum Seen {
    /// Kept on the device: one hash per [`BLOCK`] bytes of what the client holds
    /// ([`Kernel`]'s hashes); only the blocks whose hash changed cross to the host.
    Hashes { len: u64, hashes: sys::CUdeviceptr },
    /// Kept on the host (the kernel could not be loaded): the bytes the client holds, compared
    /// in [`PULL_BLOCK`]s with a copy of the whole allocation.
    Bytes(Vec<u8>),
}

impl Seen {
    fn len(&self) -> u64 {
        match self {
            Seen::Hashes { len, .. } => *len,
            Seen::Bytes(b) => b.len() as u64,
        }
    }
}

/// A client's managed memory (client mode): what the client last saw of each allocation, to
/// answer a `gpulessHostPull` with only what the device changed since. By default the whole
/// allocation is copied to the host at every pull and compared there. With
/// `GPULESS_MANAGED_COMPARE=device` (experimental: not yet proven on a GPU) the comparison runs
/// on the GPU (a hash per 256-byte block, [`Kernel`]), so a pull reads the managed memory at
/// the device's bandwidth and copies only what changed.
#[derive(Default)]
pub(crate) struct Managed {
    /// Allocation address → what the client holds.
    seen: std::collections::BTreeMap<u64, Seen>,
    /// The kernel, loaded at the first allocation (`Err`: it could not be; host comparison).
    kernel: Option<Result<Kernel, String>>,
    /// The kernel's list of changed blocks (a count, then room for `list_blocks` blocks).
    list: sys::CUdeviceptr,
    list_blocks: u64,
}

impl Managed {
    /// A new allocation at `addr` (live at `live`), zeroed on the device, as the client's pages
    /// are (the caller's memset is queued on the legacy stream before this).
    pub fn add(&mut self, addr: u64, len: u64, live: sys::CUdeviceptr) {
        let seen = self
            .hashed(len, live)
            .map_or_else(|| Seen::Bytes(vec![0; len as usize]), |hashes| Seen::Hashes { len, hashes });
        if let Some(old) = self.seen.insert(addr, seen) {
            Self::free(old);
        }
    }

    /// Device hashes of the `len` bytes at `live`, as they are now; `None` without the kernel,
    /// and unless asked for: `GPULESS_MANAGED_COMPARE=device` in the server's environment (not
    /// yet proven on a GPU: the host comparison stays the default until it is).
    fn hashed(&mut self, len: u64, live: sys::CUdeviceptr) -> Option<sys::CUdeviceptr> {
        static ON_DEVICE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        if !*ON_DEVICE.get_or_init(|| std::env::var("GPULESS_MANAGED_COMPARE").is_ok_and(|v| v == "device")) {
            return None;
        }
        let kernel = self.kernel.get_or_insert_with(Kernel::load).as_ref().ok()?;
        let blocks = len.div_ceil(BLOCK).max(1);
        let mut hashes = 0;
        // SAFETY (block): a new buffer of ours; our list grown to room for every block of this
        // allocation; one pass of the kernel over the allocation (its baseline).
        unsafe {
            if sys::cuMemAlloc_v2(&mut hashes, (blocks * 8) as usize) != sys::CUresult::CUDA_SUCCESS {
                return None;
            }
            if blocks > self.list_blocks {
                if self.list != 0 {
                    sys::cuMemFree_v2(self.list);
                }
                self.list = 0;
                if sys::cuMemAlloc_v2(&mut self.list, ((blocks + 1) * 8) as usize) != sys::CUresult::CUDA_SUCCESS {
                    self.list_blocks = 0;
                    sys::cuMemFree_v2(hashes);
                    return None;
                }
                self.list_blocks = blocks;
            }
            // The list's count restarts: a pass appends from it, and the list has room for one
            // allocation's blocks only.
            if sys::cuMemsetD8_v2(self.list, 0, 8) != sys::CUresult::CUDA_SUCCESS
                || kernel.pass(live, len, hashes, 0, self.list).is_err()
            {
                sys::cuMemFree_v2(hashes);
                return None;
            }
        }
        Some(hashes)
    }

    fn free(seen: Seen) {
        if let Seen::Hashes { hashes, .. } = seen {
            // SAFETY: our buffer; cuMemFree waits for the kernels that use it.
            unsafe { sys::cuMemFree_v2(hashes) };
        }
    }

    /// The allocation at `addr` was freed.
    pub fn remove(&mut self, addr: u64) {
        if let Some(old) = self.seen.remove(&addr) {
            Self::free(old);
        }
    }

    /// Whether `[addr, addr + n)` lies in one allocation.
    pub fn covers(&self, addr: u64, n: usize) -> bool {
        self.seen.range(..=addr).next_back().is_some_and(|(&a, v)| addr + n as u64 <= a + v.len())
    }

    /// The client wrote `data` at `addr` (live at `live`: it holds those bytes now, and they
    /// are on the device). With hashes, the blocks written are hashed again (the device's copy
    /// is what the client holds there), so that the next pull does not send them back.
    pub fn wrote(&mut self, addr: u64, data: &[u8], live: sys::CUdeviceptr) {
        let Some((&a, v)) = self.seen.range_mut(..=addr).next_back() else { return };
        let off = addr - a;
        match v {
            Seen::Bytes(b) => {
                if let Some(dst) = b.get_mut(off as usize..off as usize + data.len()) {
                    dst.copy_from_slice(data);
                }
            }
            Seen::Hashes { len, hashes } => {
                let (lo, hi) = ((off / BLOCK) * BLOCK, ((off + data.len() as u64).div_ceil(BLOCK) * BLOCK).min(*len));
                let (Some(Ok(kernel)), true) = (&self.kernel, lo < hi) else { return };
                // SAFETY: the written blocks of the allocation (live at `live - off`), their
                // slice of its hashes, and our list, its count reset first (room for every
                // block of one allocation; reset again before every pull, so these blocks are
                // not reported). Without the reset, passes between two pulls appended past the
                // list's end (found on the H200: mapped_mem's values corrupted).
                let _ = unsafe {
                    if sys::cuMemsetD8_v2(self.list, 0, 8) != sys::CUresult::CUDA_SUCCESS {
                        return;
                    }
                    kernel.pass(live - (off - lo), hi - lo, *hashes + (lo / BLOCK) * 8, lo / BLOCK, self.list)
                };
            }
        }
    }
}

impl Drop for Managed {
    fn drop(&mut self) {
        for (_, seen) in std::mem::take(&mut self.seen) {
            Self::free(seen);
        }
        if self.list != 0 {
            // SAFETY: our buffer.
            unsafe { sys::cuMemFree_v2(self.list) };
        }
    }
}

/// What the device changed in the client's managed memory since the client last saw it:
/// `[u64 address, u32 length, bytes]…` (runs joined).
fn pull(st: &mut State, rec: &CallRecord) -> Result<Vec<u8>, ReplayError> {
    let mut out = Vec::new();
    let addrs: Vec<u64> = st.managed.seen.keys().copied().collect();
    for a in addrs {
        let live = st.mem.translate(a);
        let m = &mut st.managed;
        match m.seen.get_mut(&a) {
            Some(Seen::Hashes { len, hashes }) => {
                let (len, hashes) = (*len, *hashes);
                let Some(Ok(kernel)) = &m.kernel else { continue };
                let blocks = changed_blocks(kernel, live, len, hashes, m.list)
                    .map_err(|problem| bad(rec, &format!("comparing managed memory on the device: {problem}")))?;
                for (lo, hi) in runs(&blocks, len) {
                    out.extend_from_slice(&(a + lo).to_le_bytes());
                    out.extend_from_slice(&((hi - lo) as u32).to_le_bytes());
                    let at = out.len();
                    out.resize(at + (hi - lo) as usize, 0);
                    // SAFETY: a copy out of device memory this session created for the allocation.
                    check(
                        unsafe { sys::cuMemcpyDtoH_v2(out[at..].as_mut_ptr().cast(), live + lo, (hi - lo) as usize) },
                        rec.seq,
                        HOST_PULL,
                    )?;
                }
            }
            Some(Seen::Bytes(seen)) => pull_bytes(a, live, seen, &mut out, rec)?,
            None => {}
        }
    }
    Ok(out)
}

/// The blocks of the `len` bytes at `live` whose hash changed since the last pass (after the
/// device finished the work before: the legacy stream, and the program's wait before the pull).
fn changed_blocks(
    kernel: &Kernel,
    live: sys::CUdeviceptr,
    len: u64,
    hashes: sys::CUdeviceptr,
    list: sys::CUdeviceptr,
) -> Result<Vec<u64>, String> {
    let fail = |what: &str, r: sys::CUresult| {
        if r == sys::CUresult::CUDA_SUCCESS {
            Ok(())
        } else {
            Err(format!("{what}: {r:?}"))
        }
    };
    let total = len.div_ceil(BLOCK);
    // SAFETY (block): our list (room for every block of the allocation), reset; the pass; the
    // count and the list copied out by synchronous copies after it on the same stream.
    unsafe {
        fail("cuMemsetD8", sys::cuMemsetD8_v2(list, 0, 8))?;
        kernel.pass(live, len, hashes, 0, list)?;
        let mut n = 0u64;
        fail("cuMemcpyDtoH", sys::cuMemcpyDtoH_v2((&mut n as *mut u64).cast(), list, 8))?;
        let mut blocks = vec![0u64; n.min(total) as usize];
        if !blocks.is_empty() {
            fail("cuMemcpyDtoH", sys::cuMemcpyDtoH_v2(blocks.as_mut_ptr().cast(), list + 8, blocks.len() * 8))?;
        }
        Ok(blocks)
    }
}

/// Byte ranges `[lo, hi)` of an allocation of `len` bytes covering `blocks` (in any order),
/// contiguous blocks joined (a run at most 2 GiB).
fn runs(blocks: &[u64], len: u64) -> Vec<(u64, u64)> {
    let mut b = blocks.to_vec();
    b.sort_unstable();
    b.dedup();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for k in b {
        let lo = k * BLOCK;
        if lo >= len {
            continue;
        }
        let hi = (lo + BLOCK).min(len);
        match out.last_mut() {
            Some(r) if r.1 == lo && hi - r.0 <= u64::from(u32::MAX) / 2 => r.1 = hi,
            _ => out.push((lo, hi)),
        }
    }
    out
}

/// [`pull`] of one allocation compared on the host: the whole allocation copied out and
/// compared with what the client holds, by [`PULL_BLOCK`]s.
fn pull_bytes(
    a: u64,
    live: sys::CUdeviceptr,
    seen: &mut Vec<u8>,
    out: &mut Vec<u8>,
    rec: &CallRecord,
) -> Result<(), ReplayError> {
    let mut now = vec![0u8; seen.len()];
    // SAFETY: a copy out of device memory this session created for the allocation.
    check(unsafe { sys::cuMemcpyDtoH_v2(now.as_mut_ptr().cast(), live, now.len()) }, rec.seq, HOST_PULL)?;
    let mut run: Option<(usize, usize)> = None;
    let flush = |out: &mut Vec<u8>, (lo, hi): (usize, usize), now: &[u8]| {
        out.extend_from_slice(&(a + lo as u64).to_le_bytes());
        out.extend_from_slice(&((hi - lo) as u32).to_le_bytes());
        out.extend_from_slice(&now[lo..hi]);
    };
    for lo in (0..now.len()).step_by(PULL_BLOCK) {
        let hi = (lo + PULL_BLOCK).min(now.len());
        if now[lo..hi] != seen[lo..hi] {
            run = match run {
                Some((s, e)) if e == lo && hi - s <= u32::MAX as usize / 2 => Some((s, hi)),
                Some(r) => {
                    flush(out, r, &now);
                    Some((lo, hi))
                }
                None => Some((lo, hi)),
            };
        }
    }
    if let Some(r) = run {
        flush(out, r, &now);
    }
    *seen = now;
    Ok(())
}

/// Executes a `gpulessFunctionFound` record: the function (or kernel) `h` of a module (or
/// library) by its name, which the program took without a recorded call.
pub(crate) fn function_found(st: &mut State, rec: &CallRecord) -> Result<(), ReplayError> {
    let (Some(owner), Some(Value::Str(name)), Some(&Value::Handle(_, h))) =
        (rec.args.first(), rec.args.get(1), rec.results.first())
    else {
        return Err(bad(rec, "owner, name or handle not recorded"));
    };
    let cname = std::ffi::CString::new(name.as_str()).map_err(|_| bad(rec, "a name with a NUL byte"))?;
    let name_of = rec.function.name();
    match *owner {
        Value::Handle(gpuless_analyzer::api::HandleKind::Module, m) => {
            let live = *st.modules.get(&m).ok_or_else(|| bad(rec, "its module was never loaded"))?;
            let mut f = std::ptr::null_mut();
            // SAFETY: a live module and a NUL-terminated name.
            check(unsafe { sys::cuModuleGetFunction(&mut f, live, cname.as_ptr()) }, rec.seq, name_of)?;
            st.functions.insert(h, f);
        }
        Value::Handle(gpuless_analyzer::api::HandleKind::Library, l) => {
            let live = *st.libraries.get(&l).ok_or_else(|| bad(rec, "its library was never loaded"))?;
            let mut k = std::ptr::null_mut();
            // SAFETY: a live library and a NUL-terminated name.
            check(unsafe { sys::cuLibraryGetKernel(&mut k, live, cname.as_ptr()) }, rec.seq, name_of)?;
            st.kernels.insert(h, k);
        }
        _ => return Err(bad(rec, "its owner is neither a module nor a library")),
    }
    st.names.insert(h, name.clone());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_blocks_become_runs_within_the_allocation() {
        assert_eq!(runs(&[3, 1, 2, 2], 10_000), [(256, 1024)]);
        assert_eq!(runs(&[0, 5], 1300), [(0, 256), (1280, 1300)]);
        assert!(runs(&[9], 1300).is_empty(), "blocks past the end are ignored");
        assert!(runs(&[], 1300).is_empty());
    }
}
