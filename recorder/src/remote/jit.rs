//! Client mode's JIT linker (`=local(link)` in the API table: `cuLinkCreate`, `cuLinkAddData`,
//! `cuLinkAddFile`, `cuLinkComplete`, `cuLinkDestroy`). The linker is a host-side tool of the
//! driver; here it runs on the server's driver, where the session's executor keeps a link state
//! for each link of the program's (`gpuless_traces::protocol::link`, `gpulessLink` records):
//!
//! - `cuLinkCreate` makes up the handle, keeps the program's options and where its
//!   `optionValues` array is, and sends the creation without waiting (it goes out with the next
//!   segment); a creation the driver refuses is the answer to the link's next add or
//!   completion;
//! - `cuLinkAddData` and `cuLinkAddFile` (the file read here, where the program's files are)
//!   send the input as a blob and wait: the driver checks, and compiles, an input when it is
//!   added, so the add returns the driver's status, and what the driver wrote into the options
//!   (an error log) is written into the program's option values as the driver would;
//! - `cuLinkComplete` waits for the driver's status, the linked image and what the driver wrote
//!   into the options — slots it overwrote (the log sizes it filled), the logs, the wall time;
//!   the image stays in the client's memory until `cuLinkDestroy`;
//! - `cuLinkDestroy` sends the destruction without waiting (a session's end destroys the links
//!   left).
//!
//! Options whose slot points to an array of the program's that the driver reads (symbol names
//! and the addresses to relocate them to, kept kernel and variable names) travel by value: the
//! strings and addresses, as many as the option's count option says, are copied here and the
//! executor hands the driver arrays of its own (device addresses mean the same there, the arena
//! being one address space). Options cuda.h does not know, options of one input that the driver
//! writes through (an input's own logs), and a list whose count is missing or too large are
//! refused (`CUDA_ERROR_NOT_SUPPORTED`, said once).
//!
//! Above the session: the client's part names a linker step ([`super::step::Step::Link`]) and the
//! call's trip (`trip.rs`) runs it here.

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::Mutex;

use gpuless_analyzer::api::jit::{self, JitValue};
use gpuless_analyzer::api::ApiFunction;
use gpuless_traces::protocol::link::{JitList, JitOption, LinkAnswer, LinkInput, LinkRequest, LINK};
use gpuless_traces::BlobRef;
use gpuless_traces::{BlobKind, Value};

use super::handles::new_handle;
use super::session;
use super::step::refused;

const INVALID_VALUE: u32 = 1;
const FILE_NOT_FOUND: u32 = 301;
const INVALID_HANDLE: u32 = 400;
const UNKNOWN: u32 = 999;

/// Most options one call may pass (a larger count is a program's error, not an array to read).
const MAX_OPTIONS: u64 = 4096;

/// A link the program created and has not destroyed.
struct LinkState {
    /// `cuLinkCreate`'s options, values as the program gave them.
    options: Vec<JitOption>,
    /// The program's `optionValues` array (the driver writes answers into its slots).
    values: u64,
    /// Linked images handed out, valid until the link is destroyed.
    images: Vec<Box<[u8]>>,
}

static LINKS: Mutex<Option<HashMap<u64, LinkState>>> = Mutex::new(None);

fn links<R>(f: impl FnOnce(&mut HashMap<u64, LinkState>) -> R) -> R {
    let mut g = LINKS.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(HashMap::new))
}

/// One call of a JIT linker function; its status.
///
/// # Safety
/// `raw` are the program's arguments to `f`, in the API table's order.
pub(crate) unsafe fn call(f: &ApiFunction, raw: &[u64]) -> u32 {
    let arg = |name: &str| f.args.iter().position(|a| a.name == name).and_then(|i| raw.get(i).copied()).unwrap_or(0);
    let options = || (arg("numOptions"), arg("options"), arg("optionValues"));
    // SAFETY (all arms): the program's arguments, by the table's names.
    unsafe {
        match f.name {
            "cuLinkCreate" => create(f, options(), arg("stateOut")),
            "cuLinkAddData" => {
                let (data, size) = (arg("data"), arg("size"));
                if data == 0 || size == 0 {
                    return INVALID_VALUE;
                }
                let bytes = std::slice::from_raw_parts(data as *const u8, size as usize).to_vec();
                add(f, arg("state"), arg("type"), cstr(arg("name")), Ok(bytes), options())
            }
            "cuLinkAddFile" => {
                let Some(path) = cstr(arg("path")) else { return INVALID_VALUE };
                let bytes = std::fs::read(&path).map_err(|_| FILE_NOT_FOUND);
                add(f, arg("state"), arg("type"), Some(path), bytes, options())
            }
            "cuLinkComplete" => complete(f, arg("state"), arg("cubinOut"), arg("sizeOut")),
            "cuLinkDestroy" => {
                let link = arg("state");
                if links(|l| l.remove(&link)).is_none() {
                    return INVALID_HANDLE;
                }
                // The images go with the link; the server's state too.
                match session::tell(LINK, LinkRequest::Destroy { link }.to_args()) {
                    Ok(()) => 0,
                    Err(st) => st,
                }
            }
            _ => refused(f, "not a step of the JIT linker"),
        }
    }
}

/// The string at `p` (`None` for null).
///
/// # Safety
/// `p` is null or a NUL-terminated string of the program's.
unsafe fn cstr(p: u64) -> Option<String> {
    // SAFETY: the caller's contract.
    (p != 0).then(|| unsafe { CStr::from_ptr(p as *const std::ffi::c_char) }.to_string_lossy().into_owned())
}

/// The program's options: `n` ids at `ids`, their slots at `values`. `Err`: the status.
///
/// # Safety
/// `ids` and `values` are the program's arrays of `n` entries (or null).
unsafe fn read_options(
    f: &ApiFunction,
    (n, ids, values): (u64, u64, u64),
    one_input: bool,
) -> Result<Vec<JitOption>, u32> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if ids == 0 || values == 0 || n > MAX_OPTIONS {
        return Err(INVALID_VALUE);
    }
    // SAFETY: the program's arrays of `n` option ids (4 bytes) and slots (8 bytes).
    let pairs: Vec<(u32, u64)> = (0..n as usize)
        .map(|i| unsafe {
            (
                std::ptr::read_unaligned((ids as *const u32).add(i)),
                std::ptr::read_unaligned((values as *const u64).add(i)),
            )
        })
        .collect();
    let count_of = |c: u32| pairs.iter().find(|p| p.0 == c).map(|p| p.1 as u32 as u64);
    let mut out = Vec::with_capacity(pairs.len());
    for &(id, value) in &pairs {
        let list = match jit::value_of(id) {
            Some(JitValue::Plain) => None,
            Some(JitValue::Log { .. } | JitValue::Float) if !one_input => None,
            Some(JitValue::Log { .. } | JitValue::Float) => {
                return Err(refused(f, "an input's own log or wall-time option is not served"));
            }
            Some(JitValue::Names { count } | JitValue::Addresses { count }) => {
                let Some(k) = count_of(count).filter(|&k| k <= MAX_LIST && (k == 0 || value != 0)) else {
                    return Err(refused(f, "a JIT list option without its count, or with more than 65,536 entries"));
                };
                // SAFETY: the program's array of `k` entries at `value` (checked non-null).
                let list = unsafe {
                    match jit::value_of(id) {
                        Some(JitValue::Names { .. }) => read_names(value, k),
                        _ => Some(JitList::Addresses(
                            (0..k as usize).map(|i| std::ptr::read_unaligned((value as *const u64).add(i))).collect(),
                        )),
                    }
                };
                match list {
                    Some(l) => Some(l),
                    None => return Err(refused(f, "a JIT option's name longer than 4 KiB or null")),
                }
            }
            None => return Err(refused(f, "a JIT option cuda.h 13.0 does not know is not served")),
        };
        out.push(JitOption { id, value, list });
    }
    Ok(out)
}

/// Most entries of a list option ([`JitList`]).
const MAX_LIST: u64 = 1 << 16;
/// Longest name of a list option.
const MAX_NAME: usize = 4096;

/// The `k` C strings the program's array at `at` points to; `None` for a null entry or one
/// longer than [`MAX_NAME`].
///
/// # Safety
/// `at` is the program's array of `k` pointers to NUL-terminated strings.
unsafe fn read_names(at: u64, k: u64) -> Option<JitList> {
    let mut names = Vec::with_capacity(k as usize);
    for i in 0..k as usize {
        // SAFETY: the caller's contract.
        let p = unsafe { std::ptr::read_unaligned((at as *const u64).add(i)) } as *const u8;
        if p.is_null() {
            return None;
        }
        // SAFETY: a NUL-terminated string of the program's, read up to its NUL (bounded).
        let len = (0..=MAX_NAME).find(|&j| unsafe { *p.add(j) } == 0)?;
        // SAFETY: `len` bytes before the NUL.
        names.push(unsafe { std::slice::from_raw_parts(p, len) }.to_vec());
    }
    Some(JitList::Names(names))
}

/// `cuLinkCreate`: a link of the client's, created on the server without waiting.
///
/// # Safety
/// As [`call`].
unsafe fn create(f: &ApiFunction, options: (u64, u64, u64), out: u64) -> u32 {
    if out == 0 {
        return INVALID_VALUE;
    }
    // SAFETY: the program's option arrays.
    let opts = match unsafe { read_options(f, options, false) } {
        Ok(o) => o,
        Err(st) => return st,
    };
    let h = new_handle();
    if let Err(st) = session::tell(LINK, LinkRequest::Create { link: h, options: opts.clone() }.to_args()) {
        return st;
    }
    links(|l| l.insert(h, LinkState { options: opts, values: options.2, images: Vec::new() }));
    // SAFETY: the program's out-pointer for a CUlinkState.
    unsafe { std::ptr::write_unaligned(out as *mut u64, h) };
    0
}

/// `cuLinkAddData` and `cuLinkAddFile`: the input added on the server; the driver's status.
///
/// # Safety
/// As [`call`].
unsafe fn add(
    f: &ApiFunction,
    state: u64,
    kind: u64,
    name: Option<String>,
    bytes: Result<Vec<u8>, u32>,
    options: (u64, u64, u64),
) -> u32 {
    if !links(|l| l.contains_key(&state)) {
        return INVALID_HANDLE;
    }
    if kind >= u64::from(jit::NUM_INPUT_TYPES) {
        return INVALID_VALUE;
    }
    // SAFETY: the program's option arrays.
    let options = match unsafe { read_options(f, options, true) } {
        Ok(o) => o,
        Err(st) => return st,
    };
    let mut data = match bytes {
        Ok(b) => b,
        Err(st) => return st,
    };
    // PTX read from a file is text without its NUL; the driver wants the NUL.
    if kind == u64::from(jit::INPUT_PTX) && data.last() != Some(&0) {
        data.push(0);
    }
    let data = match session::blob(BlobKind::Other, &data) {
        Value::Blob(b) => b,
        _ => BlobRef { hash: gpuless_traces::Hash128::of(&data), len: data.len() as u64 },
    };
    let input = LinkInput { kind: kind as u32, name: name.unwrap_or_default(), data, options };
    // SAFETY: forwarded from the caller.
    unsafe { ask(f, state, LinkRequest::Add { link: state, input }) }.map_or_else(|st| st, |_| 0)
}

/// `cuLinkComplete`: the link completed on the server's driver; the image is kept until the
/// link is destroyed.
///
/// # Safety
/// As [`call`].
unsafe fn complete(f: &ApiFunction, state: u64, cubin_out: u64, size_out: u64) -> u32 {
    if !links(|l| l.contains_key(&state)) {
        return INVALID_HANDLE;
    }
    // SAFETY: forwarded from the caller.
    let answer = match unsafe { ask(f, state, LinkRequest::Complete { link: state }) } {
        Ok(a) => a,
        Err(st) => return st,
    };
    let image = answer.image.into_boxed_slice();
    let (ptr, len) = (image.as_ptr() as u64, image.len() as u64);
    if links(|l| l.get_mut(&state).map(|s| s.images.push(image))).is_none() {
        return INVALID_HANDLE; // destroyed by another thread meanwhile
    }
    // SAFETY: the program's out-pointers (null ones are left alone).
    unsafe {
        if cubin_out != 0 {
            std::ptr::write_unaligned(cubin_out as *mut u64, ptr);
        }
        if size_out != 0 {
            std::ptr::write_unaligned(size_out as *mut u64, len);
        }
    }
    0
}

/// Sends a step of link `state` the executor answers and waits for the answer; what the
/// driver wrote into the link's options is written into the program's. `Err`: the step's
/// status (the driver's, or the session's when it is lost).
///
/// # Safety
/// The program's option values of the link are as it gave them to `cuLinkCreate` (the driver
/// writes there at every step).
unsafe fn ask(f: &ApiFunction, state: u64, req: LinkRequest) -> Result<LinkAnswer, u32> {
    // The links' lock is not held while waiting for the server.
    let answer = match session::ask(f, LINK, req.to_args()) {
        Ok(bytes) => LinkAnswer::decode(&bytes).map_err(|e| {
            eprintln!("gpuless: the server's answer to {} does not decode: {e}", f.name);
            UNKNOWN
        })?,
        Err(st) => return Err(st),
    };
    // Destroyed by another thread meanwhile: the program's arrays are not the driver's anymore.
    let Some((options, values)) = links(|l| l.get(&state).map(|s| (s.options.clone(), s.values))) else {
        return Err(INVALID_HANDLE);
    };
    // SAFETY: the caller's contract.
    unsafe { write_options(&options, values, &answer) };
    match answer.status {
        0 => Ok(answer),
        st => Err(st as u32),
    }
}

/// Writes what the server's driver wrote into the link's options into the program's: slots of
/// its `values` array the driver overwrote, and the bytes it wrote at an option's pointer (a
/// log, at most its buffer's size; a wall time's 4 bytes).
///
/// # Safety
/// `values` is the program's `optionValues` array of `options.len()` slots (or null), the
/// pointers in `options` its buffers of the sizes its options give.
unsafe fn write_options(options: &[JitOption], values: u64, answer: &LinkAnswer) {
    let value_of = |id: u32| options.iter().find(|o| o.id == id).map(|o| o.value);
    for w in &answer.written {
        let Some(opt) = options.get(w.option as usize) else { continue };
        if let (Some(slot), true) = (w.slot, values != 0) {
            // SAFETY: slot `w.option` of the program's array.
            unsafe { std::ptr::write_unaligned((values as *mut u64).add(w.option as usize), slot) };
        }
        let Some(bytes) = &w.bytes else { continue };
        let room = match jit::value_of(opt.id) {
            Some(JitValue::Log { size }) => value_of(size).map_or(0, |v| v as u32 as usize),
            Some(JitValue::Float) => 4,
            _ => 0,
        };
        let n = bytes.len().min(room);
        if opt.value != 0 && n > 0 {
            // SAFETY: the program's buffer of at least `room` bytes.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), opt.value as *mut u8, n) };
        }
    }
}
