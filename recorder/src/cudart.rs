//! The runtime's registration functions, recorded as annotations: `__cudaRegisterFatBinary`,
//! `__cudaRegisterFatBinaryEnd`, `__cudaRegisterFunction` and `__cudaRegisterVar`, which the
//! static constructors nvcc generates call to tell libcudart which host stub is which kernel
//! and which host shadow is which device variable (the client mode needs both).
//!
//! This library exports them (`build.rs`, `RUNTIME_EXPORTS`), so every object that binds them
//! through the global scope — a program or library linked against a shared libcudart — calls
//! these wrappers instead. Programs with a static cudart call their own copy and never get
//! here. A wrapper must forward to the definition the caller would have bound without this
//! library, and a wrong or missing forward would break the program at start-up, so that
//! definition is found the way the loader finds it ([`resolve`]):
//!
//! 1. `dlsym(RTLD_NEXT, name)`: the first definition in the global scope after this library.
//!    Every caller that reached us searched the global scope first (that is how it found us),
//!    so this is exactly its binding — also for a caller loaded with `RTLD_LOCAL` (its local
//!    scope comes second).
//! 2. Otherwise the definition lies in a local scope (PyTorch loads libcudart as a dependency
//!    of an `RTLD_LOCAL` extension module). If exactly one loaded object defines the function,
//!    the loader can have bound nothing else.
//! 3. Otherwise (several libcudart copies outside the global scope) the loader's choice depends
//!    on the `dlopen` root of the caller's scope, which no interface tells. The call goes to the
//!    first definition among the caller's own dependencies, breadth first (the caller found by
//!    the address of its fat binary wrapper, host stub or variable), and is *not recorded*;
//!    stderr says so once.
//!
//! No definition at all: the call does nothing (say so once); without this library the loader
//! would have failed to bind the call. The look-ups read the loader's tables from memory
//! (`loaded.rs`) and never `dlopen`, which can run other objects' constructors early when
//! called from one. Results are cached while the loader's add/remove counts stay the same.
//!
//! A fat binary handle remembers whose registration made it, so the later calls with it go
//! where the handle came from. The fat binary's bytes are recorded once, by the driver call
//! cudart makes to load it; the annotation keeps its address.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use gpuless_analyzer::api::{self, ApiFunction, ApiId, ApiLevel, Return, Variant};
use gpuless_traces::{CallRecord, Function, Value};

use crate::{batches, capture, dl, lane, loaded, state};

mod generated {
    //! The exported wrappers (`build.rs`, `RUNTIME_EXPORTS`).
    #![allow(clippy::all, unused_unsafe, non_snake_case)]
    include!(concat!(env!("OUT_DIR"), "/cudart_exports.rs"));
}

/// Where a call goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Target {
    addr: usize,
    /// The loader would certainly have bound the caller to `addr` (steps 1 and 2).
    certain: bool,
}

/// What the loader offers for one function name, whoever asks.
enum Found {
    /// `dlsym(RTLD_NEXT)` found it, or exactly one loaded object defines it.
    Certain(usize),
    /// Nothing defines it.
    Nowhere,
    /// Several objects outside the global scope define it: (object index, address) each.
    Several(Arc<Vec<loaded::Object>>, Vec<(usize, usize)>),
}

/// Resolutions for the loader generation they were made in.
struct Cache {
    generation: (u64, u64),
    found: HashMap<ApiId, Arc<Found>>,
    /// For `Found::Several`: (function, owner address) → the address picked.
    picks: HashMap<(ApiId, usize), usize>,
}

static CACHE: Mutex<Option<Cache>> = Mutex::new(None);
/// Fat binary handle → the address its registration was owned by (the wrapper's).
static HANDLES: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);

/// Runs `f` on the cache of `generation` (emptied when the loader has changed since).
fn cached<T>(generation: (u64, u64), f: impl FnOnce(&mut Cache) -> T) -> T {
    let mut guard = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let c = guard.get_or_insert_with(|| Cache { generation, found: HashMap::new(), picks: HashMap::new() });
    if c.generation != generation {
        *c = Cache { generation, found: HashMap::new(), picks: HashMap::new() };
    }
    f(c)
}

/// The definition of `f` the caller owning `owner` would have bound (see the module doc).
/// The loader is never called with one of this module's locks held: a constructor running
/// under the loader's lock may be calling us from another thread.
fn resolve(f: &ApiFunction, owner: usize) -> Option<Target> {
    let generation = loaded::generation();
    let found = match cached(generation, |c| c.found.get(&f.id).cloned()) {
        Some(found) => found,
        None => {
            let found = Arc::new(find(f.name));
            cached(generation, |c| c.found.insert(f.id, found.clone()));
            found
        }
    };
    match &*found {
        Found::Certain(addr) => Some(Target { addr: *addr, certain: true }),
        Found::Nowhere => None,
        Found::Several(objects, defs) => {
            let addr = match cached(generation, |c| c.picks.get(&(f.id, owner)).copied()) {
                Some(a) => a,
                None => {
                    let a = pick(f.name, objects, defs, owner);
                    cached(generation, |c| c.picks.insert((f.id, owner), a));
                    a
                }
            };
            Some(Target { addr, certain: false })
        }
    }
}

fn find(name: &str) -> Found {
    let Ok(cname) = CString::new(name) else { return Found::Nowhere };
    let p = dl::next_symbol(&cname);
    if !p.is_null() && !dl::is_ours(p) {
        return Found::Certain(p as usize);
    }
    let objects = loaded::objects();
    let ours = loaded::containing(&objects, find as *const () as usize);
    let defs: Vec<(usize, usize)> = objects
        .iter()
        .enumerate()
        .filter(|&(i, _)| Some(i) != ours)
        .filter_map(|(i, o)| o.lookup(name).map(|a| (i, a)))
        .collect();
    match defs.as_slice() {
        [] => {
            warn_once(&NONE_WARNED, &format!("no loaded library defines {name}; its calls do nothing"));
            Found::Nowhere
        }
        [(_, a)] => Found::Certain(*a),
        _ => Found::Several(Arc::new(objects), defs),
    }
}

/// Of several definitions, the first among the dependencies of the object containing `owner`
/// (breadth first, the object itself first), else the first loaded.
fn pick(name: &str, objects: &[loaded::Object], defs: &[(usize, usize)], owner: usize) -> usize {
    let from = (owner != 0).then(|| loaded::containing(objects, owner)).flatten();
    let first = defs.first().map_or(0, |&(_, a)| a);
    let addr = from
        .and_then(|o| {
            loaded::dependency_order(objects, o)
                .into_iter()
                .find_map(|i| defs.iter().find(|(d, _)| *d == i).map(|&(_, a)| a))
        })
        .unwrap_or(first);
    let owner_name = from.and_then(|o| objects.get(o)).map_or("an unknown object", |o| o.name.as_str());
    let target_name = loaded::containing(objects, addr).and_then(|i| objects.get(i)).map_or("?", |o| &o.name);
    warn_once(
        &AMBIGUOUS_WARNED,
        &format!(
            "{} loaded libraries outside the global scope define {name}; registrations from {owner_name} go to \
             {target_name} and are not recorded",
            defs.len()
        ),
    );
    addr
}

static NONE_WARNED: AtomicBool = AtomicBool::new(false);
static AMBIGUOUS_WARNED: AtomicBool = AtomicBool::new(false);

fn warn_once(flag: &AtomicBool, what: &str) {
    if !flag.swap(true, Ordering::Relaxed) {
        eprintln!("gpuless: {what}");
    }
}

/// The address that tells whose registration a call is: the fat binary wrapper for
/// `__cudaRegisterFatBinary`; for the others, the owner remembered for their handle, else the
/// host stub or variable (their second argument).
fn owner_of(f: &ApiFunction, raw: &[u64]) -> usize {
    let first = raw.first().copied().unwrap_or(0) as usize;
    if f.name == "__cudaRegisterFatBinary" {
        return first;
    }
    let known = HANDLES.lock().unwrap_or_else(|e| e.into_inner()).as_ref().and_then(|m| m.get(&first).copied());
    known.unwrap_or_else(|| match f.name {
        "__cudaRegisterFunction" | "__cudaRegisterVar" => raw.get(1).copied().unwrap_or(0) as usize,
        _ => 0,
    })
}

fn remember(handle: u64, owner: usize) {
    if handle != 0 {
        let mut m = HANDLES.lock().unwrap_or_else(|e| e.into_inner());
        m.get_or_insert_with(HashMap::new).insert(handle as usize, owner);
    }
}

/// One call of the exported function `id` with raw arguments `raw`: `real` calls the
/// definition at the address it is given and returns the returned word (0 for `void`).
/// Returns that word, or 0 when there is nothing to forward to.
///
/// # Safety
/// `raw` are the caller's arguments in the table's order; `real` passes them on unchanged.
pub(crate) unsafe fn call(id: ApiId, raw: &[u64], real: impl FnOnce(*mut c_void) -> u64) -> u64 {
    let Some(f) = api::get(id) else { return 0 };
    let owner = owner_of(f, raw);
    // Resolution never panics by construction; a panic here would be a bug, and with no
    // definition to forward to, the call can only do nothing.
    let Ok(Some(target)) = std::panic::catch_unwind(|| resolve(f, owner)) else { return 0 };
    let record = target.certain
        && state::enabled()
        && state::level_enabled(ApiLevel::Runtime)
        && crate::diag::diag() == crate::diag::Diag::Off;
    if !record {
        let ret = real(target.addr as *mut c_void);
        if f.name == "__cudaRegisterFatBinary" {
            remember(ret, owner);
        }
        return ret;
    }
    // Client mode: what capturing needs of the session is lent before the first hooked call
    // when a constructor registers kernels first.
    crate::remote::install();
    let seq = state::next_seq();
    // Registrations are not timed (like folded queries): a program registers tens of thousands
    // of kernels at start-up, and their timestamps were a sixth of a PyTorch trace's call bytes.
    // Each carries the time its thread last read the clock.
    let t0 = lane::last_ns();
    // SAFETY: forwarded from the caller; the table's kinds read only what libcudart reads.
    let args = std::panic::catch_unwind(|| unsafe { capture::inputs(f, raw) });
    let parent = lane::enter(seq);
    let ret = real(target.addr as *mut c_void);
    lane::leave(parent);
    if f.name == "__cudaRegisterFatBinary" {
        remember(ret, owner);
    }
    let Ok(args) = args else {
        state::fail(&format!("capturing the arguments of {} failed", f.name));
        return ret;
    };
    let results = match f.ret {
        Return::Value { kind, c_type } => {
            let p = capture::Prim::Value(api::CScalar::of(c_type, kind));
            vec![capture::word_value(kind, p, ret).unwrap_or(Value::U64(ret))]
        }
        Return::Void | Return::Status => Vec::new(),
    };
    batches::emit(CallRecord {
        seq,
        thread: lane::tid(),
        timestamp_ns: t0,
        duration_ns: 0,
        level: f.level,
        parent,
        function: Function::Known(f.id),
        variant: Variant::BASE,
        status: 0,
        args,
        results,
        repeat: 0,
    });
    state::note_annotation();
    ret
}
