//! Code images loaded ahead, on several threads at once: a cold start (`gpuless invoke`) spends
//! most of its set-up in the driver's module and library loads, which do not depend on each
//! other or on anything else the set-up does. Each load's handle is taken by the replay when
//! it reaches the record ([`State::preloaded`](super::State)).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use cudarc::driver::sys;
use gpuless_traces::Value;

use super::{Device, LoadedTrace};

/// A code image loaded ahead of its record.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Preloaded {
    /// `cuModuleLoadData` and its variants (the `CUmodule`, as an address).
    Module(usize),
    /// `cuLibraryLoadData` (the `CUlibrary`).
    Library(usize),
}

/// Whether record `r` loads an in-memory image this module can load ahead.
fn kind(name: &str) -> Option<bool> {
    match name {
        "cuModuleLoadData" | "cuModuleLoadDataEx" | "cuModuleLoadFatBinary" => Some(false),
        "cuLibraryLoadData" => Some(true),
        _ => None,
    }
}

/// Loads the in-memory images of records `records` of `trace` on up to `threads` threads,
/// each with `device`'s context current; returns the handles by sequence number. A load that
/// fails is left to the replay (which reports it at its record).
pub(crate) fn preload(
    device: Device,
    trace: &LoadedTrace,
    records: &[usize],
    threads: usize,
) -> HashMap<u64, Preloaded> {
    let jobs: Vec<(u64, bool, &[u8])> = records
        .iter()
        .filter_map(|&i| {
            let r = trace.calls.get(i)?;
            let library = kind(r.function.api()?.name)?;
            let image = r.args.iter().find_map(|v| match v {
                Value::Blob(b) => trace.blobs.get(&b.hash).map(|d| &**d),
                _ => None,
            })?;
            Some((r.seq, library, image))
        })
        .collect();
    let next = AtomicUsize::new(0);
    let out = Mutex::new(HashMap::new());
    std::thread::scope(|s| {
        for _ in 0..threads.min(jobs.len()) {
            s.spawn(|| {
                if device.make_current().is_err() {
                    return;
                }
                while let Some(&(seq, library, image)) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                    // Images are read as 64-bit words by the driver: an aligned copy.
                    let mut words = vec![0u64; image.len().div_ceil(8)];
                    // SAFETY: `words` holds at least `image.len()` bytes.
                    unsafe { std::ptr::copy_nonoverlapping(image.as_ptr(), words.as_mut_ptr().cast(), image.len()) };
                    // SAFETY: loads of a complete image with no options; out-pointers valid.
                    let loaded = unsafe {
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
                    };
                    if let (Some(p), Ok(mut o)) = (loaded, out.lock()) {
                        o.insert(seq, p);
                    }
                }
            });
        }
    });
    out.into_inner().unwrap_or_default()
}
