//! Trace analysis: the thesis-style statistics and the synchronization analysis, computed in
//! one streaming pass with bounded memory.

mod events;
pub mod perfetto;
#[cfg(feature = "plot")]
pub mod plot;
mod registrations;
pub mod reorder;
mod stats;

use std::io::Read;

use gpuless_analyzer::api::ApiLevel;
use gpuless_analyzer::sync::{CallEvent, SyncAnalyzer, SyncReport};
use serde::Serialize;

use crate::error::TraceError;
use crate::reader::{ChunkBody, TraceReader};

pub use events::{call_event, host_buffer_bytes};
pub use registrations::{RegisteredFunction, RegisteredVariable, Registrations};
pub use stats::{CopyStats, FunctionCount, Stats};

/// Summary of the recording metadata.
#[derive(Debug, Clone, Serialize)]
pub struct MetaSummary {
    /// Trace format version.
    pub format_version: String,
    /// Tool that wrote the trace.
    pub tool_version: String,
    /// Driver version.
    pub driver_version: i32,
    /// CUDA version.
    pub cuda_version: i32,
    /// GPU name.
    pub gpu_name: String,
    /// Compute capability (10*major + minor).
    pub sm: u32,
    /// Command line.
    pub command_line: Vec<String>,
    /// Start time, ns since the Unix epoch.
    pub start_time_unix_ns: u64,
    /// The recorder's device-memory arena base (0: allocations were not served from one).
    pub arena_base: u64,
    /// Its size.
    pub arena_size: u64,
}

/// How complete the trace was.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Integrity {
    /// Complete chunks read.
    pub chunks: u64,
    /// Call chunks.
    pub call_chunks: u64,
    /// Blob chunks.
    pub blob_chunks: u64,
    /// The writer finished (index and trailer present).
    pub finished: bool,
    /// Bytes of the file that were read successfully.
    pub good_bytes: u64,
    /// File size, if known.
    pub file_bytes: Option<u64>,
    /// Chunks of unknown kinds skipped.
    pub skipped_unknown_chunks: u64,
    /// The first error met (a damaged chunk, or the one that stopped reading), if any.
    pub error: Option<String>,
    /// Damaged chunks skipped (reading resumed after each).
    pub damaged_chunks: u64,
    /// Bytes skipped looking for a valid chunk header after a damaged one.
    pub skipped_bytes: u64,
}

/// Everything `gpuless analyze` reports about a trace.
#[derive(Debug, Clone, Serialize)]
pub struct TraceAnalysis {
    /// Recording metadata.
    pub meta: MetaSummary,
    /// Statistics.
    pub stats: Stats,
    /// One report per synchronization policy.
    pub sync: Vec<SyncReport>,
    /// Completeness.
    pub integrity: Integrity,
}

/// Analyze a trace. Returns the analysis of every complete chunk, plus the error that stopped
/// reading, if any (a truncated or damaged trace still gets analyzed up to the damage).
/// `progress(bytes_read, total)` is called after each chunk.
pub fn analyze<R: Read>(
    mut reader: TraceReader<R>,
    progress: &mut dyn FnMut(u64, Option<u64>),
) -> (TraceAnalysis, Option<TraceError>) {
    let m = reader.meta().clone();
    let (major, minor) = reader.version();
    let meta = MetaSummary {
        format_version: format!("{major}.{minor}"),
        tool_version: m.tool_version,
        driver_version: m.driver_version,
        cuda_version: m.cuda_version,
        gpu_name: m.gpu_name,
        sm: m.sm,
        command_line: m.command_line,
        start_time_unix_ns: m.start_time_unix_ns,
        arena_base: m.arena_base,
        arena_size: m.arena_size,
    };
    let mut stats = stats::StatsBuilder::default();
    stats.arena = (meta.arena_base, meta.arena_size);
    let mut sync = SyncAnalyzer::default();
    // Synchronization points depend on call order; a trace holds async copies after the
    // synchronization that completed them.
    let mut order: reorder::Reorder<(CallEvent, u32)> = reorder::Reorder::default();
    let mut feed = |(e, repeat): (CallEvent, u32)| {
        // A folded record stands for 1 + repeat calls.
        for _ in 0..=repeat {
            sync.push(&e);
        }
    };
    let mut integrity = Integrity::default();
    let mut error = None;
    while let Some(chunk) = reader.next() {
        match chunk {
            Ok(c) => {
                match &c.body {
                    ChunkBody::Calls(calls) => {
                        integrity.call_chunks += 1;
                        for r in calls {
                            stats.add(r);
                            // The driver level is what crosses the wire; calls at other
                            // levels reach it through nested driver calls.
                            if r.level == ApiLevel::Driver {
                                order.push(r.seq, (call_event(r), r.repeat), &mut feed);
                            }
                        }
                    }
                    ChunkBody::Blobs(parts) => {
                        integrity.blob_chunks += 1;
                        for p in parts {
                            stats.add_blob_part(p);
                        }
                    }
                    ChunkBody::Index(_) | ChunkBody::Unknown(_) => {}
                }
                let (pos, total) = reader.progress();
                progress(pos, total);
            }
            Err(e) => {
                if error.is_none() {
                    integrity.error = Some(e.to_string());
                    error = Some(e);
                }
            }
        }
    }
    order.finish(&mut feed);
    let rec = reader.recovery();
    integrity.chunks = rec.chunks;
    integrity.finished = rec.finished;
    integrity.good_bytes = rec.good_bytes;
    integrity.skipped_unknown_chunks = rec.skipped_unknown;
    integrity.damaged_chunks = rec.damaged;
    integrity.skipped_bytes = rec.skipped_bytes;
    integrity.file_bytes = reader.progress().1;
    (TraceAnalysis { meta, stats: stats.finish(), sync: sync.finish(), integrity }, error)
}
