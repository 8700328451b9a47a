//! The gpuless wire protocol between clients and `gpuless serve` (docs/PROTOCOL.md).
//!
//! A connection carries length-prefixed frames ([`frame`]); each frame holds one [`Message`]
//! ([`message`]). The client speaks first with [`Hello`]; the server answers [`Welcome`] (a
//! session on a partition, with the full [`DeviceDescription`]) or [`Message::Refused`]. Then
//! the client streams [`Message::Segment`]s — call records in the trace format, with the
//! client's own addresses and handle numbers — without waiting, and waits only for the
//! [`Message::Answer`] that a segment marked `want_answer` produces. Blobs (code images,
//! host-to-device payloads) travel by content hash: [`Message::BlobQuery`] asks which the
//! server holds, [`Message::BlobData`] sends the bytes of the others. A function file
//! (`gpuless compile`) uploaded as a blob is registered under a name with [`Message::Deploy`]
//! and run with [`Message::Invoke`], which the server answers with its [`Outputs`]. A client's
//! JIT link travels as records of gpuless's own, one per step, an add answered with the driver's
//! status, a completion with the linked image too ([`link`]).
//!
//! Everything here is plain `std` I/O and total decoding (every decoder returns a
//! [`ProtocolError`] on bad input), so the server, its executors and every client share it.

pub mod client;
pub mod codec;
pub mod frame;
pub mod link;
pub mod message;
pub mod piece;
pub mod ring;
pub mod segment;
pub mod share;
pub mod shm;
pub mod stream;
pub mod tls;

pub use client::{connect, Connection, Endpoint, Traffic};
pub use frame::{read_frame, read_header, read_payload, write_frame, FrameHeader, FRAME_HEADER_LEN, MAX_FRAME};
pub use message::{
    Answer, CallError, DeviceDescription, Hello, HostCall, Message, MoreDevices, NvLinkFact, NvmlFacts, Outputs,
    PartitionInfo, PartitionRequest, PeerFact, Priority, QueryResult, SessionStats, Welcome, NVML_P2P_STATUS,
};

/// The protocol version this build speaks. A server refuses any other.
pub const PROTOCOL_VERSION: u16 = 6;

/// Magic at the start of a [`Hello`]: "GLSP" (gpuless session protocol).
pub const HELLO_MAGIC: u32 = 0x5053_4c47;

/// Errors of the protocol: I/O, bad frames, bad messages.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// The connection failed or closed.
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    /// A frame longer than [`MAX_FRAME`] or shorter than its header says.
    #[error("bad frame: {0}")]
    Frame(String),
    /// A frame whose payload does not decode as its message kind.
    #[error("bad {kind} message at byte {offset} of its payload: {reason}")]
    Message {
        /// The message kind's name.
        kind: &'static str,
        /// Offset in the payload.
        offset: usize,
        /// What is wrong.
        reason: String,
    },
    /// A message kind this version does not know.
    #[error("unknown message kind {0}")]
    UnknownKind(u16),
    /// The peer answered with something the exchange does not allow here.
    #[error("unexpected {got} (expected {expected})")]
    Unexpected {
        /// What was expected.
        expected: &'static str,
        /// What came.
        got: &'static str,
    },
    /// The server refused or ended the session.
    #[error("the server {0}")]
    Server(String),
    /// TLS could not be set up: the CA file, the server's certificate, the handshake.
    #[error("{0}")]
    Tls(String),
}
