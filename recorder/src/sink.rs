//! The trace writer behind the recording: before the driver is initialized the records and
//! blobs wait here for the header's GPU facts ([`open`]); then the writer takes them, built on
//! its own thread ([`records_with`]), until the recording ends ([`close`]). A blob captured in
//! client mode is kept for the session as well ([`blob`]).

use std::ffi::{c_char, c_int, c_void};
use std::path::PathBuf;
use std::sync::{Mutex, RwLock};

use gpuless_traces::{BlobKind, BlobRef, CallRecord, TraceMeta, TraceWriter, Value, WriterOptions};

use crate::{mode, state};

enum Sink {
    /// Before the driver is initialized: records wait here for the header's GPU facts.
    Pending(Vec<CallRecord>, Vec<(BlobKind, Vec<u8>)>),
    Open(TraceWriter),
    Closed,
}

static SINK: RwLock<Sink> = RwLock::new(Sink::Pending(Vec::new(), Vec::new()));
static OPENING: Mutex<()> = Mutex::new(());

/// Hands records to the writer: `make` builds them on the writer's thread once the trace is
/// open, at once while it waits for the driver; nothing after it closed.
pub fn records_with(make: impl FnOnce() -> Vec<CallRecord> + Send + 'static) {
    if let Ok(s) = SINK.read() {
        match &*s {
            Sink::Open(w) => {
                if let Err(e) = w.records_with(make) {
                    drop(s);
                    state::fail(&format!("trace writer: {e}"));
                }
                return;
            }
            Sink::Closed => return,
            Sink::Pending(..) => {}
        }
    }
    if let Ok(mut s) = SINK.write() {
        match &mut *s {
            Sink::Pending(pending, _) => pending.extend(make()),
            Sink::Open(w) => {
                let _ = w.records_with(make);
            }
            Sink::Closed => {}
        }
    }
}

/// Stores a blob, returning its reference.
pub fn blob(kind: BlobKind, data: &[u8]) -> Value {
    if let Some(client) = mode::active().then(mode::client).flatten() {
        let r = (client.blob)(kind, data);
        if state::trace_path().is_none() {
            return r;
        }
        // `gpuless record --remote`: the trace keeps the bytes too (same hash).
    }
    if let Ok(s) = SINK.read() {
        match &*s {
            Sink::Open(w) => {
                return match w.blob(kind, data) {
                    Ok(r) => Value::Blob(r),
                    Err(e) => {
                        drop(s);
                        state::fail(&format!("trace writer: {e}"));
                        Value::Null
                    }
                };
            }
            Sink::Closed => return Value::Null,
            Sink::Pending(..) => {}
        }
    }
    let r = BlobRef { hash: gpuless_traces::Hash128::of(data), len: data.len() as u64 };
    if let Ok(mut s) = SINK.write() {
        if let Sink::Pending(_, blobs) = &mut *s {
            blobs.push((kind, data.to_vec()));
        }
    }
    Value::Blob(r)
}

type DriverGetVersion = unsafe extern "C" fn(*mut c_int) -> u32;
type DeviceGetName = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> u32;
type DeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> u32;
type DeviceGetUuid = unsafe extern "C" fn(*mut u8, c_int) -> u32;

fn driver_fn<T: Copy>(cname: &str) -> Option<T> {
    let p = crate::driver::libcuda_symbol(cname);
    // SAFETY: `T` is the function's C signature (size of a pointer), checked by callers.
    (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

/// Facts about device 0 for the header, asked of the real driver (not through hooks).
pub fn device_facts(meta: &mut TraceMeta) {
    use cudarc::driver::sys::CUdevice_attribute as A;
    // SAFETY: real driver functions with valid out-pointers; the driver is initialized.
    unsafe {
        if let Some(f) = driver_fn::<DriverGetVersion>("cuDriverGetVersion\0") {
            let mut v = 0;
            if f(&mut v) == 0 {
                meta.driver_version = v;
            }
        }
        if let Some(f) = driver_fn::<DeviceGetName>("cuDeviceGetName\0") {
            let mut buf = [0 as c_char; 256];
            if f(buf.as_mut_ptr(), 255, 0) == 0 {
                meta.gpu_name = std::ffi::CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned();
            }
        }
        if let Some(f) = driver_fn::<DeviceGetAttribute>("cuDeviceGetAttribute\0") {
            let (mut ma, mut mi) = (0, 0);
            if f(&mut ma, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR as c_int, 0) == 0
                && f(&mut mi, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR as c_int, 0) == 0
            {
                meta.sm = (ma * 10 + mi) as u32;
            }
        }
        if let Some(f) = driver_fn::<DeviceGetUuid>("cuDeviceGetUuid_v2\0") {
            let mut u = [0u8; 16];
            if f(u.as_mut_ptr(), 0) == 0 {
                meta.uuid = u.to_vec();
            }
        }
    }
}

fn base_meta() -> TraceMeta {
    let cmdline = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    TraceMeta {
        tool_version: format!("gpuless-recorder {}", env!("CARGO_PKG_VERSION")),
        command_line: cmdline
            .split(|&b| b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect(),
        start_time_unix_ns: state::start_unix_ns(),
        pid: std::process::id(),
        hostname: hostname.trim().to_string(),
        ..TraceMeta::default()
    }
}

/// Opens the trace file once the driver is initialized (or at exit if it never was):
/// `describe` fills the header's device facts from the driver that is ready ([`device_facts`]
/// for the real one, the session's description in client mode); `None` when none is.
pub fn open(describe: Option<&dyn Fn(&mut TraceMeta)>) {
    let _g = OPENING.lock();
    if !matches!(SINK.read().as_deref(), Ok(Sink::Pending(..))) {
        return;
    }
    let Some(path) = state::trace_path().cloned() else { return };
    // Not inside `state::config()`: starting a thread calls dlsym, which asks it again.
    crate::signals::install();
    let mut meta = base_meta();
    meta.cuda_version = state::cuda_version();
    if let Some(describe) = describe {
        describe(&mut meta);
        state::set_device_sm(meta.sm);
        if !state::keep_all_code() {
            meta.extra.push(("code".into(), format!("sm_{} only", meta.sm)));
        }
        if let Some((base, size)) = crate::arena::reserve() {
            meta.arena_base = base;
            meta.arena_size = size;
            meta.extra.push(("arena_chunk".into(), gpuless_traces::arena::CHUNK.to_string()));
        }
    }
    // A child process that inherited the environment writes next to the first trace.
    let path = match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
        Ok(_) => path,
        Err(_) => {
            let mut p = path.into_os_string();
            p.push(format!(".{}", std::process::id()));
            PathBuf::from(p)
        }
    };
    let max_file_bytes = std::env::var(state::ENV_MAX_SIZE).ok().and_then(|v| v.parse::<u64>().ok()).filter(|&m| m > 0);
    // The writer's default queue (16 Ki messages, ~1 MiB): records travel in batches, one
    // message per hand-over, so a deeper queue only costs memory — 1 Mi slots were 56 MiB
    // written at cuInit, in every recorded process.
    let mut opts = WriterOptions { max_file_bytes, ..WriterOptions::default() };
    if let Some(n) = std::env::var(state::ENV_COMPRESS_THREADS).ok().and_then(|v| v.trim().parse::<usize>().ok()) {
        opts.compression_threads = n.min(64);
    }
    let writer = match TraceWriter::create(&path, &meta, opts) {
        Ok(w) => w,
        Err(e) => {
            let mut s = SINK.write().unwrap_or_else(|e| e.into_inner());
            *s = Sink::Closed;
            state::fail(&format!("cannot create {}: {e}", path.display()));
            return;
        }
    };
    let mut s = SINK.write().unwrap_or_else(|e| e.into_inner());
    if let Sink::Pending(recs, blobs) = std::mem::replace(&mut *s, Sink::Closed) {
        for (kind, data) in blobs {
            let _ = writer.blob_owned(kind, data);
        }
        // One message for what came before the trace opened (tens of thousands of kernel
        // registrations in a PyTorch process).
        let _ = writer.records(recs);
    }
    *s = Sink::Open(writer);
}

/// Closes the trace: the writer writes what it holds and the index (the end of the recording).
pub fn close() {
    let w = {
        let mut s = SINK.write().unwrap_or_else(|e| e.into_inner());
        match std::mem::replace(&mut *s, Sink::Closed) {
            Sink::Open(w) => Some(w),
            _ => None,
        }
    };
    if let Some(w) = w {
        if let Err(e) = w.finish() {
            eprintln!("gpuless: finishing the trace failed: {e}");
        }
    }
}
