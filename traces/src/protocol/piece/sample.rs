//! Records of the calls pieces are made of, as a client sends them: for the tests of the piece
//! rule and of its users (the executor's `server::pieces`, the client's `remote::pieces`).

use gpuless_analyzer::api::{ApiLevel, HandleKind, Variant};

use crate::model::{BlobRef, CallRecord, Function, Hash128, KernelParams, Value};

/// A record of `name`'s newest variant the table has (v2, else the bare symbol), with `args`;
/// thread and time made up from `seq`, as a recording's differ between repetitions.
///
/// # Panics
/// When the table does not model `name`.
pub fn record(seq: u64, name: &str, args: Vec<Value>) -> CallRecord {
    let v2 = Variant { version: 2, per_thread: false };
    let (function, variant) = match Function::resolve(name, v2) {
        Function::Known(id) => (Function::Known(id), v2),
        Function::Other(_) => (Function::resolve(name, Variant::BASE), Variant::BASE),
    };
    assert!(function.api().is_some(), "{name} is in the table");
    let mut r = CallRecord::new(seq, ApiLevel::Driver, function);
    r.variant = variant;
    r.args = args;
    r.thread = seq * 7;
    r.timestamp_ns = seq * 1000;
    r
}

/// `cuLaunchKernel` of function 0x10 on `stream`, 4 blocks of 128 threads, one 8-byte parameter
/// of bytes `param`.
pub fn launch(seq: u64, stream: u64, param: u8) -> CallRecord {
    launch_blocks(seq, stream, param, 4)
}

/// [`launch`] of `blocks` blocks (another shape of piece).
pub fn launch_blocks(seq: u64, stream: u64, param: u8, blocks: u64) -> CallRecord {
    let g = Value::U64;
    let args = vec![
        Value::Handle(HandleKind::Function, 0x10),
        g(blocks),
        g(1),
        g(1),
        g(128),
        g(1),
        g(1),
        g(0),
        Value::Handle(HandleKind::Stream, stream),
        Value::KernelParams(KernelParams { bytes: vec![param; 8], layout: vec![(0, 8)] }),
        Value::Null,
    ];
    record(seq, "cuLaunchKernel", args)
}

/// `cuMemcpyHtoDAsync` of 64 bytes whose content hashes to `content`, on `stream`.
pub fn upload(seq: u64, stream: u64, content: u128) -> CallRecord {
    let args = vec![
        Value::DevPtr(0x7e00_0000_0000),
        Value::Blob(BlobRef { hash: Hash128(content), len: 64 }),
        Value::Size(64),
        Value::Handle(HandleKind::Stream, stream),
    ];
    record(seq, "cuMemcpyHtoDAsync", args)
}

/// `cuMemcpyDtoHAsync` of 16 bytes into the program's buffer at `host`, on `stream`.
pub fn download(seq: u64, stream: u64, host: u64) -> CallRecord {
    let args = vec![
        Value::HostPtr(host),
        Value::DevPtr(0x7e00_0000_1000),
        Value::Size(16),
        Value::Handle(HandleKind::Stream, stream),
    ];
    record(seq, "cuMemcpyDtoHAsync", args)
}

/// `cuStreamSynchronize` of `stream`.
pub fn sync(seq: u64, stream: u64) -> CallRecord {
    record(seq, "cuStreamSynchronize", vec![Value::Handle(HandleKind::Stream, stream)])
}
