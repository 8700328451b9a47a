//! Warm constants (issue 20) on the GPU: the rules of which uploads stay and when a copy is
//! skipped are [`gpuless_traces::resident`]'s (shared with `gpuless analyze --resident`); this
//! module adds what needs the device — reading the uploads back before they are kept ([`verify`])
//! — and the executor's view of a record ([`before`]).
//!
//! When a session ends and its executor is kept for its program
//! ([`Stream::keep`](super::stream::Stream::keep)), each noted upload is read back and compared
//! with its blob: only ranges that still hold exactly what was uploaded are kept, with the
//! allocations around them (`Memory::hold`); every other byte of the memory that stays mapped
//! is zeroed, and everything else is freed. A wrong byte is never left in place of an upload.

use cudarc::driver::sys;
pub use gpuless_traces::resident::{gaps, Ranges, Resident, MIN_RESIDENT};
use gpuless_traces::Hash128;

use super::args::Call;

/// Whether the record of `c` is a copy the last session of the program left in place (it is
/// skipped); notes uploads and device writes either way ([`Resident::before`]).
pub(crate) fn before(r: &mut Resident, c: &Call<'_>, capturing: bool, base: impl Fn(u64) -> Option<u64>) -> bool {
    r.before(c.f, c.rec, capturing, base)
}

/// Of `uploads` (address, length, content), those whose device bytes equal their blob
/// (`bytes` of a content hash), read back in pieces of 64 MiB. The context is current and idle.
pub fn verify<'b>(
    uploads: impl Iterator<Item = (u64, u64, Hash128)>,
    bytes: impl Fn(&Hash128) -> Option<&'b [u8]>,
) -> Ranges {
    const PIECE: usize = 64 << 20;
    let mut buf = Vec::new();
    let mut held = Ranges::new();
    'next: for (dst, len, h) in uploads {
        let Some(want) = bytes(&h).filter(|b| b.len() as u64 == len) else { continue };
        let mut off = 0usize;
        while off < want.len() {
            let n = (want.len() - off).min(PIECE);
            buf.resize(n, 0u8);
            // SAFETY: a copy of `n` bytes of live device memory (inside an allocation the
            // session made) into a host buffer of `n` bytes.
            let r = unsafe { sys::cuMemcpyDtoH_v2(buf.as_mut_ptr().cast(), dst + off as u64, n) };
            if r != sys::CUresult::CUDA_SUCCESS || buf[..n] != want[off..off + n] {
                continue 'next;
            }
            off += n;
        }
        held.insert(dst, (len, h));
    }
    held
}
