//! Decoding a frame's payload into a [`Message`]: total (every malformed payload is a
//! [`ProtocolError`], never a panic), with the layouts of docs/PROTOCOL.md.

use super::*;

impl Message {
    /// Decodes a frame's payload as message `kind`.
    pub fn decode(kind: u16, flags: u16, payload: &[u8]) -> Result<Message, ProtocolError> {
        let name = kind_name(kind);
        let mut g = Get::new(payload, name);
        let m = match kind {
            kind::HELLO => {
                if g.u32()? != HELLO_MAGIC {
                    return Err(g.error("not a gpuless client (magic)"));
                }
                let protocol = g.u16()?;
                let tool = g.str()?;
                let token = g.str()?;
                let partition = match g.u8()? {
                    0 => PartitionRequest::Whole,
                    1 => PartitionRequest::Profile(g.str()?),
                    2 => PartitionRequest::Sms(g.u32()?),
                    t => return Err(g.error(format!("partition kind {t}"))),
                };
                let priority = match g.u8()? {
                    0 => Priority::LatencyCritical,
                    1 => Priority::BestEffort,
                    t => return Err(g.error(format!("priority {t}"))),
                };
                let (arena_base, arena_size, recorded_sm) = (g.u64()?, g.u64()?, g.u32()?);
                let program = g.str()?;
                let whole_segments = if g.remaining() > 0 { flag(&mut g, "whole_segments")? } else { false };
                let gpu = if g.remaining() > 0 { Some(g.u32()?).filter(|&i| i != u32::MAX) } else { None };
                let devices = if g.remaining() > 0 { g.u32()? } else { 0 };
                let mut more_gpus = Vec::new();
                if g.remaining() > 0 {
                    for _ in 0..g.count(4)? {
                        more_gpus.push(g.u32()?);
                    }
                }
                Message::Hello(Hello {
                    protocol,
                    tool,
                    token,
                    partition,
                    priority,
                    arena_base,
                    arena_size,
                    recorded_sm,
                    program,
                    whole_segments,
                    gpu,
                    devices,
                    more_gpus,
                })
            }
            kind::WELCOME => {
                let (session, executor_pid, server) = (g.u64()?, g.u32()?, g.str()?);
                let partition = PartitionInfo::get(&mut g)?;
                let device = DeviceDescription::get(&mut g)?;
                let cached_execution = flag(&mut g, "cached_execution")?;
                let gpu = if g.remaining() > 0 { g.u32()? } else { 0 };
                let more = MoreDevices::get(&mut g)?;
                let rings = g.remaining() > 0 && flag(&mut g, "rings")?;
                Message::Welcome(Box::new(Welcome {
                    session,
                    executor_pid,
                    server,
                    partition,
                    device,
                    cached_execution,
                    gpu,
                    more,
                    rings,
                }))
            }
            kind::REFUSED | kind::ERROR => {
                let (code, message) = (g.u16()?, g.str()?);
                if kind == kind::REFUSED {
                    Message::Refused { code, message }
                } else {
                    Message::Error { code, message }
                }
            }
            kind::SEGMENT => {
                let records = g.take(g.remaining())?.to_vec();
                Message::Segment {
                    want_answer: flags & WANT_ANSWER != 0,
                    zstd: flags & crate::protocol::segment::ZSTD != 0,
                    records,
                }
            }
            kind::ANSWER => {
                let (through_seq, executed, exec_us) = (g.u64()?, g.u64()?, g.u64()?);
                let n = g.count(12)?;
                let mut outputs = Vec::with_capacity(n);
                for _ in 0..n {
                    outputs.push((g.u64()?, g.bytes()?.to_vec()));
                }
                let n = g.count(20)?;
                let mut errors = Vec::with_capacity(n);
                for _ in 0..n {
                    errors.push(CallError { seq: g.u64()?, function: g.str()?, code: g.i32()?, message: g.str()? });
                }
                let n = g.count(16)?;
                let mut queries = Vec::with_capacity(n);
                for _ in 0..n {
                    let (seq, status) = (g.u64()?, g.i32()?);
                    let k = g.count(8)?;
                    let mut values = Vec::with_capacity(k);
                    for _ in 0..k {
                        values.push(g.u64()?);
                    }
                    queries.push(QueryResult { seq, status, values });
                }
                let n = g.count(16)?;
                let mut pieces = Vec::with_capacity(n);
                for _ in 0..n {
                    pieces.push(Hash128(g.u128()?));
                }
                let printed = if g.remaining() > 0 { g.bytes()?.to_vec() } else { Vec::new() };
                Message::Answer(Answer { through_seq, executed, outputs, errors, exec_us, queries, pieces, printed })
            }
            kind::OUTPUT_PART => {
                let (seq, total, offset) = (g.u64()?, g.u64()?, g.u64()?);
                let bytes = g.take(g.remaining())?.to_vec();
                if offset.checked_add(bytes.len() as u64).is_none_or(|end| end > total) {
                    return Err(g.error(format!(
                        "part at {offset} of {} bytes lies outside the output's {total} bytes",
                        bytes.len()
                    )));
                }
                Message::OutputPart { seq, total, offset, bytes }
            }
            kind::HOST_CALL => {
                let n = g.count(8)?;
                let mut ids = Vec::with_capacity(n);
                for _ in 0..n {
                    ids.push(g.u64()?);
                }
                let n = g.count(12)?;
                let mut outputs = Vec::with_capacity(n);
                for _ in 0..n {
                    outputs.push((g.u64()?, g.bytes()?.to_vec()));
                }
                Message::HostCall(HostCall { ids, outputs })
            }
            kind::RING_OFFER => Message::RingOffer { capacity: g.u64()? },
            kind::RING_READY => Message::RingReady,
            kind::HOST_RETURNED => {
                let n = g.count(8)?;
                let mut ids = Vec::with_capacity(n);
                for _ in 0..n {
                    ids.push(g.u64()?);
                }
                let n = g.count(20)?;
                let mut data = Vec::with_capacity(n);
                for _ in 0..n {
                    data.push((g.u64()?, g.u64()?, g.bytes()?.to_vec()));
                }
                Message::HostReturned { ids, data }
            }
            kind::BLOB_QUERY => {
                let n = g.count(16)?;
                let mut hs = Vec::with_capacity(n);
                for _ in 0..n {
                    hs.push(Hash128(g.u128()?));
                }
                Message::BlobQuery(hs)
            }
            kind::BLOB_HAVE => {
                let n = g.count(1)?;
                let mut have = Vec::with_capacity(n);
                for _ in 0..n {
                    have.push(g.u8()? != 0);
                }
                Message::BlobHave(have)
            }
            kind::BLOB_DATA => {
                let (hash, total, offset) = (Hash128(g.u128()?), g.u64()?, g.u64()?);
                let bytes = g.take(g.remaining())?.to_vec();
                if offset.checked_add(bytes.len() as u64).is_none_or(|end| end > total) {
                    return Err(g.error(format!(
                        "part at {offset} of {} bytes lies outside the blob's {total} bytes",
                        bytes.len()
                    )));
                }
                Message::BlobData { hash, total, offset, bytes }
            }
            kind::BLOB_SHM => {
                let n = g.count(32)?;
                let mut es = Vec::with_capacity(n);
                for _ in 0..n {
                    let (h, off, len) = (Hash128(g.u128()?), g.u64()?, g.u64()?);
                    if off.checked_add(len).is_none() {
                        return Err(g.error(format!("a blob at {off} of {len} bytes overflows")));
                    }
                    es.push((h, off, len));
                }
                Message::BlobShm(es)
            }
            kind::CLOSE => Message::Close,
            kind::CLOSED => {
                let mut f = [0u64; 13];
                for x in &mut f {
                    *x = g.u64()?;
                }
                Message::Closed(SessionStats::from_fields(f))
            }
            kind::DEPLOY => Message::Deploy { name: g.str()?, hash: Hash128(g.u128()?), len: g.u64()? },
            kind::DEPLOYED => Message::Deployed { name: g.str()?, manifest: g.str()? },
            kind::INVOKE => {
                let name = g.str()?;
                let verify = flag(&mut g, "verify")?;
                Message::Invoke { name, verify, inputs: g.take(g.remaining())?.to_vec() }
            }
            kind::OUTPUTS => {
                let (prepare_us, run_us) = (g.u64()?, g.u64()?);
                let graph = flag(&mut g, "graph")?;
                let verified = g.u64()?;
                let n = g.count(4)?;
                let mut mismatches = Vec::with_capacity(n);
                for _ in 0..n {
                    mismatches.push(g.str()?);
                }
                let outputs = g.take(g.remaining())?.to_vec();
                Message::Outputs(Outputs { prepare_us, run_us, graph, verified, mismatches, outputs })
            }
            kind::PIECE => {
                let (key, first_seq, records) = (Hash128(g.u128()?), g.u64()?, g.u32()?);
                let n = g.count(24)?;
                let mut payloads = Vec::with_capacity(n);
                for _ in 0..n {
                    payloads.push(crate::model::BlobRef { hash: Hash128(g.u128()?), len: g.u64()? });
                }
                Message::Piece(crate::protocol::piece::PieceRef { key, first_seq, records, payloads })
            }
            k => return Err(ProtocolError::UnknownKind(k)),
        };
        g.end()?;
        Ok(m)
    }
}

/// A `u8` that must be 0 or 1.
pub(super) fn flag(g: &mut Get<'_>, what: &str) -> Result<bool, ProtocolError> {
    match g.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(g.error(format!("{what} flag {v} (0 or 1)"))),
    }
}
