//! Code images loaded ahead, on several threads at once: a cold start (`gpuless invoke`) spends
//! most of its set-up in the driver's module and library loads, which do not depend on each
//! other or on anything else the set-up does. The loads run while the set-up's other records
//! (allocations, weight uploads) replay; the replay takes each load's handle when it reaches
//! the record ([`State::preloaded`](super::State)), waiting for it if it is not done yet.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use cudarc::driver::sys;
use gpuless_traces::{BlobBytes, Value};

use super::{Device, LoadedTrace};

/// A code image loaded ahead of its record.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Preloaded {
    /// `cuModuleLoadData` and its variants (the `CUmodule`, as an address).
    Module(usize),
    /// `cuLibraryLoadData` (the `CUlibrary`).
    Library(usize),
}

/// Whether a record of function `name` loads an in-memory image (a library: `Some(true)`)
/// this module can load ahead.
fn kind(name: &str) -> Option<bool> {
    match name {
        "cuModuleLoadData" | "cuModuleLoadDataEx" | "cuModuleLoadFatBinary" => Some(false),
        "cuLibraryLoadData" => Some(true),
        _ => None,
    }
}

/// Results the loading threads hand over: by sequence number, `None` for a load that failed.
#[derive(Default)]
struct Shared {
    done: Mutex<HashMap<u64, Option<Preloaded>>>,
    ready: Condvar,
}

/// Loads in flight or done, by the sequence number of their record.
#[derive(Default)]
pub(crate) struct Preloads {
    shared: Arc<Shared>,
    pending: HashSet<u64>,
}

impl Preloads {
    /// Starts loading the in-memory images of records `records` of `trace` on up to `threads`
    /// threads, each with `device`'s context current; returns at once.
    pub(crate) fn start(device: Device, trace: &LoadedTrace, records: &[usize], threads: usize) -> Preloads {
        let jobs: Vec<(u64, bool, BlobBytes)> = records
            .iter()
            .filter_map(|&i| {
                let r = trace.calls.get(i)?;
                let library = kind(r.function.api()?.name)?;
                let image = r.args.iter().find_map(|v| match v {
                    Value::Blob(b) => trace.blobs.get(&b.hash).cloned(),
                    _ => None,
                })?;
                Some((r.seq, library, image))
            })
            .collect();
        Preloads::start_keyed(device, jobs, threads)
    }

    /// Starts loading `jobs` — (key, whether a library, image) — on up to `threads` threads;
    /// [`Self::take`] then finds each by its key.
    pub(crate) fn start_keyed(device: Device, jobs: Vec<(u64, bool, BlobBytes)>, threads: usize) -> Preloads {
        let shared = Arc::new(Shared::default());
        let pending = jobs.iter().map(|j| j.0).collect();
        let jobs = Arc::new(jobs);
        let next = Arc::new(AtomicUsize::new(0));
        for _ in 0..threads.min(jobs.len()) {
            let (jobs, next, shared) = (jobs.clone(), next.clone(), shared.clone());
            std::thread::spawn(move || {
                let current = device.make_current().is_ok();
                while let Some((seq, library, image)) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let loaded = if current { load(*library, image) } else { None };
                    if let Ok(mut d) = shared.done.lock() {
                        d.insert(*seq, loaded);
                    }
                    shared.ready.notify_all();
                }
            });
        }
        Preloads { shared, pending }
    }

    /// Loads in flight or done, not taken yet.
    pub(crate) fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether record `seq`'s image is being or was loaded ahead (and not taken yet).
    pub(crate) fn has(&self, seq: u64) -> bool {
        self.pending.contains(&seq)
    }

    /// Unloads the images loaded ahead and never taken, waiting for loads in flight (an executor
    /// kept for another session must not keep them).
    pub(crate) fn unload_untaken(&mut self) {
        let keys: Vec<u64> = self.pending.iter().copied().collect();
        for k in keys {
            // SAFETY: handles these loads made and nobody took: nothing else refers to them.
            match self.take(k) {
                Some(Preloaded::Module(m)) => unsafe {
                    sys::cuModuleUnload(m as sys::CUmodule);
                },
                Some(Preloaded::Library(l)) => unsafe {
                    sys::cuLibraryUnload(l as sys::CUlibrary);
                },
                None => {}
            }
        }
    }

    /// Record `seq`'s preloaded image, waiting for its load; `None` if it was not loaded ahead
    /// or its load failed (the replay loads it then, and reports the failure at its record).
    pub(crate) fn take(&mut self, seq: u64) -> Option<Preloaded> {
        if !self.pending.remove(&seq) {
            return None;
        }
        let mut done = self.shared.done.lock().ok()?;
        loop {
            if let Some(r) = done.remove(&seq) {
                return r;
            }
            done = self.shared.ready.wait(done).ok()?;
        }
    }
}

/// Loads one image with no options.
fn load(library: bool, image: &[u8]) -> Option<Preloaded> {
    // Images are read as 64-bit words by the driver: an aligned copy.
    let mut words = vec![0u64; image.len().div_ceil(8)];
    // SAFETY: `words` holds at least `image.len()` bytes.
    unsafe { std::ptr::copy_nonoverlapping(image.as_ptr(), words.as_mut_ptr().cast(), image.len()) };
    // SAFETY: loads of a complete image with no options; out-pointers valid.
    unsafe {
        if library {
            let mut l = std::ptr::null_mut();
            let (o, v, lo) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
            let lv = std::ptr::null_mut();
            let r = sys::cuLibraryLoadData(&mut l, words.as_ptr().cast(), o, v, 0, lo, lv, 0);
            (r == sys::CUresult::CUDA_SUCCESS).then_some(Preloaded::Library(l as usize))
        } else {
            let mut m = std::ptr::null_mut();
            let r = sys::cuModuleLoadData(&mut m, words.as_ptr().cast());
            (r == sys::CUresult::CUDA_SUCCESS).then_some(Preloaded::Module(m as usize))
        }
    }
}
