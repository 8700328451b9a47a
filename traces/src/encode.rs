//! Owned records → flatbuffers (used on the writer thread).

use flatbuffers::{FlatBufferBuilder, UnionWIPOffset, WIPOffset};

use crate::generated::fb;
use crate::model::{BlobPart, CallRecord, ChunkEntry, Hash128, TraceIndex, TraceMeta, Value};

type Fbb<'a> = FlatBufferBuilder<'a>;

fn hash(h: Hash128) -> fb::Hash128 {
    fb::Hash128::new(h.0 as u64, (h.0 >> 64) as u64)
}

fn dim(d: crate::model::Dim3) -> fb::Dim3 {
    fb::Dim3::new(d.x, d.y, d.z)
}

/// Serialize the header metadata.
pub fn encode_meta(meta: &TraceMeta) -> Vec<u8> {
    let mut b = Fbb::with_capacity(1024);
    let tool_version = b.create_string(&meta.tool_version);
    let gpu_name = b.create_string(&meta.gpu_name);
    let uuid = b.create_vector(&meta.uuid);
    let cl: Vec<_> = meta.command_line.iter().map(|s| b.create_string(s)).collect();
    let command_line = b.create_vector(&cl);
    let hostname = b.create_string(&meta.hostname);
    let kvs: Vec<_> = meta
        .extra
        .iter()
        .map(|(k, v)| {
            let key = Some(b.create_string(k));
            let value = Some(b.create_string(v));
            fb::KeyValue::create(&mut b, &fb::KeyValueArgs { key, value })
        })
        .collect();
    let extra = b.create_vector(&kvs);
    let root = fb::TraceHeader::create(
        &mut b,
        &fb::TraceHeaderArgs {
            tool_version: Some(tool_version),
            driver_version: meta.driver_version,
            cuda_version: meta.cuda_version,
            gpu_name: Some(gpu_name),
            sm: meta.sm,
            uuid: Some(uuid),
            command_line: Some(command_line),
            start_time_unix_ns: meta.start_time_unix_ns,
            arena_base: meta.arena_base,
            arena_size: meta.arena_size,
            pid: meta.pid,
            hostname: Some(hostname),
            extra: Some(extra),
        },
    );
    b.finish_minimal(root);
    b.finished_data().to_vec()
}

/// Tag of a [`fb::Word`] that stands for the value at index `v` of the table vector.
pub(crate) const WORD_OTHER: u8 = 255;

/// A value as an inline word, if it is one.
fn word(v: &Value) -> Option<fb::Word> {
    let (tag, kind, x) = match v {
        Value::Null => (0, 0, 0),
        Value::U64(x) => (1, 0, *x),
        Value::I64(x) => (2, 0, *x as u64),
        Value::F64(x) => (3, 0, x.to_bits()),
        Value::DevPtr(x) => (4, 0, *x),
        Value::HostPtr(x) => (5, 0, *x),
        Value::Size(x) => (6, 0, *x),
        Value::Handle(k, x) => (7, *k as u8, *x),
        _ => return None,
    };
    Some(fb::Word::new(tag, kind, x))
}

type Words<'a> = Option<WIPOffset<flatbuffers::Vector<'a, fb::Word>>>;
type Others<'a> = Option<WIPOffset<flatbuffers::Vector<'a, flatbuffers::ForwardsUOffset<fb::Value<'a>>>>>;

/// A record's argument (or result) list as words, the values that are not words as tables.
fn values<'a>(
    b: &mut Fbb<'a>,
    vals: &[Value],
    words: &mut Vec<fb::Word>,
    others: &mut Vec<WIPOffset<fb::Value<'static>>>,
) -> (Words<'a>, Others<'a>) {
    if vals.is_empty() {
        return (None, None);
    }
    words.clear();
    others.clear();
    for v in vals {
        match word(v) {
            Some(w) => words.push(w),
            None => {
                words.push(fb::Word::new(WORD_OTHER, 0, others.len() as u64));
                // The scratch vector outlives one record only; offsets are plain integers.
                others.push(WIPOffset::new(value(b, v).value()));
            }
        }
    }
    let w = Some(b.create_vector(words));
    let o = if others.is_empty() {
        None
    } else {
        let offs: Vec<WIPOffset<fb::Value<'a>>> = others.iter().map(|o| WIPOffset::new(o.value())).collect();
        Some(b.create_vector(&offs))
    };
    (w, o)
}

fn value<'a>(b: &mut Fbb<'a>, v: &Value) -> WIPOffset<fb::Value<'a>> {
    let (t, off): (fb::Val, WIPOffset<UnionWIPOffset>) = match v {
        Value::U64(x) => (fb::Val::U64, fb::U64::create(b, &fb::U64Args { v: *x }).as_union_value()),
        Value::I64(x) => (fb::Val::I64, fb::I64::create(b, &fb::I64Args { v: *x }).as_union_value()),
        Value::F64(x) => (fb::Val::F64, fb::F64::create(b, &fb::F64Args { v: *x }).as_union_value()),
        Value::DevPtr(x) => (fb::Val::DevPtr, fb::DevPtr::create(b, &fb::DevPtrArgs { v: *x }).as_union_value()),
        Value::HostPtr(x) => (fb::Val::HostPtr, fb::HostPtr::create(b, &fb::HostPtrArgs { v: *x }).as_union_value()),
        Value::Size(x) => (fb::Val::Size, fb::Size::create(b, &fb::SizeArgs { v: *x }).as_union_value()),
        Value::Handle(k, x) => {
            (fb::Val::Handle, fb::Handle::create(b, &fb::HandleArgs { kind: *k as u8, v: *x }).as_union_value())
        }
        Value::Dim(d) => (fb::Val::Dim, fb::Dim::create(b, &fb::DimArgs { v: Some(&dim(*d)) }).as_union_value()),
        Value::Str(s) => {
            let s = b.create_string(s);
            (fb::Val::Str, fb::Str::create(b, &fb::StrArgs { v: Some(s) }).as_union_value())
        }
        Value::Bytes(bytes) => {
            let v = b.create_vector(bytes);
            (fb::Val::Bytes, fb::Bytes::create(b, &fb::BytesArgs { v: Some(v) }).as_union_value())
        }
        Value::Blob(r) => (
            fb::Val::BlobRef,
            fb::BlobRef::create(b, &fb::BlobRefArgs { hash: Some(&hash(r.hash)), len: r.len }).as_union_value(),
        ),
        Value::Digest(r) => (
            fb::Val::Digest,
            fb::Digest::create(b, &fb::DigestArgs { hash: Some(&hash(r.hash)), len: r.len }).as_union_value(),
        ),
        Value::KernelParams(p) => {
            let bytes = b.create_vector(&p.bytes);
            let slots: Vec<fb::ParamSlot> = p.layout.iter().map(|(o, s)| fb::ParamSlot::new(*o, *s)).collect();
            let layout = b.create_vector(&slots);
            (
                fb::Val::KernelParams,
                fb::KernelParams::create(b, &fb::KernelParamsArgs { bytes: Some(bytes), layout: Some(layout) })
                    .as_union_value(),
            )
        }
        Value::LaunchConfig(c) => {
            let attrs: Vec<_> = c
                .attrs
                .iter()
                .map(|a| {
                    let value = Some(b.create_vector(&a.value));
                    fb::LaunchAttr::create(b, &fb::LaunchAttrArgs { id: a.id, value })
                })
                .collect();
            let attrs = b.create_vector(&attrs);
            (
                fb::Val::LaunchConfig,
                fb::LaunchConfig::create(
                    b,
                    &fb::LaunchConfigArgs {
                        grid: Some(&dim(c.grid)),
                        block: Some(&dim(c.block)),
                        shared_mem: c.shared_mem,
                        stream: c.stream,
                        attrs: Some(attrs),
                    },
                )
                .as_union_value(),
            )
        }
        Value::List(items) => {
            let items: Vec<_> = items.iter().map(|v| value(b, v)).collect();
            let items = b.create_vector(&items);
            (fb::Val::List, fb::List::create(b, &fb::ListArgs { items: Some(items) }).as_union_value())
        }
        Value::Null => (fb::Val::Null, fb::Null::create(b, &fb::NullArgs {}).as_union_value()),
    };
    fb::Value::create(b, &fb::ValueArgs { v_type: t, v: Some(off) })
}

/// Builds call batches; keeps its flatbuffer builder and name table between batches.
pub struct CallBatchEncoder {
    builder: Fbb<'static>,
    names: Vec<String>,
    name_ids: std::collections::HashMap<String, u32>,
    records: Vec<WIPOffset<fb::CallRecord<'static>>>,
    first_seq: Option<u64>,
    /// Scratch for one record's words and other values.
    words: Vec<fb::Word>,
    others: Vec<WIPOffset<fb::Value<'static>>>,
}

impl Default for CallBatchEncoder {
    fn default() -> Self {
        Self::new()
    }
}

impl CallBatchEncoder {
    /// An empty encoder.
    pub fn new() -> Self {
        CallBatchEncoder {
            builder: Fbb::with_capacity(1 << 20),
            names: Vec::new(),
            name_ids: std::collections::HashMap::new(),
            records: Vec::new(),
            first_seq: None,
            words: Vec::new(),
            others: Vec::new(),
        }
    }

    /// Number of records added since the last [`finish`](Self::finish).
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether no record was added.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Approximate encoded size so far.
    pub fn size(&self) -> usize {
        self.builder.unfinished_data().len()
    }

    /// Sequence number of the first record in the batch.
    pub fn first_seq(&self) -> u64 {
        self.first_seq.unwrap_or(0)
    }

    /// Append one record.
    pub fn push(&mut self, r: &CallRecord) {
        let name = r.function.name();
        let fid = match self.name_ids.get(name) {
            Some(i) => *i,
            None => {
                let i = self.names.len() as u32;
                self.names.push(name.to_string());
                self.name_ids.insert(name.to_string(), i);
                i
            }
        };
        self.first_seq.get_or_insert(r.seq);
        let b = &mut self.builder;
        let (arg_words, args) = values(b, &r.args, &mut self.words, &mut self.others);
        let (result_words, results) = values(b, &r.results, &mut self.words, &mut self.others);
        let rec = fb::CallRecord::create(
            b,
            &fb::CallRecordArgs {
                seq: r.seq,
                thread: r.thread,
                timestamp_ns: r.timestamp_ns,
                duration_ns: r.duration_ns,
                level: r.level as u8,
                parent: r.parent,
                function: fid,
                version: r.variant.version,
                per_thread: r.variant.per_thread,
                status: r.status,
                args,
                results,
                repeat: r.repeat,
                arg_words,
                result_words,
            },
        );
        self.records.push(rec);
    }

    /// Finish the batch: returns its bytes and resets the encoder.
    pub fn finish(&mut self) -> Vec<u8> {
        let b = &mut self.builder;
        let names: Vec<_> = self.names.iter().map(|n| b.create_string(n)).collect();
        let functions = b.create_vector(&names);
        let records = b.create_vector(&self.records);
        let root = fb::CallBatch::create(b, &fb::CallBatchArgs { functions: Some(functions), records: Some(records) });
        b.finish_minimal(root);
        let out = b.finished_data().to_vec();
        b.reset();
        self.records.clear();
        self.names.clear();
        self.name_ids.clear();
        self.first_seq = None;
        out
    }
}

/// Serialize a batch of blob parts; `data` gives each part's bytes. Returns the builder's
/// buffer and the offset where the flatbuffer starts in it (no copy of the payload).
pub fn encode_blobs(parts: &[(BlobPart, &[u8])]) -> (Vec<u8>, usize) {
    let total: usize = parts.iter().map(|(_, d)| d.len() + 64).sum();
    let mut b = Fbb::with_capacity(total + 1024);
    let offs: Vec<_> = parts
        .iter()
        .map(|(p, data)| {
            let data = b.create_vector(data);
            fb::BlobPart::create(
                &mut b,
                &fb::BlobPartArgs {
                    hash: Some(&hash(p.hash)),
                    kind: p.kind as u8,
                    total_len: p.total_len,
                    offset: p.offset,
                    data: Some(data),
                },
            )
        })
        .collect();
    let parts = b.create_vector(&offs);
    let root = fb::BlobBatch::create(&mut b, &fb::BlobBatchArgs { parts: Some(parts) });
    b.finish_minimal(root);
    b.collapse()
}

/// Serialize the index.
pub fn encode_index(index: &TraceIndex) -> Vec<u8> {
    let mut b = Fbb::with_capacity(64 * (index.chunks.len() + index.blobs.len()) + 256);
    let chunks: Vec<_> = index
        .chunks
        .iter()
        .map(|c: &ChunkEntry| {
            fb::ChunkEntry::create(
                &mut b,
                &fb::ChunkEntryArgs {
                    kind: c.kind,
                    offset: c.offset,
                    stored_len: c.stored_len,
                    first_seq: c.first_seq,
                    records: c.records,
                },
            )
        })
        .collect();
    let chunks = b.create_vector(&chunks);
    let blobs: Vec<_> = index
        .blobs
        .iter()
        .map(|l| {
            fb::BlobLocation::create(
                &mut b,
                &fb::BlobLocationArgs { hash: Some(&hash(l.hash)), chunk: l.chunk, len: l.len },
            )
        })
        .collect();
    let blobs = b.create_vector(&blobs);
    let root = fb::TraceIndex::create(
        &mut b,
        &fb::TraceIndexArgs {
            chunks: Some(chunks),
            blobs: Some(blobs),
            calls: index.calls,
            dropped_duplicate_blobs: index.dropped_duplicate_blobs,
        },
    );
    b.finish_minimal(root);
    b.finished_data().to_vec()
}
