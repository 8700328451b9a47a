//! Which calls the arena serves or checks: [`Op`], and the API table's functions mapped to
//! their operation ([`op`]).

use std::sync::OnceLock;

use gpuless_analyzer::api;

/// What the arena does with a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Alloc,
    AllocPitch,
    AllocAsync,
    AllocFromPool,
    Free,
    FreeAsync,
    AddressRange,
    PointerAttribute,
    PointerAttributes,
    PointerSetAttribute,
    /// The program's own reservation (`cuMemAddressReserve`), placed in the arena.
    AddressReserve,
    /// `cuMemAddressFree` of such a reservation.
    AddressFree,
    /// Pool attributes and trims the pools' books (`pools.rs`) keep.
    PoolGetAttribute,
    PoolSetAttribute,
    PoolTrimTo,
    PoolDestroy,
    /// A copy of `len` units of `unit` bytes at device address `a` (and `b`, 255 for none;
    /// argument indices): arena memory's range is checked as the driver checks an allocation's
    /// (its chunk would accept what runs past the allocation's end).
    Range {
        a: u8,
        b: u8,
        len: u8,
        unit: u8,
    },
    CtxSync,
    StreamSync,
}

/// The arena operation of API function `id`, if any.
pub fn op(id: api::ApiId) -> Option<Op> {
    static OPS: OnceLock<Vec<Option<Op>>> = OnceLock::new();
    let ops = OPS.get_or_init(|| {
        api::functions()
            .iter()
            .map(|f| match f.name {
                // The legacy 32-bit entries share the names: never theirs.
                _ if !f.modeled => None,
                "cuMemAlloc" => Some(Op::Alloc),
                "cuMemAllocPitch" => Some(Op::AllocPitch),
                "cuMemAllocAsync" => Some(Op::AllocAsync),
                "cuMemAllocFromPoolAsync" => Some(Op::AllocFromPool),
                "cuMemFree" => Some(Op::Free),
                "cuMemFreeAsync" => Some(Op::FreeAsync),
                "cuMemGetAddressRange" => Some(Op::AddressRange),
                "cuPointerGetAttribute" => Some(Op::PointerAttribute),
                "cuPointerGetAttributes" => Some(Op::PointerAttributes),
                "cuPointerSetAttribute" => Some(Op::PointerSetAttribute),
                "cuMemAddressReserve" => Some(Op::AddressReserve),
                "cuMemAddressFree" => Some(Op::AddressFree),
                "cuMemPoolGetAttribute" => Some(Op::PoolGetAttribute),
                "cuMemPoolSetAttribute" => Some(Op::PoolSetAttribute),
                "cuMemPoolTrimTo" => Some(Op::PoolTrimTo),
                "cuMemPoolDestroy" => Some(Op::PoolDestroy),
                // Copies with a host side (recorded in full anyway); device-to-device copies and
                // sets keep the recorder's raw path (`raw.rs`), which an arena operation would
                // take them off: their range is checked in client mode only (`remote/checks.rs`).
                "cuMemcpyHtoD" | "cuMemcpyHtoDAsync" => range(f, "dstDevice", None, "ByteCount", 1),
                "cuMemcpyDtoH" | "cuMemcpyDtoHAsync" => range(f, "srcDevice", None, "ByteCount", 1),
                "cuCtxSynchronize" => Some(Op::CtxSync),
                "cuStreamSynchronize" => Some(Op::StreamSync),
                _ => None,
            })
            .collect()
    });
    ops.get(usize::from(id.0)).copied().flatten()
}

/// [`Op::Range`] of `f`'s arguments by name (`None` if the table lacks one).
fn range(f: &api::ApiFunction, a: &str, b: Option<&str>, len: &str, unit: u8) -> Option<Op> {
    let at = |n: &str| f.args.iter().position(|x| x.name == n).and_then(|i| u8::try_from(i).ok());
    let b = match b {
        Some(n) => at(n)?,
        None => 255,
    };
    Some(Op::Range { a: at(a)?, b, len: at(len)?, unit })
}
