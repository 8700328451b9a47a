//! Executing one recorded call. Arguments are found by their names in the API table, so the
//! dispatch below reads like the driver's documentation.

use std::ffi::{c_void, CString};

use cudarc::driver::sys;
use gpuless_analyzer::api::{ArgKind, Disposition, Refusal};
use gpuless_traces::{CallRecord, Value};

use super::allocs::{alloc, graph_alloc, memory_node};
use super::args::{word, Call};
use super::blobs::{blob, file_image};
use super::objects::{capturing, Pending, SyncPoint};
use super::raw::raw_fn;
use super::results::{complete, dtoh_async, first_result, mirror_output, verify};
use super::{check, exec_array, exec_graph, exec_ops, LoadedTrace, ReplayError, Report, State};

/// Counts a record not re-executed (without allocating when the name is known already: hot
/// replay passes here for every query of every iteration).
fn count_skipped(report: &mut Report, name: &str, calls: u64) {
    match report.not_replayed.get_mut(name) {
        Some(n) => *n += calls,
        None => {
            report.not_replayed.insert(name.to_string(), calls);
        }
    }
}

/// A record of a function refused where no GPU is attached: a query changed nothing (skipped,
/// counted); anything else cannot be re-created and ends the replay naming it.
fn not_executed(c: &Call<'_>, r: Refusal, report: &mut Report) -> Result<(), ReplayError> {
    if c.f.is_query() {
        count_skipped(report, c.f.name, c.rec.calls_represented());
        return Ok(());
    }
    Err(c.unsupported(&format!("not replayed: {}", r.why())))
}

/// Executes one record.
pub(crate) fn call(
    st: &mut State,
    trace: &LoadedTrace,
    rec: &CallRecord,
    report: &mut Report,
) -> Result<(), ReplayError> {
    // The recorder's end-of-run count of calls it answered from memory: nothing to execute.
    if rec.is_summary() {
        count_skipped(report, rec.function.name(), rec.calls_represented());
        return Ok(());
    }
    let Some(f) = rec.function.api() else {
        if gpuless_traces::hostview::is_hostview(rec.function.name()) {
            return super::hostview::call(st, trace, rec, report);
        }
        if rec.function.name() == gpuless_traces::model::FUNCTION_FOUND {
            return super::hostview::function_found(st, rec, report);
        }
        if rec.function.name() == gpuless_traces::devices::SET_DEVICE {
            return super::devices::set(st, rec);
        }
        if rec.function.name() == gpuless_traces::devices::MEM_IMPORT {
            return super::vmm::import(st, rec);
        }
        if rec.function.name() == gpuless_traces::protocol::share::SHARE {
            return super::share::call(st, rec, report);
        }
        if rec.function.name() == gpuless_traces::protocol::link::LINK {
            return super::jit::call(st, trace, rec, report);
        }
        return Err(ReplayError::Unsupported {
            seq: rec.seq,
            what: rec.function.name().to_string(),
            problem: "not a function of this replayer's API table".into(),
        });
    };
    if rec.status != 0 {
        // The call failed when recorded: it changed nothing then, so nothing is replayed.
        *report.not_replayed.entry(format!("{} (failed when recorded)", f.name)).or_insert(0) += 1;
        return Ok(());
    }
    let c = Call { f, rec };
    let seq = rec.seq;
    st.last_call = Some((seq, f.name));
    // Sharing with other processes (not a physical allocation's descriptor, which NCCL shares
    // within the process): another process may write what this one exported or opened.
    let across =
        f.name.starts_with("cuIpc") || f.name.starts_with("cuMemPoolExport") || f.name.starts_with("cuMemPoolImport");
    if across
        && f.disposition == Disposition::Local(gpuless_analyzer::api::LocalRule::Share)
        && !st.shared_with_processes
    {
        st.shared_with_processes = true;
        report.warnings.push(format!(
            "call #{seq} {}: the program shares device memory with other processes from here on; results after it \
             are not verified (another process may have written them)",
            f.name
        ));
    }
    super::crash::at(seq, f.name);
    match f.disposition {
        // Known only from cuda.h (the legacy 32-bit entries share modeled names): nothing here
        // may act on it by name.
        Disposition::Refused(r) if !f.modeled => return not_executed(&c, r, report),
        Disposition::Server if !f.is_query() && !super::handled::executes(f.name) => {
            return Err(c.unsupported("the server executes this function, but this executor has no handler for it"))
        }
        _ => {}
    }
    if st.resident.is_on() {
        let capturing = st.stream_override.is_some();
        let mem = &st.mem;
        if super::resident::before(&mut st.resident, &c, capturing, |p| mem.find(p).map(|a| a.recorded)) {
            // The range holds this blob already (warm constants).
            return Ok(());
        }
    }
    let preloaded = if st.preloaded.has(seq) { st.preloaded.take(seq) } else { st.warm_images.take_for(&c) };
    // SAFETY (whole match): driver calls with handles and addresses translated to live ones
    // and host buffers owned here, sized as recorded.
    unsafe {
        match f.name {
            // Captured into a graph (not a body replay's own capture): graph memory, and an
            // empty node in the capture where the driver's allocation node would be.
            "cuMemAllocAsync" | "cuMemAllocFromPoolAsync"
                if st.stream_override.is_none() && capturing(st.stream(c.word("hStream")?)?) =>
            {
                let (dptr, size) = (c.out_word("dptr")?, c.word("bytesize")?);
                graph_alloc(st, dptr, size, seq)?;
                let s = st.stream(c.word("hStream")?)?;
                memory_node(st, s, (sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_ALLOC, dptr, size), seq, f.name)?;
            }
            "cuMemAlloc" | "cuMemAllocAsync" | "cuMemAllocFromPoolAsync" => {
                let recorded = c.out_word("dptr")?;
                alloc(st, recorded, c.word("bytesize")?, seq)?;
            }
            "cuMemAllocPitch" => {
                let recorded = c.out_word("dptr")?;
                let size = c.out_word("pPitch")? * c.word("Height")?;
                alloc(st, recorded, size, seq)?;
            }
            // A stream-ordered free captured into a graph is the graph's free node: the memory
            // stays for the graph's launches (the recording's or the client's address is
            // never given to another allocation), until the session ends.
            // (A body replay captures on a stream of its own: not the program's capture.)
            "cuMemFreeAsync" if st.stream_override.is_none() && capturing(st.stream(c.word("hStream")?)?) => {
                let (s, dptr) = (st.stream(c.word("hStream")?)?, c.word("dptr")?);
                memory_node(st, s, (sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_FREE, dptr, 0), seq, f.name)?;
            }
            // Graph memory freed outside a graph: kept for the graph's next launch.
            "cuMemFree" | "cuMemFreeAsync" if st.graph_memory.contains(&c.word("dptr")?) => {}
            "cuMemFree" | "cuMemFreeAsync" => {
                st.managed.remove(c.word("dptr")?);
                st.mem.free(c.word("dptr")?)
            }
            // Memory the host and the device share: device memory at the recorded address here
            // (nothing on the host side touches it at replay; the recorder's host-memory
            // records carry what the program wrote: `hostview.rs`).
            "cuMemAllocManaged" => {
                let (addr, len) = (c.out_word("dptr")?, c.word("bytesize")?);
                let live = st.mem.alloc_shared(addr, len, seq)?;
                if report.outputs.is_some() {
                    // A client's: zeroed, as its host pages are; what it sees is tracked.
                    st.managed.add(addr, len, live, c.rec)?;
                }
            }
            "cuMemHostAlloc" if c.word("Flags")? & super::hostview::DEVICEMAP != 0 => {
                let (addr, len) = (c.out_word("pp")?, c.word("bytesize")?);
                let live = st.mem.alloc_shared(addr, len, seq)?;
                if report.outputs.is_some() {
                    // A client's mirrored pinned memory: coherent as managed memory is.
                    st.managed.add(addr, len, live, c.rec)?;
                }
            }
            "cuMemHostRegister" if c.word("Flags")? & super::hostview::DEVICEMAP != 0 => {
                st.mem.alloc_shared(c.word("p")?, c.word("bytesize")?, seq)?;
            }
            // Other pinned memory: known, re-created if a kernel reaches it (`launch.rs`).
            "cuMemHostAlloc" | "cuMemAllocHost" if report.outputs.is_none() => {
                st.pinned.insert(c.out_word("pp")?, c.word("bytesize")?);
            }
            "cuMemHostRegister" if report.outputs.is_none() => {
                st.pinned.insert(c.word("p")?, c.word("bytesize")?);
            }
            "cuMemFreeHost" | "cuMemHostUnregister" if st.pinned.remove(&c.word("p")?).is_some() => {}
            "cuMemFreeHost" | "cuMemHostUnregister" if st.mem.find(c.word("p")?).is_some() => {
                st.managed.remove(c.word("p")?);
                st.mem.free(c.word("p")?)
            }
            // While a body is captured into a graph, a synchronous copy becomes a copy on the
            // capturing stream (the graph's end is the wait), from pinned memory.
            "cuMemcpyHtoD" if st.stream_override.is_some_and(capturing) => {
                let data = blob(trace, &c, c.arg("srcHost"))?;
                let dst = st.mem.translate(c.word("dstDevice")?);
                let p = st.objects.stage(data, seq)?;
                let stream = st.stream_override.unwrap_or(std::ptr::null_mut());
                check(sys::cuMemcpyHtoDAsync_v2(dst, p.cast(), data.len(), stream), seq, f.name)?;
            }
            "cuMemcpyHtoD" => {
                let data = blob(trace, &c, c.arg("srcHost"))?;
                let dst = st.mem.translate(c.word("dstDevice")?);
                check(sys::cuMemcpyHtoD_v2(dst, data.as_ptr().cast(), data.len()), seq, f.name)?;
                st.copied_in();
            }
            "cuMemcpyDtoH" if st.stream_override.is_some_and(capturing) => {
                let n = c.word("ByteCount")? as usize;
                let src = st.mem.translate(c.word("srcDevice")?);
                let stream = st.stream_override.unwrap_or(std::ptr::null_mut());
                let host = st.objects.pinned(n, seq)?;
                check(sys::cuMemcpyDtoHAsync_v2(host.cast(), src, n, stream), seq, f.name)?;
                let want = c.result("dstHost").cloned();
                st.objects.defer(Pending { seq, what: f.name, stream: 0, live_stream: stream, host, len: n, want });
            }
            // Stream-ordered copies and sets run on their recorded stream, ordered with the
            // kernels and events there. Host sources are blob bytes, alive for the whole replay
            // (staged in pinned memory when a graph captures them).
            // A late read (client mode): pinned memory behind a host function, read by the
            // client when the stream reaches the copy (`host_calls`).
            "cuMemcpyHtoDAsync" if matches!(c.arg("srcHost"), Some(Value::HostPtr(_))) => {
                let Some(calls) = st.host_calls.clone() else { return Err(c.missing("srcHost")) };
                let n = c.word("ByteCount")? as usize;
                let dst = st.mem.translate(c.word("dstDevice")?);
                let stream = st.stream(c.word("hStream")?)?;
                let staging = st.objects.pinned(n, seq)?;
                let rec_s = c.word("hStream")?;
                match st.captured_host_fn.get(&rec_s).filter(|_| capturing(stream)) {
                    // Captured after a host function: read when that function returned (no
                    // node of its own, so the graph has the program's nodes only).
                    Some(&t) => calls.attach(t as *mut std::ffi::c_void, seq, staging, n),
                    None => {
                        let (hf, ud) = calls.late_read(seq, staging, n);
                        check(sys::cuLaunchHostFunc(stream, Some(hf), ud), seq, f.name)?;
                    }
                }
                check(sys::cuMemcpyHtoDAsync_v2(dst, staging.cast(), n, stream), seq, f.name)?;
            }
            "cuMemcpyHtoDAsync" => {
                let data = blob(trace, &c, c.arg("srcHost"))?;
                let dst = st.mem.translate(c.word("dstDevice")?);
                let stream = st.stream(c.word("hStream")?)?;
                let src = if capturing(stream) { st.objects.stage(data, seq)? } else { data.as_ptr() };
                check(sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), data.len(), stream), seq, f.name)?;
            }
            "cuMemcpyDtoH" => {
                let n = c.word("ByteCount")? as usize;
                let mut host = vec![0u8; n];
                let src = st.mem.translate(c.word("srcDevice")?);
                check(sys::cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), src, n), seq, f.name)?;
                first_result(report);
                mirror_output(st, &c, "dstHost", &host, report)?;
                verify(st, &c, &host, trace, report);
            }
            "cuMemcpyDtoHAsync" => dtoh_async(st, &c, trace, report)?,
            "cuMemcpyDtoD" => {
                let dst = st.mem.translate(c.word("dstDevice")?);
                let src = st.mem.translate(c.word("srcDevice")?);
                check(sys::cuMemcpyDtoD_v2(dst, src, c.word("ByteCount")? as usize), seq, f.name)?;
            }
            "cuMemcpyDtoDAsync" => {
                let dst = st.mem.translate(c.word("dstDevice")?);
                let src = st.mem.translate(c.word("srcDevice")?);
                let (n, stream) = (c.word("ByteCount")? as usize, st.stream(c.word("hStream")?)?);
                check(sys::cuMemcpyDtoDAsync_v2(dst, src, n, stream), seq, f.name)?;
            }
            "cuMemcpy" | "cuMemcpyAsync" => super::unified::copy(st, &c, trace, report)?,
            "cuMemsetD8" | "cuMemsetD8Async" | "cuMemsetD16" | "cuMemsetD16Async" | "cuMemsetD32"
            | "cuMemsetD32Async" => {
                let dst = st.mem.translate(c.word("dstDevice")?);
                let n = c.word("N")? as usize;
                let r = match (f.name, c.arg("hStream").and_then(word).map(|s| st.stream(s)).transpose()?) {
                    ("cuMemsetD8", _) => sys::cuMemsetD8_v2(dst, c.word("uc")? as u8, n),
                    ("cuMemsetD16", _) => sys::cuMemsetD16_v2(dst, c.word("us")? as u16, n),
                    ("cuMemsetD32", _) => sys::cuMemsetD32_v2(dst, c.word("ui")? as u32, n),
                    ("cuMemsetD8Async", Some(s)) => sys::cuMemsetD8Async(dst, c.word("uc")? as u8, n, s),
                    ("cuMemsetD16Async", Some(s)) => sys::cuMemsetD16Async(dst, c.word("us")? as u16, n, s),
                    (_, Some(s)) => sys::cuMemsetD32Async(dst, c.word("ui")? as u32, n, s),
                    (_, None) => return Err(c.missing("hStream")),
                };
                check(r, seq, f.name)?;
            }
            // JIT options of cuModuleLoadDataEx are left out: they tune PTX compilation only.
            // Loaded ahead on another thread (`preload`): its handle, once the load is done.
            "cuModuleLoadData" | "cuModuleLoadDataEx" | "cuModuleLoadFatBinary" | "cuLibraryLoadData"
                if preloaded.is_some() =>
            {
                st.loaded.extend(preloaded);
                match preloaded {
                    Some(super::preload::Preloaded::Module(m)) => {
                        st.modules.insert(c.out_word("module")?, m as sys::CUmodule);
                    }
                    Some(super::preload::Preloaded::Library(l)) => {
                        st.libraries.insert(c.out_word("library")?, l as sys::CUlibrary);
                    }
                    None => {}
                }
            }
            "cuModuleLoadData" | "cuModuleLoadDataEx" | "cuModuleLoadFatBinary" | "cuModuleLoad" => {
                // The image by the table's argument kind: in memory, or read from a file.
                let image = match c.arg_of_kind(ArgKind::Image) {
                    Some(v) => aligned(blob(trace, &c, Some(v))?),
                    None => aligned(file_image(trace, &c, "fname")?),
                };
                let mut m = std::ptr::null_mut();
                check(sys::cuModuleLoadData(&mut m, image.as_ptr().cast()), seq, f.name)?;
                st.loaded.push(super::preload::Preloaded::Module(m as usize));
                st.modules.insert(c.out_word("module")?, m);
            }
            "cuLibraryLoadData" | "cuLibraryLoadFromFile" => {
                let image = if f.name == "cuLibraryLoadData" {
                    aligned(blob(trace, &c, c.arg("code"))?)
                } else {
                    aligned(file_image(trace, &c, "fileName")?)
                };
                let mut l = std::ptr::null_mut();
                let (null_o, null_v, null_l) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
                let r = sys::cuLibraryLoadData(
                    &mut l,
                    image.as_ptr().cast(),
                    null_o,
                    null_v,
                    0,
                    null_l,
                    std::ptr::null_mut(),
                    0,
                );
                check(r, seq, f.name)?;
                st.loaded.push(super::preload::Preloaded::Library(l as usize));
                st.libraries.insert(c.out_word("library")?, l);
            }
            "cuModuleGetFunction" => {
                let name = cname(&c, "name")?;
                let m = *st.modules.get(&c.word("hmod")?).ok_or_else(|| c.inconsistent("unknown module".into()))?;
                let mut h = std::ptr::null_mut();
                check(sys::cuModuleGetFunction(&mut h, m, name.as_ptr()), seq, f.name)?;
                if report.outputs.is_some() {
                    st.warmed.module(m);
                }
                let rec_h = c.out_word("hfunc")?;
                st.functions.insert(rec_h, h);
                st.names.insert(rec_h, name.to_string_lossy().into_owned());
            }
            "cuLibraryGetKernel" => {
                let name = cname(&c, "name")?;
                let l =
                    *st.libraries.get(&c.word("library")?).ok_or_else(|| c.inconsistent("unknown library".into()))?;
                let mut k = std::ptr::null_mut();
                check(sys::cuLibraryGetKernel(&mut k, l, name.as_ptr()), seq, f.name)?;
                if report.outputs.is_some() {
                    st.warmed.library(l);
                }
                let rec_k = c.out_word("pKernel")?;
                st.kernels.insert(rec_k, k);
                st.names.insert(rec_k, name.to_string_lossy().into_owned());
            }
            "cuKernelGetFunction" => {
                let rec_k = c.word("kernel")?;
                let k = *st.kernels.get(&rec_k).ok_or_else(|| c.inconsistent("unknown kernel".into()))?;
                let mut h = std::ptr::null_mut();
                check(sys::cuKernelGetFunction(&mut h, k), seq, f.name)?;
                let rec_f = c.out_word("pFunc")?;
                st.functions.insert(rec_f, h);
                if let Some(n) = st.names.get(&rec_k).cloned() {
                    st.names.insert(rec_f, n);
                }
            }
            "cuLibraryGetModule" => {
                let l =
                    *st.libraries.get(&c.word("library")?).ok_or_else(|| c.inconsistent("unknown library".into()))?;
                let mut m = std::ptr::null_mut();
                check(sys::cuLibraryGetModule(&mut m, l), seq, f.name)?;
                st.modules.insert(c.out_word("pMod")?, m);
            }
            "cuModuleGetGlobal" | "cuLibraryGetGlobal" => {
                let name = cname(&c, "name")?;
                let (mut p, mut n) = (0u64, 0usize);
                if f.name == "cuModuleGetGlobal" {
                    let m = *st.modules.get(&c.word("hmod")?).ok_or_else(|| c.inconsistent("unknown module".into()))?;
                    check(sys::cuModuleGetGlobal_v2(&mut p, &mut n, m, name.as_ptr()), seq, f.name)?;
                } else {
                    let l = *st
                        .libraries
                        .get(&c.word("library")?)
                        .ok_or_else(|| c.inconsistent("unknown library".into()))?;
                    check(sys::cuLibraryGetGlobal(&mut p, &mut n, l, name.as_ptr()), seq, f.name)?;
                }
                st.mem.alias(c.out_word("dptr")?, n as u64, p);
            }
            "cuLaunchKernel" | "cuLaunchCooperativeKernel" | "cuLaunchKernelEx" => {
                super::launch::launch(st, &c, report)?
            }
            // Function and context settings (dynamic shared memory limits, cache preferences):
            // called with C enums as plain integers, so values newer than cudarc stay defined.
            "cuFuncSetAttribute" => {
                let h = st.function(c.word("hfunc")?).ok_or_else(|| c.inconsistent("unknown function".into()))?;
                let set: FnSetAttr = raw_fn(b"cuFuncSetAttribute\0", seq)?;
                check(set(h.cast(), c.word("attrib")? as u32, c.word("value")? as i32), seq, f.name)?;
            }
            "cuKernelSetAttribute" => {
                let k = *st.kernels.get(&c.word("kernel")?).ok_or_else(|| c.inconsistent("unknown kernel".into()))?;
                let set: KernelSetAttr = raw_fn(b"cuKernelSetAttribute\0", seq)?;
                check(
                    set(c.word("attrib")? as u32, c.word("val")? as i32, k.cast(), c.word("dev")? as i32),
                    seq,
                    f.name,
                )?;
            }
            "cuFuncSetCacheConfig" | "cuFuncSetSharedMemConfig" => {
                let h = st.function(c.word("hfunc")?).ok_or_else(|| c.inconsistent("unknown function".into()))?;
                let name: &[u8] = if c.f.name == "cuFuncSetCacheConfig" {
                    b"cuFuncSetCacheConfig\0"
                } else {
                    b"cuFuncSetSharedMemConfig\0"
                };
                let set: FnSetEnum = raw_fn(name, seq)?;
                check(set(h.cast(), c.word("config")? as u32), seq, f.name)?;
            }
            "cuKernelSetCacheConfig" => {
                let k = *st.kernels.get(&c.word("kernel")?).ok_or_else(|| c.inconsistent("unknown kernel".into()))?;
                let set: KernelSetCache = raw_fn(b"cuKernelSetCacheConfig\0", seq)?;
                check(set(k.cast(), c.word("config")? as u32, c.word("dev")? as i32), seq, f.name)?;
            }
            "cuCtxSetLimit" => {
                let set: CtxSetLimit = raw_fn(b"cuCtxSetLimit\0", seq)?;
                check(set(c.word("limit")? as u32, c.word("value")? as usize), seq, f.name)?;
            }
            "cuCtxSetCacheConfig" => {
                let set: CtxSetEnum = raw_fn(b"cuCtxSetCacheConfig\0", seq)?;
                check(set(c.word("config")? as u32), seq, f.name)?;
            }
            "cuStreamCreate" | "cuStreamCreateWithPriority" => {
                let mut s = std::ptr::null_mut();
                let flags = c.arg("Flags").or(c.arg("flags")).and_then(word).unwrap_or(0) as u32;
                let recorded = c.arg("priority").and_then(word).unwrap_or(0) as i32;
                let prio = st.opts.stream_priority.unwrap_or(recorded);
                check(sys::cuStreamCreateWithPriority(&mut s, flags, prio), seq, f.name)?;
                st.streams.insert(c.out_word("phStream")?, s);
            }
            "cuStreamDestroy" => {
                if let Some(s) = st.streams.remove(&c.word("hStream")?) {
                    sys::cuStreamDestroy_v2(s);
                }
            }
            "cuStreamSynchronize" => {
                let s = c.word("hStream")?;
                check(sys::cuStreamSynchronize(st.stream(s)?), seq, f.name)?;
                complete(st, SyncPoint::Stream(s), trace, report)?;
            }
            "cuCtxSynchronize" => {
                check(sys::cuCtxSynchronize(), seq, f.name)?;
                complete(st, SyncPoint::All, trace, report)?;
            }
            // A query that found the work done was a synchronization for the recorder: results
            // it covers are compared here (their streams are waited for first).
            "cuStreamQuery" => complete(st, SyncPoint::Stream(c.word("hStream")?), trace, report)?,
            "cuEventQuery" => complete(st, SyncPoint::Event(c.word("hEvent")?), trace, report)?,
            "cuEventCreate" => {
                let mut e = std::ptr::null_mut();
                check(sys::cuEventCreate(&mut e, c.word("Flags")? as u32), seq, f.name)?;
                st.events.insert(c.out_word("phEvent")?, e);
            }
            "cuEventRecord" | "cuEventRecordWithFlags" => {
                let rec_e = c.word("hEvent")?;
                let e = *st.events.get(&rec_e).ok_or_else(|| c.inconsistent("unknown event".into()))?;
                let rec_s = c.word("hStream")?;
                let r = match c.arg("flags").and_then(word).unwrap_or(0) as u32 {
                    0 => sys::cuEventRecord(e, st.stream(rec_s)?),
                    flags => sys::cuEventRecordWithFlags(e, st.stream(rec_s)?, flags),
                };
                check(r, seq, f.name)?;
                // Shared with the program's other processes (`ipc_events`): its count too.
                check(st.ipc_events.recorded(rec_e, st.stream(rec_s)?), seq, f.name)?;
                st.objects.pending.record_event(rec_e, rec_s);
            }
            "cuEventSynchronize" => {
                let rec_e = c.word("hEvent")?;
                let e = *st.events.get(&rec_e).ok_or_else(|| c.inconsistent("unknown event".into()))?;
                check(sys::cuEventSynchronize(e), seq, f.name)?;
                st.ipc_events.synchronize(rec_e);
                complete(st, SyncPoint::Event(rec_e), trace, report)?;
            }
            "cuStreamWaitEvent" => {
                let rec_e = c.word("hEvent")?;
                let e = *st.events.get(&rec_e).ok_or_else(|| c.inconsistent("unknown event".into()))?;
                let s = st.stream(c.word("hStream")?)?;
                check(sys::cuStreamWaitEvent(s, e, c.word("Flags")? as u32), seq, f.name)?;
                check(st.ipc_events.waited(rec_e, s), seq, f.name)?;
                st.objects.pending.wait_event(c.word("hStream")?, rec_e);
            }
            "cuEventDestroy" => {
                if let Some(e) = st.events.remove(&c.word("hEvent")?) {
                    sys::cuEventDestroy_v2(e);
                }
                st.ipc_events.destroyed(c.word("hEvent")?);
            }
            // Already running: the executor's driver was started with its context.
            "cuInit" => {}
            // Host functions: a client's run on the client (`host_calls`); a local replay's
            // are no-ops that keep the stream's order (`exec_ops`).
            "cuLaunchHostFunc" | "cuStreamAddCallback" if st.host_calls.is_some() => {
                let rec_s = c.word("hStream")?;
                let s = st.stream(rec_s)?;
                let outputs = report.outputs.as_mut().map(std::mem::take).unwrap_or_default();
                // Captured: the copies captured before it on the stream go with every call.
                let live = if capturing(s) { st.objects.graph_outputs.live(Some(rec_s), None) } else { Vec::new() };
                let (hf, ud) = super::host_calls::host_function(st, seq, outputs, &live);
                check(sys::cuLaunchHostFunc(s, Some(hf), ud), seq, f.name)?;
                if capturing(s) {
                    st.captured_host_fn.insert(rec_s, ud as usize);
                }
            }
            _ => {
                if !exec_graph::call(st, trace, &c, report)?
                    && !exec_array::call(st, trace, &c, report)?
                    && !exec_ops::call(st, trace, &c)?
                    && !super::vmm::call(st, &c)?
                {
                    return match f.disposition {
                        Disposition::Refused(r) => not_executed(&c, r, report),
                        // What another process shared with the recorded one (`cuIpcOpen*`,
                        // imported pools): a replay of one process's trace has no other process.
                        Disposition::Local(gpuless_analyzer::api::LocalRule::Share) if !f.is_query() => Err(
                            c.unsupported("memory or events another process shared: a replay of one process's trace has no other process")
                        ),
                        Disposition::Server if !f.is_query() => Err(
                            c.unsupported("the server executes this function, but this executor has no handler for it")
                        ),
                        // A query, or the client's own answer (its context stack, its host
                        // memory): nothing to re-execute.
                        _ => {
                            count_skipped(report, f.name, rec.calls_represented());
                            Ok(())
                        }
                    };
                }
            }
        }
    }
    report.executed += 1;
    Ok(())
}

type FnSetAttr = unsafe extern "C" fn(*mut c_void, u32, i32) -> sys::CUresult;
type KernelSetAttr = unsafe extern "C" fn(u32, i32, *mut c_void, i32) -> sys::CUresult;
type FnSetEnum = unsafe extern "C" fn(*mut c_void, u32) -> sys::CUresult;
type KernelSetCache = unsafe extern "C" fn(*mut c_void, u32, i32) -> sys::CUresult;
type CtxSetLimit = unsafe extern "C" fn(u32, usize) -> sys::CUresult;
type CtxSetEnum = unsafe extern "C" fn(u32) -> sys::CUresult;

/// A copy of a code image with 8-byte alignment, as the driver reads ELF headers in place.
fn aligned(image: &[u8]) -> Vec<u64> {
    let mut v = vec![0u64; image.len().div_ceil(8) + 1];
    // SAFETY: `v` holds at least `image.len()` bytes (plus a NUL for PTX).
    unsafe { std::ptr::copy_nonoverlapping(image.as_ptr(), v.as_mut_ptr().cast::<u8>(), image.len()) };
    v
}

fn cname(c: &Call<'_>, arg: &str) -> Result<CString, ReplayError> {
    match c.arg(arg) {
        Some(Value::Str(s)) => CString::new(s.as_str()).map_err(|_| c.inconsistent(format!("`{arg}` holds a NUL"))),
        _ => Err(c.missing(arg)),
    }
}
