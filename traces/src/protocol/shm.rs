//! Same-host bulk data: blobs written into a sealed memfd whose descriptor travels with a
//! [`super::Message::BlobShm`] frame over the Unix socket (SCM_RIGHTS), so their bytes never
//! pass through the socket. The client copies each blob once (in parallel) into the memfd and
//! seals it against every change; the executor maps it read-only and uses the mapping as the
//! blobs' storage, so nothing is copied on its side. The seals make the executor's hash check
//! final: nobody can change the bytes after it.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use crate::model::Hash128;

/// Seals a memfd must carry before a server maps it: its size and bytes are fixed.
pub const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
/// Blobs start at multiples of this in the memfd.
const ALIGN: u64 = 64;
/// Most descriptors taken from one read.
const MAX_FDS: usize = 4;
/// Bytes a filling thread copies at a time.
const CHUNK: usize = 8 << 20;

/// One blob in a memfd: (hash, offset, length).
pub type Entry = (Hash128, u64, u64);

/// A new memfd being filled: writable by this process alone until [`Arena::seal`] makes it
/// read-only for everyone. Blobs written into it travel to a server with no further copy.
pub struct Arena {
    file: std::fs::File,
    map: Option<memmap2::MmapMut>,
    /// Threads populating the pages ahead of the writer (joined before the mapping goes).
    populating: Vec<std::thread::JoinHandle<()>>,
}

impl Arena {
    /// A memfd of `size` bytes, mapped writable. With `ahead` (and unless
    /// `GPULESS_SHM_PREALLOC=0`), up to 8 background threads populate its pages
    /// (`MADV_POPULATE_WRITE`) while the caller fills it: a fault per page on one writing thread
    /// is what makes fresh shared memory slow, and populating scales with threads.
    pub fn new(size: u64, ahead: bool) -> io::Result<Arena> {
        // SAFETY: a NUL-terminated name and valid flags.
        let raw = unsafe { libc::memfd_create(c"gpuless-blobs".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor memfd_create just returned, owned by nobody else.
        let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(raw) });
        file.set_len(size.max(1))?;
        // SAFETY: the memfd is ours alone until it is sealed.
        let mut map = unsafe { memmap2::MmapMut::map_mut(&file)? };
        let mut populating = Vec::new();
        if ahead && std::env::var("GPULESS_SHM_PREALLOC").map_or(true, |v| v != "0") {
            // Threads take pieces in address order from one counter, so the populated front
            // moves at their combined rate, ahead of a writer that fills from the start.
            const PIECE: usize = 2 << 20;
            let len = map.len();
            let threads = std::thread::available_parallelism().map_or(4, |n| n.get()).clamp(1, 8);
            let base = map.as_mut_ptr() as usize;
            let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            for _ in 0..threads.min(len.div_ceil(PIECE)) {
                let next = next.clone();
                populating.push(std::thread::spawn(move || loop {
                    let start = next.fetch_add(PIECE, std::sync::atomic::Ordering::Relaxed);
                    if start >= len {
                        break;
                    }
                    let n = PIECE.min(len - start);
                    // SAFETY: advice on a range of the arena's mapping, which stays mapped until
                    // this thread is joined (`wait`, before the mapping is dropped); populating
                    // pages never changes their contents.
                    unsafe { libc::madvise((base + start) as *mut libc::c_void, n, libc::MADV_POPULATE_WRITE) };
                }));
            }
        }
        Ok(Arena { file, map: Some(map), populating })
    }

    /// Its bytes, to fill.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.map.as_deref_mut().unwrap_or_default()
    }

    fn wait(&mut self) {
        for t in self.populating.drain(..) {
            let _ = t.join();
        }
    }

    /// Unmaps the writable view, seals the memfd against every change and maps it read-only:
    /// the descriptor (to send) and the mapping (to read).
    pub fn seal(mut self) -> io::Result<(Arc<OwnedFd>, Arc<memmap2::Mmap>)> {
        self.wait();
        // A memfd with a writable mapping cannot be sealed against writes.
        drop(self.map.take());
        let file = self.file.try_clone()?;
        add_seals(&file)?;
        // SAFETY: sealed: its size and bytes can no longer change.
        let ro = unsafe { memmap2::MmapOptions::new().map(&file)? };
        Ok((Arc::new(file.into()), Arc::new(ro)))
    }
}

/// Seals `file` against every change. The kernel refuses a write seal (EBUSY) while any of the
/// memfd's pages holds a reference beyond its mappings, and it waits only ~75 ms for them to go:
/// pages the copying threads just faulted can still sit in a CPU's LRU batch, or be under
/// migration, on a loaded machine. Such references are transient, so the seal is tried again
/// with growing pauses (about 1 s in all) before the error is returned.
fn add_seals(file: &std::fs::File) -> io::Result<()> {
    let mut pause = std::time::Duration::from_millis(2);
    let mut attempt = 0;
    loop {
        // SAFETY: fcntl on a descriptor we own.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, SEALS | libc::F_SEAL_SEAL) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EBUSY) || attempt >= 8 {
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "sealing the blob memfd (F_ADD_SEALS) failed after {} tries: {e}; set GPULESS_SHM=0 to send \
                     blobs through the socket instead",
                    attempt + 1
                ),
            ));
        }
        std::thread::sleep(pause);
        pause *= 2;
        attempt += 1;
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        self.wait();
    }
}

/// Where `lens` blobs go in one memfd: offsets `ALIGN`-aligned, and the total size.
pub fn layout(lens: impl IntoIterator<Item = u64>) -> (Vec<u64>, u64) {
    let mut at = 0u64;
    let offsets = lens
        .into_iter()
        .map(|len| {
            let off = at;
            at = (at + len).div_ceil(ALIGN) * ALIGN;
            off
        })
        .collect();
    (offsets, at)
}

/// Packs `blobs` into a new sealed memfd, copying on up to `threads` threads. Returns the
/// descriptor and where each blob lies.
pub fn pack(blobs: &[(Hash128, &[u8])], threads: usize) -> io::Result<(OwnedFd, Vec<Entry>)> {
    let (offsets, size) = layout(blobs.iter().map(|(_, b)| b.len() as u64));
    let entries: Vec<Entry> = blobs.iter().zip(&offsets).map(|((h, b), off)| (*h, *off, b.len() as u64)).collect();
    // The copying threads fault the pages themselves, in parallel.
    let mut arena = Arena::new(size, false)?;
    {
        // Pieces of the mapping paired with their source bytes, copied on several threads.
        let mut pairs: Vec<(&mut [u8], &[u8])> = Vec::new();
        let mut rest: &mut [u8] = arena.bytes_mut();
        let mut at = 0u64;
        for ((_, b), (_, off, _)) in blobs.iter().zip(&entries) {
            let (_, tail) = std::mem::take(&mut rest).split_at_mut((off - at) as usize);
            let (mut dst, tail) = tail.split_at_mut(b.len());
            rest = tail;
            at = off + b.len() as u64;
            let mut src: &[u8] = b;
            while !src.is_empty() {
                let n = src.len().min(CHUNK);
                let (d, dr) = std::mem::take(&mut dst).split_at_mut(n);
                pairs.push((d, &src[..n]));
                dst = dr;
                src = &src[n..];
            }
        }
        let threads = threads.clamp(1, pairs.len().max(1));
        if threads == 1 {
            for (d, s) in pairs {
                d.copy_from_slice(s);
            }
        } else {
            let mut shares: Vec<Vec<(&mut [u8], &[u8])>> = (0..threads).map(|_| Vec::new()).collect();
            for (i, p) in pairs.into_iter().enumerate() {
                shares[i % threads].push(p);
            }
            std::thread::scope(|sc| {
                for share in shares {
                    sc.spawn(move || {
                        for (d, s) in share {
                            d.copy_from_slice(s);
                        }
                    });
                }
            });
        }
    }
    let (fd, _) = arena.seal()?;
    let fd = Arc::try_unwrap(fd).map_err(|_| io::Error::other("the memfd is still shared"))?;
    Ok((fd, entries))
}

/// Room for the control message of [`MAX_FDS`] descriptors (`CMSG_SPACE`: 16 bytes of header
/// and the descriptors, rounded to 8), on the stack.
type Control = [u64; 4];

/// A message header over one buffer and a control buffer of `control_len` bytes.
fn header(iov: &mut libc::iovec, control: &mut Control, control_len: usize) -> libc::msghdr {
    // SAFETY: msghdr is plain data; the caller keeps `iov` and `control` alive for the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = control_len.min(std::mem::size_of::<Control>()) as _;
    msg
}

/// Writes `bytes` to the Unix socket `sock` with `fd` attached to the first byte.
pub fn send_with_fd(sock: RawFd, bytes: &[u8], fd: RawFd) -> io::Result<()> {
    let mut sent = 0usize;
    while sent < bytes.len() {
        let n = if sent == 0 {
            let mut iov = libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() };
            // SAFETY: CMSG_SPACE of one descriptor is a constant computation.
            let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
            let mut control: Control = [0; 4];
            let msg = header(&mut iov, &mut control, space);
            // SAFETY: the control buffer holds one header with room for one descriptor.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&msg);
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
            }
            // SAFETY: a valid socket and message.
            unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) }
        } else {
            // SAFETY: a valid socket and the unsent rest of `bytes`.
            unsafe { libc::send(sock, bytes[sent..].as_ptr().cast(), bytes.len() - sent, libc::MSG_NOSIGNAL) }
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        sent += n as usize;
    }
    Ok(())
}

/// Reads from the Unix socket `sock` like `recv(2)` with `flags`, keeping every descriptor that
/// arrives in `fds` (in order).
pub fn recv_with_fds(
    sock: RawFd,
    buf: &mut [u8],
    flags: libc::c_int,
    fds: &mut VecDeque<OwnedFd>,
) -> io::Result<usize> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: a constant computation.
    let space = unsafe { libc::CMSG_SPACE((MAX_FDS * std::mem::size_of::<RawFd>()) as u32) } as usize;
    let mut control: Control = [0; 4];
    let mut msg = header(&mut iov, &mut control, space);
    // SAFETY: a valid socket and message whose buffers are writable for their lengths.
    let n = unsafe { libc::recvmsg(sock, &mut msg, flags | libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: walking the control messages the kernel wrote, within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let bytes = (*c).cmsg_len as usize - (data as usize - c as usize);
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    fds.push_back(OwnedFd::from_raw_fd(fd));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(n as usize)
}

/// Maps a memfd a client sent, after checking that it is sealed against every change and holds
/// every entry. The mapping is read-only; its pages are mapped as they are first read.
pub fn open(fd: OwnedFd, entries: &[Entry]) -> Result<Arc<memmap2::Mmap>, String> {
    // SAFETY: fcntl on a descriptor we own.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 || seals & SEALS != SEALS {
        return Err(format!(
            "the descriptor sent with BlobShm is not a memfd sealed against shrinking, growing and writing (seals {seals:#x}): \
             make it with MFD_ALLOW_SEALING and add F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_WRITE"
        ));
    }
    let file = std::fs::File::from(fd);
    let size = file.metadata().map_err(|e| format!("the BlobShm memfd: {e}"))?.len();
    if let Some((h, off, len)) = entries.iter().find(|(_, off, len)| off.checked_add(*len).is_none_or(|e| e > size)) {
        return Err(format!("blob {h} at {off} of {len} bytes lies outside the {size}-byte memfd sent with it"));
    }
    // SAFETY: the memfd is sealed: its size and bytes can no longer change.
    let map =
        unsafe { memmap2::MmapOptions::new().map(&file) }.map_err(|e| format!("mapping the BlobShm memfd: {e}"))?;
    Ok(Arc::new(map))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn blobs_travel_through_a_sealed_memfd_and_a_socket() {
        let a: Vec<u8> = (0..(20 << 20)).map(|i| (i % 251) as u8).collect();
        let b = vec![7u8; 100];
        let blobs = [(Hash128::of(&a), a.as_slice()), (Hash128::of(&b), b.as_slice())];
        let (fd, entries) = pack(&blobs, 3).unwrap();
        assert_eq!(entries[1].1 % ALIGN, 0);
        let (x, y) = UnixStream::pair().unwrap();
        send_with_fd(x.as_raw_fd(), b"frame", fd.as_raw_fd()).unwrap();
        // Sealed: nobody can change its size or bytes any more.
        let mut f = std::fs::File::from(fd);
        assert!(f.set_len(1).is_err());
        assert!(std::io::Write::write(&mut f, b"x").is_err());
        drop(f);
        let mut fds = VecDeque::new();
        let mut buf = [0u8; 16];
        let n = recv_with_fds(y.as_raw_fd(), &mut buf, 0, &mut fds).unwrap();
        assert_eq!(&buf[..n], b"frame");
        assert_eq!(fds.len(), 1);
        let map = open(fds.pop_front().unwrap(), &entries).unwrap();
        for ((h, bytes), (eh, off, len)) in blobs.iter().zip(&entries) {
            assert_eq!(h, eh);
            let got = &map[*off as usize..(*off + *len) as usize];
            assert_eq!(got, *bytes);
            assert_eq!(Hash128::of(got), *h);
        }
    }

    #[test]
    fn an_unsealed_or_short_descriptor_is_refused() {
        let f = tempfile_memfd(b"abc");
        let e = open(f, &[(Hash128(1), 0, 3)]).unwrap_err();
        assert!(e.contains("sealed"), "{e}");
        let (fd, _) = pack(&[(Hash128(1), b"abc".as_slice())], 1).unwrap();
        let e = open(fd, &[(Hash128(1), 0, 1 << 20)]).unwrap_err();
        assert!(e.contains("outside"), "{e}");
    }

    #[test]
    fn a_seal_the_kernel_refuses_for_good_is_not_tried_again_and_says_what_to_do() {
        // Made without MFD_ALLOW_SEALING: every seal is refused with EPERM, not EBUSY.
        let f = std::fs::File::from(tempfile_memfd(b"abc"));
        let e = add_seals(&f).unwrap_err();
        assert_eq!(e.raw_os_error(), None, "the error is ours, with the OS error in its text");
        let text = e.to_string();
        // Tried once: only EBUSY is worth waiting for.
        assert!(text.contains("after 1 tries") && text.contains("GPULESS_SHM=0"), "{text}");
    }

    fn tempfile_memfd(bytes: &[u8]) -> OwnedFd {
        use std::io::Write;
        // SAFETY: a NUL-terminated name.
        let raw = unsafe { libc::memfd_create(c"t".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0);
        // SAFETY: just created, ours.
        let mut f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(raw) });
        f.write_all(bytes).unwrap();
        f.into()
    }
}
