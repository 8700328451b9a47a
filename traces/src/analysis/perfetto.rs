//! A trace as a timeline in the Chrome trace-event format (JSON), which Perfetto
//! (ui.perfetto.dev) and chrome://tracing open: `gpuless analyze TRACE --perfetto OUT.json`.
//!
//! * One process (the recorded program's pid) with a name (`M` `process_name`), one track per
//!   recording thread (`M` `thread_name`, sorted by first call).
//! * One complete event (`X`) per call record: `ts` and `dur` in microseconds since the
//!   recording started, `cat` the API level, `args` the decoded arguments and results
//!   ([`crate::dump::Decoder`]), the status name, the kernel of a launch.
//! * Nesting: a call made from inside another (`CallRecord::parent`) is drawn under it: its
//!   start is moved to the parent's start if it was earlier and the parent (and its ancestors)
//!   extended to its end where the clocks say otherwise (runtime registrations are untimed:
//!   they carry their thread's last clock reading and no duration). Calls of a thread that
//!   overlap without being nested (clock skew) are cut at the end of the enclosing call, so
//!   every thread's events nest properly.
//! * Counters (`C` `device memory`): bytes of device memory the program holds after each
//!   allocation or free: `allocations` (`cuMemAlloc*`, pitched, managed, stream-ordered; freed
//!   by `cuMemFree*`) and `vmm` (physical memory of `cuMemCreate`, freed by `cuMemRelease`).
//!   Failed calls and frees of unknown addresses change nothing; the recorder's own arena
//!   reservations are not calls of the program and are not counted.
//!
//! Events are sorted by `ts` (metadata first); at equal `ts` an enclosing call comes before
//! the calls inside it. The recorder's summary records (one per function it only counted,
//! written at exit with the count: `dump::is_summary`) are not calls at a time: they are listed
//! in `otherData.unmodeled`.
//!
//! The trace is read once, streaming; the events are kept in memory until they are sorted (a
//! few hundred bytes per call).

use std::cmp::Reverse;
use std::collections::HashMap;
use std::io::Read;

use gpuless_analyzer::api::{Group, SyncClass};
use serde::Serialize;

use crate::dump::{is_summary, Decoder, DumpRecord, Fields, Shown};
use crate::error::TraceError;
use crate::model::{CallRecord, Value};
use crate::reader::{ChunkBody, TraceReader};

/// The name of the device-memory counter track.
pub const MEMORY_COUNTER: &str = "device memory";

/// What an event's `args` hold.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum EventArgs {
    /// Metadata: a process or thread name.
    Name {
        /// The name.
        name: String,
    },
    /// Metadata: a track's position.
    SortIndex {
        /// Position (lower first).
        sort_index: u64,
    },
    /// A call.
    Call {
        /// Its sequence number.
        seq: u64,
        /// Its status name, for functions that return one.
        #[serde(skip_serializing_if = "Option::is_none")]
        status: Option<String>,
        /// For launches: the kernel.
        #[serde(skip_serializing_if = "Option::is_none")]
        kernel: Option<String>,
        /// `seq` of the call it was made from.
        #[serde(skip_serializing_if = "Option::is_none")]
        parent: Option<u64>,
        /// Further identical calls the record stands for.
        #[serde(skip_serializing_if = "is_zero")]
        repeat: u32,
        /// Decoded input arguments.
        args: Fields,
        /// Decoded results.
        results: Fields,
    },
    /// A counter sample: series name → value.
    Counter(Fields),
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// One trace event.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// Event name (the function for calls).
    pub name: String,
    /// Phase: `M` metadata, `X` complete event, `C` counter.
    pub ph: &'static str,
    /// Category (the API level of a call).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cat: Option<&'static str>,
    /// Start, microseconds since the recording started (absent for metadata).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ts: Option<f64>,
    /// Duration in microseconds (`X` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dur: Option<f64>,
    /// Process id.
    pub pid: u64,
    /// Thread id (absent for process metadata and counters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tid: Option<u64>,
    /// Arguments.
    pub args: EventArgs,
}

/// Things about the recording the viewers show as metadata.
#[derive(Debug, Clone, Serialize, Default)]
pub struct OtherData {
    /// The recorded command line.
    pub command: String,
    /// The GPU it ran on.
    pub gpu: String,
    /// Call records in the timeline.
    pub calls: u64,
    /// Calls the recorder counted without recording them one by one (unmodeled functions,
    /// versions newer than the table), by name, from its summary records (`null`: the count
    /// overflowed).
    pub unmodeled: Fields,
}

/// The timeline: serialize it with `serde_json` to get the file.
#[derive(Debug, Clone, Serialize)]
pub struct Timeline {
    /// The events.
    #[serde(rename = "traceEvents")]
    pub trace_events: Vec<Event>,
    /// `ns`: the viewers show times in nanoseconds (`ts` stays in microseconds).
    #[serde(rename = "displayTimeUnit")]
    pub display_time_unit: &'static str,
    /// Recording metadata.
    #[serde(rename = "otherData")]
    pub other_data: OtherData,
}

/// A call on its track, times in ns.
struct Slice {
    seq: u64,
    parent: Option<u64>,
    tid: u64,
    start: u64,
    end: u64,
    rec: DumpRecord,
    cat: &'static str,
}

/// What an allocation or free does to device memory.
#[derive(Debug, Clone, Copy)]
enum MemOp {
    /// Device memory at an address.
    Alloc { address: u64, bytes: u64 },
    /// Freed by address.
    Free { address: u64 },
    /// Physical memory of a VMM allocation handle.
    Create { handle: u64, bytes: u64 },
    /// Released by handle.
    Release { handle: u64 },
}

/// Allocations and frees, applied in time order at the end: the file holds each thread's
/// records in batches, so a free may come before the allocation it frees.
#[derive(Default)]
struct Memory {
    /// (end of the call, seq, operation).
    ops: Vec<(u64, u64, MemOp)>,
}

fn word(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::U64(x) | Value::Size(x) | Value::DevPtr(x) | Value::Handle(_, x) => Some(*x),
        _ => None,
    }
}

impl Memory {
    fn observe(&mut self, r: &CallRecord) {
        let Some(f) = r.function.api() else { return };
        if r.status != 0 || !matches!(f.group, Group::Memory | Group::Pool | Group::Vmm) {
            return;
        }
        let arg = |name: &str| f.args.iter().position(|a| a.name == name).and_then(|i| r.args.get(i));
        let op = match (f.sync, f.name) {
            (SyncClass::AllocatesDevice, "cuMemAddressReserve") => None,
            (SyncClass::AllocatesDevice, "cuMemCreate") => {
                word(r.results.first()).zip(word(arg("size"))).map(|(handle, bytes)| MemOp::Create { handle, bytes })
            }
            (SyncClass::AllocatesDevice, name) => {
                let bytes = if name == "cuMemAllocPitch" {
                    word(r.results.get(1)).zip(word(arg("Height"))).map(|(p, h)| p.saturating_mul(h))
                } else {
                    word(arg("bytesize"))
                };
                match (r.results.first(), bytes) {
                    (Some(Value::DevPtr(address)), Some(bytes)) => Some(MemOp::Alloc { address: *address, bytes }),
                    _ => None,
                }
            }
            (SyncClass::FreesDevice, "cuMemRelease") => word(r.args.first()).map(|handle| MemOp::Release { handle }),
            (SyncClass::FreesDevice, _) => word(arg("dptr")).map(|address| MemOp::Free { address }),
            _ => None,
        };
        if let Some(op) = op {
            self.ops.push((r.timestamp_ns.saturating_add(r.duration_ns), r.seq, op));
        }
    }

    /// Counter samples in time order: one at 0, then one after each change.
    fn counters(mut self, pid: u64) -> Vec<Event> {
        self.ops.sort_by_key(|&(t, seq, _)| (t, seq));
        let sample = |t: u64, a: u64, v: u64| Event {
            name: MEMORY_COUNTER.into(),
            ph: "C",
            cat: None,
            ts: Some(micros(t)),
            dur: None,
            pid,
            tid: None,
            args: EventArgs::Counter(Fields(vec![
                ("allocations".into(), Shown::Uint(a)),
                ("vmm".into(), Shown::Uint(v)),
            ])),
        };
        let mut out = Vec::with_capacity(self.ops.len() + 1);
        if self.ops.is_empty() {
            return out;
        }
        out.push(sample(0, 0, 0));
        let (mut by_address, mut by_handle) = (HashMap::new(), HashMap::new());
        let (mut a, mut v) = (0u64, 0u64);
        for (t, _, op) in self.ops {
            let (a0, v0) = (a, v);
            match op {
                MemOp::Alloc { address, bytes } => {
                    // A live address handed out again replaces the old entry.
                    let old = by_address.insert(address, bytes).unwrap_or(0);
                    a = a.saturating_sub(old).saturating_add(bytes);
                }
                MemOp::Free { address } => a = a.saturating_sub(by_address.remove(&address).unwrap_or(0)),
                MemOp::Create { handle, bytes } => {
                    let old = by_handle.insert(handle, bytes).unwrap_or(0);
                    v = v.saturating_sub(old).saturating_add(bytes);
                }
                MemOp::Release { handle } => v = v.saturating_sub(by_handle.remove(&handle).unwrap_or(0)),
            }
            if (a, v) != (a0, v0) {
                out.push(sample(t, a, v));
            }
        }
        out
    }
}

fn micros(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// Children inside their parents: starts moved up to the parent's, parents extended to their
/// children's ends (deepest first, so that extensions reach the ancestors).
fn nest_children(slices: &mut [Slice]) {
    let at: HashMap<u64, usize> = slices.iter().enumerate().map(|(i, s)| (s.seq, i)).collect();
    let parent_of = |slices: &[Slice], i: usize| -> Option<usize> {
        let s = slices.get(i)?;
        let p = *at.get(&s.parent?)?;
        (p != i && slices.get(p)?.tid == s.tid).then_some(p)
    };
    let mut depth = vec![0usize; slices.len()];
    for (i, d) in depth.iter_mut().enumerate() {
        let mut j = i;
        // Bounded: a malformed trace may have parent cycles.
        while let Some(p) = parent_of(slices, j) {
            *d += 1;
            j = p;
            if *d > 256 {
                break;
            }
        }
    }
    let mut order: Vec<usize> = (0..slices.len()).collect();
    order.sort_by_key(|&i| (depth.get(i).copied().unwrap_or(0), i));
    for &i in &order {
        if let Some(p) = parent_of(slices, i) {
            let ps = slices.get(p).map_or(0, |s| s.start);
            if let Some(s) = slices.get_mut(i) {
                s.start = s.start.max(ps);
                s.end = s.end.max(s.start);
            }
        }
    }
    for &i in order.iter().rev() {
        if let Some(p) = parent_of(slices, i) {
            let end = slices.get(i).map_or(0, |s| s.end);
            if let Some(ps) = slices.get_mut(p) {
                ps.end = ps.end.max(end);
            }
        }
    }
}

/// Sort by (thread, start, longest first) and cut calls that overlap the end of the call
/// enclosing their start.
fn nest_overlaps(slices: &mut [Slice]) {
    slices.sort_by_key(|s| (s.tid, s.start, Reverse(s.end), s.seq));
    let mut stack: Vec<(u64, u64)> = Vec::new(); // (tid, end)
    for s in slices.iter_mut() {
        while let Some(&(tid, end)) = stack.last() {
            if tid != s.tid || end <= s.start {
                stack.pop();
            } else {
                break;
            }
        }
        if let Some(&(_, end)) = stack.last() {
            s.end = s.end.min(end);
        }
        stack.push((s.tid, s.end));
    }
}

/// Build the timeline of every complete chunk; also returns the first error met (a damaged or
/// truncated trace still gets a timeline of what could be read).
pub fn timeline<R: Read>(reader: TraceReader<R>) -> (Timeline, Option<TraceError>) {
    let meta = reader.meta().clone();
    let pid = if meta.pid == 0 { 1 } else { u64::from(meta.pid) };
    let mut decoder = Decoder::new();
    let mut memory = Memory::default();
    let mut slices = Vec::new();
    let mut unmodeled = Vec::new();
    let mut index = 0u64;
    let mut error = None;
    for chunk in reader {
        match chunk {
            Ok(c) => {
                let ChunkBody::Calls(calls) = c.body else { continue };
                for r in &calls {
                    decoder.observe(r);
                    memory.observe(r);
                    if is_summary(r) {
                        let n = match r.args.first() {
                            Some(Value::U64(n)) => Shown::Uint(*n),
                            _ => Shown::Null,
                        };
                        unmodeled.push((r.function.name().to_string(), n));
                    } else {
                        let rec = decoder.describe(index, r);
                        let start = r.timestamp_ns;
                        slices.push(Slice {
                            seq: r.seq,
                            parent: r.parent,
                            tid: r.thread,
                            start,
                            end: start.saturating_add(rec.dur_ns.unwrap_or(0)),
                            rec,
                            cat: r.level.name(),
                        });
                    }
                    index += 1;
                }
            }
            Err(e) => {
                // Stop at the first damage: what follows may be out of context.
                error = Some(e);
                break;
            }
        }
    }
    nest_children(&mut slices);
    nest_overlaps(&mut slices);

    let mut events = Vec::with_capacity(slices.len() + 8);
    let name = |s: &str| EventArgs::Name { name: s.to_string() };
    let program = meta.command_line.first().and_then(|c| c.rsplit('/').next()).unwrap_or("recorded program");
    let meta_event = |name: &str, tid: Option<u64>, args| Event {
        name: name.into(),
        ph: "M",
        cat: None,
        ts: None,
        dur: None,
        pid,
        tid,
        args,
    };
    events.push(meta_event("process_name", None, name(&format!("{program} (pid {pid})"))));
    // Threads in order of their first call.
    let mut first: HashMap<u64, u64> = HashMap::new();
    for s in &slices {
        let t = first.entry(s.tid).or_insert(s.start);
        *t = (*t).min(s.start);
    }
    let mut threads: Vec<(u64, u64)> = first.into_iter().map(|(tid, start)| (start, tid)).collect();
    threads.sort_unstable();
    for (i, &(_, tid)) in threads.iter().enumerate() {
        let label = if i == 0 { format!("thread {tid} (first)") } else { format!("thread {tid}") };
        events.push(meta_event("thread_name", Some(tid), name(&label)));
        events.push(meta_event("thread_sort_index", Some(tid), EventArgs::SortIndex { sort_index: i as u64 }));
    }
    let meta_len = events.len();
    let calls = slices.len() as u64;
    for s in slices {
        let DumpRecord { seq, status_name, kernel, parent, repeat, args, results, function, .. } = s.rec;
        events.push(Event {
            name: function,
            ph: "X",
            cat: Some(s.cat),
            ts: Some(micros(s.start)),
            dur: Some(micros(s.end.saturating_sub(s.start))),
            pid,
            tid: Some(s.tid),
            args: EventArgs::Call { seq, status: status_name, kernel, parent, repeat, args, results },
        });
    }
    events.extend(memory.counters(pid));
    // Stable: calls keep their nesting order at equal times.
    if let Some(rest) = events.get_mut(meta_len..) {
        rest.sort_by(|a, b| a.ts.unwrap_or(0.0).total_cmp(&b.ts.unwrap_or(0.0)));
    }
    let other_data = OtherData {
        command: meta.command_line.join(" "),
        gpu: meta.gpu_name.clone(),
        calls,
        unmodeled: Fields(unmodeled),
    };
    (Timeline { trace_events: events, display_time_unit: "ns", other_data }, error)
}
