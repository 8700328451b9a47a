//! The driver's private export tables (`cuGetExportTable`) as the client hands them out, so
//! that the CUDA runtime (static or shared cudart) initializes on a machine without a driver.
//!
//! Which tables and slots: what the runtime was measured to call (docs/BENCHMARKS.md, "Fidelity
//! (issue 19) and the driver's export tables"; each table refused in turn broke it). What each
//! slot answers: what the real driver answered on the device machine
//! (`recorder/tests/fake/tables.c`, run natively in the GPU suite) and what public reverse engineering describes
//! (REFERENCE.md §8). Each table has the driver's size (its first word, where the driver's has
//! one). A slot nobody has seen called answers `CUDA_ERROR_NOT_SUPPORTED` and says so once on
//! stderr; a table not listed here is refused as the driver refuses one it lacks
//! (`CUDA_ERROR_INVALID_VALUE`), with a line naming it.
//!
//! | table | slots answered here |
//! |---|---|
//! | `6bd5fb6c` CUDART_INTERFACE | 2 primary context (a client handle, no record: the executor has one context); 1, 6, 8 module from a fatbin (sent as `cuModuleLoadData` through the hook); 7 no-op |
//! | `42d85a81` TOOLS_TLS | 2 no tool context (null) |
//! | `f8cff951` (cuBLAS, at `cublasCreate`) | size only |
//! | `21318c60` "ToolsContext" | 4, 39, 51: the outputs the driver was measured to write |
//! | `a094798c` TOOLS_RUNTIME_CALLBACK_HOOKS | 2, 6 zeroed buffers of the driver's sizes (no tool is attached) |
//! | `c693336e` CONTEXT_LOCAL_STORAGE | 0 put, 1 delete, 2 get per (context, key); a missing key is `CUDA_ERROR_INVALID_HANDLE`, as the driver answers |
//! | `263e8860` CONTEXT_CHECKS | 2 writes 0 to its first out-value and leaves the second; 3 returns 0 (the driver's answers) |
//! | `d4082055` INTEGRITY_CHECK | 1 ([`gpuless_analyzer::integrity`]) |
//! | `6e163fbe` "ToolsModule" (cuFFT) | 7 the functions of a module, each handed to the caller's callback |
//! | `1734dc26` (cuBLASLt, fp16 GEMM set-up) | none: each of its 16 slots answers `CUDA_ERROR_NOT_SUPPORTED`, with which cuBLASLt computes as with the driver's (measured) |

use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_void};
use std::sync::Mutex;

use super::attributes::attr_of;
use super::context_books::{current_context, primary_of};
use gpuless_analyzer::integrity::{self, DeviceIds};

/// Calls of the slots implemented here, for `GPULESS_EXPORT_TABLES=count` in client mode
/// (printed at exit by [`print_counts`]): by name.
static COUNTS: [(&str, std::sync::atomic::AtomicU64); 11] = [
    ("CUDART_INTERFACE.2 primary context", std::sync::atomic::AtomicU64::new(0)),
    ("CONTEXT_LOCAL_STORAGE.0 put", std::sync::atomic::AtomicU64::new(0)),
    ("CONTEXT_LOCAL_STORAGE.1 delete", std::sync::atomic::AtomicU64::new(0)),
    ("CONTEXT_LOCAL_STORAGE.2 get, found", std::sync::atomic::AtomicU64::new(0)),
    ("CONTEXT_LOCAL_STORAGE.2 get, missing", std::sync::atomic::AtomicU64::new(0)),
    ("CONTEXT_CHECKS.2", std::sync::atomic::AtomicU64::new(0)),
    ("CONTEXT_CHECKS.3", std::sync::atomic::AtomicU64::new(0)),
    ("TOOLS_TLS.2", std::sync::atomic::AtomicU64::new(0)),
    ("ToolsContext.4", std::sync::atomic::AtomicU64::new(0)),
    ("CUDART_INTERFACE.1/6/8 module loads", std::sync::atomic::AtomicU64::new(0)),
    ("ToolsModule.7 functions of a module", std::sync::atomic::AtomicU64::new(0)),
];

fn count(i: usize) {
    COUNTS[i].1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// With `GPULESS_EXPORT_TABLES=count`: how often the program called each slot answered here.
pub(crate) fn print_counts() {
    if std::env::var("GPULESS_EXPORT_TABLES").is_ok_and(|v| v == "count") {
        let c: Vec<String> =
            COUNTS.iter().map(|(n, v)| format!("{n}: {}", v.load(std::sync::atomic::Ordering::Relaxed))).collect();
        eprintln!("gpuless: export-table slots answered in client mode: {}", c.join(", "));
    }
}

const SUCCESS: u32 = 0;
const INVALID_VALUE: u32 = 1;
const INVALID_HANDLE: u32 = 400;
const NOT_SUPPORTED: u32 = 801;

/// One word of a table: a size or a function's address.
#[derive(Clone, Copy)]
#[repr(transparent)]
struct Word(*const ());

// SAFETY: sizes and the addresses of functions, immutable for the whole process.
unsafe impl Sync for Word {}

const fn size(words: usize) -> Word {
    Word(std::ptr::without_provenance(words * 8))
}

/// A slot nobody has seen called: says so once, answers `CUDA_ERROR_NOT_SUPPORTED`.
extern "C" fn stub<const T: usize, const S: usize>() -> u32 {
    static SAID: Mutex<Option<HashSet<(usize, usize)>>> = Mutex::new(None);
    let mut g = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if g.get_or_insert_with(HashSet::new).insert((T, S)) {
        eprintln!(
            "gpuless: client mode does not implement slot {S} of the driver's private table {}; \
             it returns CUDA_ERROR_NOT_SUPPORTED",
            TABLES.get(T).map_or("?", |t| t.0)
        );
    }
    NOT_SUPPORTED
}

/// A slot of a large table that nobody has seen called (which one is not known here): says so
/// once, answers `CUDA_ERROR_NOT_SUPPORTED`.
extern "C" fn unlisted<const T: usize>() -> u32 {
    static SAID: Mutex<Option<HashSet<usize>>> = Mutex::new(None);
    let mut g = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if g.get_or_insert_with(HashSet::new).insert(T) {
        eprintln!(
            "gpuless: client mode was asked for a slot it does not implement of the driver's private \
             table {} (it answers only the slots measured in use); it returns CUDA_ERROR_NOT_SUPPORTED",
            TABLES.get(T).map_or("?", |t| t.0)
        );
    }
    NOT_SUPPORTED
}

macro_rules! f {
    ($e:expr) => {
        Word($e as *const ())
    };
}

static CUDART_INTERFACE: [Word; 13] = [
    size(13),
    f!(module_from_wrapper),
    f!(primary_context),
    f!(stub::<0, 3>),
    f!(stub::<0, 4>),
    f!(stub::<0, 5>),
    f!(module_from_wrapper_ex),
    f!(no_op),
    f!(module_from_header_ex),
    f!(stub::<0, 9>),
    f!(stub::<0, 10>),
    f!(stub::<0, 11>),
    f!(stub::<0, 12>),
];
static TOOLS_TLS: [Word; 3] = [size(3), f!(stub::<1, 1>), f!(no_tools_context)];
static CALLBACK_HOOKS: [Word; 7] = [
    size(7),
    f!(stub::<2, 1>),
    f!(hooks_buffer_2),
    f!(stub::<2, 3>),
    f!(stub::<2, 4>),
    f!(stub::<2, 5>),
    f!(hooks_buffer_6),
];
static CONTEXT_STORAGE: [Word; 4] = [f!(cls_put), f!(cls_delete), f!(cls_get), f!(stub::<3, 3>)];
static CONTEXT_CHECKS: [Word; 15] = [
    size(15),
    f!(stub::<4, 1>),
    f!(context_check),
    f!(check_zero),
    f!(stub::<4, 4>),
    f!(stub::<4, 5>),
    f!(stub::<4, 6>),
    f!(stub::<4, 7>),
    f!(stub::<4, 8>),
    f!(stub::<4, 9>),
    f!(stub::<4, 10>),
    f!(stub::<4, 11>),
    f!(stub::<4, 12>),
    f!(stub::<4, 13>),
    f!(stub::<4, 14>),
];
static INTEGRITY_CHECK: [Word; 3] = [size(3), f!(integrity_check), f!(stub::<5, 2>)];
/// Asked for by cuBLAS at `cublasCreate`; none of its slots was seen called.
static CUBLAS_INIT: [Word; 3] = [size(3), f!(stub::<6, 1>), f!(stub::<6, 2>)];
/// "ToolsContext": cuBLAS calls slot 4 at every API entry (after TOOLS_TLS slot 2), and slots
/// 51 and 39 once, with the tool context object. What the driver does there, measured
/// (`GPULESS_EXPORT_TABLES=log:21318c60`, cublas_batched on the H100): slot 4 writes 1 into
/// the word after the context in the caller's block; 51 writes an object's address; 39, given
/// that object, writes 7. The client reproduces those outputs (no tool is attached).
static TOOLS_CONTEXT: [Word; 93] = tools_context();

const fn tools_context() -> [Word; 93] {
    let mut t = [f!(unlisted::<7>); 93];
    t[0] = size(93);
    t[4] = f!(tools_enter);
    t[39] = f!(tools_value);
    t[51] = f!(tools_object);
    t
}

/// "ToolsModule": cuFFT links its kernels at run time (nvJitLink), loads each image with
/// `cuModuleLoadData` and takes the module's functions from slot 7 instead of
/// `cuModuleGetFunction`. What the driver does there, measured (`scripts/probe-tools-module.py`,
/// H200, driver 580): `(context, module, callback, user)`: for each function of the module, in
/// the image's order, `callback(user, function, name)` with the function `cuModuleGetFunction`
/// gives for that name and its name; it returns how many (0 for a module without kernels). The
/// context is not used (a null one gives the same).
static TOOLS_MODULE: [Word; 99] = tools_module();

const fn tools_module() -> [Word; 99] {
    let mut t = [f!(unlisted::<8>); 99];
    t[0] = size(99);
    t[7] = f!(module_functions);
    t
}

/// Asked for by cuBLASLt while it sets up its first fp16 GEMMs (PyTorch's half-precision
/// `nn.TransformerEncoder`). Natively (H200, driver 580, `GPULESS_EXPORT_TABLES=log:1734dc26`)
/// it calls slot 4 (two heap objects returned through two out-pointers) then slot 13 (which
/// writes into each the address of a kernel's name and a per-process tag), three times. Answering
/// `CUDA_ERROR_NOT_SUPPORTED` from either or both slots instead, the program computed the same
/// result as with the driver's slots (`GPULESS_EXPORT_TABLES_ANSWER`, docs/BENCHMARKS.md); a
/// refused table crashes cuBLASLt. So the table is handed out, every slot answering
/// `CUDA_ERROR_NOT_SUPPORTED` (said once per slot).
static CUBLASLT_KERNELS: [Word; 17] = [
    size(17),
    f!(stub::<9, 1>),
    f!(stub::<9, 2>),
    f!(stub::<9, 3>),
    f!(stub::<9, 4>),
    f!(stub::<9, 5>),
    f!(stub::<9, 6>),
    f!(stub::<9, 7>),
    f!(stub::<9, 8>),
    f!(stub::<9, 9>),
    f!(stub::<9, 10>),
    f!(stub::<9, 11>),
    f!(stub::<9, 12>),
    f!(stub::<9, 13>),
    f!(stub::<9, 14>),
    f!(stub::<9, 15>),
    f!(stub::<9, 16>),
];

/// The tables by UUID (hex, as `cuGetExportTable`'s 16 bytes print), in `stub`'s numbering.
static TABLES: [(&str, &[Word]); 10] = [
    ("6bd5fb6c5bf4e74a8987d93912fd9df9", &CUDART_INTERFACE),
    ("42d85a8123f6cb478298f6e78a3aecdc", &TOOLS_TLS),
    ("a094798c2e742e7493f20800200c0a66", &CALLBACK_HOOKS),
    ("c693336e1121df11a8c368f355d89593", &CONTEXT_STORAGE),
    ("263e88607cd2614392f6bbd5006dfa7e", &CONTEXT_CHECKS),
    ("d4082055bde6704b8d34ba123c66e1f2", &INTEGRITY_CHECK),
    ("f8cff95121468b4eb9e2fb469e7c0dd9", &CUBLAS_INIT),
    ("21318c60971432488ca641ff7324c8f2", &TOOLS_CONTEXT),
    ("6e163fbeb958444d835ce182aff1991e", &TOOLS_MODULE),
    ("1734dc26800d47458726c0f1e7dd8bca", &CUBLASLT_KERNELS),
];

/// `cuGetExportTable(out, id)` in client mode.
///
/// # Safety
/// `out` and `id` are the program's arguments: null or an out-pointer and a 16-byte UUID.
pub(crate) unsafe fn get(out: u64, id: u64) -> u32 {
    if out == 0 || id == 0 {
        return INVALID_VALUE;
    }
    // SAFETY: the program's 16-byte UUID.
    let uuid = unsafe { *(id as *const [u8; 16]) };
    let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    match TABLES.iter().find(|t| t.0 == hex) {
        Some(t) => {
            // SAFETY: the program's out-pointer.
            unsafe { *(out as *mut *const c_void) = t.1.as_ptr().cast() };
            SUCCESS
        }
        None => {
            static SAID: Mutex<Option<HashSet<String>>> = Mutex::new(None);
            let mut g = SAID.lock().unwrap_or_else(|e| e.into_inner());
            if g.get_or_insert_with(HashSet::new).insert(hex.clone()) {
                eprintln!(
                    "gpuless: client mode does not implement the driver's private table {hex}; \
                     cuGetExportTable returns CUDA_ERROR_INVALID_VALUE"
                );
            }
            INVALID_VALUE // what the driver answers for a table it does not have
        }
    }
}

extern "C" fn no_op(_a: usize) -> u32 {
    SUCCESS
}

extern "C" fn primary_context(out: *mut u64, dev: i32) -> u32 {
    count(0);
    if out.is_null() {
        return INVALID_VALUE;
    }
    if !super::devices::valid(dev as u32 as u64) {
        return 101; // CUDA_ERROR_INVALID_DEVICE: not one of the session's devices
    }
    // SAFETY: checked non-null.
    unsafe { *out = primary_of(dev as u32) };
    SUCCESS
}

/// The hook of driver function `name`: a slot's work done through it is sent (and recorded)
/// as that call.
fn hook(name: &str) -> Option<*mut c_void> {
    crate::hooks::slot_of(name).map(|i| crate::hooks::HOOKS[i].hook.ptr())
}

/// The module load through the hook of `cuModuleLoadData`.
fn load_fatbin(module: *mut u64, image: *const c_void) -> u32 {
    count(9);
    if module.is_null() || image.is_null() {
        return INVALID_VALUE;
    }
    let Some(p) = hook("cuModuleLoadData") else { return NOT_SUPPORTED };
    type Load = unsafe extern "C" fn(*mut u64, *const c_void) -> u32;
    // SAFETY: the hook has cuModuleLoadData's signature.
    let load = unsafe { std::mem::transmute::<*mut c_void, Load>(p) };
    // SAFETY: the program's out-pointer and fatbin.
    unsafe { load(module, image) }
}

/// The function of `name` in `module` through the hook of `cuModuleGetFunction`.
fn get_function(module: u64, name: *const c_char) -> Option<u64> {
    type Get = unsafe extern "C" fn(*mut u64, u64, *const c_char) -> u32;
    // SAFETY: the hook has cuModuleGetFunction's signature.
    let get = unsafe { std::mem::transmute::<*mut c_void, Get>(hook("cuModuleGetFunction")?) };
    let mut h = 0u64;
    // SAFETY: an out-pointer of ours, a module handle and a NUL-terminated name the module keeps.
    (unsafe { get(&mut h, module, name) } == SUCCESS).then_some(h)
}

/// The caller's callback of ToolsModule slot 7 (cuFFT's stores the function through `user`).
type EachFunction = unsafe extern "C" fn(user: *mut c_void, function: u64, name: *const c_char);

/// ToolsModule slot 7: each function of `module` to `each`, the count returned.
extern "C" fn module_functions(_ctx: u64, module: u64, each: Option<EachFunction>, user: *mut c_void) -> u64 {
    count(10);
    let Some(list) = super::modules::functions_of(module) else { return 0 };
    let mut n = 0;
    for (name, bound) in list {
        let Some(h) = bound.or_else(|| get_function(module, name)) else { continue };
        if let Some(each) = each {
            // SAFETY: the caller's callback with its own `user`, a handle and a name that lives
            // as long as the module.
            unsafe { each(user, h, name) };
        }
        n += 1;
    }
    n
}

/// The fatbin of a `__fatBinC_Wrapper_t` (null when it is not one).
unsafe fn wrapper_data(wrapper: *const c_void) -> *const c_void {
    if wrapper.is_null() {
        return std::ptr::null();
    }
    // SAFETY: the runtime's wrapper, 24 bytes.
    let bytes = unsafe { std::slice::from_raw_parts(wrapper.cast::<u8>(), gpuless_fatbin::Wrapper::SIZE) };
    gpuless_fatbin::Wrapper::parse(bytes).map_or(std::ptr::null(), |w| w.data as *const c_void)
}

extern "C" fn module_from_wrapper(module: *mut u64, wrapper: *const c_void) -> u32 {
    // SAFETY: the runtime's wrapper.
    load_fatbin(module, unsafe { wrapper_data(wrapper) })
}

extern "C" fn module_from_wrapper_ex(
    module: *mut u64,
    wrapper: *const c_void,
    a3: *const c_void,
    a4: *const c_void,
    _a5: u32,
) -> u32 {
    if !a3.is_null() || !a4.is_null() {
        return stub::<0, 6>();
    }
    // SAFETY: the runtime's wrapper.
    load_fatbin(module, unsafe { wrapper_data(wrapper) })
}

extern "C" fn module_from_header_ex(
    header: *const c_void,
    module: *mut u64,
    a3: *const c_void,
    a4: *const c_void,
    a5: u32,
) -> u32 {
    if !a3.is_null() || !a4.is_null() || a5 != 0 {
        return stub::<0, 8>();
    }
    load_fatbin(module, header)
}

/// A zeroed buffer the runtime may write into.
#[repr(align(64))]
struct Buffer<const N: usize>(std::cell::UnsafeCell<[u8; N]>);
// SAFETY: handed to the runtime, which owns its contents; never read here.
unsafe impl<const N: usize> Sync for Buffer<N> {}

static HOOKS_2: Buffer<8192> = Buffer(std::cell::UnsafeCell::new([0; 8192]));
static HOOKS_6: Buffer<64> = Buffer(std::cell::UnsafeCell::new([0; 64]));

extern "C" fn hooks_buffer_2(p: *mut *mut u8, n: *mut usize) {
    // SAFETY: the runtime's out-pointers, checked; the driver answers 1024.
    unsafe {
        if !p.is_null() && !n.is_null() {
            *p = HOOKS_2.0.get().cast();
            *n = 1024;
        }
    }
}

extern "C" fn hooks_buffer_6(p: *mut *mut u8, n: *mut usize) {
    // SAFETY: as above; the driver answers 14.
    unsafe {
        if !p.is_null() && !n.is_null() {
            *p = HOOKS_6.0.get().cast();
            *n = 14;
        }
    }
}

type Destructor = extern "C" fn(u64, u64, u64);

/// Context-local storage: (context, key) → (value, destructor).
type Storage = HashMap<(u64, u64), (u64, Option<Destructor>)>;
static STORAGE: Mutex<Option<Storage>> = Mutex::new(None);

fn context_or_current(ctx: u64) -> u64 {
    if ctx == 0 {
        current_context()
    } else {
        ctx
    }
}

extern "C" fn cls_put(ctx: u64, key: u64, value: u64, dtor: Option<Destructor>) -> u32 {
    count(1);
    let ctx = context_or_current(ctx);
    let mut g = STORAGE.lock().unwrap_or_else(|e| e.into_inner());
    g.get_or_insert_with(HashMap::new).insert((ctx, key), (value, dtor));
    SUCCESS
}

extern "C" fn cls_delete(ctx: u64, key: u64) -> u32 {
    count(2);
    let ctx = context_or_current(ctx);
    let mut g = STORAGE.lock().unwrap_or_else(|e| e.into_inner());
    g.get_or_insert_with(HashMap::new).remove(&(ctx, key));
    SUCCESS
}

extern "C" fn cls_get(out: *mut u64, ctx: u64, key: u64) -> u32 {
    if out.is_null() {
        return INVALID_VALUE;
    }
    let ctx = context_or_current(ctx);
    let g = STORAGE.lock().unwrap_or_else(|e| e.into_inner());
    let found = g.as_ref().and_then(|m| m.get(&(ctx, key)));
    count(if found.is_some() { 3 } else { 4 });
    match found {
        Some(&(v, _)) => {
            // SAFETY: checked non-null.
            unsafe { *out = v };
            SUCCESS
        }
        None => INVALID_HANDLE,
    }
}

extern "C" fn context_check(_ctx: u64, first: *mut u32, _second: *mut u64) -> u32 {
    count(5);
    if !first.is_null() {
        // SAFETY: the caller's out-value.
        unsafe { *first = 0 };
    }
    SUCCESS
}

/// TOOLS_TLS slot 2, at a cuBLAS API entry: `(state, callback id, ...)`; the driver writes its
/// tool context object into `state[0]` (measured: `GPULESS_EXPORT_TABLES=log:42d85a81`). No
/// tool is attached to a client: null, success.
extern "C" fn no_tools_context(state: *mut u64) -> u32 {
    count(7);
    if !state.is_null() {
        // SAFETY: the caller's state block (its first word is the context out-value).
        unsafe { *state = 0 };
    }
    SUCCESS
}

extern "C" fn tools_enter(_ctx: u64, flag: *mut u32) -> u32 {
    count(8);
    if !flag.is_null() {
        // SAFETY: the caller's block (measured: the driver writes 1 there).
        unsafe { *flag = 1 };
    }
    SUCCESS
}

static TOOLS_OBJECT: Buffer<256> = Buffer(std::cell::UnsafeCell::new([0; 256]));

extern "C" fn tools_object(_ctx: u64, _a: u64, out: *mut u64) -> u32 {
    if !out.is_null() {
        // SAFETY: the caller's out-value.
        unsafe { *out = TOOLS_OBJECT.0.get() as u64 };
    }
    SUCCESS
}

extern "C" fn tools_value(_ctx: u64, _obj: u64, out: *mut u64) -> u32 {
    if !out.is_null() {
        // SAFETY: the caller's out-value (measured: the driver writes 7).
        unsafe { *out = 7 };
    }
    SUCCESS
}

extern "C" fn check_zero() -> u32 {
    count(6);
    0
}

extern "C" fn integrity_check(runtime_version: u32, timestamp: u64, out: *mut [u8; 16]) -> u32 {
    if out.is_null() {
        return INVALID_VALUE;
    }
    let Some(d) = super::devices::first() else { return 3 }; // CUDA_ERROR_NOT_INITIALIZED
                                                             // Every device of the session, in order.
    let devices = (0..super::devices::count())
        .filter_map(|k| {
            let u = super::devices::description(k)?.uuid;
            let attr = |id: u32| attr_of(k, id).unwrap_or(0) as u32;
            Some(DeviceIds { uuid: u, pci_domain: attr(50), pci_bus: attr(33), pci_device: attr(34) })
        })
        .collect();
    let inputs = integrity::Inputs {
        driver_version: d.driver_version as u32,
        runtime_version,
        pid: std::process::id(),
        // SAFETY: no preconditions.
        thread: unsafe { libc::pthread_self() } as u32,
        cudart_table: CUDART_INTERFACE.as_ptr() as u64,
        integrity_table: INTEGRITY_CHECK.as_ptr() as u64,
        check_fn: INTEGRITY_CHECK[1].0 as usize as u64,
        timestamp,
        devices,
    };
    // SAFETY: checked non-null: the caller's 16-byte result.
    unsafe { *out = integrity::answer(&inputs) };
    SUCCESS
}
