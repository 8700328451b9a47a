//! Segments: call records in the trace format's call-batch encoding, as they travel. A batch
//! larger than [`COMPRESS_ABOVE`] travels as one zstd frame (flag [`ZSTD`]): a program's set-up
//! is tens of thousands of records, a hot segment a few hundred.

use crate::decode::{decode_calls, Ctx};
use crate::encode::CallBatchEncoder;
use crate::model::CallRecord;
use crate::TraceError;

/// Encodes records as a call batch.
pub fn encode(records: &[CallRecord]) -> Vec<u8> {
    let mut e = CallBatchEncoder::new();
    for r in records {
        e.push(r);
    }
    e.finish()
}

/// Decodes a segment's records (verified flatbuffer; an error on bad bytes). `ordinal` is the
/// segment's number in its session, named in errors.
pub fn decode(bytes: &[u8], ordinal: u64) -> Result<Vec<CallRecord>, TraceError> {
    decode_calls(bytes, Ctx { chunk: ordinal, offset: 0 })
}

/// Segment frame flag: the payload is a zstd frame of the call batch.
pub const ZSTD: u16 = 2;
/// Batches larger than this are compressed.
pub const COMPRESS_ABOVE: usize = 16 << 10;
/// Largest call batch a compressed segment may expand to.
pub const MAX_BATCH: usize = 256 << 20;

thread_local! {
    /// One compression and one decompression context per thread: making a zstd context costs
    /// more than compressing a hot segment of a few hundred records.
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> = const { std::cell::RefCell::new(None) };
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { std::cell::RefCell::new(None) };
}

/// A call batch as it goes on the wire: (frame flags besides `WANT_ANSWER`, payload).
pub fn wire(batch: Vec<u8>) -> (u16, Vec<u8>) {
    if batch.len() > COMPRESS_ABOVE {
        let z = COMPRESSOR.with(|c| {
            let mut c = c.try_borrow_mut().ok()?;
            if c.is_none() {
                *c = zstd::bulk::Compressor::new(1).ok();
            }
            c.as_mut()?.compress(&batch).ok()
        });
        if let Some(z) = z {
            if z.len() < batch.len() {
                return (ZSTD, z);
            }
        }
    }
    (0, batch)
}

/// The call batch of a segment frame's payload (decompressed, within [`MAX_BATCH`], when
/// `flags` has [`ZSTD`]).
pub fn unwire(flags: u16, payload: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, String> {
    if flags & ZSTD == 0 {
        return Ok(std::borrow::Cow::Borrowed(payload));
    }
    let out = DECOMPRESSOR.with(|d| {
        let mut d = d.try_borrow_mut().map_err(|e| std::io::Error::other(e.to_string()))?;
        if d.is_none() {
            *d = Some(zstd::bulk::Decompressor::new()?);
        }
        // The frame says its size (zstd's bulk compressor writes it): allocate that, not the
        // bound, so a small segment does not map and unmap 256 MiB.
        let size = match zstd::zstd_safe::get_frame_content_size(payload) {
            Ok(Some(n)) if n <= MAX_BATCH as u64 => n as usize,
            Ok(Some(_)) => return Err(std::io::Error::other("larger than the bound")),
            _ => MAX_BATCH,
        };
        match d.as_mut() {
            Some(d) => d.decompress(payload, size),
            None => Err(std::io::Error::other("no zstd context")),
        }
    });
    out.map(std::borrow::Cow::Owned)
        .map_err(|e| format!("compressed segment does not expand within {MAX_BATCH} bytes: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_batches_are_compressed_and_come_back() {
        let small = vec![1u8; 100];
        assert_eq!(wire(small.clone()), (0, small.clone()));
        let big: Vec<u8> = (0..100_000u32).map(|i| (i % 7) as u8).collect();
        let (f, z) = wire(big.clone());
        assert_eq!(f, ZSTD);
        assert!(z.len() < big.len() / 10);
        assert_eq!(unwire(f, &z).unwrap().as_ref(), big.as_slice());
        assert!(unwire(ZSTD, b"not zstd").is_err());
    }
}
