//! `gpuless replay --dry-run`: walks a trace against a model of device memory and handles,
//! without a GPU, and reports every call the replayer could not execute faithfully: a copy or
//! set outside every live allocation, a free of unknown memory, a launch of a kernel never
//! loaded, an unknown stream or event, a missing blob. CI tests replay logic with it.

use gpuless_analyzer::api::{ApiFunction, ArgKind, Disposition, HandleKind};
use gpuless_traces::{Hash128, Value};
use serde::Serialize;

use super::args::{word, Call};
use super::dry_model::{blob_ok, Model};
use super::{exec_array, exec_graph, LoadedTrace};

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

/// Checks `trace` without a GPU.
pub fn dry_run(trace: &LoadedTrace) -> DryRunReport {
    let mut m = Model::default();
    let mut r = DryRunReport { calls: trace.calls.len() as u64, ..DryRunReport::default() };
    for rec in &trace.calls {
        let Some(f) = rec.function.api() else {
            // The recorder's record of a function taken from a module without a recorded call.
            if rec.function.name() == gpuless_traces::model::FUNCTION_FOUND {
                r.checked += 1;
                match (rec.args.first(), rec.results.first()) {
                    (Some(&Value::Handle(HandleKind::Module, o)), Some(&Value::Handle(_, h)))
                        if m.modules.contains_key(&o) =>
                    {
                        m.functions.insert(h);
                    }
                    (Some(&Value::Handle(HandleKind::Library, o)), Some(&Value::Handle(_, h)))
                        if m.libraries.contains_key(&o) =>
                    {
                        m.kernels.insert(h);
                    }
                    _ => {
                        r.violation_count += 1;
                        if r.violations.len() < MAX_REPORTED {
                            r.violations.push(format!(
                                "call #{} {}: its module or library was never loaded",
                                rec.seq,
                                rec.function.name()
                            ));
                        }
                    }
                }
            }
            continue;
        };
        if rec.status != 0 {
            continue;
        }
        let c = Call { f, rec };
        let checked = if f.modeled { check(&mut m, trace, &c) } else { Ok(false) };
        match checked.and_then(|done| if done { Ok(true) } else { unreplayable(f).map_or(Ok(false), Err) }) {
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

/// Why a replay would end at a record of `f` that the model does not check: a function refused
/// where no GPU is attached (not a query), or one the server should execute that this replayer
/// has no handler for.
fn unreplayable(f: &ApiFunction) -> Option<String> {
    if f.is_query() {
        return None;
    }
    match f.disposition {
        Disposition::Refused(r) if !f.modeled || !super::handled::executes(f.name) => {
            Some(format!("not replayed: {}", r.why()))
        }
        Disposition::Server if !super::handled::executes(f.name) => {
            Some("the server executes this function, but this replayer has no handler for it".into())
        }
        _ => None,
    }
}

fn w(c: &Call<'_>, name: &str) -> Result<u64, String> {
    c.word(name).map_err(|e| e.to_string())
}

fn ow(c: &Call<'_>, name: &str) -> Result<u64, String> {
    c.out_word(name).map_err(|e| e.to_string())
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
        // Memory the host and the device share: device memory at replay (`hostview.rs`).
        "cuMemAllocManaged" | "cuMemHostAlloc" | "cuMemHostRegister" => {
            let (p, flags) = match c.f.name {
                "cuMemAllocManaged" => (ow(c, "dptr")?, super::hostview::DEVICEMAP),
                "cuMemHostAlloc" => (ow(c, "pp")?, w(c, "Flags")?),
                _ => (w(c, "p")?, w(c, "Flags")?),
            };
            if flags & super::hostview::DEVICEMAP == 0 {
                return Ok(false);
            }
            let n = w(c, "bytesize")?;
            if p == 0 || m.inside(p, 1) || m.ranges.range(p..p.saturating_add(n)).next().is_some() {
                return Err(format!("shared memory {p:#x}..+{n} is null or overlaps a live allocation"));
            }
            m.ranges.insert(p, n);
        }
        "cuMemFreeHost" | "cuMemHostUnregister" => {
            if m.ranges.remove(&w(c, "p")?).is_none() {
                return Ok(false);
            }
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
            stream(m, c)?;
        }
        "cuMemcpyDtoH" | "cuMemcpyDtoHAsync" => {
            range(m, w(c, "srcDevice")?, w(c, "ByteCount")?, "source")?;
            stream(m, c)?;
        }
        "cuMemcpyDtoD" | "cuMemcpyDtoDAsync" => {
            let n = w(c, "ByteCount")?;
            range(m, w(c, "dstDevice")?, n, "destination")?;
            range(m, w(c, "srcDevice")?, n, "source")?;
            stream(m, c)?;
        }
        "cuMemcpy" | "cuMemcpyAsync" => {
            // A host side is recorded as a blob (source) or a host address (destination).
            let n = w(c, "ByteCount")?;
            match c.arg("src") {
                Some(Value::Blob(_)) => blob_ok(trace, c.arg("src"), "host source")?,
                _ => range(m, w(c, "src")?, n, "source")?,
            }
            if !matches!(c.arg("dst"), Some(Value::HostPtr(_))) {
                range(m, w(c, "dst")?, n, "destination")?;
            }
            stream(m, c)?;
        }
        "cuMemsetD8" | "cuMemsetD8Async" | "cuMemsetD16" | "cuMemsetD16Async" | "cuMemsetD32" | "cuMemsetD32Async" => {
            let elem = if c.f.name.starts_with("cuMemsetD8") {
                1
            } else if c.f.name.starts_with("cuMemsetD16") {
                2
            } else {
                4
            };
            range(m, w(c, "dstDevice")?, w(c, "N")?.saturating_mul(elem), "destination")?;
            stream(m, c)?;
        }
        "cuModuleLoadData" | "cuModuleLoadDataEx" | "cuModuleLoadFatBinary" => {
            let image = c.arg_of_kind(ArgKind::Image);
            blob_ok(trace, image, "code image")?;
            m.modules.insert(ow(c, "module")?, image_of(image));
        }
        "cuModuleLoad" => {
            blob_ok(trace, file_blob(c.arg("fname")), "code image read from a file")?;
            m.modules.insert(ow(c, "module")?, image_of(file_blob(c.arg("fname"))));
        }
        "cuLibraryLoadData" => {
            blob_ok(trace, c.arg("code"), "code image")?;
            m.libraries.insert(ow(c, "library")?, image_of(c.arg("code")));
        }
        "cuLibraryLoadFromFile" => {
            blob_ok(trace, file_blob(c.arg("fileName")), "code image read from a file")?;
            m.libraries.insert(ow(c, "library")?, image_of(file_blob(c.arg("fileName"))));
        }
        "cuModuleGetFunction" => {
            if !m.modules.contains_key(&w(c, "hmod")?) {
                return Err("looks up a function in a module that was never loaded".into());
            }
            m.functions.insert(ow(c, "hfunc")?);
        }
        "cuLibraryGetKernel" => {
            if !m.libraries.contains_key(&w(c, "library")?) {
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
            let Some(&image) = m.libraries.get(&w(c, "library")?) else {
                return Err("unknown library handle".into());
            };
            m.modules.insert(ow(c, "pMod")?, image);
        }
        "cuModuleGetGlobal" | "cuLibraryGetGlobal" => {
            let image = *if c.f.name == "cuModuleGetGlobal" {
                m.modules.get(&w(c, "hmod")?).ok_or("looks up a global in a module that was never loaded")?
            } else {
                m.libraries.get(&w(c, "library")?).ok_or("looks up a global in a library that was never loaded")?
            };
            // The program may not have asked for the size: the image's cubins know it.
            let size = match c.result("bytes") {
                Some(Value::Size(n)) => *n,
                _ => match c.arg("name") {
                    Some(Value::Str(name)) => m.global_size(trace, image, name).unwrap_or(0),
                    _ => 0,
                },
            };
            let p = ow(c, "dptr")?;
            if p != 0 {
                m.ranges.insert(p, size);
            }
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
        "cuStreamQuery" => {
            let s = w(c, "hStream")?;
            if !m.stream_ok(s) {
                return Err(format!("queries unknown stream {s:#x}"));
            }
        }
        "cuEventRecord"
        | "cuEventRecordWithFlags"
        | "cuEventSynchronize"
        | "cuEventQuery"
        | "cuStreamWaitEvent"
        | "cuEventDestroy" => {
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
        _ => match exec_graph::check_dry(m, trace, c).or_else(|| exec_array::check_dry(m, trace, c)) {
            Some(r) => r?,
            None => return Ok(false),
        },
    }
    Ok(true)
}

/// The stream of a stream-ordered call must exist.
fn stream(m: &Model, c: &Call<'_>) -> Result<(), String> {
    match c.arg("hStream").and_then(word) {
        Some(s) if !m.stream_ok(s) => Err(format!("uses unknown stream {s:#x}")),
        _ => Ok(()),
    }
}

fn image_of(v: Option<&Value>) -> Option<Hash128> {
    match v {
        Some(Value::Blob(b)) => Some(b.hash),
        _ => None,
    }
}

/// The stored bytes of a code image loaded from a file (the recorder keeps `[path, blob]`).
fn file_blob(v: Option<&Value>) -> Option<&Value> {
    match v {
        Some(Value::List(items)) => items.get(1),
        other => other,
    }
}
