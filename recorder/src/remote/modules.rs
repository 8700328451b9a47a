//! Kernels the program loaded, known on the client: each module load's code image is analyzed
//! (the cubin analyzer on the entry the session's GPU runs; PTX entry declarations for PTX),
//! so kernel parameter layouts, function attributes and module globals are answered without
//! the server.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, CString};
use std::sync::{Arc, Mutex};

use gpuless_analyzer::attributes::{self, FunctionFacts};
use gpuless_analyzer::cubin::analyze_cubin;
use gpuless_analyzer::occupancy::{DeviceLimits, KernelFacts};
use gpuless_fatbin::{EntryKind, Image, Limits};

use super::{devices, ptx};

/// What the client knows about one kernel.
#[derive(Debug)]
pub(crate) struct Kernel {
    /// Its (mangled) name.
    pub name: String,
    /// (offset, size) of each parameter.
    pub params: Vec<(u32, u32)>,
    /// What its cubin says (nothing for PTX: the driver compiles it).
    pub facts: FunctionFacts,
    /// Function attributes the program set (`cuFuncSetAttribute`, `cuKernelSetAttribute`).
    set: Mutex<HashMap<u32, i32>>,
}

impl Kernel {
    fn new(name: String, params: Vec<(u32, u32)>, facts: FunctionFacts) -> Kernel {
        Kernel { name, params, facts, set: Mutex::new(HashMap::new()) }
    }
}

#[derive(Default)]
struct Module {
    kernels: HashMap<String, Arc<Kernel>>,
    /// Its kernels' names in the image's order (the driver's enumeration order), NUL-terminated
    /// for a caller that keeps the pointer as long as the module lives.
    order: Vec<CString>,
    /// The first function handle bound to each kernel (the driver hands out one per kernel).
    handles: HashMap<String, u64>,
    /// Global variables: name → size.
    globals: HashMap<String, u64>,
    /// Addresses handed out for its globals.
    placed: HashMap<String, u64>,
}

#[derive(Default)]
struct Known {
    modules: HashMap<u64, Module>,
    functions: HashMap<u64, Arc<Kernel>>,
    /// The function handle each kernel handle was looked up as (`cuKernelGetFunction`).
    kernel_functions: HashMap<u64, u64>,
    /// Next address for a module global (a range reserved in this process).
    next_global: u64,
    globals_end: u64,
}

static KNOWN: Mutex<Option<Known>> = Mutex::new(None);

fn known<R>(f: impl FnOnce(&mut Known) -> R) -> R {
    let mut g = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(Known::default))
}

thread_local! {
    /// The code image the thread's current call captured (a module load's).
    static LAST_IMAGE: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
}

/// Notes a code image captured from the current call's arguments.
pub(crate) fn saw_image(bytes: &[u8]) {
    let _ = LAST_IMAGE.try_with(|l| *l.borrow_mut() = Some(bytes.to_vec()));
}

/// A module (or library) `h` was loaded from the image the current call captured.
pub(crate) fn loaded(h: u64) {
    let image = LAST_IMAGE.try_with(|l| l.borrow_mut().take()).ok().flatten().unwrap_or_default();
    let sm = devices::first().map_or(0, |d| d.sm());
    let m = analyze(&image, sm);
    known(|k| k.modules.insert(h, m));
}

fn analyze(image: &[u8], sm: u32) -> Module {
    let mut m = Module::default();
    // A PTX blob is the text without its NUL; classification wants the terminator.
    let owned;
    let image = if image.first().is_some_and(u8::is_ascii) && image.last() != Some(&0) {
        owned = [image, &[0]].concat();
        &owned[..]
    } else {
        image
    };
    match Image::classify(image) {
        Ok(Image::Cubin(b)) => add_cubin(&mut m, b),
        Ok(Image::Ptx(t)) => add_ptx(&mut m, t),
        Ok(Image::Fatbin(b)) => {
            let Ok(entries) = gpuless_fatbin::all_entries(b, 0) else { return m };
            let Ok(choice) = gpuless_fatbin::select(&entries, sm) else { return m };
            let Some(e) = entries.get(choice.index) else { return m };
            let Ok(payload) = e.payload(&Limits::default()) else { return m };
            match e.kind {
                EntryKind::Ptx => add_ptx(&mut m, &payload),
                _ => add_cubin(&mut m, &payload),
            }
        }
        _ => {}
    }
    m
}

fn add_cubin(m: &mut Module, bytes: &[u8]) {
    let Ok(c) = analyze_cubin(bytes, None) else { return };
    for k in &c.kernels {
        let params = k.params.iter().map(|p| (p.offset, p.size)).collect();
        let kernel = Kernel::new(k.name.clone(), params, FunctionFacts::of(k, &c));
        m.add(kernel);
    }
    for g in c.globals {
        m.globals.insert(g.name, g.size);
    }
}

fn add_ptx(m: &mut Module, text: &[u8]) {
    let text = String::from_utf8_lossy(text.split(|&b| b == 0).next().unwrap_or(&[]));
    for e in ptx::entries(&text) {
        m.add(Kernel::new(e.name, e.params, FunctionFacts::default()));
    }
    m.globals.extend(ptx::globals(&text));
}

impl Module {
    fn add(&mut self, kernel: Kernel) {
        if let Ok(c) = CString::new(kernel.name.as_bytes()) {
            if !self.kernels.contains_key(&kernel.name) {
                self.order.push(c);
            }
        }
        self.kernels.insert(kernel.name.clone(), Arc::new(kernel));
    }
}

/// Whether `h` is a module or library the client loaded.
pub(crate) fn is_module(h: u64) -> bool {
    known(|k| k.modules.contains_key(&h))
}

/// Binds function handle `h` to kernel `name` of module `module`; false when it has none.
pub(crate) fn function(h: u64, module: u64, name: &str) -> bool {
    known(|k| {
        let Some(m) = k.modules.get_mut(&module) else { return false };
        let Some(kernel) = m.kernels.get(name).cloned() else { return false };
        if !m.handles.contains_key(name) {
            m.handles.insert(name.to_string(), h);
        }
        k.functions.insert(h, kernel);
        true
    })
}

/// The kernels of module `module` in the image's order: each name (NUL-terminated, valid as
/// long as the client process lives) and the function handle already bound to it, if any.
/// `None` when the client did not load `module`.
pub(crate) fn functions_of(module: u64) -> Option<Vec<(*const c_char, Option<u64>)>> {
    known(|k| {
        let m = k.modules.get(&module)?;
        Some(m.order.iter().map(|c| (c.as_ptr(), c.to_str().ok().and_then(|n| m.handles.get(n).copied()))).collect())
    })
}

/// Binds function handle `h` to the kernel behind handle `of`; false when there is none.
pub(crate) fn alias(h: u64, of: u64) -> bool {
    known(|k| {
        let Some(kernel) = k.functions.get(&of).cloned() else { return false };
        k.functions.insert(h, kernel);
        true
    })
}

/// The function handle of kernel handle `kernel`, bound to `make()`'s handle the first time it
/// is asked (the driver looks up the same function for the same kernel every time:
/// `cuKernelGetFunction`, and the function a kernel node's parameters name); `None` when the
/// kernel is unknown.
pub(crate) fn kernel_function(kernel: u64, make: impl FnOnce() -> u64) -> Option<u64> {
    known(|k| {
        if let Some(&f) = k.kernel_functions.get(&kernel) {
            return Some(f);
        }
        let facts = k.functions.get(&kernel).cloned()?;
        let f = make();
        k.functions.insert(f, facts);
        k.kernel_functions.insert(kernel, f);
        Some(f)
    })
}

/// The kernel behind a function or kernel handle.
pub(crate) fn kernel(h: u64) -> Option<Arc<Kernel>> {
    known(|k| k.functions.get(&h).cloned())
}

/// (offset, size) of parameter `i` of the function or kernel `h`.
pub(crate) fn param(h: u64, i: usize) -> Option<(u32, u32)> {
    kernel(h)?.params.get(i).copied()
}

/// What the occupancy rules need of `k` (`None` without a register count: PTX).
pub(crate) fn facts(k: &Kernel) -> Option<KernelFacts> {
    k.facts.occupancy
}

/// The session's device limits for the occupancy rules: worked out once, when the session's
/// description is there (function attribute and occupancy queries ask for them at every call).
pub(crate) fn limits() -> Option<DeviceLimits> {
    static LIMITS: std::sync::OnceLock<Option<DeviceLimits>> = std::sync::OnceLock::new();
    if let Some(l) = LIMITS.get() {
        return *l;
    }
    let d = devices::first()?;
    *LIMITS.get_or_init(|| DeviceLimits::from_attributes(|id| d.attributes.iter().find(|a| a.0 == id).map(|a| a.1)))
}

/// A `CUfunction_attribute` of `k`: what the program set, else what the driver answers for
/// the code as loaded (`gpuless_analyzer::attributes`); `None` where the code does not say.
pub(crate) fn attribute(k: &Kernel, attr: u32) -> Option<i32> {
    if let Some(&v) = k.set.lock().unwrap_or_else(|e| e.into_inner()).get(&attr) {
        return Some(v);
    }
    let v = attributes::initial(&k.facts, limits().as_ref(), attr)?;
    Some(i32::try_from(v).unwrap_or(if v < 0 { i32::MIN } else { i32::MAX }))
}

/// The program sets attribute `attr` of `k` to `value`: remembered when the driver would
/// accept it (the call goes to the server either way); `false` when the driver would refuse
/// it (the status the program gets is then `CUDA_ERROR_INVALID_VALUE`).
pub(crate) fn set_attribute(k: &Kernel, attr: u32, value: i32) -> bool {
    match attributes::accepts(&k.facts, limits().as_ref(), attr, i64::from(value)) {
        Some(false) => false,
        Some(true) | None => {
            if attributes::settable(attr) {
                k.set.lock().unwrap_or_else(|e| e.into_inner()).insert(attr, value);
            }
            true
        }
    }
}

/// Address and size of global `name` of module `module`: a client address, the same for the
/// same global every time (the executor maps it to the global's address on the server).
pub(crate) fn global(module: u64, name: &str) -> Option<(u64, u64)> {
    known(|k| {
        if k.globals_end == 0 {
            let (base, len) = reserve_globals()?;
            k.next_global = base;
            k.globals_end = base + len;
        }
        let (next, end) = (k.next_global, k.globals_end);
        let m = k.modules.get_mut(&module)?;
        let size = *m.globals.get(name)?;
        if let Some(&a) = m.placed.get(name) {
            return Some((a, size));
        }
        let addr = next.div_ceil(256) * 256;
        let stop = addr.checked_add(size.max(1))?;
        if stop > end {
            return None;
        }
        m.placed.insert(name.to_string(), addr);
        k.next_global = stop;
        Some((addr, size))
    })
}

/// Whether module `module` has a kernel named `name`.
pub(crate) fn has_kernel(module: u64, name: &str) -> bool {
    known(|k| k.modules.get(&module).is_some_and(|m| m.kernels.contains_key(name)))
}

/// Whether `ptr` lies among the module globals' client addresses.
pub(crate) fn in_globals(ptr: u64) -> bool {
    known(|k| k.globals_end != 0 && ptr >= k.globals_end.saturating_sub(64 << 30) && ptr < k.next_global)
}

/// A range of this process's address space for module globals (never host memory the
/// program could own; 64 GiB, reserved, never touched).
fn reserve_globals() -> Option<(u64, u64)> {
    const LEN: usize = 64 << 30;
    // SAFETY: an anonymous PROT_NONE reservation; nothing is mapped over it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            LEN,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some((p as u64, LEN as u64))
}
