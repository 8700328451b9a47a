//! `gpuless replay --dry-run`: walks a trace against a model of device memory and handles,
//! without a GPU, and reports every call the replayer could not execute faithfully: a copy or
//! set outside every live allocation, a free of unknown memory, a launch of a kernel never
//! loaded, an unknown stream or event, a missing blob. CI tests replay logic with it.

use std::collections::{BTreeMap, HashSet};

use gpuless_traces::Value;
use serde::Serialize;

use super::args::{word, Call};
use super::LoadedTrace;

/// Violations reported in full (the count covers all).
const MAX_REPORTED: usize = 50;

/// What the dry run found.
#[derive(Debug, Default, Serialize)]
pub struct DryRunReport {
    /// Records in the trace.
    pub calls: u64,
    /// Records checked against the model (the ones a replay executes).
    pub checked: u64,
    /// Number of violations.
    pub violation_count: u64,
    /// The first violations, in trace order: `call #SEQ FUNCTION: problem`.
    pub violations: Vec<String>,
}

#[derive(Default)]
struct Model {
    /// Live allocations and module globals: base → size (recorded addresses).
    ranges: BTreeMap<u64, u64>,
    modules: HashSet<u64>,
    libraries: HashSet<u64>,
    functions: HashSet<u64>,
    kernels: HashSet<u64>,
    streams: HashSet<u64>,
    events: HashSet<u64>,
}

impl Model {
    fn inside(&self, p: u64, n: u64) -> bool {
        self.ranges
            .range(..=p)
            .next_back()
            .is_some_and(|(&base, &size)| p.checked_add(n).is_some_and(|end| end <= base.saturating_add(size.max(1))))
    }

    fn stream_ok(&self, s: u64) -> bool {
        s <= 2 || self.streams.contains(&s)
    }
}

/// Checks `trace` without a GPU.
pub fn dry_run(trace: &LoadedTrace) -> DryRunReport {
    let mut m = Model::default();
    let mut r = DryRunReport { calls: trace.calls.len() as u64, ..DryRunReport::default() };
    for rec in &trace.calls {
        let Some(f) = rec.function.api() else { continue };
        if rec.status != 0 {
            continue;
        }
        let c = Call { f, rec };
        match check(&mut m, trace, &c) {
            Ok(true) => r.checked += 1,
            Ok(false) => {}
            Err(problem) => {
                r.checked += 1;
                r.violation_count += 1;
                if r.violations.len() < MAX_REPORTED {
                    r.violations.push(format!("call #{} {}: {problem}", rec.seq, f.name));
                }
            }
        }
    }
    r
}

fn w(c: &Call<'_>, name: &str) -> Result<u64, String> {
    c.word(name).map_err(|e| e.to_string())
}

fn ow(c: &Call<'_>, name: &str) -> Result<u64, String> {
    c.out_word(name).map_err(|e| e.to_string())
}

fn blob_ok(trace: &LoadedTrace, v: Option<&Value>, what: &str) -> Result<(), String> {
    match v {
        Some(Value::Blob(b)) => match trace.blobs.get(&b.hash) {
            Some(d) if d.len() as u64 == b.len => Ok(()),
            Some(d) => Err(format!("{what} blob {} holds {} bytes, the record says {}", b.hash, d.len(), b.len)),
            None => Err(format!("{what} blob {} ({} bytes) is missing from the trace", b.hash, b.len)),
        },
        other => Err(format!("{what} bytes were not recorded ({other:?})")),
    }
}

fn range(m: &Model, p: u64, n: u64, what: &str) -> Result<(), String> {
    if m.inside(p, n) {
        Ok(())
    } else {
        Err(format!("{what} {p:#x}..+{n} lies outside every live allocation"))
    }
}

/// Checks one record; `Ok(false)` when the replayer does not execute it.
fn check(m: &mut Model, trace: &LoadedTrace, c: &Call<'_>) -> Result<bool, String> {
    match c.f.name {
        "cuMemAlloc" | "cuMemAllocAsync" | "cuMemAllocPitch" => {
            let p = ow(c, "dptr")?;
            let n = if c.f.name == "cuMemAllocPitch" { ow(c, "pPitch")? * w(c, "Height")? } else { w(c, "bytesize")? };
            if p == 0 {
                return Err("allocation returned a null address".into());
            }
            if m.inside(p, 1) || m.ranges.range(p..p.saturating_add(n)).next().is_some() {
                return Err(format!("allocation {p:#x}..+{n} overlaps a live allocation"));
            }
            m.ranges.insert(p, n);
        }
        "cuMemFree" | "cuMemFreeAsync" => {
            let p = w(c, "dptr")?;
            // cuMemFree(0) is defined as a no-op.
            if p != 0 && m.ranges.remove(&p).is_none() {
                return Err(format!("frees {p:#x}, which is not a live allocation"));
            }
        }
        "cuMemcpyHtoD" | "cuMemcpyHtoDAsync" => {
            blob_ok(trace, c.arg("srcHost"), "host-to-device payload")?;
            range(m, w(c, "dstDevice")?, w(c, "ByteCount")?, "destination")?;
        }
        "cuMemcpyDtoH" | "cuMemcpyDtoHAsync" => range(m, w(c, "srcDevice")?, w(c, "ByteCount")?, "source")?,
        "cuMemcpyDtoD" | "cuMemcpyDtoDAsync" => {
            let n = w(c, "ByteCount")?;
            range(m, w(c, "dstDevice")?, n, "destination")?;
            range(m, w(c, "srcDevice")?, n, "source")?;
        }
        "cuMemcpy" | "cuMemcpyAsync" => {
            let n = w(c, "ByteCount")?;
            range(m, w(c, "dst")?, n, "destination (host memory is not replayable)")?;
            range(m, w(c, "src")?, n, "source (host memory is not replayable)")?;
        }
        "cuMemsetD8" | "cuMemsetD8Async" => range(m, w(c, "dstDevice")?, w(c, "N")?, "destination")?,
        "cuMemsetD16" | "cuMemsetD16Async" => range(m, w(c, "dstDevice")?, w(c, "N")? * 2, "destination")?,
        "cuMemsetD32" | "cuMemsetD32Async" => range(m, w(c, "dstDevice")?, w(c, "N")? * 4, "destination")?,
        "cuModuleLoadData" | "cuModuleLoadFatBinary" => {
            let name = if c.f.name == "cuModuleLoadData" { "image" } else { "fatCubin" };
            blob_ok(trace, c.arg(name), "code image")?;
            m.modules.insert(ow(c, "module")?);
        }
        "cuModuleLoad" => {
            blob_ok(trace, file_blob(c.arg("fname")), "code image read from a file")?;
            m.modules.insert(ow(c, "module")?);
        }
        "cuLibraryLoadData" => {
            blob_ok(trace, c.arg("code"), "code image")?;
            m.libraries.insert(ow(c, "library")?);
        }
        "cuLibraryLoadFromFile" => {
            blob_ok(trace, file_blob(c.arg("fileName")), "code image read from a file")?;
            m.libraries.insert(ow(c, "library")?);
        }
        "cuModuleGetFunction" => {
            if !m.modules.contains(&w(c, "hmod")?) {
                return Err("looks up a function in a module that was never loaded".into());
            }
            m.functions.insert(ow(c, "hfunc")?);
        }
        "cuLibraryGetKernel" => {
            if !m.libraries.contains(&w(c, "library")?) {
                return Err("looks up a kernel in a library that was never loaded".into());
            }
            m.kernels.insert(ow(c, "pKernel")?);
        }
        "cuKernelGetFunction" => {
            if !m.kernels.contains(&w(c, "kernel")?) {
                return Err("unknown kernel handle".into());
            }
            m.functions.insert(ow(c, "pFunc")?);
        }
        "cuLibraryGetModule" => {
            if !m.libraries.contains(&w(c, "library")?) {
                return Err("unknown library handle".into());
            }
            m.modules.insert(ow(c, "pMod")?);
        }
        "cuModuleGetGlobal" | "cuLibraryGetGlobal" => {
            m.ranges.insert(ow(c, "dptr")?, ow(c, "bytes")?);
        }
        "cuLaunchKernel" | "cuLaunchCooperativeKernel" | "cuLaunchKernelEx" => {
            let f = w(c, "f")?;
            if !m.functions.contains(&f) && !m.kernels.contains(&f) {
                return Err(format!("launches kernel handle {f:#x}, which was never loaded"));
            }
            let stream = match c.arg("config") {
                Some(Value::LaunchConfig(cfg)) => cfg.stream,
                _ => c.arg("hStream").and_then(word).unwrap_or(0),
            };
            if !m.stream_ok(stream) {
                return Err(format!("launches on unknown stream {stream:#x}"));
            }
            if !matches!(c.arg("kernelParams"), Some(Value::KernelParams(_)) | Some(Value::Null))
                && !matches!(c.arg("extra"), Some(Value::Bytes(_)))
            {
                return Err("kernel parameters were not recorded".into());
            }
        }
        "cuStreamCreate" | "cuStreamCreateWithPriority" => {
            m.streams.insert(ow(c, "phStream")?);
        }
        "cuStreamDestroy" => {
            if !m.streams.remove(&w(c, "hStream")?) {
                return Err("destroys an unknown stream".into());
            }
        }
        "cuStreamSynchronize" => {
            let s = w(c, "hStream")?;
            if !m.stream_ok(s) {
                return Err(format!("synchronizes unknown stream {s:#x}"));
            }
        }
        "cuEventCreate" => {
            m.events.insert(ow(c, "phEvent")?);
        }
        "cuEventRecord" | "cuEventSynchronize" | "cuStreamWaitEvent" | "cuEventDestroy" => {
            let e = w(c, "hEvent")?;
            if !m.events.contains(&e) {
                return Err(format!("uses unknown event {e:#x}"));
            }
            if c.f.name == "cuEventDestroy" {
                m.events.remove(&e);
            }
            if let Some(s) = c.arg("hStream").and_then(word) {
                if !m.stream_ok(s) {
                    return Err(format!("uses unknown stream {s:#x}"));
                }
            }
        }
        "cuCtxSynchronize"
        | "cuFuncSetAttribute"
        | "cuKernelSetAttribute"
        | "cuFuncSetCacheConfig"
        | "cuFuncSetSharedMemConfig"
        | "cuKernelSetCacheConfig"
        | "cuCtxSetLimit"
        | "cuCtxSetCacheConfig" => {}
        _ => return Ok(false),
    }
    Ok(true)
}

/// The stored bytes of a code image loaded from a file (the recorder keeps `[path, blob]`).
fn file_blob(v: Option<&Value>) -> Option<&Value> {
    match v {
        Some(Value::List(items)) => items.get(1),
        other => other,
    }
}
