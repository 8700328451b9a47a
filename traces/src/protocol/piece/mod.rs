//! Pieces: the unit of the server's cached-trace execution (issue 20; docs/PROTOCOL.md,
//! "Cached execution").
//!
//! A piece is a run of consecutive records of calls the API table marks `graph` — kernel
//! launches, stream-ordered copies and sets: what stream capture turns into graph nodes — all
//! on one stream, at most [`MAX_RECORDS`] long. Any other record, a record on another stream,
//! or the limit ends it ([`Assembler`]), so the same calls cut the same way in every process
//! and every repetition: where the records came apart in segments does not matter.
//!
//! An executor runs a piece it has seen repeat as one CUDA graph. A piece's [`key`] hashes
//! what must be equal for the graph to stand for its records — functions, variants, every
//! argument (kernels, geometry, parameter bytes, sizes, device addresses, handles) — and leaves
//! out what legitimately varies from one repetition to the next: sequence numbers, threads,
//! times, statuses, the bytes a host-to-device copy uploads (their length stays in) and the
//! program's host buffer addresses. [`same`] compares two records exactly under that rule;
//! the executor compares a piece with the one its graph was captured from before the graph
//! stands in for it.

use xxhash_rust::xxh3::Xxh3;

use crate::model::{CallRecord, Hash128, Value};

/// Most records in a piece: long enough that a graph launch replaces many launches, short
/// enough that the executor, which holds a piece's records until the piece is complete, stays
/// close behind the program.
pub const MAX_RECORDS: usize = 32;

/// The stream a record of a capturable call runs on (the legacy and per-thread default
/// streams, 0, 1 and 2, are one at replay: 0), or `None` when the record cannot be part of a
/// piece: a call the table does not mark `graph`, or one whose stream was not recorded.
pub fn stream_of(rec: &CallRecord) -> Option<u64> {
    if !rec.function.api()?.capturable {
        return None;
    }
    named_stream(rec).map(|s| if s <= 2 { 0 } else { s })
}

/// The stream a record names as recorded (its `hStream`, or a launch configuration's), if it
/// names one: what a replay maps to a live stream.
pub fn named_stream(rec: &CallRecord) -> Option<u64> {
    let f = rec.function.api()?;
    match (f.args.iter().position(|a| a.name == "hStream"), rec.args.first()) {
        (Some(i), _) => match rec.args.get(i)? {
            Value::Handle(_, s) | Value::U64(s) => Some(*s),
            Value::Null => Some(0),
            _ => None,
        },
        // cuLaunchKernelEx: the stream is the configuration's.
        (None, Some(Value::LaunchConfig(c))) => Some(c.stream),
        _ => None,
    }
}

/// The bytes a record uploads (its host-to-device payload), if it has any.
pub fn payload(rec: &CallRecord) -> Option<crate::model::BlobRef> {
    rec.args.iter().find_map(|v| match v {
        Value::Blob(b) => Some(*b),
        _ => None,
    })
}

/// The key of a piece: a hash of its records under the rule in the module's documentation.
pub fn key(records: &[CallRecord]) -> Hash128 {
    hash_records(records, false)
}

/// The *shape* key of a piece: [`key`] without device addresses and without the bytes of
/// kernel parameters (their layout and length stay in). Pieces of one shape are one graph
/// whose nodes are pointed at this repetition's buffers and given its parameters before a
/// launch (`cuGraphExec*NodeSetParams`): a program whose allocator hands out other addresses
/// at every repetition (PyTorch's caching allocator) still runs its repeated work as graphs.
pub fn shape_key(records: &[CallRecord]) -> Hash128 {
    hash_records(records, true)
}

fn hash_records(records: &[CallRecord], shape: bool) -> Hash128 {
    let mut h = Xxh3::new();
    h.update(&(records.len() as u64).to_le_bytes());
    for r in records {
        feed_record(&mut h, r, shape);
    }
    Hash128(h.digest128())
}

/// Whether `a` and `b` are the same call under the piece rule: equal but for sequence numbers,
/// threads, times, statuses, uploaded bytes and host buffer addresses.
pub fn same(a: &CallRecord, b: &CallRecord) -> bool {
    same_record(a, b, false)
}

/// Whether `a` and `b` have the same shape ([`shape_key`]): [`same`] but for device addresses
/// and kernel parameter bytes.
pub fn same_shape(a: &CallRecord, b: &CallRecord) -> bool {
    same_record(a, b, true)
}

fn same_record(a: &CallRecord, b: &CallRecord, shape: bool) -> bool {
    a.function == b.function
        && a.variant == b.variant
        && a.args.len() == b.args.len()
        && a.results.len() == b.results.len()
        && a.args.iter().zip(&b.args).all(|(x, y)| same_value(x, y, shape))
        && a.results.iter().zip(&b.results).all(|(x, y)| same_value(x, y, shape))
}

fn same_value(a: &Value, b: &Value, shape: bool) -> bool {
    match (a, b) {
        (Value::HostPtr(_), Value::HostPtr(_)) => true,
        (Value::DevPtr(_), Value::DevPtr(_)) if shape => true,
        (Value::KernelParams(x), Value::KernelParams(y)) if shape => {
            x.layout == y.layout && x.bytes.len() == y.bytes.len()
        }
        (Value::Bytes(x), Value::Bytes(y)) if shape => x.len() == y.len(),
        (Value::Blob(x), Value::Blob(y)) | (Value::Digest(x), Value::Digest(y)) => x.len == y.len,
        (Value::F64(x), Value::F64(y)) => x.to_bits() == y.to_bits(),
        (Value::List(x), Value::List(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_value(p, q, shape)),
        _ => a == b,
    }
}

fn feed_record(h: &mut Xxh3, r: &CallRecord, shape: bool) {
    match &r.function {
        crate::model::Function::Known(id) => h.update(&[0, (id.0 & 0xff) as u8, (id.0 >> 8) as u8]),
        crate::model::Function::Other(n) => {
            h.update(&[1]);
            h.update(n.as_bytes());
        }
    }
    h.update(&[r.variant.version, u8::from(r.variant.per_thread), r.args.len() as u8, r.results.len() as u8]);
    for v in r.args.iter().chain(&r.results) {
        feed_value(h, v, shape);
    }
}

fn feed_value(h: &mut Xxh3, v: &Value, shape: bool) {
    let word = |h: &mut Xxh3, tag: u8, w: u64| {
        h.update(&[tag]);
        h.update(&w.to_le_bytes());
    };
    let bytes = |h: &mut Xxh3, tag: u8, b: &[u8]| {
        word(h, tag, b.len() as u64);
        h.update(b);
    };
    match v {
        Value::U64(x) => word(h, 1, *x),
        Value::I64(x) => word(h, 2, *x as u64),
        Value::F64(x) => word(h, 3, x.to_bits()),
        Value::DevPtr(_) if shape => h.update(&[4]),
        Value::DevPtr(x) => word(h, 4, *x),
        // The program's own buffer: a new one at every repetition is the same call.
        Value::HostPtr(_) => h.update(&[5]),
        Value::Size(x) => word(h, 6, *x),
        Value::Handle(k, x) => {
            word(h, 7, *x);
            h.update(&[*k as u8]);
        }
        Value::Dim(d) => {
            word(h, 8, u64::from(d.x));
            h.update(&d.y.to_le_bytes());
            h.update(&d.z.to_le_bytes());
        }
        Value::Str(s) => bytes(h, 9, s.as_bytes()),
        Value::Bytes(b) if shape => word(h, 10, b.len() as u64),
        Value::Bytes(b) => bytes(h, 10, b),
        // What is uploaded (or came back) varies; how much does not.
        Value::Blob(b) => word(h, 11, b.len),
        Value::Digest(b) => word(h, 12, b.len),
        Value::KernelParams(kp) => {
            if shape {
                word(h, 13, kp.bytes.len() as u64);
            } else {
                bytes(h, 13, &kp.bytes);
            }
            word(h, 13, kp.layout.len() as u64);
            for &(o, s) in &kp.layout {
                h.update(&o.to_le_bytes());
                h.update(&s.to_le_bytes());
            }
        }
        Value::LaunchConfig(c) => {
            word(h, 14, c.stream);
            for d in [c.grid, c.block] {
                h.update(&d.x.to_le_bytes());
                h.update(&d.y.to_le_bytes());
                h.update(&d.z.to_le_bytes());
            }
            h.update(&c.shared_mem.to_le_bytes());
            word(h, 14, c.attrs.len() as u64);
            for a in &c.attrs {
                h.update(&a.id.to_le_bytes());
                bytes(h, 14, &a.value);
            }
        }
        Value::List(items) => {
            word(h, 15, items.len() as u64);
            for i in items {
                feed_value(h, i, shape);
            }
        }
        Value::Null => h.update(&[16]),
    }
}

/// A piece sent by reference (`Message::Piece`): the executor holds a graph of a piece with
/// `key`, captured from records it keeps; this repetition's records are those with their
/// sequence numbers `first_seq`, `first_seq + 1`, ... and their uploads' bytes `payloads`
/// (the blobs, in record order), which the client compared with its copy of the piece first
/// ([`same`], record by record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PieceRef {
    /// The piece's [`key`].
    pub key: Hash128,
    /// The sequence number of its first record (the others follow without gaps).
    pub first_seq: u64,
    /// How many records it stands for.
    pub records: u32,
    /// The bytes each of its uploads sends, in record order ([`payload`]).
    pub payloads: Vec<crate::model::BlobRef>,
}

impl PieceRef {
    /// The records `template` (the piece the key was made from) stands for with this
    /// repetition's sequence numbers and uploads; `None` when they do not fit it (another
    /// length, another number of uploads).
    pub fn records(&self, template: &[CallRecord]) -> Option<Vec<CallRecord>> {
        if template.len() != self.records as usize {
            return None;
        }
        let mut payloads = self.payloads.iter();
        let mut out = Vec::with_capacity(template.len());
        for (i, t) in template.iter().enumerate() {
            let mut r = t.clone();
            r.seq = self.first_seq.checked_add(i as u64)?;
            if let Some(v) = r.args.iter_mut().find(|v| matches!(v, Value::Blob(_))) {
                let b = payloads.next()?;
                if let Value::Blob(old) = v {
                    if old.len != b.len {
                        return None;
                    }
                }
                *v = Value::Blob(*b);
            }
            out.push(r);
        }
        payloads.next().is_none().then_some(out)
    }
}

/// Cuts a stream of records into pieces: feed every record in call order with [`push`]; each
/// returns what became complete.
///
/// [`push`]: Assembler::push
#[derive(Debug, Default)]
pub struct Assembler {
    open: Vec<CallRecord>,
    stream: u64,
}

/// What [`Assembler::push`] hands back, in call order.
#[derive(Debug, PartialEq)]
pub enum Cut {
    /// A complete piece.
    Piece(Vec<CallRecord>),
    /// A record that belongs to no piece.
    Single(CallRecord),
}

impl Assembler {
    /// Takes the next record; returns, in call order, the piece it completed or ended (if any)
    /// and the record itself when it belongs to no piece.
    pub fn push(&mut self, rec: CallRecord, out: &mut Vec<Cut>) {
        match stream_of(&rec) {
            Some(s) => {
                if !self.open.is_empty() && s != self.stream {
                    out.push(Cut::Piece(std::mem::take(&mut self.open)));
                }
                self.stream = s;
                self.open.push(rec);
                if self.open.len() >= MAX_RECORDS {
                    out.push(Cut::Piece(std::mem::take(&mut self.open)));
                }
            }
            None => {
                self.finish(out);
                out.push(Cut::Single(rec));
            }
        }
    }

    /// Ends the open piece, if any (the session closes, or the executor must run everything
    /// it holds).
    pub fn finish(&mut self, out: &mut Vec<Cut>) {
        if !self.open.is_empty() {
            out.push(Cut::Piece(std::mem::take(&mut self.open)));
        }
    }

    /// Records held in the open piece.
    pub fn held(&self) -> usize {
        self.open.len()
    }
}

pub mod policy;
pub mod sample;
pub mod survey;
#[cfg(test)]
mod tests;
