//! What goes out besides the program's calls: managed memory the host wrote and the pull that
//! ends a wait (`remote/shared.rs`), gpuless's own records, blobs; and where the bytes of
//! asynchronous device-to-host copies go when they come back.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

use gpuless_traces::{BlobKind, BlobRef, CallRecord, Function, Hash128, Value};

use super::Session;
use crate::remote::copies::Target;
use crate::state;

/// Where the bytes of asynchronous device-to-host copies go when they come back: in an answer,
/// or with a host call (which a waiting thread, holding the session, or the host-call poller,
/// holding only the connection, receives). A leaf lock: nothing else is taken under it.
#[derive(Default)]
pub(crate) struct Targets {
    /// Copies whose bytes have not arrived: seq → where they go.
    d2h: HashMap<u64, Target>,
    /// Copies captured into graphs: their bytes come back after every launch of the graph, so
    /// their targets stay.
    graph_d2h: HashSet<u64>,
}

static TARGETS: std::sync::LazyLock<Mutex<Targets>> = std::sync::LazyLock::new(Default::default);

/// The targets, locked.
pub(crate) fn targets() -> MutexGuard<'static, Targets> {
    TARGETS.lock().unwrap_or_else(|e| e.into_inner())
}

impl Targets {
    pub(super) fn add(&mut self, seq: u64, target: Target, captured: bool) {
        self.d2h.insert(seq, target);
        if captured {
            self.graph_d2h.insert(seq);
        }
    }

    /// Whether bytes of a copy outside graphs have yet to come back.
    pub(super) fn awaited(&self) -> bool {
        self.d2h.keys().any(|seq| !self.graph_d2h.contains(seq))
    }

    /// Writes the bytes of copy `seq` where they go (nothing for a copy not awaited).
    ///
    /// # Safety
    /// The program's buffer or rows of an asynchronous copy, which it reads only after the
    /// synchronization (or in the host function) that delivers them.
    pub(crate) unsafe fn deliver(&mut self, seq: u64, bytes: &[u8]) {
        let target = if self.graph_d2h.contains(&seq) { self.d2h.get(&seq).copied() } else { self.d2h.remove(&seq) };
        // SAFETY (both): the caller's contract.
        match target {
            // Shared memory: the executor wrote its copy too (`replay/exec.rs`, `mirror_output`).
            Some(Target::Buffer(host, len))
                if crate::remote::shared::write_synced(host, &bytes[..bytes.len().min(len)]) => {}
            Some(Target::Buffer(host, len)) => unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), host as *mut u8, bytes.len().min(len))
            },
            Some(Target::Rows(c)) => unsafe { crate::remote::copies::scatter_rows(&c, bytes) },
            None => {}
        }
    }
}

/// Pinned memory the device uses from now on (`host.rs`): the executor backs it with device
/// memory at its address before the next record (whose dirty pages follow). `false` without a
/// session.
pub(crate) fn mirror_host(addr: u64, len: u64) -> bool {
    let mut g = super::lock();
    match super::open_session(&mut g) {
        Ok(sess) => {
            sess.push_other(gpuless_traces::hostview::HOST_MIRROR, vec![Value::DevPtr(addr), Value::Size(len)]);
            true
        }
        Err(_) => false,
    }
}

impl Session {
    /// What goes before the next record of the program: the device it runs on, where that
    /// changed (a session of several devices, [`gpuless_traces::devices::SET_DEVICE`]), and
    /// the managed memory the host wrote.
    pub(super) fn before_record(&mut self) {
        self.switch_device();
        self.push_dirty();
    }

    /// The calling thread's current device, where it is not the one the last record ran on.
    pub(super) fn switch_device(&mut self) {
        if self.welcome.more.devices.is_empty() {
            return;
        }
        let d = super::route::current().device;
        if d != self.device {
            self.device = d;
            self.push_other(gpuless_traces::devices::SET_DEVICE, vec![Value::Size(u64::from(d))]);
        }
    }

    /// Managed memory the host wrote goes before the next record (`shared.rs`).
    fn push_dirty(&mut self) {
        if !crate::remote::shared::dirty() {
            return;
        }
        // Each server's own: the allocation's address says its device (`route.rs`).
        let me = self.member;
        let mine =
            |start: u64| super::route::device_of_address(start).map_or(0, |d| super::route::split(d).member) == me;
        for (addr, bytes) in crate::remote::shared::take_dirty(mine) {
            let data = self.keep_blob(BlobKind::HostToDevice, &bytes);
            self.push_other(gpuless_traces::hostview::HOST_MEMORY, vec![Value::DevPtr(addr), data]);
        }
    }

    /// A wait ends with the pull of what the device changed in managed memory (`shared.rs`).
    pub(super) fn push_pull(&mut self) {
        self.pull =
            crate::remote::shared::active().then(|| self.push_other(gpuless_traces::hostview::HOST_PULL, Vec::new()));
        self.pulls += u64::from(self.pull.is_some());
    }

    /// Queues a record of gpuless's own (not a driver call); its sequence number.
    pub(super) fn push_other(&mut self, name: &str, args: Vec<Value>) -> u64 {
        let seq = state::next_seq();
        let mut rec = CallRecord::new(seq, gpuless_analyzer::api::ApiLevel::Other, Function::Other(name.to_string()));
        rec.thread = crate::lane::tid();
        rec.args = args;
        self.pending.push(rec);
        self.pieces.pushed(&mut self.pending, &mut self.refs);
        seq
    }

    /// A blob of `data`, kept until the segment that refers to it goes out.
    fn keep_blob(&mut self, kind: BlobKind, data: &[u8]) -> Value {
        let hash = Hash128::of(data);
        if !self.held.contains(&hash) && !self.new_blobs.iter().any(|(h, _)| *h == hash) {
            self.new_blobs.push((hash, data.to_vec()));
        }
        let _ = kind;
        Value::Blob(BlobRef { hash, len: data.len() as u64 })
    }
}
