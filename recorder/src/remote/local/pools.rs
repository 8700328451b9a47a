//! Memory pools' access by the session's devices (`cuMemPoolSetAccess`, `cuMemPoolGetAccess`)
//! as the client answers it: each pool's device reads and writes it, other devices as the
//! program set them (none at first), as the driver answers. Every allocation of a session
//! comes from the arena, whose memory the executor maps for every device that can reach it,
//! so nothing goes to the server: only the driver's answers and errors are kept. The one
//! difference: a device given no access still reaches the memory (nothing is unmapped) — more
//! than the driver allows, never less (docs/FIDELITY.md).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::remote::handles::is_client_handle;

const INVALID_VALUE: u32 = 1;
const INVALID_DEVICE: u32 = 101;

/// `CU_MEM_LOCATION_TYPE_DEVICE`.
const LOCATION_DEVICE: u32 = 1;
/// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`.
const READWRITE: u32 = 3;

/// The device of each pool the program created, and the access it gave other devices.
#[derive(Default)]
struct Books {
    device: HashMap<u64, u32>,
    access: HashMap<(u64, u32), u32>,
}

static BOOKS: Mutex<Option<Books>> = Mutex::new(None);

fn books<R>(f: impl FnOnce(&mut Books) -> R) -> R {
    let mut g = BOOKS.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(Books::default))
}

/// The device of pool `pool` (a default pool's, or the one the program created it on).
fn device_of(pool: u64) -> Option<u32> {
    (0..crate::remote::devices::count())
        .find(|&d| crate::remote::driver::pool(d) == pool)
        .or_else(|| books(|b| b.device.get(&pool).copied()))
        .or_else(|| is_client_handle(pool).then_some(0))
}

/// `cuMemPoolCreate` made `pool` with these properties (`CUmemPoolProps`: its location's
/// device id at byte 12).
///
/// # Safety
/// `props` is null or the program's `CUmemPoolProps`.
pub(super) unsafe fn created(pool: u64, props: u64) {
    if props == 0 {
        return;
    }
    // SAFETY: the caller's contract.
    let id = unsafe { std::ptr::read_unaligned((props + 12) as *const i32) };
    books(|b| b.device.insert(pool, id.max(0) as u32));
}

/// `cuMemPoolSetAccess(pool, map, count)`: the status.
///
/// # Safety
/// `map` is null or the program's array of `count` `CUmemAccessDesc` (12 bytes each).
pub(super) unsafe fn set_access(pool: u64, map: u64, count: u64) -> u32 {
    let Some(owner) = device_of(pool) else { return INVALID_VALUE };
    if map == 0 || count == 0 {
        return INVALID_VALUE;
    }
    let mut set = Vec::new();
    for k in 0..count.min(64) {
        // SAFETY: the caller's contract: three 32-bit words per descriptor.
        let (ty, id, flags) = unsafe {
            let p = (map + 12 * k) as *const u32;
            (std::ptr::read_unaligned(p), std::ptr::read_unaligned(p.add(1)) as i32, std::ptr::read_unaligned(p.add(2)))
        };
        if ty != LOCATION_DEVICE || flags > READWRITE || flags == 2 {
            return INVALID_VALUE;
        }
        if !crate::remote::devices::valid(id as u32 as u64) {
            return INVALID_DEVICE;
        }
        let d = id as u32;
        // The pool's own device keeps read-write; a device that cannot reach it gets none.
        if d == owner && flags != READWRITE {
            return INVALID_DEVICE;
        }
        if d != owner && flags != 0 && !crate::remote::devices::can_access(d, owner) {
            return INVALID_DEVICE;
        }
        set.push((d, flags));
    }
    books(|b| {
        for (d, fl) in set {
            b.access.insert((pool, d), fl);
        }
    });
    0
}

/// `cuMemPoolGetAccess(flags, pool, location)`: (status, flags).
///
/// # Safety
/// `location` is null or the program's `CUmemLocation` (two 32-bit words).
pub(super) unsafe fn get_access(pool: u64, location: u64) -> (u32, u64) {
    let Some(owner) = device_of(pool) else { return (INVALID_VALUE, 0) };
    if location == 0 {
        return (INVALID_VALUE, 0);
    }
    // SAFETY: the caller's contract.
    let (ty, id) = unsafe {
        let p = location as *const u32;
        (std::ptr::read_unaligned(p), std::ptr::read_unaligned(p.add(1)) as i32)
    };
    if ty != LOCATION_DEVICE || !crate::remote::devices::valid(id as u32 as u64) {
        return (INVALID_VALUE, 0);
    }
    let d = id as u32;
    let fl = if d == owner { READWRITE } else { books(|b| b.access.get(&(pool, d)).copied().unwrap_or(0)) };
    (0, u64::from(fl))
}
