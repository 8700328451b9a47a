//! A call whose arguments name devices of different servers ([`super::route::Decision::Apart`]):
//! no server can run it alone, and the servers do not talk to each other, so the client does
//! it with calls each server can run — made as the program's calls are, through the call's
//! trip, which hands its own way in ([`Call`]).
//!
//! - **A linear copy** (`cuMemcpy`, `cuMemcpyPeer`, `cuMemcpyDtoD`, the host copies and their
//!   asynchronous forms — the table's copies of one source, one destination and a byte count):
//!   the source's bytes come to the client (a download from the source's server, or the
//!   program's host memory) and go to the destination (an upload to its server, or the host
//!   memory). On a stream of the destination's server the upload is queued on that stream, in
//!   the copy's place; on any other stream, that stream's earlier work completes first and the
//!   call returns when the bytes are in place.
//! - **A stream waiting for an event of another server** (`cuStreamWaitEvent`): the client
//!   waits for the event (`cuEventSynchronize` where it lives); the stream's later work is then
//!   issued after it completed.
//! - Anything else (an event recorded on another server's stream, a launch with another
//!   server's stream, a copy while capturing) returns `CUDA_ERROR_NOT_SUPPORTED`, said once.

use gpuless_analyzer::api::{ApiFunction, ArgKind, HandleKind};

use super::context_books::current_device;
use super::step::refused;
use super::{route, streams};
use crate::slots::Slot;

/// `CUDA_ERROR_UNKNOWN`: no hook for a call made here.
const UNKNOWN: u32 = 999;

/// One driver call as the program makes it (`trip::call`): the hook's slot, its entry, the
/// arguments.
pub(crate) type Call = unsafe fn(usize, &Slot, &[u64]) -> u32;

/// What a cross-server call returns: done through the client as above (each call it makes
/// through `call`), or refused.
///
/// # Safety
/// `raw` are the program's arguments to `f`.
pub(crate) unsafe fn apart(f: &ApiFunction, raw: &[u64], call: Call) -> u32 {
    if streams::captured(f, raw) {
        return refused(f, "a stream capture cannot hold work of devices on different servers");
    }
    if let Some(c) = Linear::of(f, raw) {
        // SAFETY: forwarded from the caller (the program's host buffers of the copy).
        return unsafe { c.run(call) };
    }
    let kinds: Vec<ArgKind> = f.args.iter().map(|a| a.kind).collect();
    if kinds.starts_with(&[ArgKind::Handle(HandleKind::Stream), ArgKind::Handle(HandleKind::Event)]) {
        return synthetic(call, "cuEventSynchronize", &[raw[1]]);
    }
    refused(f, "its arguments name devices of different servers, which only copies and event waits may")
}

/// A linear copy's operands.
struct Linear {
    dst: u64,
    src: u64,
    len: u64,
    stream: Option<u64>,
}

impl Linear {
    /// `f`'s operands when it is a linear copy: a destination and a source (device, unified or
    /// host addresses), one byte count, and nothing else but contexts and a stream.
    fn of(f: &ApiFunction, raw: &[u64]) -> Option<Linear> {
        let (mut dst, mut src, mut len, mut stream) = (None, None, None, None);
        for (i, a) in f.args.iter().enumerate() {
            let v = raw.get(i).copied()?;
            match a.kind {
                ArgKind::DevPtr | ArgKind::AnyBuf(_) | ArgKind::HostBuf(_) if a.name.starts_with("dst") => {
                    dst = Some(v)
                }
                ArgKind::DevPtr | ArgKind::AnyBuf(_) | ArgKind::HostBuf(_) if a.name.starts_with("src") => {
                    src = Some(v)
                }
                ArgKind::Size => len = Some(v),
                ArgKind::Handle(HandleKind::Stream) => stream = Some(v),
                ArgKind::Handle(HandleKind::Context) => {}
                _ => return None,
            }
        }
        Some(Linear { dst: dst?, src: src?, len: len?, stream })
    }

    /// The copy through the client.
    ///
    /// # Safety
    /// Host operands are the program's buffers of `len` bytes.
    unsafe fn run(&self, call: Call) -> u32 {
        let Ok(len) = usize::try_from(self.len) else { return INVALID_VALUE };
        let member = |d: u32| route::split(d).member;
        let dst = route::device_of_address(self.dst).map(member);
        // A stream of the destination's server keeps the copy in its place there: the upload
        // is queued on it, and nothing waits for its earlier work (which cannot write the other
        // server's source).
        let on_dst = self.stream.filter(|&s| {
            let home = if s <= 2 { Some(current_device()) } else { route::home(s) };
            dst.is_some() && home.map(member) == dst
        });
        if let (Some(s), true) = (on_dst, route::device_of_address(self.src).is_some()) {
            let mut staged = vec![0u8; len];
            let st = synthetic(call, "cuMemcpyDtoH_v2", &[staged.as_mut_ptr() as u64, self.src, self.len]);
            if st != 0 {
                return st;
            }
            // The bytes are taken at the call (a blob): the buffer may go after it.
            return synthetic(call, "cuMemcpyHtoDAsync_v2", &[self.dst, staged.as_ptr() as u64, self.len, s]);
        }
        // Otherwise the copy's place in its stream: the work queued there before it completes
        // first.
        let st = synthetic(call, "cuStreamSynchronize", &[self.stream.unwrap_or(0)]);
        if st != 0 {
            return st;
        }
        let mut staged = Vec::new();
        let from = if route::device_of_address(self.src).is_some() {
            staged = vec![0u8; len];
            let st = synthetic(call, "cuMemcpyDtoH_v2", &[staged.as_mut_ptr() as u64, self.src, self.len]);
            if st != 0 {
                return st;
            }
            staged.as_ptr()
        } else {
            self.src as *const u8
        };
        if route::device_of_address(self.dst).is_some() {
            synthetic(call, "cuMemcpyHtoD_v2", &[self.dst, from as u64, self.len])
        } else {
            // SAFETY: the caller's contract (host source and destination of `len` bytes).
            unsafe { std::ptr::copy(from, self.dst as *mut u8, len) };
            drop(staged);
            0
        }
    }
}

/// `CUDA_ERROR_INVALID_VALUE`.
const INVALID_VALUE: u32 = 1;

/// Makes the driver call `name` with `args` as the program would (through `call`), routed by
/// its own arguments.
fn synthetic(call: Call, name: &str, args: &[u64]) -> u32 {
    let Some(slot) = crate::hooks::slot_of(name) else { return UNKNOWN };
    let Some(s) = crate::slots::get(slot) else { return UNKNOWN };
    // SAFETY: arguments of `name`'s C signature, built above from the program's own.
    unsafe { call(slot, s, args) }
}
