//! Host functions of a client's session (`cuLaunchHostFunc`, `cuStreamAddCallback`, graph host
//! nodes added directly or by stream capture), run on the client in stream order.
//!
//! Where the program's host function would run, the executor runs a trampoline of its own
//! (a host function on the same stream, or the host node's function): it tells the client
//! which host function was reached ([`HostCall`], with the device-to-host results executed
//! before it that no answer carried yet) and blocks the driver's callback thread until the
//! client says it returned ([`HostCalls::returned`]). So the work before it in its stream has
//! completed when the client's function runs, the work after it does not start until it has
//! returned, and the session's other streams keep running — as with the driver's own host
//! functions, which also run one at a time on a thread of the driver.
//!
//! A host function's id is the sequence number of the record that registered it; a graph's
//! host node (or a captured host function) calls the same id at every launch of the graph.
//! In a local replay there is no client: host functions run as no-ops in stream order.

use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use gpuless_traces::protocol::HostCall;

/// Sends a [`HostCall`] to the client (the executor writes it on the session's connection).
pub type Sink = Box<dyn Fn(HostCall) -> std::io::Result<()> + Send + Sync>;

/// The session's host calls: what reached the client and what returned.
pub struct HostCalls {
    inner: Arc<Inner>,
}

struct Inner {
    sink: Sink,
    /// Whether any host function was registered (the executor then reads the connection while
    /// it executes, for the client's replies): one load for every message the executor reads.
    used: std::sync::atomic::AtomicBool,
    state: Mutex<Calls>,
    changed: Condvar,
}

#[derive(Default)]
struct Calls {
    /// Host calls the client reported returned and no trampoline has taken yet.
    returned: HashSet<(u64, u64)>,
    /// How many times each id was called (a graph node's id is called at every launch).
    called: std::collections::HashMap<u64, u64>,
    /// How many times each id returned.
    done: std::collections::HashMap<u64, u64>,
    /// The session ended (or its connection broke): trampolines return at once.
    ended: bool,
    /// Bytes the client read for late reads, by call, until their trampoline takes them.
    data: std::collections::HashMap<(u64, u64), Vec<u8>>,
    /// Late reads' bytes arriving in parts, by id, until the reply's ids come.
    parts: std::collections::HashMap<u64, Vec<u8>>,
    /// Bytes of late reads attached to a host function (by the copy's seq), until its
    /// trampoline takes them.
    attached: std::collections::HashMap<u64, Vec<u8>>,
}

/// What a trampoline is called with: its id and the results to send with its first call.
struct Tramp {
    inner: Arc<Inner>,
    id: u64,
    outputs: Mutex<Vec<(u64, Vec<u8>)>>,
    /// A late read: where the bytes the client read go (pinned memory of `len` bytes that the
    /// copy after the trampoline reads).
    into: Option<(usize, usize)>,
    /// Device-to-host copies before it in its graph: (seq, pinned buffer, length), whose bytes
    /// go with every call (they completed before it; the client writes them where they go).
    live: Vec<(u64, usize, usize)>,
    /// Late reads captured after it (seq, pinned staging buffer, length): the client reads
    /// their sources once the function returned, and the bytes come with its reply.
    attached: Mutex<Vec<(u64, usize, usize)>>,
}

/// A device-to-host copy of a graph whose bytes travel with the host calls after it: (seq of
/// its record, the pinned buffer it writes, its length).
pub(crate) type LiveOutput = (u64, *const u8, usize);

impl HostCalls {
    /// Host calls reported through `sink`.
    pub fn new(sink: Sink) -> Self {
        HostCalls {
            inner: Arc::new(Inner {
                sink,
                used: Default::default(),
                state: Mutex::new(Calls::default()),
                changed: Condvar::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Calls> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the session registered a host function: its replies may come at any time.
    pub fn used(&self) -> bool {
        self.inner.used.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The client reports host functions returned (or, without ids, parts of its late reads).
    pub fn returned(&self, ids: &[u64], data: Vec<(u64, u64, Vec<u8>)>) {
        let mut g = self.lock();
        for (id, off, bytes) in data {
            let v = g.parts.entry(id).or_default();
            if v.len() as u64 == off {
                v.extend_from_slice(&bytes);
            }
        }
        let mut data = std::mem::take(&mut g.parts);
        if ids.is_empty() {
            g.parts = data;
            return;
        }
        for &id in ids {
            let n = g.done.entry(id).or_insert(0);
            *n += 1;
            let n = *n;
            g.returned.insert((id, n));
            if let Some(d) = data.remove(&id) {
                g.data.insert((id, n), d);
            }
        }
        // The rest: late reads attached to these functions, by the copy's seq.
        g.attached.extend(data);
        drop(g);
        self.inner.changed.notify_all();
    }

    /// The session ends: every trampoline still waiting returns.
    pub fn end(&self) {
        self.lock().ended = true;
        self.inner.changed.notify_all();
    }

    /// The function and user data that call host function `id` (sending `outputs` first):
    /// for `cuLaunchHostFunc` or a host node. The trampoline lives as long as the session.
    pub(crate) fn trampoline(
        &self,
        id: u64,
        outputs: Vec<(u64, Vec<u8>)>,
        live: &[LiveOutput],
    ) -> (sys_fn::HostFn, *mut c_void) {
        self.inner.used.store(true, std::sync::atomic::Ordering::Release);
        let live = live.iter().map(|&(seq, p, n)| (seq, p as usize, n)).collect();
        let t = Box::new(Tramp {
            inner: self.inner.clone(),
            id,
            outputs: Mutex::new(outputs),
            into: None,
            live,
            attached: Default::default(),
        });
        // Kept alive for the process: a graph may call it at any later launch.
        (trampoline, Box::into_raw(t).cast())
    }
}

impl HostCalls {
    /// The function and user data of a late read (id `id`): the client reads `len` bytes of
    /// its pinned memory when the stream reaches it, and they land in `staging`, which the copy
    /// queued after it reads.
    pub(crate) fn late_read(&self, id: u64, staging: *mut u8, len: usize) -> (sys_fn::HostFn, *mut c_void) {
        self.inner.used.store(true, std::sync::atomic::Ordering::Release);
        let into = Some((staging as usize, len));
        let t = Box::new(Tramp {
            inner: self.inner.clone(),
            id,
            outputs: Mutex::new(Vec::new()),
            into,
            live: Vec::new(),
            attached: Default::default(),
        });
        (trampoline, Box::into_raw(t).cast())
    }
}

impl HostCalls {
    /// Attaches the late read `seq` (into `staging`, `len` bytes) to the host function whose
    /// user data is `tramp` (a trampoline of this session): the client reads the copy's source
    /// when that function returned, at every launch of its graph.
    pub(crate) fn attach(&self, tramp: *mut c_void, seq: u64, staging: *mut u8, len: usize) {
        // SAFETY: user data made by `trampoline`, never freed.
        let t = unsafe { &*(tramp as *const Tramp) };
        t.attached.lock().unwrap_or_else(|e| e.into_inner()).push((seq, staging as usize, len));
    }
}

impl Drop for HostCalls {
    fn drop(&mut self) {
        self.end();
    }
}

/// Whether `rec` may register a host function: by its function's id (the executor asks of
/// every record of a segment until the session registers one).
pub fn record_registers(rec: &gpuless_traces::CallRecord) -> bool {
    static IDS: std::sync::OnceLock<Vec<gpuless_analyzer::api::ApiId>> = std::sync::OnceLock::new();
    let ids = IDS.get_or_init(|| {
        ["cuLaunchHostFunc", "cuStreamAddCallback", "cuGraphAddHostNode", "cuGraphAddNode"]
            .iter()
            .filter_map(|n| gpuless_analyzer::api::by_name(n).map(|f| f.id))
            .collect()
    });
    rec.function.api().is_some_and(|f| ids.contains(&f.id))
}

/// The host function and user data that stand for the program's host function registered by
/// record `id`: the trampoline in a client's session; in a local replay, a no-op.
/// `live`: the device-to-host copies before it in its graph, whose bytes go with every call.
pub(crate) fn host_function(
    st: &super::State,
    id: u64,
    outputs: Vec<(u64, Vec<u8>)>,
    live: &[LiveOutput],
) -> (sys_fn::HostFn, *mut c_void) {
    match &st.host_calls {
        Some(h) => h.trampoline(id, outputs, live),
        None => (noop, std::ptr::null_mut()),
    }
}

/// The host function a local replay runs where the program ran its own.
pub(crate) unsafe extern "C" fn noop(_: *mut c_void) {}

/// The type of a host function (`CUhostFn`'s function).
pub(crate) mod sys_fn {
    /// `void (*)(void*)`.
    pub type HostFn = unsafe extern "C" fn(*mut std::ffi::c_void);
}

/// The executor's host function: reports the call and waits until the client's returned.
unsafe extern "C" fn trampoline(ud: *mut c_void) {
    // SAFETY: `ud` is a `Tramp` leaked by `HostCalls::trampoline`, never freed.
    let t = unsafe { &*(ud as *const Tramp) };
    let mut outputs = std::mem::take(&mut *t.outputs.lock().unwrap_or_else(|e| e.into_inner()));
    for &(seq, p, n) in &t.live {
        // SAFETY: pinned memory the session keeps for a copy of this graph, complete here.
        outputs.push((seq, unsafe { std::slice::from_raw_parts(p as *const u8, n) }.to_vec()));
    }
    let mut g = t.inner.state.lock().unwrap_or_else(|e| e.into_inner());
    if g.ended {
        return;
    }
    let n = g.called.entry(t.id).or_insert(0);
    *n += 1;
    let key = (t.id, *n);
    drop(g);
    if (t.inner.sink)(HostCall { ids: vec![t.id], outputs }).is_err() {
        // The connection broke: the session is over.
        let mut g = t.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        g.ended = true;
        drop(g);
        t.inner.changed.notify_all();
        return;
    }
    let mut g = t.inner.state.lock().unwrap_or_else(|e| e.into_inner());
    while !g.ended && !g.returned.remove(&key) {
        g = t.inner.changed.wait(g).unwrap_or_else(|e| e.into_inner());
    }
    if let (Some((at, len)), Some(d)) = (t.into, g.data.remove(&key)) {
        // SAFETY: pinned memory of `len` bytes the session keeps for this copy.
        unsafe { std::ptr::copy_nonoverlapping(d.as_ptr(), at as *mut u8, d.len().min(len)) };
    }
    for &(seq, at, len) in t.attached.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        if let Some(d) = g.attached.remove(&seq) {
            // SAFETY: pinned staging memory of `len` bytes the session keeps for that copy.
            unsafe { std::ptr::copy_nonoverlapping(d.as_ptr(), at as *mut u8, d.len().min(len)) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn a_trampoline_reports_its_call_and_waits_for_the_return() {
        let (tx, rx) = mpsc::channel::<HostCall>();
        let tx = Mutex::new(tx);
        let hc = Arc::new(HostCalls::new(Box::new(move |c| {
            tx.lock().unwrap().send(c).map_err(|_| std::io::Error::other("closed"))
        })));
        let (f, ud) = hc.trampoline(42, vec![(7, vec![1, 2])], &[]);
        assert!(hc.used());
        let ud = ud as usize;
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d = done.clone();
        let th = std::thread::spawn(move || {
            // SAFETY: the trampoline with its own user data.
            unsafe { f(ud as *mut c_void) };
            d.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        let c = rx.recv().unwrap();
        assert_eq!(c.ids, vec![42]);
        assert_eq!(c.outputs, vec![(7, vec![1, 2])]);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!done.load(std::sync::atomic::Ordering::SeqCst), "returned before the client did");
        hc.returned(&[42], Vec::new());
        th.join().unwrap();
        assert!(done.load(std::sync::atomic::Ordering::SeqCst));
        // A second call (a graph's next launch) sends no outputs again and waits again.
        let th = std::thread::spawn(move || unsafe { f(ud as *mut c_void) });
        let c = rx.recv().unwrap();
        assert!(c.outputs.is_empty());
        hc.end();
        th.join().unwrap();
    }

    #[test]
    fn a_late_read_fills_its_staging_from_parts_and_attached_reads_follow_their_function() {
        let (tx, rx) = mpsc::channel::<HostCall>();
        let tx = Mutex::new(tx);
        let hc = Arc::new(HostCalls::new(Box::new(move |c| {
            tx.lock().unwrap().send(c).map_err(|_| std::io::Error::other("closed"))
        })));
        let mut staging = vec![0u8; 6];
        let (f, ud) = hc.late_read(70, staging.as_mut_ptr(), staging.len());
        let ud = ud as usize;
        let th = std::thread::spawn(move || unsafe { f(ud as *mut c_void) });
        assert_eq!(rx.recv().unwrap().ids, vec![70]);
        hc.returned(&[], vec![(70, 0, vec![1, 2, 3])]); // a part, no ids: nothing returns yet
        hc.returned(&[70], vec![(70, 3, vec![4, 5, 6])]);
        th.join().unwrap();
        assert_eq!(staging, vec![1, 2, 3, 4, 5, 6]);
        // A host function with a read attached: the read's bytes come with its reply.
        let mut copy = vec![0u8; 2];
        let (f, ud) = hc.trampoline(80, Vec::new(), &[]);
        hc.attach(ud, 81, copy.as_mut_ptr(), copy.len());
        let ud = ud as usize;
        let th = std::thread::spawn(move || unsafe { f(ud as *mut c_void) });
        assert_eq!(rx.recv().unwrap().ids, vec![80]);
        hc.returned(&[80], vec![(81, 0, vec![9, 8])]);
        th.join().unwrap();
        assert_eq!(copy, vec![9, 8]);
    }
}
