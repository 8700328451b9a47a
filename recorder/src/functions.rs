//! Function handles a program got where no recorded call shows it (issue 21, `torch.fft`):
//! cuFFT loads a module with `cuModuleLoadData` and takes its functions from a private export
//! table, not from `cuModuleGetFunction`, so a replay met launches of handles it never saw.
//! The recorder knows the handles recorded calls gave out (`cuModuleGetFunction`,
//! `cuLibraryGetKernel`, `cuKernelGetFunction`, ...: any out function or kernel handle); when a
//! call takes one it does not know, it asks the driver which module (or library) and name it
//! belongs to and records that first as a `gpulessFunctionFound` record
//! ([`gpuless_traces::model::FUNCTION_FOUND`]), which a replay resolves like
//! `cuModuleGetFunction` / `cuLibraryGetKernel`.

use std::cell::RefCell;
use std::collections::HashSet;
use std::ffi::{c_char, c_void, CStr};
use std::sync::{Mutex, OnceLock};

use gpuless_analyzer::api::{ApiLevel, HandleKind};
use gpuless_traces::model::FUNCTION_FOUND;
use gpuless_traces::{CallRecord, Function, Value};

use crate::driver::libcuda_symbol;
use crate::lane::Lane;
use crate::state;

static KNOWN: Mutex<Option<HashSet<u64>>> = Mutex::new(None);

thread_local! {
    /// Handles this thread already found known (no lock on the launch path).
    static SEEN: RefCell<HashSet<u64>> = RefCell::new(HashSet::new());
}

/// A handle a recorded call gave out.
pub fn given(h: u64) {
    if h == 0 {
        return;
    }
    if let Ok(mut k) = KNOWN.lock() {
        k.get_or_insert_with(HashSet::new).insert(h);
    }
}

type GetOwner = unsafe extern "C" fn(*mut *mut c_void, *mut c_void) -> u32;
type GetName = unsafe extern "C" fn(*mut *const c_char, *mut c_void) -> u32;

struct Lookups {
    func_module: Option<GetOwner>,
    func_name: Option<GetName>,
    kernel_library: Option<GetOwner>,
    kernel_name: Option<GetName>,
}

fn lookups() -> &'static Lookups {
    static L: OnceLock<Lookups> = OnceLock::new();
    L.get_or_init(|| {
        let sym = |n: &str| {
            let p = libcuda_symbol(n);
            (!p.is_null()).then_some(p)
        };
        // SAFETY: libcuda's exports of these names have these C signatures.
        unsafe {
            Lookups {
                func_module: sym("cuFuncGetModule\0").map(|p| std::mem::transmute::<*mut c_void, GetOwner>(p)),
                func_name: sym("cuFuncGetName\0").map(|p| std::mem::transmute::<*mut c_void, GetName>(p)),
                kernel_library: sym("cuKernelGetLibrary\0").map(|p| std::mem::transmute::<*mut c_void, GetOwner>(p)),
                kernel_name: sym("cuKernelGetName\0").map(|p| std::mem::transmute::<*mut c_void, GetName>(p)),
            }
        }
    })
}

/// Before a call that takes function handle `h`: records where an unknown one comes from.
pub fn taken(h: u64, lane: &Lane) {
    // While the thread's locals are destroyed (static destructors at exit), the lock decides.
    if h == 0 || SEEN.try_with(|s| s.borrow().contains(&h)).unwrap_or(false) {
        return;
    }
    let Ok(mut k) = KNOWN.lock() else { return };
    let known = k.get_or_insert_with(HashSet::new);
    if known.insert(h) {
        // First sight of a handle no recorded call gave out.
        if let Some((owner, name)) = resolve(h) {
            let mut rec = CallRecord::new(state::next_seq(), ApiLevel::Other, Function::Other(FUNCTION_FOUND.into()));
            rec.thread = lane.tid();
            rec.timestamp_ns = state::now_ns();
            rec.parent = lane.current.get();
            rec.args = vec![owner, Value::Str(name)];
            rec.results = vec![Value::Handle(HandleKind::Function, h)];
            crate::batches::emit(rec);
        }
    }
    drop(k);
    let _ = SEEN.try_with(|s| s.borrow_mut().insert(h));
}

/// The module (or library) and name of `h`, asked of the driver as a function, else as a kernel.
fn resolve(h: u64) -> Option<(Value, String)> {
    let l = lookups();
    let name_of = |f: GetName| {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: a query with a valid out-pointer; the name is the driver's NUL-terminated string.
        unsafe {
            (f(&mut p, h as *mut c_void) == 0 && !p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
        }
    };
    let owner_of = |f: GetOwner| {
        let mut o: *mut c_void = std::ptr::null_mut();
        // SAFETY: a query with a valid out-pointer.
        unsafe { (f(&mut o, h as *mut c_void) == 0 && !o.is_null()).then_some(o as u64) }
    };
    if let (Some(m), Some(n)) = (l.func_module.and_then(owner_of), l.func_name.and_then(name_of)) {
        return Some((Value::Handle(HandleKind::Module, m), n));
    }
    let lib = l.kernel_library.and_then(owner_of)?;
    Some((Value::Handle(HandleKind::Library, lib), l.kernel_name.and_then(name_of)?))
}
