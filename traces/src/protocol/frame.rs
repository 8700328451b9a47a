//! Frames: `u32 payload length | u16 kind | u16 flags`, little-endian, then the payload.

use std::io::{Read, Write};

use super::ProtocolError;

/// Bytes of a frame header.
pub const FRAME_HEADER_LEN: usize = 8;

/// Largest payload a frame may carry (64 MiB). Blobs larger than a frame travel in parts.
pub const MAX_FRAME: usize = 64 << 20;

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Payload bytes that follow.
    pub len: u32,
    /// The message kind.
    pub kind: u16,
    /// Per-kind flags.
    pub flags: u16,
}

impl FrameHeader {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; FRAME_HEADER_LEN] {
        let mut h = [0u8; FRAME_HEADER_LEN];
        h[..4].copy_from_slice(&self.len.to_le_bytes());
        h[4..6].copy_from_slice(&self.kind.to_le_bytes());
        h[6..].copy_from_slice(&self.flags.to_le_bytes());
        h
    }

    /// Decodes a header; a length over [`MAX_FRAME`] is an error.
    pub fn decode(h: [u8; FRAME_HEADER_LEN]) -> Result<Self, ProtocolError> {
        let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        if len as usize > MAX_FRAME {
            return Err(ProtocolError::Frame(format!("payload of {len} bytes announced, at most {MAX_FRAME} allowed")));
        }
        Ok(FrameHeader { len, kind: u16::from_le_bytes([h[4], h[5]]), flags: u16::from_le_bytes([h[6], h[7]]) })
    }
}

/// Reads one frame into `payload` (reused between calls). A connection closed before the
/// header's first byte is `Io(UnexpectedEof)`.
pub fn read_frame(r: &mut impl Read, payload: &mut Vec<u8>) -> Result<FrameHeader, ProtocolError> {
    let header = read_header(r)?;
    read_payload(r, header.len as usize, payload)?;
    Ok(header)
}

/// Reads a frame's header only (its payload follows; see [`read_payload`]).
pub fn read_header(r: &mut impl Read) -> Result<FrameHeader, ProtocolError> {
    let mut h = [0u8; FRAME_HEADER_LEN];
    r.read_exact(&mut h)?;
    FrameHeader::decode(h)
}

/// Reads `len` payload bytes into `payload` (its capacity reused, nothing zero-filled). The
/// buffer grows as bytes arrive: a header that announces more than the peer sends costs no
/// allocation of the announced size.
pub fn read_payload(r: &mut impl Read, len: usize, payload: &mut Vec<u8>) -> Result<(), ProtocolError> {
    payload.clear();
    payload.reserve(len.min(1 << 20));
    let got = r.take(len as u64).read_to_end(payload)?;
    if got != len {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("the connection closed after {got} of a frame's {len} bytes"),
        )
        .into());
    }
    Ok(())
}

/// Writes one frame (header and payload; the caller flushes).
pub fn write_frame(w: &mut impl Write, kind: u16, flags: u16, payload: &[u8]) -> Result<(), ProtocolError> {
    if payload.len() > MAX_FRAME {
        return Err(ProtocolError::Frame(format!("payload of {} bytes, at most {MAX_FRAME} allowed", payload.len())));
    }
    let h = FrameHeader { len: payload.len() as u32, kind, flags }.encode();
    w.write_all(&h)?;
    w.write_all(payload)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_absurd_lengths_are_refused() {
        let mut buf = Vec::new();
        write_frame(&mut buf, 7, 1, b"hello").unwrap();
        let mut payload = Vec::new();
        let h = read_frame(&mut buf.as_slice(), &mut payload).unwrap();
        assert_eq!((h.kind, h.flags, payload.as_slice()), (7, 1, &b"hello"[..]));
        let mut bad = FrameHeader { len: 0, kind: 1, flags: 0 }.encode();
        bad[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = read_frame(&mut bad.as_slice(), &mut payload).unwrap_err();
        assert!(e.to_string().contains("at most"), "{e}");
        // Cut inside the payload.
        let e = read_frame(&mut &buf[..10], &mut payload).unwrap_err();
        assert!(matches!(e, ProtocolError::Io(_)), "{e}");
    }
}
