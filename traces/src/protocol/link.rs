//! The JIT linker in a session (client mode, `cuLink*`). Each step of a link is one record of
//! gpuless's own, [`LINK`] (a `Function::Other` record at level `Other`, like
//! `gpulessHostPull`), whose arguments are a [`LinkRequest`]: the operation and the link's
//! handle, which the client makes up. The executor keeps, per session, a link state of its
//! driver for each handle, created with the link's options (buffers of its own where the driver
//! writes: the logs, the wall time):
//!
//! - [`LinkRequest::Create`] creates it; it is not answered (the client does not wait): a
//!   failure is kept and is the answer to the link's next add or completion;
//! - [`LinkRequest::Add`] adds one input (`cuLinkAddData`, or `cuLinkAddFile` with the file
//!   read by the client) — the driver checks, and compiles, an input when it is added;
//! - [`LinkRequest::Complete`] completes the link;
//! - [`LinkRequest::Destroy`] destroys it (not answered; a session's end destroys the links
//!   left).
//!
//! An add and a completion are answered with an output under the record's sequence number: a
//! [`LinkAnswer`] — the driver's status, the linked image (a completion's), and what the driver
//! wrote into the link's options since the last answer (their slots, the logs, the wall time),
//! which the client writes into the program's option values.
//!
//! A failed step is not a failed record: its status travels in the answer, and the session
//! goes on. A record whose arguments do not decode ends the session (a client's bug).

use super::codec::{Get, Put};
use super::ProtocolError;
use crate::{BlobRef, Value};

/// The record's function name.
pub const LINK: &str = "gpulessLink";

/// One JIT option (`CUjit_option`) and its value as the program's `optionValues` slot held it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JitOption {
    /// The option (`CUjit_option`).
    pub id: u32,
    /// The slot's value: a plain value, or (for a buffer or list option) the program's
    /// pointer, which the executor replaces with a buffer or an array of its own.
    pub value: u64,
    /// For an option whose slot points to an array the driver reads (symbol names and
    /// addresses): its contents, carried by value.
    pub list: Option<JitList>,
}

/// The array an option's slot points to in the program's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JitList {
    /// C strings, without their NULs.
    Names(Vec<Vec<u8>>),
    /// Addresses.
    Addresses(Vec<u64>),
}

impl JitOption {
    /// An option with a plain value (or a buffer the executor replaces).
    pub fn plain(id: u32, value: u64) -> Self {
        JitOption { id, value, list: None }
    }
}

/// One input of a link (`cuLinkAddData`, or `cuLinkAddFile` with the file read by the client).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkInput {
    /// `CUjitInputType`.
    pub kind: u32,
    /// The input's name (`cuLinkAddFile`: the path), for the driver's logs.
    pub name: String,
    /// The input's bytes, a blob of the session.
    pub data: BlobRef,
    /// Options for this input only.
    pub options: Vec<JitOption>,
}

/// What a [`LINK`] record asks of the link the client calls `link`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkRequest {
    /// `cuLinkCreate` with these options. Not answered.
    Create {
        /// The client's handle of the link.
        link: u64,
        /// The options, values as the program gave them.
        options: Vec<JitOption>,
    },
    /// `cuLinkAddData` / `cuLinkAddFile`: one input. Answered.
    Add {
        /// The client's handle of the link.
        link: u64,
        /// The input.
        input: LinkInput,
    },
    /// `cuLinkComplete`. Answered, with the image.
    Complete {
        /// The client's handle of the link.
        link: u64,
    },
    /// `cuLinkDestroy`. Not answered.
    Destroy {
        /// The client's handle of the link.
        link: u64,
    },
}

/// What the driver wrote for option `option` of the link (an index into the options of its
/// [`LinkRequest::Create`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// Index of the option in the link's options.
    pub option: u32,
    /// The slot's new value, if the driver overwrote the slot.
    pub slot: Option<u64>,
    /// The bytes the driver wrote at the option's pointer (a log with its NUL, a wall time's 4
    /// bytes), from its start to the last byte it changed.
    pub bytes: Option<Vec<u8>>,
}

/// The executor's answer to an add or a completion.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkAnswer {
    /// The driver's `CUresult` of the step (0: done); of the link's creation when that failed.
    pub status: i32,
    /// The linked image (`cuLinkComplete`'s `cubinOut`, `sizeOut` bytes); empty for an add and
    /// when the link failed.
    pub image: Vec<u8>,
    /// What the driver wrote into the link's options since the link's last answer, in option
    /// order.
    pub written: Vec<Written>,
}

/// Smallest encoding of one option: id, value and the list's tag.
const OPTION_LEN: usize = 13;
/// Tags of an option's list: none, names, addresses.
const NO_LIST: u8 = 0;
const NAMES: u8 = 1;
const ADDRESSES: u8 = 2;
/// Smallest encoding of one [`Written`]: index and flags.
const WRITTEN_LEN: usize = 5;
const HAS_SLOT: u8 = 1;
const HAS_BYTES: u8 = 2;

/// The operations' codes, the record's first argument.
const CREATE: u64 = 0;
const ADD: u64 = 1;
const COMPLETE: u64 = 2;
const DESTROY: u64 = 3;

fn put_options(options: &[JitOption]) -> Vec<u8> {
    let mut p = Put::default();
    p.u32(options.len() as u32);
    for o in options {
        p.u32(o.id).u64(o.value);
        match &o.list {
            None => {
                p.u8(NO_LIST);
            }
            Some(JitList::Names(names)) => {
                p.u8(NAMES).u32(names.len() as u32);
                for n in names {
                    p.bytes(n);
                }
            }
            Some(JitList::Addresses(addrs)) => {
                p.u8(ADDRESSES).u32(addrs.len() as u32);
                for &a in addrs {
                    p.u64(a);
                }
            }
        }
    }
    p.0
}

fn get_options(bytes: &[u8]) -> Result<Vec<JitOption>, ProtocolError> {
    let mut g = Get::new(bytes, LINK);
    let n = g.count(OPTION_LEN)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let (id, value) = (g.u32()?, g.u64()?);
        let list = match g.u8()? {
            NO_LIST => None,
            NAMES => {
                let k = g.count(4)?;
                let mut names = Vec::with_capacity(k);
                for _ in 0..k {
                    names.push(g.bytes()?.to_vec());
                }
                Some(JitList::Names(names))
            }
            ADDRESSES => {
                let k = g.count(8)?;
                let mut addrs = Vec::with_capacity(k);
                for _ in 0..k {
                    addrs.push(g.u64()?);
                }
                Some(JitList::Addresses(addrs))
            }
            t => return Err(g.error(format!("an option's list of unknown kind {t}"))),
        };
        out.push(JitOption { id, value, list });
    }
    g.end()?;
    Ok(out)
}

/// An error about argument `at` of a [`LINK`] record.
fn bad(at: usize, reason: &str) -> ProtocolError {
    ProtocolError::Message { kind: LINK, offset: at, reason: reason.into() }
}

impl LinkRequest {
    /// The client's handle of the link.
    pub fn link(&self) -> u64 {
        match self {
            LinkRequest::Create { link, .. }
            | LinkRequest::Add { link, .. }
            | LinkRequest::Complete { link }
            | LinkRequest::Destroy { link } => *link,
        }
    }

    /// Whether the executor answers the record (an add, a completion).
    pub fn answered(&self) -> bool {
        matches!(self, LinkRequest::Add { .. } | LinkRequest::Complete { .. })
    }

    /// The record's arguments: `U64(operation)` (0 create, 1 add, 2 complete, 3 destroy),
    /// `U64(link)`, then a create's `Bytes(options)`, an add's `U64(kind), Str(name),
    /// Blob(data), Bytes(options)`; options as a `u32` count then `u32` id, `u64` value and
    /// the list each (`u8` tag: 0 none; 1 names: `u32` count, each `u32` length and bytes;
    /// 2 addresses: `u32` count, `u64` each).
    pub fn to_args(&self) -> Vec<Value> {
        let link = Value::U64(self.link());
        match self {
            LinkRequest::Create { options, .. } => {
                vec![Value::U64(CREATE), link, Value::Bytes(put_options(options))]
            }
            LinkRequest::Add { input, .. } => vec![
                Value::U64(ADD),
                link,
                Value::U64(u64::from(input.kind)),
                Value::Str(input.name.clone()),
                Value::Blob(input.data),
                Value::Bytes(put_options(&input.options)),
            ],
            LinkRequest::Complete { .. } => vec![Value::U64(COMPLETE), link],
            LinkRequest::Destroy { .. } => vec![Value::U64(DESTROY), link],
        }
    }

    /// Reads a record's arguments ([`Self::to_args`]); an error names what does not fit (the
    /// offset is the argument's index).
    pub fn from_args(args: &[Value]) -> Result<Self, ProtocolError> {
        let [Value::U64(op), Value::U64(link), rest @ ..] = args else {
            return Err(bad(0, "arguments do not start with [operation, link]"));
        };
        let link = *link;
        Ok(match (*op, rest) {
            (CREATE, [Value::Bytes(o)]) => LinkRequest::Create { link, options: get_options(o)? },
            (ADD, [Value::U64(kind), Value::Str(name), Value::Blob(data), Value::Bytes(o)]) => LinkRequest::Add {
                link,
                input: LinkInput {
                    kind: u32::try_from(*kind).map_err(|_| bad(2, "input type out of range"))?,
                    name: name.clone(),
                    data: *data,
                    options: get_options(o)?,
                },
            },
            (COMPLETE, []) => LinkRequest::Complete { link },
            (DESTROY, []) => LinkRequest::Destroy { link },
            (CREATE, _) => return Err(bad(2, "a create is not [options]")),
            (ADD, _) => return Err(bad(2, "an add is not [type, name, data, options]")),
            (COMPLETE | DESTROY, _) => return Err(bad(2, "arguments after the link")),
            (op, _) => return Err(bad(0, &format!("unknown operation {op}"))),
        })
    }
}

impl LinkAnswer {
    /// The answer's bytes: `i32` status, the image (`u32` length and bytes), a `u32` count of
    /// written options, each `u32` option index, `u8` flags (1: a slot follows, 2: bytes
    /// follow), the slot (`u64`), the bytes (`u32` length and bytes).
    pub fn encode(&self) -> Vec<u8> {
        let mut p = Put::default();
        p.i32(self.status).bytes(&self.image).u32(self.written.len() as u32);
        for w in &self.written {
            let flags = if w.slot.is_some() { HAS_SLOT } else { 0 } | if w.bytes.is_some() { HAS_BYTES } else { 0 };
            p.u32(w.option).u8(flags);
            if let Some(s) = w.slot {
                p.u64(s);
            }
            if let Some(b) = &w.bytes {
                p.bytes(b);
            }
        }
        p.0
    }

    /// Reads an answer ([`Self::encode`]); every byte must be consumed.
    pub fn decode(bytes: &[u8]) -> Result<Self, ProtocolError> {
        let mut g = Get::new(bytes, LINK);
        let status = g.i32()?;
        let image = g.bytes()?.to_vec();
        let n = g.count(WRITTEN_LEN)?;
        let mut written = Vec::with_capacity(n);
        for _ in 0..n {
            let option = g.u32()?;
            let flags = g.u8()?;
            if flags & !(HAS_SLOT | HAS_BYTES) != 0 {
                return Err(g.error(format!("unknown flags {flags:#x}")));
            }
            let slot = if flags & HAS_SLOT != 0 { Some(g.u64()?) } else { None };
            let bytes = if flags & HAS_BYTES != 0 { Some(g.bytes()?.to_vec()) } else { None };
            written.push(Written { option, slot, bytes });
        }
        g.end()?;
        Ok(LinkAnswer { status, image, written })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Hash128;

    fn requests() -> Vec<LinkRequest> {
        let data = BlobRef { hash: Hash128::of(b".version 8.0"), len: 12 };
        vec![
            LinkRequest::Create {
                link: 0x7f00_0001,
                options: vec![
                    JitOption::plain(2, 0x7fff_0000),
                    JitOption::plain(4, 8192),
                    JitOption { id: 17, value: 0x7100, list: Some(JitList::Names(vec![b"g_x".to_vec(), Vec::new()])) },
                    JitOption { id: 18, value: 0x7200, list: Some(JitList::Addresses(vec![0x6400_0000_0200, 0])) },
                    JitOption::plain(19, 2),
                ],
            },
            LinkRequest::Create { link: 1, options: vec![] },
            LinkRequest::Add {
                link: 0x7f00_0001,
                input: LinkInput { kind: 1, name: "a.ptx".into(), data, options: vec![] },
            },
            LinkRequest::Add {
                link: 0x7f00_0001,
                input: LinkInput { kind: 0, name: "/tmp/b.cubin".into(), data, options: vec![JitOption::plain(7, 3)] },
            },
            LinkRequest::Complete { link: 0x7f00_0001 },
            LinkRequest::Destroy { link: u64::MAX },
        ]
    }

    fn answer() -> LinkAnswer {
        LinkAnswer {
            status: 218,
            image: b"\x7fELF....".to_vec(),
            written: vec![
                Written { option: 0, slot: None, bytes: Some(vec![0, 0, 128, 62]) },
                Written { option: 1, slot: Some(41), bytes: None },
                Written { option: 2, slot: Some(7), bytes: Some(b"error\0".to_vec()) },
                Written { option: 3, slot: None, bytes: None },
            ],
        }
    }

    #[test]
    fn requests_and_answers_round_trip() {
        for r in requests() {
            assert_eq!(LinkRequest::from_args(&r.to_args()).unwrap(), r);
        }
        let answered: Vec<bool> = requests().iter().map(LinkRequest::answered).collect();
        assert_eq!(answered, [false, false, true, true, true, false]);
        let a = answer();
        assert_eq!(LinkAnswer::decode(&a.encode()).unwrap(), a);
        assert_eq!(LinkAnswer::decode(&LinkAnswer::default().encode()).unwrap(), LinkAnswer::default());
    }

    #[test]
    fn every_cut_of_an_answer_is_an_error() {
        let wire = answer().encode();
        for n in 0..wire.len() {
            assert!(LinkAnswer::decode(&wire[..n]).is_err(), "cut at {n}");
        }
        let mut longer = wire.clone();
        longer.push(0);
        assert!(LinkAnswer::decode(&longer).is_err(), "a byte after the answer");
    }

    #[test]
    fn bad_answers_are_errors_not_panics() {
        // Unknown flags.
        let mut p = Put::default();
        p.i32(0).bytes(b"").u32(1).u32(0).u8(4);
        assert!(LinkAnswer::decode(&p.0).is_err());
        // A count the payload cannot hold, an image longer than the payload.
        let mut p = Put::default();
        p.i32(0).bytes(b"").u32(u32::MAX);
        assert!(LinkAnswer::decode(&p.0).is_err());
        let mut p = Put::default();
        p.i32(0).u32(1 << 30);
        assert!(LinkAnswer::decode(&p.0).is_err());
        // Every byte string of a few bytes, over a fixed generator.
        let mut x = 0x2545_f491_u64;
        for _ in 0..20_000 {
            let len = (x % 40) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % 7) as u8
                })
                .collect();
            let _ = LinkAnswer::decode(&bytes);
        }
    }

    #[test]
    fn requests_of_the_wrong_shape_are_errors() {
        let all = requests();
        let (create, add) = (all[0].to_args(), all[2].to_args());
        assert!(LinkRequest::from_args(&[]).is_err());
        assert!(LinkRequest::from_args(&create[..1]).is_err());
        // Every cut of every request, and every request with a value after it.
        for r in &all {
            let args = r.to_args();
            for n in 0..args.len() {
                assert!(LinkRequest::from_args(&args[..n]).is_err(), "{r:?} cut at {n}");
            }
            let mut longer = args.clone();
            longer.push(Value::U64(0));
            assert!(LinkRequest::from_args(&longer).is_err(), "{r:?} with a value after it");
        }
        // An unknown operation; a link that is not a U64; one operation's arguments under
        // another's code.
        let mut unknown = create.clone();
        unknown[0] = Value::U64(4);
        assert!(LinkRequest::from_args(&unknown).is_err());
        let mut link = create.clone();
        link[1] = Value::Size(1);
        assert!(LinkRequest::from_args(&link).is_err());
        for (op, args) in [(ADD, &create), (CREATE, &add), (COMPLETE, &create), (DESTROY, &add)] {
            let mut v = args.clone();
            v[0] = Value::U64(op);
            assert!(LinkRequest::from_args(&v).is_err(), "operation {op}");
        }
        // Options cut short, or with a byte after them.
        let Value::Bytes(o) = &create[2] else { unreachable!() };
        let mut longer = o.clone();
        longer.push(0);
        for bad in [o[..o.len() - 1].to_vec(), vec![1, 0, 0, 0], vec![], longer] {
            let mut v = create.clone();
            v[2] = Value::Bytes(bad.clone());
            assert!(LinkRequest::from_args(&v).is_err(), "create options {bad:?}");
            let mut v = add.clone();
            v[5] = Value::Bytes(bad);
            assert!(LinkRequest::from_args(&v).is_err(), "input options");
        }
        // An input whose type is not 32 bits; values of the wrong kinds in an add.
        let mut v = add.clone();
        v[2] = Value::U64(1 << 40);
        assert!(LinkRequest::from_args(&v).is_err());
        for at in 2..add.len() {
            let mut v = add.clone();
            v[at] = Value::List(vec![]);
            assert!(LinkRequest::from_args(&v).is_err(), "argument {at}");
        }
    }
}

#[cfg(test)]
mod list_tests {
    use super::*;

    #[test]
    fn option_lists_round_trip_and_damaged_ones_are_errors() {
        let opts = vec![
            JitOption { id: 17, value: 1, list: Some(JitList::Names(vec![b"a".to_vec(), b"bc".to_vec()])) },
            JitOption { id: 18, value: 2, list: Some(JitList::Addresses(vec![7, 8])) },
            JitOption::plain(19, 2),
        ];
        let bytes = put_options(&opts);
        assert_eq!(get_options(&bytes).unwrap(), opts);
        // An unknown list tag (the first option's tag is at 4 + 12).
        let mut bad = bytes.clone();
        bad[16] = 9;
        assert!(get_options(&bad).is_err());
        // Every cut is an error, never a panic.
        for n in 0..bytes.len() {
            assert!(get_options(&bytes[..n]).is_err(), "cut at {n}");
        }
        // A count larger than the bytes left is an error, not an allocation.
        let mut huge = bytes;
        huge[17..21].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(get_options(&huge).is_err());
    }
}
