//! What an executor tells its server during a session: latency samples, the blobs and piece
//! templates for the cache (which only the server writes: `manager_store.rs`), the blobs it
//! found there, questions it waits for ([`ask`]: a function's registration, a barrier), and
//! the memory a program's processes share, which the server brokers ([`ControlBroker`]).

use super::*;
use std::os::fd::AsRawFd;

/// Sends `m` to the server on `control` and waits for its [`Control::Registered`] answer (at
/// most 60 s): `Ok` for an empty one, else why it failed.
pub(super) fn ask(control: &Channel, m: &Control) -> Result<(), String> {
    control.send(m, None).map_err(|e| format!("asking the server: {e}"))?;
    loop {
        match control.recv_timeout(Duration::from_secs(60)) {
            Ok(Some((Control::Registered(e), _))) => return if e.is_empty() { Ok(()) } else { Err(e) },
            Ok(Some(_)) => continue,
            Ok(None) => return Err("no answer from the server within 60 s (or it closed the channel)".into()),
            Err(e) => return Err(format!("waiting for the server: {e}")),
        }
    }
}

/// The session's piece templates go to the server on `control`, which keeps them for the
/// program's next session (the executor cannot write the cache).
pub(super) fn keep_templates(control: &Channel, p: &mut crate::server::pieces::Pieces) {
    let Some((key, bytes)) = p.kept() else { return };
    match crate::server::manager::store::sealed(&[(key, &bytes)]) {
        Ok((fd, _)) => {
            let m = Control::Templates { key, len: bytes.len() as u64 };
            let _ = crate::server::manager::store::send_with(control, &m, &fd);
        }
        Err(e) => eprintln!("gpuless executor: the piece templates could not be kept: {e}"),
    }
}

/// Blobs for the cache in a sealed memfd, and where each lies ([`Control::Store`]).
pub(super) type Stored = (OwnedFd, Vec<shm::Entry>);

impl Session<'_> {
    /// A measurement for the server's histograms, by kind: 0 a segment's execution, 1 from a
    /// synchronizing segment's arrival to its answer, 2 a best-effort hold at the gate, 3 a wait
    /// in the best-effort window (microseconds); 4 a preemption latency, 5 the uncertainty of
    /// the clock it was measured with (nanoseconds).
    pub(super) fn sample(&mut self, which: u8, value: u64) {
        self.samples.push((which, value.min(u64::from(u32::MAX)) as u32));
        if self.samples.len() >= SAMPLES {
            let s = std::mem::take(&mut self.samples);
            let _ = self.control.send(&Control::Samples(s), None);
        }
    }

    /// [`ask`] on the session's control channel.
    pub(super) fn ask(&self, m: &Control) -> Result<(), String> {
        ask(self.control, m)
    }

    /// Sends the server the blobs for the cache ready so far, what was found in it, and the
    /// latencies so far.
    /// `wait`: also for the cache copies still being written.
    pub(super) fn flush_notes(&mut self, wait: bool) {
        if wait {
            self.flush_small();
        }
        let (done, running): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.writers).into_iter().partition(|t| wait || t.is_finished());
        self.writers = running;
        for (fd, entries) in done.into_iter().filter_map(|t| t.join().ok().flatten()) {
            // Large lists go in packets of a few thousand entries, each with the memfd.
            for part in entries.chunks(4096) {
                let _ = crate::server::manager::store::send_with(self.control, &Control::Store(part.to_vec()), &fd);
            }
        }
        self.hits.append(&mut self.functions.hits);
        let calls = self.functions.take_counts(wait);
        if !calls.is_empty() {
            let _ = self.control.send(&Control::Invocations(calls), None);
        }
        // Large lists go in packets of a few thousand entries (what was added, the server
        // knows: it wrote it).
        for hits in std::mem::take(&mut self.hits).chunks(4096) {
            let _ = self.control.send(&Control::Cache { added: Vec::new(), hits: hits.to_vec() }, None);
        }
        if !self.samples.is_empty() {
            let s = std::mem::take(&mut self.samples);
            let _ = self.control.send(&Control::Samples(s), None);
        }
    }
}

/// The server as the session's broker of memory shared between a program's processes
/// ([`crate::replay::share`]): offers and takes on the control channel, answered in order (the
/// executor asks from the thread that executes the session's records).
pub(super) struct ControlBroker(pub(super) Channel);

impl crate::replay::share::Broker for ControlBroker {
    fn offer(&self, token: u128, fd: &OwnedFd) -> Result<(), String> {
        self.0.send(&Control::Offer { token }, Some(fd.as_raw_fd())).map_err(|e| format!("asking the server: {e}"))?;
        loop {
            match self.0.recv_timeout(Duration::from_secs(60)) {
                Ok(Some((Control::Registered(e), _))) => return if e.is_empty() { Ok(()) } else { Err(e) },
                Ok(Some(_)) => continue,
                Ok(None) => return Err("no answer from the server within 60 s".into()),
                Err(e) => return Err(format!("waiting for the server: {e}")),
            }
        }
    }

    fn take(&self, token: u128) -> Result<OwnedFd, String> {
        self.0.send(&Control::Take { token }, None).map_err(|e| format!("asking the server: {e}"))?;
        loop {
            match self.0.recv_timeout(Duration::from_secs(60)) {
                Ok(Some((Control::Given(e), fd))) => {
                    return match fd {
                        Some(fd) if e.is_empty() => Ok(fd),
                        _ if e.is_empty() => Err("the server's answer came without its descriptor".into()),
                        _ => Err(e),
                    }
                }
                Ok(Some(_)) => continue,
                Ok(None) => return Err("no answer from the server within 60 s".into()),
                Err(e) => return Err(format!("waiting for the server: {e}")),
            }
        }
    }
}
