//! NVML in client mode: the library also answers the NVML C API, for programs that load it as
//! `libnvidia-ml.so.1` (`gpuless run` links that name to it as well) or find its exports first
//! (it is preloaded). What PyTorch (`c10::cuda::DriverAPI`, `torch.cuda`) and tools such as
//! `pynvml` ask: the session's devices ([`devices`]: one, or as many as `gpuless run --gpus N`
//! asked for), each with a handle of its own — its index, name, UUID, PCI location, compute
//! capability from that device's description, with what the server's NVML said of the device
//! there (its total memory as NVML counts it, the kernel driver's and NVML's versions); free
//! memory from the server, asked as the driver's `cuMemGetInfo` is (for the calling thread's
//! current device: the one the server's answer is about); peer-to-peer read, write and atomics
//! between two devices as the server's driver answered them; no running processes, MIG mode
//! disabled. What would need the server's NVML at every call (utilization, temperature, power),
//! the device node's minor number, and another device's free memory are
//! `NVML_ERROR_NOT_SUPPORTED`.
//!
//! `nvmlInit*` connects the session when the program asks NVML before `cuInit` (the same
//! connection `cuInit` makes, once); a server that cannot be reached is one `gpuless:` line and
//! `NVML_ERROR_DRIVER_NOT_LOADED`.
//!
//! Outside client mode (the recorder preloaded, its exports first in the global scope) every
//! entry point passes through to the real `libnvidia-ml.so.1` where there is one, else returns
//! `NVML_ERROR_LIBRARY_NOT_FOUND`: a program linked against NVML keeps its NVML while recorded.
//!
//! Types and codes are `nvml.h`'s, from `nvml-wrapper-sys`'s bindings.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use gpuless_traces::protocol::{DeviceDescription, NvLinkFact};
use nvml_wrapper_sys::bindings as sys;

use super::pci::{bus_id, bus_id_legacy, parse_bus_id, pci_location};
use super::{devices, route, session};
use crate::hooks::{self, HOOKS};
use crate::{capture, dl, slots};

type Ret = sys::nvmlReturn_t;
type Device = sys::nvmlDevice_t;

const SUCCESS: Ret = sys::nvmlReturn_enum_NVML_SUCCESS;
const UNINITIALIZED: Ret = sys::nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
const INVALID_ARGUMENT: Ret = sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
const NOT_SUPPORTED: Ret = sys::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
const NOT_FOUND: Ret = sys::nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
const INSUFFICIENT_SIZE: Ret = sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
const DRIVER_NOT_LOADED: Ret = sys::nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED;
const LIBRARY_NOT_FOUND: Ret = sys::nvmlReturn_enum_NVML_ERROR_LIBRARY_NOT_FOUND;
const FUNCTION_NOT_FOUND: Ret = sys::nvmlReturn_enum_NVML_ERROR_FUNCTION_NOT_FOUND;
const VERSION_MISMATCH: Ret = sys::nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
const UNKNOWN: Ret = sys::nvmlReturn_enum_NVML_ERROR_UNKNOWN;

/// `nvmlMemory_v2`: `NVML_STRUCT_VERSION(Memory, 2)`, the size and the version in the top byte.
const MEMORY_V2: c_uint = std::mem::size_of::<sys::nvmlMemory_v2_t>() as c_uint | (2 << 24);
/// Bytes of the `nvmlPciInfo_t` the unversioned `nvmlDeviceGetPciInfo` writes (nvml.h before
/// the `_v2` struct: a 16-byte bus id, five ids, four reserved words). Its first 36 bytes are
/// today's `busIdLegacy` and ids.
const PCI_INFO_V1: usize = 52;

/// Successful `nvmlInit*` calls not yet matched by `nvmlShutdown`.
static INITS: AtomicU32 = AtomicU32::new(0);

/// Most devices NVML lists (a session of more shows its first `MAX_DEVICES`).
const MAX_DEVICES: usize = 16;

/// The session's devices: device `k`'s handle is the address of byte `k`.
static DEVICES: [u8; MAX_DEVICES] = [0; MAX_DEVICES];

/// Device `k`'s handle (null past [`MAX_DEVICES`]).
fn handle(k: u32) -> Device {
    DEVICES.get(k as usize).map_or(std::ptr::null_mut(), |b| std::ptr::from_ref(b).cast_mut().cast())
}

/// The index of handle `h` among the first `count` devices; `None` for any other pointer.
fn index_of(h: Device, count: u32) -> Option<u32> {
    let k = (h as usize).checked_sub(DEVICES.as_ptr() as usize)?;
    (k < MAX_DEVICES && (k as u64) < u64::from(count)).then_some(k as u32)
}

/// How many devices NVML lists: the session's, at most [`MAX_DEVICES`].
fn count() -> u32 {
    devices::count().min(MAX_DEVICES as u32)
}

/// The first of `count` devices, described by `describe`, for which `wanted` holds.
fn find<'a>(
    count: u32,
    describe: impl Fn(u32) -> Option<&'a DeviceDescription>,
    wanted: impl Fn(&DeviceDescription) -> bool,
) -> Option<u32> {
    (0..count).find(|&k| describe(k).is_some_and(&wanted))
}

fn described() -> Result<&'static DeviceDescription, Ret> {
    if INITS.load(Ordering::Acquire) == 0 {
        return Err(UNINITIALIZED);
    }
    devices::first().ok_or(UNINITIALIZED)
}

/// The index of the device behind handle `h`.
fn index(h: Device) -> Result<u32, Ret> {
    described()?;
    index_of(h, count()).ok_or(INVALID_ARGUMENT)
}

/// The description of the device behind handle `h`.
fn device(h: Device) -> Result<&'static DeviceDescription, Ret> {
    devices::description(index(h)?).ok_or(INVALID_ARGUMENT)
}

fn init() -> Result<(), Ret> {
    if session::init() != 0 {
        // Said on stderr by the session (once).
        return Err(DRIVER_NOT_LOADED);
    }
    INITS.fetch_add(1, Ordering::AcqRel);
    Ok(())
}

/// Writes `v` through `p`, or `INVALID_ARGUMENT` for a null pointer.
///
/// # Safety
/// `p` is null or valid for writing a `T`.
unsafe fn put<T>(p: *mut T, v: T) -> Result<(), Ret> {
    if p.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: the caller's contract.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

/// Writes `s` and its NUL into the caller's buffer of `len` bytes.
///
/// # Safety
/// `buf` is null or valid for `len` bytes.
unsafe fn put_str(buf: *mut c_char, len: c_uint, s: &str) -> Result<(), Ret> {
    if buf.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    if (len as usize) <= s.len() {
        return Err(INSUFFICIENT_SIZE);
    }
    // SAFETY: `len` > `s.len()` bytes are the caller's.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
        *buf.add(s.len()) = 0;
    }
    Ok(())
}

/// Copies `s` into a fixed C character array, truncated, NUL-terminated.
fn fill(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.bytes().take(n)) {
        *d = b as c_char;
    }
    if let Some(end) = dst.get_mut(n) {
        *end = 0;
    }
}

/// The free device memory of device `k`, asked of the server that holds it as `cuMemGetInfo`
/// with `k` current there (the executor answers it for the session's partition), and the
/// total from its description `d`.
fn memory(k: u32, d: &DeviceDescription) -> Result<(u64, u64), Ret> {
    let _on = route::enter(route::split(k), false);
    let slot = hooks::slots_of_base("cuMemGetInfo")
        .iter()
        .copied()
        .filter(|&i| !HOOKS[i].variant.per_thread)
        .max_by_key(|&i| HOOKS[i].variant.version)
        .ok_or(UNKNOWN)?;
    let s = slots::get(slot).ok_or(UNKNOWN)?;
    let (mut free, mut total) = (0usize, 0usize);
    let raw = [std::ptr::addr_of_mut!(free) as u64, std::ptr::addr_of_mut!(total) as u64];
    // SAFETY: cuMemGetInfo's arguments: two valid `size_t` out-pointers, alive until it returns.
    let (st, seq) = unsafe { session::wait(slot, s.func, &raw, capture::inputs(s.func, &raw)) };
    match (st, seq) {
        (0, Some(_)) => {
            // NVML's total where the server's NVML gave it (it counts memory CUDA's leaves out).
            let total = if d.nvml.total_mem > 0 { d.nvml.total_mem } else { d.total_mem };
            Ok((total, (free as u64).min(total)))
        }
        (session::NOT_INITIALIZED, _) => Err(UNINITIALIZED),
        _ => Err(UNKNOWN),
    }
}

/// Fills a `nvmlPciInfo_t` from the description.
fn pci_info(d: &DeviceDescription) -> sys::nvmlPciInfo_t {
    let (domain, bus, dev) = pci_location(d);
    // SAFETY: a plain C struct of integers and characters: all zeros is a value.
    let mut p: sys::nvmlPciInfo_t = unsafe { std::mem::zeroed() };
    fill(&mut p.busIdLegacy, &bus_id_legacy(domain, bus, dev));
    fill(&mut p.busId, &bus_id(domain, bus, dev));
    p.domain = domain;
    p.bus = bus;
    p.device = dev;
    // The PCI vendor, device and subsystem ids are not in the description: 0, unknown.
    p
}

/// The real `libnvidia-ml.so.1`'s `name` (NUL-terminated), outside client mode.
fn real(name: &str) -> Result<*mut c_void, Ret> {
    // 0: not looked for yet, 1: none, else the handle.
    static LIB: AtomicUsize = AtomicUsize::new(0);
    let mut h = LIB.load(Ordering::Acquire);
    if h == 0 {
        // SAFETY: dlopen with a constant name.
        let p = unsafe { libc::dlopen(c"libnvidia-ml.so.1".as_ptr(), libc::RTLD_LAZY) };
        h = if p.is_null() { 1 } else { p as usize };
        LIB.store(h, Ordering::Release);
    }
    let name = CStr::from_bytes_with_nul(name.as_bytes()).map_err(|_| FUNCTION_NOT_FOUND)?;
    let p = if h == 1 { std::ptr::null_mut() } else { dl::symbol_in(h as *mut c_void, name) };
    match p {
        // This library found under the real one's name: there is no other.
        _ if h == 1 || dl::is_ours(p) => Err(LIBRARY_NOT_FOUND),
        p if p.is_null() => Err(FUNCTION_NOT_FOUND),
        p => Ok(p),
    }
}

/// Defines NVML entry points: in client mode the body (`Ok(())` is `NVML_SUCCESS`), else the
/// real library's function of the same name.
macro_rules! nvml {
    ($($(#[doc = $doc:literal])* fn $name:ident($($a:ident: $t:ty),* $(,)?) $body:block)*) => {$(
        $(#[doc = $doc])*
        ///
        /// # Safety
        /// NVML's contract for this function: every pointer null or valid for what it names.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> Ret {
            if !crate::mode::active() {
                type Real = unsafe extern "C" fn($($t),*) -> Ret;
                return match real(concat!(stringify!($name), "\0")) {
                    // SAFETY: the real library's export of this name, whose C signature this is.
                    Ok(p) => unsafe { std::mem::transmute::<*mut c_void, Real>(p)($($a),*) },
                    Err(e) => e,
                };
            }
            super::trip::install();
            #[allow(unused_variables)]
            unsafe fn imp($($a: $t),*) -> Result<(), Ret> $body
            // SAFETY: forwarded from the caller.
            match unsafe { imp($($a),*) } {
                Ok(()) => SUCCESS,
                Err(e) => e,
            }
        }
    )*};
}

nvml! {
    /// Connects the session if `cuInit` has not.
    fn nvmlInit() { init() }
    /// As `nvmlInit`.
    fn nvmlInit_v2() { init() }
    /// As `nvmlInit` (the flags change nothing here).
    fn nvmlInitWithFlags(flags: c_uint) { init() }
    /// Ends one `nvmlInit*`; the session stays (CUDA uses it too).
    fn nvmlShutdown() {
        match INITS.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)) {
            Ok(_) => Ok(()),
            Err(_) => Err(UNINITIALIZED),
        }
    }
    /// The server's kernel driver's version (its NVML's answer, in the session's description).
    fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) {
        let d = described()?;
        if d.nvml.driver_version.is_empty() {
            return Err(NOT_SUPPORTED);
        }
        // SAFETY: the caller's buffer of `length` bytes.
        unsafe { put_str(version, length, &d.nvml.driver_version) }
    }
    /// The server's NVML's version (in the session's description).
    fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) {
        let d = described()?;
        if d.nvml.nvml_version.is_empty() {
            return Err(NOT_SUPPORTED);
        }
        // SAFETY: the caller's buffer of `length` bytes.
        unsafe { put_str(version, length, &d.nvml.nvml_version) }
    }
    /// The CUDA driver's version (`cuDriverGetVersion` on the server).
    fn nvmlSystemGetCudaDriverVersion(v: *mut c_int) {
        // SAFETY: the caller's out-pointer.
        unsafe { put(v, devices::first().ok_or(UNINITIALIZED)?.driver_version) }
    }
    /// As `nvmlSystemGetCudaDriverVersion`.
    fn nvmlSystemGetCudaDriverVersion_v2(v: *mut c_int) {
        // SAFETY: the caller's out-pointer.
        unsafe { put(v, devices::first().ok_or(UNINITIALIZED)?.driver_version) }
    }
    /// The session's devices.
    fn nvmlDeviceGetCount(n: *mut c_uint) {
        described()?;
        // SAFETY: the caller's out-pointer.
        unsafe { put(n, count()) }
    }
    /// As `nvmlDeviceGetCount`.
    fn nvmlDeviceGetCount_v2(n: *mut c_uint) {
        described()?;
        // SAFETY: the caller's out-pointer.
        unsafe { put(n, count()) }
    }
    /// Device `index`'s handle.
    fn nvmlDeviceGetHandleByIndex(index: c_uint, dev: *mut Device) {
        // SAFETY: forwarded.
        unsafe { by_index(index, dev) }
    }
    /// As `nvmlDeviceGetHandleByIndex`.
    fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, dev: *mut Device) {
        // SAFETY: forwarded.
        unsafe { by_index(index, dev) }
    }
    /// The device whose UUID is `uuid` (any case).
    fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, dev: *mut Device) {
        described()?;
        if uuid.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: the caller's NUL-terminated string.
        let asked = unsafe { CStr::from_ptr(uuid) }.to_string_lossy();
        let mig = session::on_mig();
        let k = find(count(), devices::description, |d| asked.trim().eq_ignore_ascii_case(&d.nvml_uuid(mig)));
        // SAFETY: the caller's out-pointer.
        unsafe { put(dev, handle(k.ok_or(NOT_FOUND)?)) }
    }
    /// The device at PCI bus id `id` (`[domain:]bus:device[.function]`).
    fn nvmlDeviceGetHandleByPciBusId(id: *const c_char, dev: *mut Device) {
        // SAFETY: forwarded.
        unsafe { by_bus_id(id, dev) }
    }
    /// As `nvmlDeviceGetHandleByPciBusId`.
    fn nvmlDeviceGetHandleByPciBusId_v2(id: *const c_char, dev: *mut Device) {
        // SAFETY: forwarded.
        unsafe { by_bus_id(id, dev) }
    }
    /// `cuDeviceGetName`'s.
    fn nvmlDeviceGetName(dev: Device, name: *mut c_char, length: c_uint) {
        // SAFETY: the caller's buffer of `length` bytes.
        unsafe { put_str(name, length, &device(dev)?.name) }
    }
    /// `GPU-…` from `cuDeviceGetUuid`'s bytes (`MIG-…` on a MIG instance).
    fn nvmlDeviceGetUUID(dev: Device, uuid: *mut c_char, length: c_uint) {
        let d = device(dev)?;
        // SAFETY: the caller's buffer of `length` bytes.
        unsafe { put_str(uuid, length, &d.nvml_uuid(session::on_mig())) }
    }
    /// The device's ordinal in the session (its CUDA device number too).
    fn nvmlDeviceGetIndex(dev: Device, at: *mut c_uint) {
        // SAFETY: the caller's out-pointer.
        unsafe { put(at, index(dev)?) }
    }
    /// Total from the description, free from the server, used the rest.
    fn nvmlDeviceGetMemoryInfo(dev: Device, mem: *mut sys::nvmlMemory_t) {
        let d = device(dev)?;
        if mem.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let (total, free) = memory(index(dev)?, d)?;
        // SAFETY: the caller's struct (checked not null).
        unsafe { put(mem, sys::nvmlMemory_t { total, free, used: total - free }) }
    }
    /// As `nvmlDeviceGetMemoryInfo`; nothing is counted as reserved.
    fn nvmlDeviceGetMemoryInfo_v2(dev: Device, mem: *mut sys::nvmlMemory_v2_t) {
        let d = device(dev)?;
        if mem.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: the caller's struct (checked not null).
        if unsafe { std::ptr::addr_of!((*mem).version).read_unaligned() } != MEMORY_V2 {
            return Err(VERSION_MISMATCH);
        }
        let (total, free) = memory(index(dev)?, d)?;
        let v = sys::nvmlMemory_v2_t { version: MEMORY_V2, total, reserved: 0, free, used: total - free };
        // SAFETY: as above.
        unsafe { put(mem, v) }
    }
    /// The legacy struct: bus id, domain, bus, device; reserved words zero.
    fn nvmlDeviceGetPciInfo(dev: Device, pci: *mut sys::nvmlPciInfo_t) {
        let p = pci_info(device(dev)?);
        if pci.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let mut bytes = [0u8; PCI_INFO_V1];
        let head = std::mem::offset_of!(sys::nvmlPciInfo_t, busId);
        // SAFETY: `p` is a plain C struct of more than `head` bytes; the caller's struct of the
        // legacy layout has `PCI_INFO_V1` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(std::ptr::addr_of!(p).cast::<u8>(), bytes.as_mut_ptr(), head);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), pci.cast::<u8>(), PCI_INFO_V1);
        }
        Ok(())
    }
    /// Domain, bus, device and both bus id forms.
    fn nvmlDeviceGetPciInfo_v2(dev: Device, pci: *mut sys::nvmlPciInfo_t) {
        // SAFETY: the caller's struct.
        unsafe { put(pci, pci_info(device(dev)?)) }
    }
    /// As `nvmlDeviceGetPciInfo_v2`.
    fn nvmlDeviceGetPciInfo_v3(dev: Device, pci: *mut sys::nvmlPciInfo_t) {
        // SAFETY: the caller's struct.
        unsafe { put(pci, pci_info(device(dev)?)) }
    }
    /// Attributes 75 and 76.
    fn nvmlDeviceGetCudaComputeCapability(dev: Device, major: *mut c_int, minor: *mut c_int) {
        let d = device(dev)?;
        // SAFETY: the caller's out-pointers.
        unsafe {
            put(major, d.attribute(75).unwrap_or(0))?;
            put(minor, d.attribute(76).unwrap_or(0))
        }
    }
    /// The server's device node is not this machine's.
    fn nvmlDeviceGetMinorNumber(dev: Device, minor: *mut c_uint) {
        device(dev)?;
        Err(NOT_SUPPORTED)
    }
    /// Only the server's NVML could say.
    fn nvmlDeviceGetUtilizationRates(dev: Device, u: *mut sys::nvmlUtilization_t) {
        device(dev)?;
        Err(NOT_SUPPORTED)
    }
    /// Disabled, now and pending: the session's devices are not partitioned further.
    fn nvmlDeviceGetMigMode(dev: Device, current: *mut c_uint, pending: *mut c_uint) {
        device(dev)?;
        // SAFETY: the caller's out-pointers.
        unsafe {
            put(current, sys::NVML_DEVICE_MIG_DISABLE)?;
            put(pending, sys::NVML_DEVICE_MIG_DISABLE)
        }
    }
    /// None seen from here (the server's executor is the process on the GPU).
    fn nvmlDeviceGetComputeRunningProcesses(dev: Device, count: *mut c_uint, infos: *mut c_void) {
        // SAFETY: the caller's out-pointer.
        unsafe { no_processes(dev, count) }
    }
    /// As `nvmlDeviceGetComputeRunningProcesses`.
    fn nvmlDeviceGetComputeRunningProcesses_v2(dev: Device, count: *mut c_uint, infos: *mut c_void) {
        // SAFETY: the caller's out-pointer.
        unsafe { no_processes(dev, count) }
    }
    /// As `nvmlDeviceGetComputeRunningProcesses`.
    fn nvmlDeviceGetComputeRunningProcesses_v3(dev: Device, count: *mut c_uint, infos: *mut c_void) {
        // SAFETY: the caller's out-pointer.
        unsafe { no_processes(dev, count) }
    }
    /// Only the server's NVML could say.
    fn nvmlDeviceGetTemperature(dev: Device, sensor: c_uint, temp: *mut c_uint) {
        device(dev)?;
        Err(NOT_SUPPORTED)
    }
    /// Only the server's NVML could say.
    fn nvmlDeviceGetPowerUsage(dev: Device, milliwatts: *mut c_uint) {
        device(dev)?;
        Err(NOT_SUPPORTED)
    }
    /// What is at the other end of an active NVLink, as the server's NVML said; a link not
    /// active, or one NVML did not type, is `NOT_SUPPORTED` (PyTorch requires the symbol).
    fn nvmlDeviceGetNvLinkRemoteDeviceType(dev: Device, link: c_uint, kind: *mut c_uint) {
        let l = nvlink(index(dev)?, link)?.ok_or(NOT_SUPPORTED)?;
        if l.remote_type == u32::MAX {
            return Err(NOT_SUPPORTED);
        }
        // SAFETY: the caller's out-pointer.
        unsafe { put(kind, l.remote_type) }
    }
    /// What is at the other end of an active NVLink (the server's NVML's answer, in a session
    /// of several devices); a link not active is `NOT_SUPPORTED` (PyTorch requires the symbol).
    fn nvmlDeviceGetNvLinkRemotePciInfo_v2(dev: Device, link: c_uint, pci: *mut sys::nvmlPciInfo_t) {
        // SAFETY: the caller's struct.
        unsafe { put(pci, remote_pci(dev, link)?) }
    }
    /// As `_v2` (NCCL looks this name up).
    fn nvmlDeviceGetNvLinkRemotePciInfo(dev: Device, link: c_uint, pci: *mut sys::nvmlPciInfo_t) {
        // SAFETY: the caller's struct.
        unsafe { put(pci, remote_pci(dev, link)?) }
    }
    /// Whether NVLink `link` of the device is active, as the server's NVML said (a session of
    /// several devices; none otherwise).
    fn nvmlDeviceGetNvLinkState(dev: Device, link: c_uint, active: *mut c_uint) {
        let up = nvlink(index(dev)?, link)?.is_some();
        // SAFETY: the caller's out-pointer.
        unsafe { put(active, c_uint::from(up)) }
    }
    /// A link's capability as the server's NVML answered it for an active link (0 for a link
    /// not active); past NVML's capabilities, `INVALID_ARGUMENT`.
    fn nvmlDeviceGetNvLinkCapability(dev: Device, link: c_uint, capability: c_uint, result: *mut c_uint) {
        let l = nvlink(index(dev)?, link)?;
        if capability >= sys::nvmlNvLinkCapability_enum_NVML_NVLINK_CAP_COUNT {
            return Err(INVALID_ARGUMENT);
        }
        let v = l.is_some_and(|l| l.capabilities >> capability & 1 == 1);
        // SAFETY: the caller's out-pointer.
        unsafe { put(result, c_uint::from(v)) }
    }
    /// Field values: each NVLink's state (`NVML_FI_DEV_NVLINK_GET_STATE`, which NCCL asks of
    /// Hopper); every other field is `NOT_SUPPORTED` in its entry.
    fn nvmlDeviceGetFieldValues(dev: Device, count: c_int, values: *mut sys::nvmlFieldValue_t) {
        let k = index(dev)?;
        if values.is_null() || count < 0 {
            return Err(INVALID_ARGUMENT);
        }
        for i in 0..count as usize {
            // SAFETY: the caller's array of `count` entries.
            let v = unsafe { &mut *values.add(i) };
            match (v.fieldId, nvlink(k, v.scopeId)) {
                (sys::field_id::NVML_FI_DEV_NVLINK_GET_STATE, Ok(up)) => {
                    v.valueType = sys::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT;
                    v.value.uiVal = c_uint::from(up.is_some());
                    v.nvmlReturn = SUCCESS;
                }
                _ => v.nvmlReturn = NOT_SUPPORTED,
            }
        }
        Ok(())
    }
    /// The server's NVML's own answer for the pair, where the session carries it (a session of
    /// several GPUs of one server; devices of different servers answer `NOT_SUPPORTED`); else
    /// read, write and atomics as the server's driver answered `cuDeviceCanAccessPeer` and the
    /// native-atomics attribute, and `NOT_SUPPORTED` for what the description does not say.
    fn nvmlDeviceGetP2PStatus(dev1: Device, dev2: Device, p2p_index: c_uint, status: *mut c_uint) {
        let (src, dst) = (index(dev1)?, index(dev2)?);
        if p2p_index <= sys::nvmlGpuP2PCapsIndex_enum_NVML_P2P_CAPS_INDEX_PCI {
            if let Some(v) = devices::peer(src, dst, gpuless_traces::protocol::NVML_P2P_STATUS + p2p_index) {
                // SAFETY: the caller's out-pointer.
                return unsafe { put(status, v as c_uint) };
            }
        }
        let ok = p2p(src, dst, p2p_index, devices::can_access, devices::peer)?;
        // SAFETY: the caller's out-pointer.
        unsafe { put(status, if ok { P2P_OK } else { P2P_NOT_SUPPORTED }) }
    }
}

/// The PCI information of what is at the other end of NVLink `link` of `dev`.
fn remote_pci(dev: Device, link: c_uint) -> Result<sys::nvmlPciInfo_t, Ret> {
    let l = nvlink(index(dev)?, link)?.ok_or(NOT_SUPPORTED)?;
    let (domain, b, d) = parse_bus_id(&l.remote_bus_id).ok_or(NOT_SUPPORTED)?;
    let mut p = pci_info(&DeviceDescription::default());
    fill(&mut p.busIdLegacy, &bus_id_legacy(domain, b, d));
    fill(&mut p.busId, &bus_id(domain, b, d));
    (p.domain, p.bus, p.device) = (domain, b, d);
    Ok(p)
}

/// NVLink `link` of device `k` as the server's NVML described it, where it is active (`None`:
/// not active); `INVALID_ARGUMENT` past NVML's links.
fn nvlink(k: u32, link: c_uint) -> Result<Option<&'static NvLinkFact>, Ret> {
    if link >= sys::NVML_NVLINK_MAX_LINKS {
        return Err(INVALID_ARGUMENT);
    }
    Ok(devices::more().and_then(|m| m.links.iter().find(|l| l.device == k && l.link == link)))
}

/// `CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED`.
const P2P_NATIVE_ATOMICS: u32 = 3;
/// `nvmlGpuP2PStatus_t`: `NVML_P2P_STATUS_OK`, `_NOT_SUPPORTED`.
const P2P_OK: c_uint = sys::nvmlGpuP2PStatus_enum_NVML_P2P_STATUS_OK;
const P2P_NOT_SUPPORTED: c_uint = sys::nvmlGpuP2PStatus_enum_NVML_P2P_STATUS_NOT_SUPPORTED;

/// Whether device `src` reaches `dst` in NVML's sense `p2p_index` (read and write: peer access,
/// `can_access`; atomics: also the native-atomics attribute, `peer`); a device does not reach
/// itself. `NOT_SUPPORTED` for NVLink and PCI properties (the session does not know them),
/// `INVALID_ARGUMENT` past NVML's indices: where the session does not carry the server's own
/// statuses (measured on two H200s, NVML answers otherwise: a device reaches itself, NVLink is
/// OK, PCI properties status NOT_SUPPORTED).
fn p2p(
    src: u32,
    dst: u32,
    p2p_index: c_uint,
    can_access: impl Fn(u32, u32) -> bool,
    peer: impl Fn(u32, u32, u32) -> Option<i32>,
) -> Result<bool, Ret> {
    match p2p_index {
        sys::nvmlGpuP2PCapsIndex_enum_NVML_P2P_CAPS_INDEX_READ
        | sys::nvmlGpuP2PCapsIndex_enum_NVML_P2P_CAPS_INDEX_WRITE => Ok(src != dst && can_access(src, dst)),
        sys::nvmlGpuP2PCapsIndex_enum_NVML_P2P_CAPS_INDEX_ATOMICS => {
            Ok(src != dst && can_access(src, dst) && peer(src, dst, P2P_NATIVE_ATOMICS) == Some(1))
        }
        sys::nvmlGpuP2PCapsIndex_enum_NVML_P2P_CAPS_INDEX_NVLINK
        | sys::nvmlGpuP2PCapsIndex_enum_NVML_P2P_CAPS_INDEX_PCI => Err(NOT_SUPPORTED),
        _ => Err(INVALID_ARGUMENT),
    }
}

/// `nvmlDeviceGetHandleByIndex[_v2]`.
///
/// # Safety
/// `dev` is null or a valid out-pointer.
unsafe fn by_index(index: c_uint, dev: *mut Device) -> Result<(), Ret> {
    described()?;
    if index >= count() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: the caller's out-pointer.
    unsafe { put(dev, handle(index)) }
}

/// `nvmlDeviceGetHandleByPciBusId[_v2]`.
///
/// # Safety
/// `id` is null or NUL-terminated; `dev` null or a valid out-pointer.
unsafe fn by_bus_id(id: *const c_char, dev: *mut Device) -> Result<(), Ret> {
    described()?;
    if id.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: the caller's NUL-terminated string.
    let asked = unsafe { CStr::from_ptr(id) }.to_string_lossy();
    let at = parse_bus_id(&asked).ok_or(INVALID_ARGUMENT)?;
    let k = find(count(), devices::description, |d| pci_location(d) == at).ok_or(NOT_FOUND)?;
    // SAFETY: the caller's out-pointer.
    unsafe { put(dev, handle(k)) }
}

/// `nvmlDeviceGetComputeRunningProcesses*`: no processes.
///
/// # Safety
/// `count` is null or a valid out-pointer.
unsafe fn no_processes(dev: Device, count: *mut c_uint) -> Result<(), Ret> {
    device(dev)?;
    // SAFETY: the caller's out-pointer.
    unsafe { put(count, 0) }
}

/// `nvmlErrorString`: the name of an NVML status (ours in every mode: no state involved).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlErrorString(result: Ret) -> *const c_char {
    let s: &'static CStr = match result {
        SUCCESS => c"Success",
        UNINITIALIZED => c"Uninitialized",
        INVALID_ARGUMENT => c"Invalid Argument",
        NOT_SUPPORTED => c"Not Supported",
        NOT_FOUND => c"Not Found",
        INSUFFICIENT_SIZE => c"Insufficient Size",
        DRIVER_NOT_LOADED => c"Driver Not Loaded",
        LIBRARY_NOT_FOUND => c"NVML Shared Library Not Found",
        FUNCTION_NOT_FOUND => c"Function Not Found",
        VERSION_MISMATCH => c"Argument Version Mismatch",
        _ => c"Unknown Error",
    };
    s.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn uuids_are_formatted_as_nvml_writes_them() {
        let b: [u8; 16] = std::array::from_fn(|i| (i as u8) * 0x11);
        let d = |uuid| DeviceDescription { uuid, ..Default::default() };
        assert_eq!(d(b).nvml_uuid(false), "GPU-00112233-4455-6677-8899-aabbccddeeff");
        assert_eq!(d([0xab; 16]).nvml_uuid(true), "MIG-abababab-abab-abab-abab-abababababab");
        assert_eq!(d([0; 16]).nvml_uuid(false).len(), sys::NVML_DEVICE_UUID_ASCII_LEN as usize - 1);
    }

    #[test]
    fn structs_have_the_layouts_of_nvml_h() {
        assert_eq!(size_of::<sys::nvmlMemory_t>(), 24);
        assert_eq!(size_of::<sys::nvmlMemory_v2_t>(), 40);
        assert_eq!(offset_of!(sys::nvmlMemory_v2_t, total), 8);
        assert_eq!(MEMORY_V2, 0x0200_0028, "nvml.h's nvmlMemory_v2");
        assert_eq!(size_of::<sys::nvmlUtilization_t>(), 8);
        assert_eq!(size_of::<sys::nvmlPciInfo_t>(), 68);
        assert_eq!(offset_of!(sys::nvmlPciInfo_t, domain), 16);
        assert_eq!(offset_of!(sys::nvmlPciInfo_t, pciSubSystemId), 32);
        assert_eq!(offset_of!(sys::nvmlPciInfo_t, busId), 36);
        assert!(PCI_INFO_V1 <= size_of::<sys::nvmlPciInfo_t>());
    }

    #[test]
    fn pci_info_holds_both_bus_id_forms() {
        let d = DeviceDescription { attributes: vec![(50, 1), (33, 0x1b), (34, 2)], ..Default::default() };
        let p = pci_info(&d);
        // SAFETY: `fill` NUL-terminates both arrays.
        let s = |a: &[c_char]| unsafe { CStr::from_ptr(a.as_ptr()) }.to_str().unwrap_or("").to_string();
        assert_eq!(s(&p.busId), "00000001:1B:02.0");
        assert_eq!(s(&p.busIdLegacy), "0001:1B:02.0");
        assert_eq!((p.domain, p.bus, p.device, p.pciDeviceId), (1, 0x1b, 2, 0));
        let mut tiny = [1 as c_char; 4];
        fill(&mut tiny, "abcdef");
        assert_eq!(s(&tiny), "abc");
    }

    #[test]
    fn each_device_has_its_own_handle_and_index() {
        let n = 3;
        let handles: Vec<Device> = (0..n).map(handle).collect();
        for (k, &h) in handles.iter().enumerate() {
            assert!(!h.is_null());
            assert_eq!(index_of(h, n), Some(k as u32));
            assert_eq!(handles.iter().filter(|&&o| o == h).count(), 1, "handle {k} is distinct");
        }
        // A handle past the session's devices, past the table, or any other pointer is none.
        assert_eq!(index_of(handle(n), n), None);
        assert!(handle(MAX_DEVICES as u32).is_null());
        assert_eq!(index_of(std::ptr::null_mut(), n), None);
        let elsewhere = 0u8;
        assert_eq!(index_of(std::ptr::from_ref(&elsewhere).cast_mut().cast(), n), None);
        assert_eq!(index_of(handle(15), MAX_DEVICES as u32 + 4), Some(15));
        // Lookups search every device, in order.
        let at = |bus| DeviceDescription { uuid: [bus as u8; 16], attributes: vec![(33, bus)], ..Default::default() };
        let descs = [at(1), at(2), at(2)];
        let describe = |k: u32| descs.get(k as usize);
        assert_eq!(find(3, describe, |d| pci_location(d) == (0, 2, 0)), Some(1));
        assert_eq!(find(1, describe, |d| pci_location(d) == (0, 2, 0)), None, "only the first `count`");
        let uuid = descs[0].nvml_uuid(false);
        assert_eq!(find(3, describe, |d| d.nvml_uuid(false) == uuid), Some(0));
        assert_eq!(find(3, describe, |_| false), None);
    }

    #[test]
    fn peer_status_follows_the_drivers_answers() {
        let (read, write, nvlink, atomics, pci) = (0, 1, 2, 3, 4);
        // Device 0 reaches 1 with native atomics; 1 reaches 0 without; nothing reaches 2.
        let can = |s: u32, d: u32| s != d && s < 2 && d < 2;
        let peer = |s: u32, d: u32, a: u32| (a == P2P_NATIVE_ATOMICS).then_some(i32::from(s == 0 && d == 1));
        let at = |s, d, i| p2p(s, d, i, can, peer);
        assert_eq!((at(0, 1, read), at(0, 1, write), at(0, 1, atomics)), (Ok(true), Ok(true), Ok(true)));
        assert_eq!((at(1, 0, read), at(1, 0, atomics)), (Ok(true), Ok(false)));
        assert_eq!(
            (at(0, 0, read), at(0, 2, write)),
            (Ok(false), Ok(false)),
            "not itself, not a device it cannot reach"
        );
        assert_eq!((at(0, 1, nvlink), at(0, 1, pci)), (Err(NOT_SUPPORTED), Err(NOT_SUPPORTED)));
        assert_eq!(at(0, 1, 9), Err(INVALID_ARGUMENT));
    }

    #[test]
    fn every_status_has_a_name() {
        // SAFETY: nvmlErrorString returns static NUL-terminated strings.
        let name = |r| unsafe { CStr::from_ptr(nvmlErrorString(r)) }.to_str().unwrap_or("").to_string();
        assert_eq!(name(SUCCESS), "Success");
        assert_eq!(name(DRIVER_NOT_LOADED), "Driver Not Loaded");
        assert_eq!(name(12345), "Unknown Error");
    }
}
