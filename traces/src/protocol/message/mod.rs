//! The messages of a session, their kinds and payload layouts (docs/PROTOCOL.md).

use super::codec::{Get, Put};
use super::{ProtocolError, HELLO_MAGIC};
use crate::model::Hash128;

mod decode;
use decode::flag;
mod device;
pub use device::{DeviceDescription, MoreDevices, NvLinkFact, NvmlFacts, PartitionInfo, PeerFact, NVML_P2P_STATUS};

/// Which part of a GPU a session asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartitionRequest {
    /// The whole GPU, exclusively.
    Whole,
    /// A MIG profile by name (`3g.71gb`) or id (`9`): a MIG instance where MIG is on, else a
    /// soft partition of the profile's SMs and memory.
    Profile(String),
    /// A soft partition (green context) of at least this many SMs.
    Sms(u32),
}

impl PartitionRequest {
    /// Parses `whole`, `sms:N` or a profile name/id.
    pub fn parse(s: &str) -> Self {
        match s {
            "" | "whole" | "full" => PartitionRequest::Whole,
            _ => match s.strip_prefix("sms:").and_then(|n| n.parse().ok()) {
                Some(n) => PartitionRequest::Sms(n),
                None => PartitionRequest::Profile(s.to_string()),
            },
        }
    }
}

impl std::fmt::Display for PartitionRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PartitionRequest::Whole => write!(f, "whole"),
            PartitionRequest::Profile(p) => write!(f, "{p}"),
            PartitionRequest::Sms(n) => write!(f, "sms:{n}"),
        }
    }
}

/// A session's priority class, kept by the executor's queue and reported in the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Priority {
    /// Interactive work: served first.
    LatencyCritical,
    /// Batch work that may be preempted.
    BestEffort,
}

impl Priority {
    /// The metrics label.
    pub fn name(self) -> &'static str {
        match self {
            Priority::LatencyCritical => "latency-critical",
            Priority::BestEffort => "best-effort",
        }
    }
}

/// The client's first message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// [`super::PROTOCOL_VERSION`] of the client.
    pub protocol: u16,
    /// The client's tool version (`gpuless 0.1.0`).
    pub tool: String,
    /// The server's access token (empty when the server needs none).
    pub token: String,
    /// The partition asked for.
    pub partition: PartitionRequest,
    /// Priority class.
    pub priority: Priority,
    /// The client's arena: addresses it allocates from (`traces::arena`).
    pub arena_base: u64,
    /// Its size.
    pub arena_size: u64,
    /// SM of the GPU the client's code was chosen for (0: not known).
    pub recorded_sm: u32,
    /// What the client runs (a label for logs and metrics; `function:NAME` announces a
    /// function session, and with warm constants on a server keeps a session's uploads for
    /// the next session of the same program).
    pub program: String,
    /// The client sends each synchronization's records in one segment, not as a program makes
    /// them (a trace replayer, `replay --remote`): a piece held within a segment keeps no GPU
    /// waiting, so a server whose cached execution is `auto` (the default) runs this session's
    /// repeated pieces as graphs. A trailing byte of the payload, absent from older clients
    /// (false).
    pub whole_segments: bool,
    /// The server's GPU the session asks for (its index, as `gpuless devices` and the metrics
    /// number them); `None`: wherever the server places it (docs/PROTOCOL.md, placement). A
    /// trailing field: a Hello without it asks for none in particular.
    pub gpu: Option<u32>,
    /// How many devices the session asks for (0 or 1: one); the program sees them as devices
    /// 0.. (docs/PROTOCOL.md, "A session of several GPUs"). A trailing field.
    pub devices: u32,
    /// The server's GPUs it names for its devices 1.. (`gpu` names device 0's); empty: wherever
    /// the server places them. A trailing field.
    pub more_gpus: Vec<u32>,
}

/// The server's answer to [`Hello`]: the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    /// Session id (in the server's logs and metrics).
    pub session: u64,
    /// The executor process serving it.
    pub executor_pid: u32,
    /// The server's tool version.
    pub server: String,
    /// The partition granted.
    pub partition: PartitionInfo,
    /// The device as the session sees it.
    pub device: DeviceDescription,
    /// Whether the executor runs repeated pieces as graphs (cached-trace execution): then the
    /// client may send pieces it names by reference ([`Answer::pieces`]).
    pub cached_execution: bool,
    /// The server's GPU the session runs on (its index). A trailing field: 0 where absent.
    pub gpu: u32,
    /// The session's further devices (a session of several GPUs). A trailing field: none
    /// where absent.
    pub more: MoreDevices,
    /// Whether the executor takes a [`Message::RingOffer`] (a session on a Unix socket: frames
    /// through shared memory, [`super::ring`]). A trailing field: false where absent.
    pub rings: bool,
}

/// A call that failed on the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallError {
    /// Sequence number of the call.
    pub seq: u64,
    /// Its driver function.
    pub function: String,
    /// `CUresult` (or 999 for a failure that is not the driver's).
    pub code: i32,
    /// The executor's message.
    pub message: String,
}

/// What the server returns at a synchronization point.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Answer {
    /// Sequence number of the last record executed.
    pub through_seq: u64,
    /// Records executed since the last answer.
    pub executed: u64,
    /// Device-to-host bytes since the last answer: (sequence number of the copy, bytes).
    pub outputs: Vec<(u64, Vec<u8>)>,
    /// Calls that failed since the last answer (an asynchronous error arrives here, at the next
    /// synchronization, as the driver reports it).
    pub errors: Vec<CallError>,
    /// Microseconds the executor spent on the segments since the last answer.
    pub exec_us: u64,
    /// Answers to the state queries since the last answer (event timings, stream and event
    /// status, free memory), in call order.
    pub queries: Vec<QueryResult>,
    /// Keys of pieces the executor captured as graphs since the last answer (cached-trace
    /// execution, [`super::piece`]): the client may send such a piece as a
    /// [`Message::Piece`] from now on.
    pub pieces: Vec<Hash128>,
    /// What the session's kernels printed (device `printf`) since the last answer, flushed by
    /// the synchronizations it answers: the client writes it to the program's stdout. A
    /// trailing field: an answer without it decodes with none.
    pub printed: Vec<u8>,
}

/// What the driver said to a state query: its status (`CUresult`) and its out values in the
/// order of the function's out arguments in the API table (a `float` as its bits).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueryResult {
    /// Sequence number of the query.
    pub seq: u64,
    /// The driver's status.
    pub status: i32,
    /// The out values.
    pub values: Vec<u64>,
}

/// A session's totals, sent when it closes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SessionStats {
    /// Records received.
    pub records: u64,
    /// Records executed.
    pub executed: u64,
    /// Kernel launches.
    pub launches: u64,
    /// Segments received.
    pub segments: u64,
    /// Answers sent.
    pub answers: u64,
    /// Blob bytes received from the client.
    pub blob_bytes_received: u64,
    /// Blobs the client asked about that the server held.
    pub blob_hits: u64,
    /// Blobs it did not.
    pub blob_misses: u64,
    /// Peak device memory of the session.
    pub peak_memory: u64,
    /// Cached-trace execution: pieces (runs of launches, copies and sets;
    /// [`super::piece`]) launched as a graph captured before, captured (and launched) this
    /// time, and run record by record; records in the graph launches.
    pub pieces_graph: u64,
    /// See `pieces_graph`.
    pub pieces_captured: u64,
    /// See `pieces_graph`.
    pub pieces_eager: u64,
    /// See `pieces_graph`.
    pub records_graph: u64,
}

impl SessionStats {
    fn fields(&self) -> [u64; 13] {
        [
            self.records,
            self.executed,
            self.launches,
            self.segments,
            self.answers,
            self.blob_bytes_received,
            self.blob_hits,
            self.blob_misses,
            self.peak_memory,
            self.pieces_graph,
            self.pieces_captured,
            self.pieces_eager,
            self.records_graph,
        ]
    }
    fn from_fields(f: [u64; 13]) -> Self {
        let [records, executed, launches, segments, answers, blob_bytes_received, blob_hits, blob_misses, peak_memory, pieces_graph, pieces_captured, pieces_eager, records_graph] =
            f;
        SessionStats {
            records,
            executed,
            launches,
            segments,
            answers,
            blob_bytes_received,
            blob_hits,
            blob_misses,
            peak_memory,
            pieces_graph,
            pieces_captured,
            pieces_eager,
            records_graph,
        }
    }
}

/// The server's answer to [`Message::Invoke`]: one invocation of a deployed function.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outputs {
    /// Microseconds the executor spent reading and setting up the function before this
    /// invocation (0 when the session had it set up already: the hot path).
    pub prepare_us: u64,
    /// Microseconds of the invocation itself (inputs written, the body run, outputs ready).
    pub run_us: u64,
    /// Whether the body ran as one CUDA graph (else record by record).
    pub graph: bool,
    /// Outputs of this invocation compared with the recording and equal (only with `verify`).
    pub verified: u64,
    /// Outputs that differ from the recording, in words.
    pub mismatches: Vec<String>,
    /// Every output of the function, back to back in signature order.
    pub outputs: Vec<u8>,
}

/// Why the server refused or ended a session ([`Message::Refused`], [`Message::Error`]).
pub mod code {
    /// Another protocol version.
    pub const VERSION: u16 = 1;
    /// Wrong or missing token.
    pub const AUTH: u16 = 2;
    /// No partition of the server can ever fit the request.
    pub const NO_PARTITION: u16 = 3;
    /// The admission queue is full or the wait timed out.
    pub const BUSY: u16 = 4;
    /// The server is shutting down.
    pub const DRAINING: u16 = 5;
    /// A message the server could not decode or does not allow here.
    pub const BAD_MESSAGE: u16 = 6;
    /// The executor failed (crash, fault, lost GPU).
    pub const EXECUTOR: u16 = 7;
    /// The session was idle too long.
    pub const IDLE: u16 = 8;
    /// A record the executor cannot run (unknown handle, memory outside the session, ...).
    pub const BAD_RECORD: u16 = 9;
    /// A function request the server refuses: a name not deployed or not allowed, a deployed
    /// blob that is not a function file, inputs of the wrong size.
    pub const FUNCTION: u16 = 10;
}

/// One message of the protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// Client → server: open a session.
    Hello(Hello),
    /// Server → client: the session.
    Welcome(Box<Welcome>),
    /// Server → client: no session (a [`code`] and why); the connection closes.
    Refused {
        /// A [`code`].
        code: u16,
        /// The reason and the fix.
        message: String,
    },
    /// Client → server: call records (a trace call batch) to execute in order.
    Segment {
        /// Whether the server answers after executing it (a synchronization point).
        want_answer: bool,
        /// Whether `records` is a zstd frame of the batch (frame flag
        /// [`super::segment::ZSTD`]).
        zstd: bool,
        /// The records, encoded as a trace call batch (`docs/TRACE_FORMAT.md`).
        records: Vec<u8>,
    },
    /// Server → client: the results since the last answer.
    Answer(Answer),
    /// Client → server: which of these blobs does the server hold?
    BlobQuery(Vec<Hash128>),
    /// Server → client: one flag per queried hash.
    BlobHave(Vec<bool>),
    /// Client → server: bytes of a blob (whole or a part).
    BlobData {
        /// The blob's content hash (checked by the server).
        hash: Hash128,
        /// Its whole length.
        total: u64,
        /// Where this part starts.
        offset: u64,
        /// The part.
        bytes: Vec<u8>,
    },
    /// Client → server, on a Unix socket only: blobs in the sealed memfd that travels with this
    /// frame (SCM_RIGHTS; [`super::shm`]): (hash, offset in the memfd, length) each. The
    /// server answers [`Message::BlobHave`], one flag per entry, once it holds them.
    BlobShm(Vec<(Hash128, u64, u64)>),
    /// Client → server: end the session.
    Close,
    /// Server → client: the session ended normally.
    Closed(SessionStats),
    /// Server → client: the session ended with an error.
    Error {
        /// A [`code`].
        code: u16,
        /// What happened.
        message: String,
    },
    /// Client → server: register the function file whose bytes are blob `hash` (already sent
    /// with [`Message::BlobData`] or held by the server's cache) under `name`.
    Deploy {
        /// The function's name (`[A-Za-z0-9._-]{1,64}`).
        name: String,
        /// The function file's content hash.
        hash: Hash128,
        /// Its length.
        len: u64,
    },
    /// Server → client: the function is registered.
    Deployed {
        /// Its name.
        name: String,
        /// Its manifest (JSON): signature, kernels, records.
        manifest: String,
    },
    /// Client → server: run the function deployed as `name` once.
    Invoke {
        /// The function's name.
        name: String,
        /// Compare the outputs with the recording (meaningful with the recorded inputs).
        verify: bool,
        /// Every input, back to back in signature order; empty: the recorded inputs.
        inputs: Vec<u8>,
    },
    /// Server → client: the invocation's outputs.
    Outputs(Outputs),
    /// Client → server: a piece of records the executor holds as a graph
    /// ([`Answer::pieces`]), by key, in place of its records.
    Piece(super::piece::PieceRef),
    /// Server → client, before the [`Message::Answer`] it belongs to: part of a device-to-host
    /// result too large to travel inside the answer's frame (the answer lists the rest).
    OutputPart {
        /// Sequence number of the copy.
        seq: u64,
        /// The result's whole length.
        total: u64,
        /// Where this part starts.
        offset: u64,
        /// The part.
        bytes: Vec<u8>,
    },
    /// Server → client, unasked, at any time: the session's host functions that the server
    /// reached in stream (or graph) order, to run on the client now
    /// ([`HostCall`]). The client answers with [`Message::HostReturned`] once they returned.
    HostCall(HostCall),
    /// Client → server: the host functions of a [`Message::HostCall`] (their ids) returned;
    /// the work after them may start. `data`: the bytes a late read among them read, by id
    /// and offset (a host-to-device copy from host memory behind a host function, whose source
    /// the client reads when the copy is reached, as the device would). Parts of a large read
    /// come first in frames without ids; the frame with the ids ends the reply.
    HostReturned {
        /// The ids, as called (empty: a frame of data parts only).
        ids: Vec<u64>,
        /// (id, offset, bytes) of late reads among them.
        data: Vec<(u64, u64, Vec<u8>)>,
    },
    /// Client → executor, on a Unix socket after the [`Welcome`] (which said `rings`), with a
    /// memfd attached: frames from now on go through the two rings of `capacity` bytes it holds
    /// ([`super::ring`]). The client sends nothing more until [`Message::RingReady`].
    RingOffer {
        /// Bytes of each direction's ring.
        capacity: u64,
    },
    /// Executor → client, the last frame on the socket: every later frame, each way, goes
    /// through the rings.
    RingReady,
}

/// Host functions the server reached, with the device-to-host results that came before them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HostCall {
    /// Each host function's id: the sequence number of the record that registered it (a
    /// `cuLaunchHostFunc`, `cuStreamAddCallback` or `cuGraphAddHostNode`), in the order
    /// they are to run.
    pub ids: Vec<u64>,
    /// Device-to-host bytes executed before them and not yet answered: (sequence number of
    /// the copy, bytes), as in [`Answer::outputs`]. A later answer does not repeat them.
    pub outputs: Vec<(u64, Vec<u8>)>,
}

pub mod kind;
pub use kind::kind_name;

/// Flag of a segment frame: answer after it.
pub const WANT_ANSWER: u16 = 1;

impl Message {
    /// The message's name, for errors and logs.
    pub fn name(&self) -> &'static str {
        kind_name(self.kind())
    }

    /// The frame kind.
    pub fn kind(&self) -> u16 {
        match self {
            Message::Hello(_) => kind::HELLO,
            Message::Welcome(_) => kind::WELCOME,
            Message::Refused { .. } => kind::REFUSED,
            Message::Segment { .. } => kind::SEGMENT,
            Message::Answer(_) => kind::ANSWER,
            Message::BlobQuery(_) => kind::BLOB_QUERY,
            Message::BlobHave(_) => kind::BLOB_HAVE,
            Message::BlobData { .. } => kind::BLOB_DATA,
            Message::BlobShm(_) => kind::BLOB_SHM,
            Message::Close => kind::CLOSE,
            Message::Closed(_) => kind::CLOSED,
            Message::Error { .. } => kind::ERROR,
            Message::Deploy { .. } => kind::DEPLOY,
            Message::Deployed { .. } => kind::DEPLOYED,
            Message::Invoke { .. } => kind::INVOKE,
            Message::Outputs(_) => kind::OUTPUTS,
            Message::Piece(_) => kind::PIECE,
            Message::OutputPart { .. } => kind::OUTPUT_PART,
            Message::HostCall(_) => kind::HOST_CALL,
            Message::HostReturned { .. } => kind::HOST_RETURNED,
            Message::RingOffer { .. } => kind::RING_OFFER,
            Message::RingReady => kind::RING_READY,
        }
    }

    /// The frame flags.
    pub fn flags(&self) -> u16 {
        match self {
            Message::Segment { want_answer, zstd, .. } => {
                (if *want_answer { WANT_ANSWER } else { 0 }) | if *zstd { super::segment::ZSTD } else { 0 }
            }
            _ => 0,
        }
    }

    /// Encodes the payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut p = Put::default();
        match self {
            Message::Hello(h) => {
                p.u32(HELLO_MAGIC).u16(h.protocol).str(&h.tool).str(&h.token);
                match &h.partition {
                    PartitionRequest::Whole => p.u8(0),
                    PartitionRequest::Profile(s) => p.u8(1).str(s),
                    PartitionRequest::Sms(n) => p.u8(2).u32(*n),
                };
                p.u8(match h.priority {
                    Priority::LatencyCritical => 0,
                    Priority::BestEffort => 1,
                });
                p.u64(h.arena_base).u64(h.arena_size).u32(h.recorded_sm).str(&h.program);
                p.u8(u8::from(h.whole_segments));
                p.u32(h.gpu.unwrap_or(u32::MAX)).u32(h.devices).u32(h.more_gpus.len() as u32);
                for g in &h.more_gpus {
                    p.u32(*g);
                }
            }
            Message::Welcome(w) => {
                p.u64(w.session).u32(w.executor_pid).str(&w.server);
                w.partition.put(&mut p);
                w.device.put(&mut p);
                p.u8(u8::from(w.cached_execution));
                p.u32(w.gpu);
                w.more.put(&mut p);
                p.u8(u8::from(w.rings));
            }
            Message::Refused { code, message } | Message::Error { code, message } => {
                p.u16(*code).str(message);
            }
            Message::Segment { records, .. } => p.0.extend_from_slice(records),
            Message::Answer(a) => {
                p.u64(a.through_seq).u64(a.executed).u64(a.exec_us).u32(a.outputs.len() as u32);
                for (seq, bytes) in &a.outputs {
                    p.u64(*seq).bytes(bytes);
                }
                p.u32(a.errors.len() as u32);
                for e in &a.errors {
                    p.u64(e.seq).str(&e.function).i32(e.code).str(&e.message);
                }
                p.u32(a.queries.len() as u32);
                for q in &a.queries {
                    p.u64(q.seq).i32(q.status).u32(q.values.len() as u32);
                    for v in &q.values {
                        p.u64(*v);
                    }
                }
                p.u32(a.pieces.len() as u32);
                for k in &a.pieces {
                    p.u128(k.0);
                }
                p.bytes(&a.printed);
            }
            Message::OutputPart { seq, total, offset, bytes } => {
                p.u64(*seq).u64(*total).u64(*offset);
                p.0.extend_from_slice(bytes);
            }
            Message::HostCall(c) => {
                p.u32(c.ids.len() as u32);
                for id in &c.ids {
                    p.u64(*id);
                }
                p.u32(c.outputs.len() as u32);
                for (seq, bytes) in &c.outputs {
                    p.u64(*seq).bytes(bytes);
                }
            }
            Message::RingOffer { capacity } => {
                p.u64(*capacity);
            }
            Message::RingReady => {}
            Message::HostReturned { ids, data } => {
                p.u32(ids.len() as u32);
                for id in ids {
                    p.u64(*id);
                }
                p.u32(data.len() as u32);
                for (id, offset, bytes) in data {
                    p.u64(*id).u64(*offset).bytes(bytes);
                }
            }
            Message::BlobQuery(hs) => {
                p.u32(hs.len() as u32);
                for h in hs {
                    p.u128(h.0);
                }
            }
            Message::BlobHave(have) => {
                p.u32(have.len() as u32);
                for h in have {
                    p.u8(u8::from(*h));
                }
            }
            Message::BlobData { hash, total, offset, bytes } => {
                p.u128(hash.0).u64(*total).u64(*offset);
                p.0.extend_from_slice(bytes);
            }
            Message::BlobShm(es) => {
                p.u32(es.len() as u32);
                for (h, off, len) in es {
                    p.u128(h.0).u64(*off).u64(*len);
                }
            }
            Message::Close => {}
            Message::Closed(s) => {
                for f in s.fields() {
                    p.u64(f);
                }
            }
            Message::Deploy { name, hash, len } => {
                p.str(name).u128(hash.0).u64(*len);
            }
            Message::Deployed { name, manifest } => {
                p.str(name).str(manifest);
            }
            Message::Invoke { name, verify, inputs } => {
                p.str(name).u8(u8::from(*verify));
                p.0.extend_from_slice(inputs);
            }
            Message::Outputs(o) => {
                p.u64(o.prepare_us).u64(o.run_us).u8(u8::from(o.graph)).u64(o.verified);
                p.u32(o.mismatches.len() as u32);
                for m in &o.mismatches {
                    p.str(m);
                }
                p.0.extend_from_slice(&o.outputs);
            }
            Message::Piece(r) => {
                p.u128(r.key.0).u64(r.first_seq).u32(r.records).u32(r.payloads.len() as u32);
                for b in &r.payloads {
                    p.u128(b.hash.0).u64(b.len);
                }
            }
        }
        p.0
    }
}

/// A [`Message::BlobData`] payload read in place: (hash, total length, offset, the part's
/// bytes), with the same checks as [`Message::decode`] and no copy of the bytes.
pub fn blob_part(payload: &[u8]) -> Result<(Hash128, u64, u64, &[u8]), ProtocolError> {
    let mut g = Get::new(payload, "BlobData");
    let (hash, total, offset) = (Hash128(g.u128()?), g.u64()?, g.u64()?);
    let bytes = g.take(g.remaining())?;
    if offset.checked_add(bytes.len() as u64).is_none_or(|end| end > total) {
        return Err(g.error(format!("part at {offset} of {} bytes lies outside the blob's {total} bytes", bytes.len())));
    }
    Ok((hash, total, offset, bytes))
}

/// A [`Message::Invoke`] payload read in place: (name, verify, the inputs' bytes), with the
/// same checks as [`Message::decode`] and no copy of the inputs.
pub fn invoke_request(payload: &[u8]) -> Result<(String, bool, &[u8]), ProtocolError> {
    let mut g = Get::new(payload, "Invoke");
    let name = g.str()?;
    let verify = flag(&mut g, "verify")?;
    Ok((name, verify, g.take(g.remaining())?))
}

#[cfg(test)]
mod tests;
