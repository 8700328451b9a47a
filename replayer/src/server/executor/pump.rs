//! Reading the client's connection while the executor is busy executing, in a session with
//! host functions ([`crate::replay::host_calls`]): a synchronization may wait for a host
//! function that waits for the client, whose reply ([`Message::HostReturned`]) must be read
//! while the executor's own thread is blocked in the driver. The pump reads every frame that
//! arrives then: replies are taken at once, everything else is kept, in order, for the
//! executor's loop.

use std::collections::VecDeque;
use std::io::BufReader;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use gpuless_traces::protocol::client::{Polled, Stream};
use gpuless_traces::protocol::message::kind;
use gpuless_traces::protocol::{read_header, read_payload, FrameHeader, Message};

use crate::replay::host_calls::HostCalls;

/// The client's connection, read by the executor's loop and, while it executes, by a pump.
pub(super) type Reader = Arc<Mutex<BufReader<Polled>>>;
/// Frames a pump read that the executor's loop has yet to handle.
pub(super) type Kept = Arc<Mutex<VecDeque<(FrameHeader, Vec<u8>)>>>;

/// Locks `m` (a panic elsewhere leaves the data usable: frames are read whole or not at all).
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A pump running until dropped.
pub(super) struct Pump {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Pump {
    /// Starts reading `reader` for `calls` (frames of other kinds go to `kept`).
    pub(super) fn start(reader: &Reader, kept: &Kept, calls: &Arc<HostCalls>) -> Pump {
        let stop = Arc::new(AtomicBool::new(false));
        let (reader, kept, calls, s) = (reader.clone(), kept.clone(), calls.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("gpuless-pump".into())
            .spawn(move || pump(&reader, &kept, &calls, &s))
            .ok();
        Pump { stop, thread }
    }
}

impl Drop for Pump {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn pump(reader: &Reader, kept: &Kept, calls: &HostCalls, stop: &AtomicBool) {
    let (fd, rings) = {
        let r = lock(reader);
        (r.get_ref().stream.as_raw_fd(), matches!(r.get_ref().stream, Stream::Ring(_)))
    };
    while !stop.load(Ordering::Acquire) {
        if rings {
            // Frames through shared memory wake no poll: look every 50 µs.
            std::thread::sleep(std::time::Duration::from_micros(50));
        } else {
            let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd; the timeout bounds how long a stop waits.
            unsafe { libc::poll(&mut p, 1, 2) };
        }
        let mut r = lock(reader);
        loop {
            let buffered = !r.buffer().is_empty();
            let readable = buffered || r.get_ref().readable();
            if !readable {
                break;
            }
            let mut payload = Vec::new();
            let h = match read_header(&mut *r)
                .and_then(|h| read_payload(&mut *r, h.len as usize, &mut payload).map(|_| h))
            {
                Ok(h) => h,
                // The client went away (or sent garbage): the loop finds out on its next read;
                // host functions waiting for it return.
                Err(_) => {
                    calls.end();
                    return;
                }
            };
            if h.kind == kind::HOST_RETURNED {
                if let Ok(Message::HostReturned { ids, data }) = Message::decode(h.kind, h.flags, &payload) {
                    calls.returned(&ids, data);
                    continue;
                }
            }
            lock(kept).push_back((h, payload));
        }
    }
}
