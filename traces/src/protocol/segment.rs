//! Segments: call records in the trace format's call-batch encoding, as they travel.

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
