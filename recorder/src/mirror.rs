//! The records of memory the host and the device both use (`hostview.rs` keeps the regions):
//! before a call that may submit work, the bytes the host changed (`gpulessHostMemory`); after
//! the program waited for the device, the hash of what the device changed (`gpulessHostView`).

use gpuless_analyzer::api::ApiLevel;
use gpuless_traces::hostview::{HOST_MEMORY, HOST_VIEW};
use gpuless_traces::{BlobKind, BlobRef, CallRecord, Function, Value};

use crate::hostview;
use crate::lane::Lane;
use crate::state;

fn record(lane: &Lane, name: &str, args: Vec<Value>, results: Vec<Value>) {
    let mut rec = CallRecord::new(state::next_seq(), ApiLevel::Other, Function::Other(name.to_string()));
    rec.thread = lane.tid();
    rec.timestamp_ns = state::now_ns();
    rec.parent = lane.current.get();
    rec.args = args;
    rec.results = results;
    crate::batches::emit(rec);
}

/// Before a call that may submit work: stores every region the host changed.
pub fn before_submit(lane: &Lane) {
    if !hostview::is_host_turn() {
        return;
    }
    hostview::changed(|addr, bytes, _| {
        let blob = crate::sink::blob(BlobKind::HostToDevice, bytes);
        record(lane, HOST_MEMORY, vec![Value::DevPtr(addr), blob], Vec::new());
    });
}

/// After the program waited for the device: hashes every region the device changed.
pub fn after_sync(lane: &Lane) {
    hostview::host_turn();
    hostview::changed(|addr, bytes, h| {
        let len = bytes.len() as u64;
        let digest = Value::Digest(BlobRef { hash: h, len });
        record(lane, HOST_VIEW, vec![Value::DevPtr(addr), Value::Size(len)], vec![digest]);
    });
}
