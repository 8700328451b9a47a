//! Replay of the recorder's records for memory the host and the device share
//! ([`gpuless_traces::hostview`]): what the host wrote is copied to the memory's address
//! before the next call, and what the host could read after a synchronization is copied back
//! and verified like a device-to-host result.

use cudarc::driver::sys;
use gpuless_traces::hostview::{HOST_MEMORY, HOST_MIRROR, HOST_PULL, HOST_VIEW};
use gpuless_traces::{CallRecord, Value};

use super::results::{first_result, verify_value};
use super::{check, LoadedTrace, ReplayError, Report, State};

/// `CU_MEMHOSTALLOC_DEVICEMAP` and `CU_MEMHOSTREGISTER_DEVICEMAP`.
pub(crate) const DEVICEMAP: u64 = 0x02;

fn bad(rec: &CallRecord, problem: &str) -> ReplayError {
    ReplayError::Inconsistent { seq: rec.seq, what: rec.function.name().to_string(), problem: problem.into() }
}

/// Executes a `gpulessHostMemory` or `gpulessHostView` record.
pub(crate) fn call(
    st: &mut State,
    trace: &LoadedTrace,
    rec: &CallRecord,
    report: &mut Report,
) -> Result<(), ReplayError> {
    let name = rec.function.name();
    if name == HOST_PULL {
        st.last_call = Some((rec.seq, HOST_PULL));
        let changed = super::managed::pull(st, rec)?;
        if let Some(o) = report.outputs.as_mut() {
            o.push((rec.seq, changed));
        }
        report.executed += 1;
        return Ok(());
    }
    let Some(&Value::DevPtr(addr)) = rec.args.first() else { return Err(bad(rec, "no address recorded")) };
    if name == HOST_MIRROR {
        st.last_call = Some((rec.seq, HOST_MIRROR));
        let Some(&Value::Size(len)) = rec.args.get(1) else { return Err(bad(rec, "no length recorded")) };
        let live = st.mem.alloc_shared(addr, len, rec.seq)?;
        st.managed.add(addr, len, live, rec)?;
        report.executed += 1;
        return Ok(());
    }
    let live = st.mem.translate(addr);
    st.last_call = Some((rec.seq, if name == HOST_MEMORY { HOST_MEMORY } else { HOST_VIEW }));
    if name == HOST_MEMORY {
        let Some(Value::Blob(b)) = rec.args.get(1) else { return Err(bad(rec, "no contents recorded")) };
        let data = trace.blobs.get(&b.hash).ok_or_else(|| bad(rec, "its contents are not in the trace"))?;
        // Pointers the host stored in shared memory (a linked structure) name recorded
        // addresses: where an allocation lives elsewhere now, they are rewritten to it, as a
        // launch's parameters are.
        let moved;
        let data: &[u8] = if st.mem.may_translate() && addr % 8 == 0 {
            let mut m = data.to_vec();
            st.mem.translate_params(&mut m);
            moved = m;
            &moved
        } else {
            data
        };
        // At once, not behind the program's streams (`managed.rs`).
        st.managed.write(addr, data, live, rec)?;
    } else {
        let Some(&Value::Size(len)) = rec.args.get(1) else { return Err(bad(rec, "no length recorded")) };
        let mut host = vec![0u8; usize::try_from(len).map_err(|_| bad(rec, "length out of range"))?];
        // SAFETY: a copy out of device memory this replay created for the range.
        check(unsafe { sys::cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), live, host.len()) }, rec.seq, name)?;
        // Pointers into moved allocations read back as the recorded addresses they stand for.
        if st.mem.may_translate() && addr % 8 == 0 {
            st.mem.untranslate_words(&mut host);
        }
        first_result(report);
        verify_value(st, rec.seq, HOST_VIEW, rec.results.first(), &host, trace, report);
    }
    report.executed += 1;
    Ok(())
}

/// Executes a `gpulessFunctionFound` record: the function (or kernel) `h` of a module (or
/// library) by its name, which the program took without a recorded call.
pub(crate) fn function_found(st: &mut State, rec: &CallRecord, report: &Report) -> Result<(), ReplayError> {
    let (Some(owner), Some(Value::Str(name)), Some(&Value::Handle(_, h))) =
        (rec.args.first(), rec.args.get(1), rec.results.first())
    else {
        return Err(bad(rec, "owner, name or handle not recorded"));
    };
    let cname = std::ffi::CString::new(name.as_str()).map_err(|_| bad(rec, "a name with a NUL byte"))?;
    let name_of = rec.function.name();
    match *owner {
        Value::Handle(gpuless_analyzer::api::HandleKind::Module, m) => {
            let live = *st.modules.get(&m).ok_or_else(|| bad(rec, "its module was never loaded"))?;
            let mut f = std::ptr::null_mut();
            // SAFETY: a live module and a NUL-terminated name.
            check(unsafe { sys::cuModuleGetFunction(&mut f, live, cname.as_ptr()) }, rec.seq, name_of)?;
            if report.outputs.is_some() {
                st.warmed.module(live);
            }
            st.functions.insert(h, f);
        }
        Value::Handle(gpuless_analyzer::api::HandleKind::Library, l) => {
            let live = *st.libraries.get(&l).ok_or_else(|| bad(rec, "its library was never loaded"))?;
            let mut k = std::ptr::null_mut();
            // SAFETY: a live library and a NUL-terminated name.
            check(unsafe { sys::cuLibraryGetKernel(&mut k, live, cname.as_ptr()) }, rec.seq, name_of)?;
            if report.outputs.is_some() {
                st.warmed.library(live);
            }
            st.kernels.insert(h, k);
        }
        _ => return Err(bad(rec, "its owner is neither a module nor a library")),
    }
    st.names.insert(h, name.clone());
    Ok(())
}
