//! The bytes a record names in the trace's blob store: a stored argument (`blob`), and the code
//! image of a load from a file (`file_image`).

use gpuless_traces::Value;

use super::args::Call;
use super::{LoadedTrace, ReplayError};

/// The stored bytes of argument value `v` (a blob of the trace, of the recorded length).
pub(crate) fn blob<'t>(trace: &'t LoadedTrace, c: &Call<'_>, v: Option<&Value>) -> Result<&'t [u8], ReplayError> {
    match v {
        Some(Value::Blob(b)) => trace
            .blobs
            .get(&b.hash)
            .map(|d| &**d)
            .filter(|d| d.len() as u64 == b.len)
            .ok_or_else(|| c.inconsistent(format!("blob {} ({} bytes) missing from the trace", b.hash, b.len))),
        other => Err(c.inconsistent(format!("expected stored bytes, found {other:?}"))),
    }
}

/// The code image of a load from a file: the recorder stored the file's bytes with its path.
pub(super) fn file_image<'t>(trace: &'t LoadedTrace, c: &Call<'_>, arg: &str) -> Result<&'t [u8], ReplayError> {
    match c.arg(arg) {
        Some(Value::List(items)) => blob(trace, c, items.get(1)),
        Some(Value::Str(path)) => {
            Err(c.inconsistent(format!("the recorder could not read {path}: the code image is not in the trace")))
        }
        other => Err(c.inconsistent(format!("expected a file's stored bytes, found {other:?}"))),
    }
}
