//! Frame kinds.

/// [`super::Message::Hello`].
pub const HELLO: u16 = 1;
/// [`super::Message::Welcome`].
pub const WELCOME: u16 = 2;
/// [`super::Message::Refused`].
pub const REFUSED: u16 = 3;
/// [`super::Message::Segment`].
pub const SEGMENT: u16 = 4;
/// [`super::Message::Answer`].
pub const ANSWER: u16 = 5;
/// [`super::Message::BlobQuery`].
pub const BLOB_QUERY: u16 = 6;
/// [`super::Message::BlobHave`].
pub const BLOB_HAVE: u16 = 7;
/// [`super::Message::BlobData`].
pub const BLOB_DATA: u16 = 8;
/// [`super::Message::Close`].
pub const CLOSE: u16 = 9;
/// [`super::Message::Closed`].
pub const CLOSED: u16 = 10;
/// [`super::Message::Error`].
pub const ERROR: u16 = 11;
/// [`super::Message::BlobShm`].
pub const BLOB_SHM: u16 = 12;
/// [`super::Message::Deploy`].
pub const DEPLOY: u16 = 13;
/// [`super::Message::Deployed`].
pub const DEPLOYED: u16 = 14;
/// [`super::Message::Invoke`].
pub const INVOKE: u16 = 15;
/// [`super::Message::Outputs`].
pub const OUTPUTS: u16 = 16;
/// [`super::Message::Piece`].
pub const PIECE: u16 = 17;
/// [`super::Message::OutputPart`].
pub const OUTPUT_PART: u16 = 18;
/// [`super::Message::HostCall`].
pub const HOST_CALL: u16 = 19;
/// [`super::Message::HostReturned`].
pub const HOST_RETURNED: u16 = 20;
/// [`super::Message::RingOffer`].
pub const RING_OFFER: u16 = 21;
/// [`super::Message::RingReady`].
pub const RING_READY: u16 = 22;

/// The name of frame kind `k`.
pub fn kind_name(k: u16) -> &'static str {
    match k {
        HELLO => "Hello",
        WELCOME => "Welcome",
        REFUSED => "Refused",
        SEGMENT => "Segment",
        ANSWER => "Answer",
        BLOB_QUERY => "BlobQuery",
        BLOB_HAVE => "BlobHave",
        BLOB_DATA => "BlobData",
        CLOSE => "Close",
        CLOSED => "Closed",
        ERROR => "Error",
        BLOB_SHM => "BlobShm",
        DEPLOY => "Deploy",
        DEPLOYED => "Deployed",
        INVOKE => "Invoke",
        OUTPUTS => "Outputs",
        PIECE => "Piece",
        OUTPUT_PART => "OutputPart",
        HOST_CALL => "HostCall",
        HOST_RETURNED => "HostReturned",
        RING_OFFER => "RingOffer",
        RING_READY => "RingReady",
        _ => "unknown",
    }
}
