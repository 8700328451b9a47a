//! Memory pools' books (issue 35). Stream-ordered allocations (`cuMemAllocAsync`,
//! `cuMemAllocFromPoolAsync`) are served by the arena (`arena.rs`), not by the driver's pools,
//! so what a pool reports about its memory is kept here, as the driver keeps it for memory it
//! hands out itself, and answered in a recording and for a client alike:
//! - used memory: the bytes of the pool's live allocations (an asynchronous free counts when the
//!   arena releases the memory, at the synchronization that covers it);
//! - reserved memory: at least the used memory; after a synchronization, what exceeds the
//!   release threshold is returned (`CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`, 0 unless set), and
//!   `cuMemPoolTrimTo` returns what exceeds its argument;
//! - the high-water marks of both, which the program may reset (to the current value);
//! - the release threshold as the program set it.
//!
//! The reuse policies (attributes 1 to 3) are the driver's: the call goes to it.

use std::collections::HashMap;
use std::sync::Mutex;

/// `CUmemPool_attribute` values the books answer.
const RELEASE_THRESHOLD: u64 = 4;
const RESERVED_MEM_CURRENT: u64 = 5;
const RESERVED_MEM_HIGH: u64 = 6;
const USED_MEM_CURRENT: u64 = 7;
const USED_MEM_HIGH: u64 = 8;

const SUCCESS: u32 = 0;
const INVALID_VALUE: u32 = 1;

#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
struct Book {
    used: u64,
    reserved: u64,
    used_high: u64,
    reserved_high: u64,
    threshold: u64,
}

static BOOKS: Mutex<Option<HashMap<u64, Book>>> = Mutex::new(None);

fn with<T>(pool: u64, f: impl FnOnce(&mut Book) -> T) -> T {
    let mut g = BOOKS.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(HashMap::new).entry(pool).or_default())
}

/// `bytes` of `pool` handed out.
pub fn allocated(pool: u64, bytes: u64) {
    with(pool, |b| {
        b.used += bytes;
        b.reserved = b.reserved.max(b.used);
        b.used_high = b.used_high.max(b.used);
        b.reserved_high = b.reserved_high.max(b.reserved);
    });
}

/// `bytes` of `pool` given back (still reserved until a synchronization).
pub fn released(pool: u64, bytes: u64) {
    with(pool, |b| b.used = b.used.saturating_sub(bytes));
}

/// A synchronization: every pool returns the reserved memory above its threshold.
pub fn synchronized() {
    let mut g = BOOKS.lock().unwrap_or_else(|e| e.into_inner());
    for b in g.get_or_insert_with(HashMap::new).values_mut() {
        b.reserved = b.used.max(b.reserved.min(b.threshold));
    }
}

/// `cuMemPoolTrimTo(pool, keep)`.
pub fn trim(pool: u64, keep: u64) {
    with(pool, |b| b.reserved = b.used.max(b.reserved.min(keep)));
}

/// `cuMemPoolDestroy(pool)`: its books go.
pub fn destroyed(pool: u64) {
    let mut g = BOOKS.lock().unwrap_or_else(|e| e.into_inner());
    g.get_or_insert_with(HashMap::new).remove(&pool);
}

/// `cuMemPoolGetAttribute(pool, attr, value*)`: the answer for the attributes the books keep
/// (written as a `cuuint64_t`); `None` for the driver's.
///
/// # Safety
/// `value` is null or the program's pointer to a `cuuint64_t`.
pub unsafe fn get(pool: u64, attr: u64, value: u64) -> Option<u32> {
    let v = with(pool, |b| match attr {
        RELEASE_THRESHOLD => Some(b.threshold),
        RESERVED_MEM_CURRENT => Some(b.reserved),
        RESERVED_MEM_HIGH => Some(b.reserved_high),
        USED_MEM_CURRENT => Some(b.used),
        USED_MEM_HIGH => Some(b.used_high),
        _ => None,
    })?;
    if value == 0 {
        return Some(INVALID_VALUE);
    }
    // SAFETY: the caller's contract.
    unsafe { std::ptr::write_unaligned(value as *mut u64, v) };
    Some(SUCCESS)
}

/// `cuMemPoolSetAttribute(pool, attr, value*)`: the books take the threshold and high-water
/// resets (only to 0, as the driver accepts); `Some(status)` when the driver would refuse the
/// value, `None` to let the call go on to the driver (or the server).
///
/// # Safety
/// `value` is null or the program's pointer to a `cuuint64_t`.
pub unsafe fn set(pool: u64, attr: u64, value: u64) -> Option<u32> {
    if !matches!(attr, RELEASE_THRESHOLD | RESERVED_MEM_HIGH | USED_MEM_HIGH) {
        return None;
    }
    if value == 0 {
        return Some(INVALID_VALUE);
    }
    // SAFETY: the caller's contract.
    let v = unsafe { std::ptr::read_unaligned(value as *const u64) };
    with(pool, |b| match attr {
        RELEASE_THRESHOLD => {
            b.threshold = v;
            None
        }
        _ if v != 0 => Some(INVALID_VALUE),
        RESERVED_MEM_HIGH => {
            b.reserved_high = b.reserved;
            None
        }
        _ => {
            b.used_high = b.used;
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(pool: u64, attr: u64) -> u64 {
        let mut v = 7u64;
        // SAFETY: a valid cuuint64_t.
        assert_eq!(unsafe { get(pool, attr, &mut v as *mut u64 as u64) }, Some(SUCCESS));
        v
    }

    #[test]
    fn used_and_reserved_memory_follow_allocations_thresholds_synchronizations_and_trims() {
        let p = 0xabc0;
        assert_eq!(read(p, USED_MEM_CURRENT), 0);
        allocated(p, 100);
        allocated(p, 50);
        assert_eq!((read(p, USED_MEM_CURRENT), read(p, RESERVED_MEM_CURRENT)), (150, 150));
        let t = 120u64;
        // SAFETY: a valid cuuint64_t.
        assert_eq!(unsafe { set(p, RELEASE_THRESHOLD, &t as *const u64 as u64) }, None);
        assert_eq!(read(p, RELEASE_THRESHOLD), 120);
        released(p, 150);
        assert_eq!((read(p, USED_MEM_CURRENT), read(p, RESERVED_MEM_CURRENT)), (0, 150));
        synchronized();
        assert_eq!(read(p, RESERVED_MEM_CURRENT), 120, "the threshold keeps memory reserved");
        trim(p, 0);
        assert_eq!(read(p, RESERVED_MEM_CURRENT), 0);
        assert_eq!(read(p, USED_MEM_HIGH), 150);
        let zero = 0u64;
        let one = 1u64;
        // SAFETY: valid cuuint64_t values.
        unsafe {
            assert_eq!(set(p, USED_MEM_HIGH, &one as *const u64 as u64), Some(INVALID_VALUE));
            assert_eq!(set(p, USED_MEM_HIGH, &zero as *const u64 as u64), None);
            assert_eq!(get(p, 1, &mut 0u64 as *mut u64 as u64), None, "reuse policies are the driver's");
        }
        assert_eq!(read(p, USED_MEM_HIGH), 0);
        destroyed(p);
    }
}
