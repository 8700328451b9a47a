//! Memory and events shared between the processes of a program (client mode: `cuIpc*`, and
//! `cuMemExportToShareableHandle` / `cuMemImportFromShareableHandle` across processes).
//!
//! Each process of a program has a session, and each session an executor process of its own;
//! natively the processes share device memory through the driver, here their executors do,
//! brokered by the server. An exporting session's executor exports the physical memory as a
//! POSIX file descriptor and hands it to the server under a token the client drew (128 random
//! bits); an importing session's executor asks the server for the token's descriptor and
//! imports it. The server gives a descriptor only to sessions of the exporter's tenant, and
//! forgets its offers when the exporting session ends (memory imported before stays alive, as
//! the driver keeps it).
//!
//! Each step is one record of gpuless's own, [`SHARE`], whose arguments are a
//! [`ShareRequest`]. Every request is answered with an output under the record's sequence
//! number: a [`ShareAnswer`] (the driver's status, or the broker's, and any bytes the call
//! returns). The client waits for each: a handle another process may use must be usable when
//! the call that made it returns.
//!
//! What the program holds — a `CUipcMemHandle` or a descriptor — names the token: an IPC
//! memory handle is an [`IpcMemHandle`]; an exported descriptor is a memfd of the client's
//! whose contents are an [`IpcMemHandle`] too, so that another process which received it (over
//! a Unix socket, `SCM_RIGHTS`) can read the token.

use super::codec::{Get, Put};
use super::ProtocolError;
use crate::Value;

/// The record's function name.
pub const SHARE: &str = "gpulessShare";

/// Bytes of a `CUipcMemHandle` / `CUipcEventHandle`.
pub const IPC_HANDLE_BYTES: usize = 64;

/// A token: 128 bits from the kernel's random source (never 0; the clock and the process id
/// where that source fails — the server also gives an offer only to the offerer's tenant).
pub fn token() -> u128 {
    let mut b = [0u8; 16];
    // SAFETY: a valid buffer of 16 bytes.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    let t = u128::from_le_bytes(b);
    if n == 16 && t != 0 {
        return t;
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos());
    now ^ (u128::from(std::process::id()) << 96) | 1
}

/// What a [`SHARE`] record asks of the executor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShareRequest {
    /// `cuIpcGetMemHandle`: the physical memory mapped at `address` (its whole mapping: the
    /// arena's chunk or the allocation's own range) offered under `token`.
    OfferMemory {
        /// The token the client drew.
        token: u128,
        /// An address of the allocation.
        address: u64,
    },
    /// `cuMemExportToShareableHandle` (a POSIX descriptor): the program's physical allocation
    /// `handle` offered under `token`.
    OfferHandle {
        /// The token the client drew.
        token: u128,
        /// The client's handle of the allocation.
        handle: u64,
    },
    /// `cuIpcOpenMemHandle`: the memory `token` names, mapped at `address` for `len` bytes (a
    /// range of the arena the client reserved), readable and writable by the session's
    /// device; the executor holds it as the physical allocation `handle`.
    MapMemory {
        /// The exporter's token.
        token: u128,
        /// The client's handle for the imported allocation.
        handle: u64,
        /// Where to map it.
        address: u64,
        /// How many bytes.
        len: u64,
    },
    /// `cuMemImportFromShareableHandle` of another process's descriptor: the memory `token`
    /// names, as the program's physical allocation `handle`.
    TakeHandle {
        /// The exporter's token.
        token: u128,
        /// The client's new handle.
        handle: u64,
    },
    /// `cuIpcCloseMemHandle`: unmaps `[address, address + len)` and releases `handle`.
    Unmap {
        /// The handle [`ShareRequest::MapMemory`] made.
        handle: u64,
        /// The mapping's address.
        address: u64,
        /// Its length.
        len: u64,
    },
    /// `cuIpcGetEventHandle`: a handle of the client's `event` other processes can open
    /// (answered with its [`IPC_HANDLE_BYTES`] bytes, an [`IpcEventHandle`]).
    EventHandle {
        /// The client's event.
        event: u64,
    },
    /// `cuIpcOpenEventHandle`: `handle` (an [`IpcEventHandle`] of another session's event),
    /// opened as the client's event `event`.
    OpenEvent {
        /// The client's handle for the opened event.
        event: u64,
        /// The handle's bytes.
        handle: Vec<u8>,
    },
    /// Nothing: answered once everything before it has been executed (a record of or a wait on
    /// an event other processes see is in its stream when the program's call returns).
    Barrier,
}

const OFFER_MEMORY: u64 = 1;
const OFFER_HANDLE: u64 = 2;
const MAP_MEMORY: u64 = 3;
const TAKE_HANDLE: u64 = 4;
const UNMAP: u64 = 5;
const EVENT_HANDLE: u64 = 6;
const OPEN_EVENT: u64 = 7;
const BARRIER: u64 = 8;

fn bad(i: usize, what: &str) -> ProtocolError {
    ProtocolError::Message { kind: SHARE, offset: i, reason: what.into() }
}

fn token_args(t: u128) -> [Value; 2] {
    [Value::U64(t as u64), Value::U64((t >> 64) as u64)]
}

impl ShareRequest {
    /// The record's arguments.
    pub fn to_args(&self) -> Vec<Value> {
        let mut a = Vec::with_capacity(6);
        match self {
            ShareRequest::OfferMemory { token, address } => {
                a.push(Value::U64(OFFER_MEMORY));
                a.extend(token_args(*token));
                a.push(Value::U64(*address));
            }
            ShareRequest::OfferHandle { token, handle } => {
                a.push(Value::U64(OFFER_HANDLE));
                a.extend(token_args(*token));
                a.push(Value::U64(*handle));
            }
            ShareRequest::MapMemory { token, handle, address, len } => {
                a.push(Value::U64(MAP_MEMORY));
                a.extend(token_args(*token));
                a.extend([Value::U64(*handle), Value::U64(*address), Value::U64(*len)]);
            }
            ShareRequest::TakeHandle { token, handle } => {
                a.push(Value::U64(TAKE_HANDLE));
                a.extend(token_args(*token));
                a.push(Value::U64(*handle));
            }
            ShareRequest::Unmap { handle, address, len } => {
                a.extend([Value::U64(UNMAP), Value::U64(*handle), Value::U64(*address), Value::U64(*len)]);
            }
            ShareRequest::EventHandle { event } => a.extend([Value::U64(EVENT_HANDLE), Value::U64(*event)]),
            ShareRequest::OpenEvent { event, handle } => {
                a.extend([Value::U64(OPEN_EVENT), Value::U64(*event), Value::Bytes(handle.clone())])
            }
            // Two words: a record of gpuless's own with one word is a summary (`is_summary`).
            ShareRequest::Barrier => a.extend([Value::U64(BARRIER), Value::U64(0)]),
        }
        a
    }

    /// Reads a record's arguments ([`Self::to_args`]); an error names what does not fit (the
    /// offset is the argument's index).
    pub fn from_args(args: &[Value]) -> Result<Self, ProtocolError> {
        let words: Vec<Option<u64>> = args
            .iter()
            .map(|v| match v {
                Value::U64(w) => Some(*w),
                _ => None,
            })
            .collect();
        let w = |i: usize| words.get(i).copied().flatten().ok_or_else(|| bad(i, "expected a word"));
        let token = || -> Result<u128, ProtocolError> { Ok(u128::from(w(1)?) | u128::from(w(2)?) << 64) };
        let arity =
            |n: usize| if args.len() == n { Ok(()) } else { Err(bad(args.len().min(n), "wrong number of arguments")) };
        Ok(match w(0)? {
            OFFER_MEMORY => {
                arity(4)?;
                ShareRequest::OfferMemory { token: token()?, address: w(3)? }
            }
            OFFER_HANDLE => {
                arity(4)?;
                ShareRequest::OfferHandle { token: token()?, handle: w(3)? }
            }
            MAP_MEMORY => {
                arity(6)?;
                ShareRequest::MapMemory { token: token()?, handle: w(3)?, address: w(4)?, len: w(5)? }
            }
            TAKE_HANDLE => {
                arity(4)?;
                ShareRequest::TakeHandle { token: token()?, handle: w(3)? }
            }
            UNMAP => {
                arity(4)?;
                ShareRequest::Unmap { handle: w(1)?, address: w(2)?, len: w(3)? }
            }
            EVENT_HANDLE => {
                arity(2)?;
                ShareRequest::EventHandle { event: w(1)? }
            }
            OPEN_EVENT => {
                arity(3)?;
                let Some(Value::Bytes(h)) = args.get(2) else { return Err(bad(2, "expected the handle's bytes")) };
                if h.len() != IPC_HANDLE_BYTES {
                    return Err(bad(2, "an event handle is 64 bytes"));
                }
                ShareRequest::OpenEvent { event: w(1)?, handle: h.clone() }
            }
            BARRIER => {
                arity(2)?;
                ShareRequest::Barrier
            }
            op => return Err(bad(0, &format!("unknown operation {op}"))),
        })
    }
}

/// The answer to a [`SHARE`] record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareAnswer {
    /// The `CUresult` the program's call returns.
    pub status: u32,
    /// Bytes the call returns (an event handle).
    pub bytes: Vec<u8>,
}

impl ShareAnswer {
    /// The answer's bytes, as the record's output.
    pub fn encode(&self) -> Vec<u8> {
        let mut p = Put::default();
        p.u32(self.status).bytes(&self.bytes);
        p.0
    }

    /// Reads an output ([`Self::encode`]).
    pub fn decode(b: &[u8]) -> Result<Self, ProtocolError> {
        let mut g = Get::new(b, "gpulessShare answer");
        let status = g.u32()?;
        let bytes = g.bytes()?.to_vec();
        g.end()?;
        Ok(ShareAnswer { status, bytes })
    }
}

/// What a `CUipcMemHandle` (and a client's exported descriptor) holds in client mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpcMemHandle {
    /// The exporter's token.
    pub token: u128,
    /// Bytes the importer maps (the exported mapping's length).
    pub len: u64,
    /// Where the allocation starts within them.
    pub offset: u64,
    /// The allocation's size.
    pub size: u64,
    /// The memory pool it came from, when exported as a pool's pointer
    /// (`cuMemPoolExportPointer`: the pool's token, 0 otherwise).
    pub pool: u128,
}

/// The first bytes of an [`IpcMemHandle`].
const MAGIC: &[u8; 8] = b"GLIPCMEM";

impl IpcMemHandle {
    /// The handle's 64 bytes.
    pub fn to_bytes(&self) -> [u8; IPC_HANDLE_BYTES] {
        let mut b = [0u8; IPC_HANDLE_BYTES];
        b[..8].copy_from_slice(MAGIC);
        b[8..24].copy_from_slice(&self.token.to_le_bytes());
        b[24..32].copy_from_slice(&self.len.to_le_bytes());
        b[32..40].copy_from_slice(&self.offset.to_le_bytes());
        b[40..48].copy_from_slice(&self.size.to_le_bytes());
        b[48..64].copy_from_slice(&self.pool.to_le_bytes());
        b
    }

    /// Reads 64 bytes; `None` if they are not a handle of gpuless's (or not consistent).
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.len() < IPC_HANDLE_BYTES || &b[..8] != MAGIC {
            return None;
        }
        let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        let token = u128::from_le_bytes(b[8..24].try_into().ok()?);
        let pool = u128::from_le_bytes(b[48..64].try_into().ok()?);
        let h = IpcMemHandle { token, len: word(24), offset: word(32), size: word(40), pool };
        let fits = h.offset.checked_add(h.size).is_some_and(|e| e <= h.len);
        (token != 0 && h.len > 0 && fits).then_some(h)
    }
}

/// What a `CUipcEventHandle` holds in client mode: the driver's own handles do not open in
/// another (confined) executor, so an event other processes see is a slot of a page of host
/// memory the executors share (brokered as a descriptor under `token`): per slot, how many
/// records were issued and how many completed, which the streams that record it write and the
/// streams that wait for it wait on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpcEventHandle {
    /// The page's token.
    pub token: u128,
    /// The event's slot in it.
    pub slot: u32,
}

/// The first bytes of an [`IpcEventHandle`].
const EVENT_MAGIC: &[u8; 8] = b"GLIPCEVT";

impl IpcEventHandle {
    /// The handle's 64 bytes.
    pub fn to_bytes(&self) -> [u8; IPC_HANDLE_BYTES] {
        let mut b = [0u8; IPC_HANDLE_BYTES];
        b[..8].copy_from_slice(EVENT_MAGIC);
        b[8..24].copy_from_slice(&self.token.to_le_bytes());
        b[24..28].copy_from_slice(&self.slot.to_le_bytes());
        b
    }

    /// Reads 64 bytes; `None` if they are not an event handle of gpuless's.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.len() < IPC_HANDLE_BYTES || &b[..8] != EVENT_MAGIC || b[28..].iter().any(|&x| x != 0) {
            return None;
        }
        let token = u128::from_le_bytes(b[8..24].try_into().ok()?);
        let slot = u32::from_le_bytes(b[24..28].try_into().ok()?);
        (token != 0).then_some(IpcEventHandle { token, slot })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_bad_ones_are_errors() {
        let t = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210u128;
        let all = [
            ShareRequest::OfferMemory { token: t, address: 0x6400_0000_0000 },
            ShareRequest::OfferHandle { token: t, handle: 7 },
            ShareRequest::MapMemory { token: t, handle: 9, address: 0x6400_0020_0000, len: 2 << 20 },
            ShareRequest::TakeHandle { token: t, handle: 11 },
            ShareRequest::Unmap { handle: 9, address: 0x6400_0020_0000, len: 2 << 20 },
            ShareRequest::EventHandle { event: 5 },
            ShareRequest::OpenEvent { event: 6, handle: vec![3; 64] },
            ShareRequest::Barrier,
        ];
        for r in all {
            assert_eq!(ShareRequest::from_args(&r.to_args()).unwrap(), r);
            let rec = crate::CallRecord {
                args: r.to_args(),
                ..crate::CallRecord::new(
                    1,
                    gpuless_analyzer::api::ApiLevel::Other,
                    crate::Function::Other(SHARE.into()),
                )
            };
            assert!(!rec.is_summary(), "{r:?} is not taken for a summary record");
        }
        assert!(ShareRequest::from_args(&[]).is_err());
        assert!(ShareRequest::from_args(&[Value::U64(99)]).is_err());
        assert!(ShareRequest::from_args(&[Value::U64(OFFER_MEMORY), Value::U64(1)]).is_err());
        assert!(ShareRequest::from_args(&[Value::U64(OPEN_EVENT), Value::U64(1), Value::Bytes(vec![0; 3])]).is_err());
        assert!(ShareRequest::from_args(&[Value::U64(BARRIER)]).is_err());
        let a = ShareAnswer { status: 400, bytes: vec![1, 2, 3] };
        assert_eq!(ShareAnswer::decode(&a.encode()).unwrap(), a);
        assert!(ShareAnswer::decode(&[1, 2]).is_err());
    }

    #[test]
    fn ipc_handles_round_trip_and_foreign_bytes_are_not_handles() {
        let h = IpcMemHandle { token: 42 << 70 | 5, len: 2 << 20, offset: 512, size: 1000, pool: 0 };
        assert_eq!(IpcMemHandle::from_bytes(&h.to_bytes()), Some(h));
        assert_eq!(IpcMemHandle::from_bytes(&[0u8; 64]), None);
        assert_eq!(IpcMemHandle::from_bytes(&h.to_bytes()[..40]), None);
        let mut b = h.to_bytes();
        b[24..32].copy_from_slice(&100u64.to_le_bytes());
        assert_eq!(IpcMemHandle::from_bytes(&b), None, "the allocation must lie within the mapping");
        let p = IpcMemHandle { pool: 77 << 64, ..h };
        assert_eq!(IpcMemHandle::from_bytes(&p.to_bytes()), Some(p));
        let e = IpcEventHandle { token: 9 << 80, slot: 255 };
        assert_eq!(IpcEventHandle::from_bytes(&e.to_bytes()), Some(e));
        assert_eq!(IpcEventHandle::from_bytes(&h.to_bytes()), None, "a memory handle is not an event's");
        assert_eq!(IpcMemHandle::from_bytes(&e.to_bytes()), None);
    }
}
