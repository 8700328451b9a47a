//! Flatbuffers → owned records, after verification. Never panics on bad input.

use flatbuffers::{Follow, Verifiable, VerifierOptions};
use gpuless_analyzer::api::{ApiLevel, HandleKind, Variant};

use crate::error::TraceError;
use crate::generated::fb;
use crate::model::{
    BlobKind, BlobLocation, BlobPart, BlobRef, CallRecord, ChunkEntry, Dim3, Function, Hash128, KernelParams,
    LaunchAttr, LaunchConfig, TraceIndex, TraceMeta, Value,
};

/// Where a payload came from, for error messages.
#[derive(Debug, Clone, Copy)]
pub struct Ctx {
    /// Chunk ordinal.
    pub chunk: u64,
    /// Offset of the chunk header.
    pub offset: u64,
}

impl Ctx {
    fn corrupt(&self, reason: impl Into<String>) -> TraceError {
        TraceError::Corrupt { chunk: self.chunk, offset: self.offset, reason: reason.into() }
    }
}

fn verify<'a, T: Follow<'a> + Verifiable + 'a>(buf: &'a [u8], ctx: Ctx) -> Result<T::Inner, TraceError> {
    // Every table takes at least 4 bytes, so this bounds the work (and the owned output) by the
    // buffer size even when offsets are shared.
    let opts = VerifierOptions {
        max_depth: 64,
        max_tables: buf.len() / 4 + 64,
        max_apparent_size: 1 << 31,
        ignore_missing_null_terminator: false,
    };
    flatbuffers::root_with_opts::<T>(&opts, buf).map_err(|e| ctx.corrupt(format!("flatbuffer: {e}")))
}

fn hash(h: Option<&fb::Hash128>) -> Hash128 {
    match h {
        Some(h) => Hash128(u128::from(h.lo()) | (u128::from(h.hi()) << 64)),
        None => Hash128(0),
    }
}

fn dim(d: Option<&fb::Dim3>) -> Dim3 {
    match d {
        Some(d) => Dim3 { x: d.x(), y: d.y(), z: d.z() },
        None => Dim3::default(),
    }
}

/// Decode the header metadata flatbuffer.
pub fn decode_meta(buf: &[u8]) -> Result<TraceMeta, TraceError> {
    let ctx = Ctx { chunk: 0, offset: 0 };
    let h = verify::<fb::TraceHeader>(buf, ctx)
        .map_err(|e| TraceError::BadHeader { offset: crate::format::FILE_HEADER_LEN as u64, reason: e.to_string() })?;
    Ok(TraceMeta {
        tool_version: h.tool_version().unwrap_or_default().to_string(),
        driver_version: h.driver_version(),
        cuda_version: h.cuda_version(),
        gpu_name: h.gpu_name().unwrap_or_default().to_string(),
        sm: h.sm(),
        uuid: h.uuid().map(|v| v.bytes().to_vec()).unwrap_or_default(),
        command_line: h.command_line().map(|v| v.iter().map(str::to_string).collect()).unwrap_or_default(),
        start_time_unix_ns: h.start_time_unix_ns(),
        arena_base: h.arena_base(),
        arena_size: h.arena_size(),
        pid: h.pid(),
        hostname: h.hostname().unwrap_or_default().to_string(),
        extra: h
            .extra()
            .map(|v| {
                v.iter()
                    .map(|kv| (kv.key().unwrap_or_default().to_string(), kv.value().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default(),
    })
}

fn value(v: fb::Value<'_>) -> Value {
    match v.v_type() {
        fb::Val::U64 => v.v_as_u64().map(|x| Value::U64(x.v())),
        fb::Val::I64 => v.v_as_i64().map(|x| Value::I64(x.v())),
        fb::Val::F64 => v.v_as_f64().map(|x| Value::F64(x.v())),
        fb::Val::DevPtr => v.v_as_dev_ptr().map(|x| Value::DevPtr(x.v())),
        fb::Val::HostPtr => v.v_as_host_ptr().map(|x| Value::HostPtr(x.v())),
        fb::Val::Size => v.v_as_size().map(|x| Value::Size(x.v())),
        fb::Val::Handle => v.v_as_handle().map(|x| Value::Handle(HandleKind::from_u8(x.kind()), x.v())),
        fb::Val::Dim => v.v_as_dim().map(|x| Value::Dim(dim(x.v()))),
        fb::Val::Str => v.v_as_str().map(|x| Value::Str(x.v().unwrap_or_default().to_string())),
        fb::Val::Bytes => v.v_as_bytes().map(|x| Value::Bytes(x.v().map(|b| b.bytes().to_vec()).unwrap_or_default())),
        fb::Val::BlobRef => v.v_as_blob_ref().map(|x| Value::Blob(BlobRef { hash: hash(x.hash()), len: x.len() })),
        fb::Val::Digest => v.v_as_digest().map(|x| Value::Digest(BlobRef { hash: hash(x.hash()), len: x.len() })),
        fb::Val::KernelParams => v.v_as_kernel_params().map(|x| {
            Value::KernelParams(KernelParams {
                bytes: x.bytes().map(|b| b.bytes().to_vec()).unwrap_or_default(),
                layout: x.layout().map(|l| l.iter().map(|s| (s.offset(), s.size())).collect()).unwrap_or_default(),
            })
        }),
        fb::Val::LaunchConfig => v.v_as_launch_config().map(|x| {
            Value::LaunchConfig(LaunchConfig {
                grid: dim(x.grid()),
                block: dim(x.block()),
                shared_mem: x.shared_mem(),
                stream: x.stream(),
                attrs: x
                    .attrs()
                    .map(|a| {
                        a.iter()
                            .map(|a| LaunchAttr {
                                id: a.id(),
                                value: a.value().map(|b| b.bytes().to_vec()).unwrap_or_default(),
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            })
        }),
        fb::Val::List => {
            v.v_as_list().map(|x| Value::List(x.items().map(|i| i.iter().map(value).collect()).unwrap_or_default()))
        }
        // Null, NONE and union members added by a newer minor version.
        _ => None,
    }
    .unwrap_or(Value::Null)
}

type Tables<'a> = flatbuffers::Vector<'a, flatbuffers::ForwardsUOffset<fb::Value<'a>>>;

/// An argument or result list: words (format 2) with the other values in `tables`, or only
/// tables (format 1). `Err(index)` for a word naming a value `tables` does not have.
fn values(words: Option<flatbuffers::Vector<'_, fb::Word>>, tables: Option<Tables<'_>>) -> Result<Vec<Value>, u64> {
    let Some(words) = words else {
        return Ok(tables.map(|v| v.iter().map(value).collect()).unwrap_or_default());
    };
    words
        .iter()
        .map(|w| {
            let x = w.v();
            Ok(match w.tag() {
                1 => Value::U64(x),
                2 => Value::I64(x as i64),
                3 => Value::F64(f64::from_bits(x)),
                4 => Value::DevPtr(x),
                5 => Value::HostPtr(x),
                6 => Value::Size(x),
                7 => Value::Handle(HandleKind::from_u8(w.kind()), x),
                crate::encode::WORD_OTHER => match tables {
                    Some(t) if x < t.len() as u64 => value(t.get(x as usize)),
                    _ => return Err(x),
                },
                // Null, and tags a newer minor version may add.
                _ => Value::Null,
            })
        })
        .collect()
}

/// Decode a call batch.
pub fn decode_calls(buf: &[u8], ctx: Ctx) -> Result<Vec<CallRecord>, TraceError> {
    let batch = verify::<fb::CallBatch>(buf, ctx)?;
    let names: Vec<&str> = batch.functions().map(|v| v.iter().collect()).unwrap_or_default();
    // Resolve each name once per (name, variant) seen in this batch.
    let mut resolved: std::collections::HashMap<(u32, Variant), Function> = Default::default();
    let records = batch.records().map(|v| v.len()).unwrap_or(0);
    let mut out = Vec::with_capacity(records);
    for r in batch.records().into_iter().flatten() {
        let variant = Variant { version: r.version(), per_thread: r.per_thread() };
        let fid = r.function();
        let function = match resolved.get(&(fid, variant)) {
            Some(f) => f.clone(),
            None => {
                let name = names
                    .get(fid as usize)
                    .ok_or_else(|| ctx.corrupt(format!("call {} names function #{fid} of {}", r.seq(), names.len())))?;
                let f = Function::resolve(name, variant);
                resolved.insert((fid, variant), f.clone());
                f
            }
        };
        out.push(CallRecord {
            seq: r.seq(),
            thread: r.thread(),
            timestamp_ns: r.timestamp_ns(),
            duration_ns: r.duration_ns(),
            level: ApiLevel::from_u8(r.level()),
            parent: r.parent(),
            function,
            variant,
            status: r.status(),
            args: values(r.arg_words(), r.args())
                .map_err(|i| ctx.corrupt(format!("call {}: argument word names value #{i}", r.seq())))?,
            results: values(r.result_words(), r.results())
                .map_err(|i| ctx.corrupt(format!("call {}: result word names value #{i}", r.seq())))?,
            repeat: r.repeat(),
        });
    }
    Ok(out)
}

/// Decode a blob batch; with `with_data == false` the parts' bytes are not copied.
pub fn decode_blobs(buf: &[u8], ctx: Ctx, with_data: bool) -> Result<Vec<BlobPart>, TraceError> {
    Ok(decode_blob_slices(buf, ctx)?
        .into_iter()
        .map(|(mut part, data)| {
            if with_data {
                part.data = data.to_vec();
            }
            part
        })
        .collect())
}

/// The parts of a blob chunk with their bytes where they lie in `buf` (no copy); each
/// [`BlobPart`]'s `data` is empty.
pub fn decode_blob_slices(buf: &[u8], ctx: Ctx) -> Result<Vec<(BlobPart, &[u8])>, TraceError> {
    let batch = verify::<fb::BlobBatch>(buf, ctx)?;
    let mut out = Vec::new();
    for p in batch.parts().into_iter().flatten() {
        let data = p.data().map(|d| d.bytes()).unwrap_or_default();
        let part = BlobPart {
            hash: hash(p.hash()),
            kind: BlobKind::from_u8(p.kind()),
            total_len: p.total_len(),
            offset: p.offset(),
            len: data.len() as u64,
            data: Vec::new(),
        };
        if part.offset.checked_add(part.len).is_none_or(|e| e > part.total_len) {
            return Err(ctx.corrupt(format!(
                "blob {} part at {} + {} exceeds its length {}",
                part.hash, part.offset, part.len, part.total_len
            )));
        }
        out.push((part, data));
    }
    Ok(out)
}

/// Decode the index.
pub fn decode_index(buf: &[u8], ctx: Ctx) -> Result<TraceIndex, TraceError> {
    let ix = verify::<fb::TraceIndex>(buf, ctx)?;
    Ok(TraceIndex {
        chunks: ix
            .chunks()
            .map(|v| {
                v.iter()
                    .map(|c| ChunkEntry {
                        kind: c.kind(),
                        offset: c.offset(),
                        stored_len: c.stored_len(),
                        first_seq: c.first_seq(),
                        records: c.records(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        blobs: ix
            .blobs()
            .map(|v| v.iter().map(|b| BlobLocation { hash: hash(b.hash()), chunk: b.chunk(), len: b.len() }).collect())
            .unwrap_or_default(),
        calls: ix.calls(),
        dropped_duplicate_blobs: ix.dropped_duplicate_blobs(),
    })
}
