//! The recording's switches and counters, the lowest layer every other reads: whether
//! recording is on (`GPULESS_TRACE`) or stopped for good, the sequence counter, what the
//! environment asks for (levels, outputs, code), and the process's exit and fork as the
//! recording sees them. The trace itself is written above: `sink.rs` (the writer), `batches.rs`
//! (each thread's records), `finish.rs` (the end).

use std::ffi::c_int;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::hot::HOT;

/// Environment variable naming the trace file to write.
pub const ENV_TRACE: &str = "GPULESS_TRACE";
/// Set to 1 to store device-to-host results in full instead of their hash.
pub const ENV_CAPTURE_OUTPUTS: &str = "GPULESS_CAPTURE_OUTPUTS";
/// `all` stores every entry of a fatbin; by default only the code the recording GPU runs.
pub const ENV_CODE: &str = "GPULESS_CODE";

/// Comma-separated API levels whose calls are counted besides the driver's (`runtime`,
/// `cublas`, `cublaslt`, `cudnn`, `nvrtc`, `other`); default all. The driver is always recorded.
pub const ENV_LEVELS: &str = "GPULESS_LEVELS";
/// Trace size limit in bytes; once reached the rest of the run is not recorded.
pub const ENV_MAX_SIZE: &str = "GPULESS_MAX_SIZE";
/// Threads compressing the trace (0: on the writer thread); default
/// [`gpuless_traces::default_compression_threads`].
pub const ENV_COMPRESS_THREADS: &str = "GPULESS_COMPRESS_THREADS";

/// Whether calls of `level` are recorded (`GPULESS_LEVELS`).
pub fn level_enabled(level: gpuless_analyzer::api::ApiLevel) -> bool {
    use gpuless_analyzer::api::ApiLevel;
    static LEVELS: OnceLock<Option<Vec<String>>> = OnceLock::new();
    let chosen = LEVELS.get_or_init(|| {
        std::env::var(ENV_LEVELS)
            .ok()
            .filter(|v| !v.trim().is_empty() && v.trim() != "all")
            .map(|v| v.split(',').map(|s| s.trim().to_ascii_lowercase()).collect())
    });
    level == ApiLevel::Driver || chosen.as_ref().is_none_or(|l| l.iter().any(|n| n == level.name()))
}

/// SM of the recording GPU (10·major + minor), known once the driver is initialized.
static DEVICE_SM: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Highest CUDA version a caller of `cuGetProcAddress` asked entry points for: the version of
/// the CUDA runtime (or library) the program was built with (1000·major + 10·minor).
static CUDA_VERSION: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Notes the `cudaVersion` argument of a `cuGetProcAddress` call.
pub fn note_cuda_version(v: c_int) {
    CUDA_VERSION.fetch_max(v, Ordering::Relaxed);
}

/// SM of the recording GPU, 0 before `cuInit`.
pub fn device_sm() -> u32 {
    DEVICE_SM.load(Ordering::Relaxed)
}

/// Sets the device's SM where no driver tells it (client mode: the session's device).
pub(crate) fn set_device_sm(sm: u32) {
    DEVICE_SM.store(sm, Ordering::Relaxed);
}

/// Whether fatbins are stored with every entry (`GPULESS_CODE=all`).
pub fn keep_all_code() -> bool {
    static ALL: OnceLock<bool> = OnceLock::new();
    *ALL.get_or_init(|| std::env::var(ENV_CODE).is_ok_and(|v| v == "all"))
}

/// Pauses or resumes recording (`diag::gpuless_diag_pause`).
pub(crate) fn pause(paused: bool) {
    HOT.paused.store(paused, Ordering::Relaxed);
}
static DISABLED: &AtomicBool = &HOT.disabled;
static SEQ: &AtomicU64 = &HOT.seq;

struct Config {
    path: Option<PathBuf>,
    capture_outputs: bool,
    start_unix_ns: u64,
}

fn config() -> &'static Config {
    static C: OnceLock<Config> = OnceLock::new();
    C.get_or_init(|| {
        let path = std::env::var_os(ENV_TRACE).filter(|p| !p.is_empty()).map(PathBuf::from);
        let start_unix_ns =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        if path.is_some() {
            crate::owner::note_owner();
            // SAFETY: registering plain extern "C" functions with the C library.
            unsafe {
                libc::atexit(at_exit);
                libc::pthread_atfork(None, None, Some(in_child));
            }
        }
        crate::clock::start();
        Config { path, capture_outputs: std::env::var(ENV_CAPTURE_OUTPUTS).is_ok_and(|v| v == "1"), start_unix_ns }
    })
}

/// The trace file asked for (`GPULESS_TRACE`), if any.
pub(crate) fn trace_path() -> Option<&'static PathBuf> {
    config().path.as_ref()
}

/// When recording started (Unix nanoseconds).
pub(crate) fn start_unix_ns() -> u64 {
    config().start_unix_ns
}

/// Highest CUDA version a caller of `cuGetProcAddress` asked for, 0 if none
/// ([`note_cuda_version`]).
pub(crate) fn cuda_version() -> c_int {
    CUDA_VERSION.load(Ordering::Relaxed)
}

/// Whether calls are being recorded.
pub fn enabled() -> bool {
    let on = match HOT.recording.load(Ordering::Relaxed) {
        0 => {
            let on = config().path.is_some();
            HOT.recording.store(if on { 1 } else { 2 }, Ordering::Relaxed);
            on
        }
        r => r == 1,
    };
    on && !DISABLED.load(Ordering::Relaxed) && !HOT.paused.load(Ordering::Relaxed)
}

/// Whether device-to-host results are stored in full.
pub fn capture_outputs() -> bool {
    config().capture_outputs
}

/// Nanoseconds since the recorder started.
pub fn now_ns() -> u64 {
    crate::clock::now_ns()
}

/// The next sequence number.
pub fn next_seq() -> u64 {
    SEQ.fetch_add(1, Ordering::Relaxed)
}

/// The first of `n` consecutive sequence numbers.
pub fn next_seqs(n: u64) -> u64 {
    SEQ.fetch_add(n, Ordering::Relaxed)
}

/// Stops recording after an internal error, saying so once; the program runs on unchanged.
pub fn fail(what: &str) {
    if !DISABLED.swap(true, Ordering::Relaxed) {
        eprintln!("gpuless: recorder disabled, calls now pass through untouched: {what}");
    }
}

/// Sequence numbers given so far.
pub(crate) fn seqs_given() -> u64 {
    SEQ.load(Ordering::Relaxed)
}

/// Annotation records the runtime's registrations queued (`cudart.rs`): a process that only
/// registered kernels and never called the driver leaves no trace file (`finish.rs`).
static ANNOTATIONS: AtomicU64 = AtomicU64::new(0);

/// Counts one annotation record queued.
pub(crate) fn note_annotation() {
    ANNOTATIONS.fetch_add(1, Ordering::Relaxed);
}

/// Number of annotation records queued so far.
pub(crate) fn annotations() -> u64 {
    ANNOTATIONS.load(Ordering::Relaxed)
}

/// Stops recording for good (the trace is finished); later calls pass through.
pub(crate) fn disable() {
    DISABLED.store(true, Ordering::Relaxed);
}

/// What the process's exit runs (`atexit`, registered with the trace path on first use): the
/// recording's end (`finish.rs`), which lies above this layer and is lent at load (`init.rs`).
static AT_EXIT: OnceLock<fn()> = OnceLock::new();

/// Lends the recording's end to the exit path (once).
pub(crate) fn on_exit(finish: fn()) {
    let _ = AT_EXIT.set(finish);
}

extern "C" fn at_exit() {
    if let Some(finish) = AT_EXIT.get() {
        finish();
    }
    // Calls made after this (other atexit handlers, late threads) pass through unrecorded.
    DISABLED.store(true, Ordering::Relaxed);
}

/// Set in a child forked without `exec`: its CUDA calls are not recorded (cleared once said).
static FORKED: AtomicBool = AtomicBool::new(false);
/// Set in a child forked without `exec`, for good: the writer it inherited is the parent's.
static IN_CHILD: AtomicBool = AtomicBool::new(false);

extern "C" fn in_child() {
    // The writer thread does not exist in a forked child: record nothing there.
    DISABLED.store(true, Ordering::Relaxed);
    FORKED.store(true, Ordering::Relaxed);
    IN_CHILD.store(true, Ordering::Relaxed);
    crate::signals::reset_in_child();
}

/// A call that is not recorded because recording is off: a forked child says so once, naming
/// the call (a child that `exec`s starts a recorder of its own and writes `TRACE.PID`).
pub fn unrecorded(name: &str) {
    if FORKED.load(Ordering::Relaxed) && FORKED.swap(false, Ordering::Relaxed) {
        eprintln!(
            "gpuless: process {} was forked from a recorded process without exec; its CUDA calls \
             (first: {name}) are not recorded. Run it through exec (e.g. multiprocessing's \
             'spawn' start method) to get a trace of its own",
            std::process::id()
        );
    }
}

/// Whether this is a child forked without `exec` (the writer it inherited is the parent's).
pub(crate) fn in_forked_child() -> bool {
    IN_CHILD.load(Ordering::Relaxed)
}
