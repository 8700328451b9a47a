//! The thesis-style statistics: calls by level and function, launches, kernels, allocations,
//! copies, unmodeled calls.

use std::collections::{HashMap, HashSet};

use gpuless_analyzer::api::{ArgKind, Group, SyncClass};
use serde::Serialize;

use super::events::transfer_bytes;
use crate::dump::KernelNames;
use crate::model::{BlobKind, BlobPart, CallRecord, Function, Value};

/// Count and bytes.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct CopyStats {
    /// Number of calls.
    pub count: u64,
    /// Bytes.
    pub bytes: u64,
}

impl CopyStats {
    fn add(&mut self, bytes: u64) {
        self.count += 1;
        self.bytes = self.bytes.saturating_add(bytes);
    }
}

/// Calls of one function.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FunctionCount {
    /// API level.
    pub level: &'static str,
    /// Base name.
    pub name: String,
    /// Calls.
    pub count: u64,
    /// Whether the API table models it.
    pub modeled: bool,
}

/// Statistics of a trace.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    /// Call records.
    pub calls: u64,
    /// Calls by API level.
    pub by_level: Vec<(&'static str, u64)>,
    /// Calls by function, most frequent first.
    pub by_function: Vec<FunctionCount>,
    /// Kernel launches (`cuLaunchKernel*`, cooperative).
    pub kernel_launches: u64,
    /// Graph launches.
    pub graph_launches: u64,
    /// Distinct kernel handles launched.
    pub unique_kernels: u64,
    /// Distinct kernel names launched (where the name is known from a look-up).
    pub unique_kernel_names: u64,
    /// Device allocations (bytes exclude VMM address reservations).
    pub allocations: CopyStats,
    /// Of the successful allocations, those the recorder served from its arena (exact
    /// addresses at replay) and those outside it (translated at replay unless the address
    /// happens to be free).
    pub allocations_in_arena: u64,
    /// See `allocations_in_arena`.
    pub allocations_outside_arena: u64,
    /// Digest of the set of allocated (address, size) pairs: two recordings of the same program
    /// that allocated at the same addresses have the same digest (hex), whatever the order in
    /// which their threads' records reached the file.
    pub allocation_digest: String,
    /// The first 4,096 successful allocations in file order: (seq, thread, address, bytes).
    pub allocation_list: Vec<(u64, u64, u64, u64)>,
    /// Device frees.
    pub frees: u64,
    /// Host-to-device copies.
    pub h2d: CopyStats,
    /// Device-to-host copies.
    pub d2h: CopyStats,
    /// Device-to-device copies.
    pub d2d: CopyStats,
    /// Memsets.
    pub memsets: u64,
    /// Code images loaded (modules, libraries).
    pub module_loads: u64,
    /// Calls the table does not model.
    pub unmodeled_calls: u64,
    /// Unmodeled functions with their call counts.
    pub unmodeled: Vec<(String, u64)>,
    /// Calls through the driver's private export tables, measured by the recorder
    /// (`GPULESS_EXPORT_TABLES=count`): (table UUID, slot, calls), by table and slot. Not
    /// counted as unmodeled calls.
    pub export_table_slots: Vec<(String, u32, u64)>,
    /// Calls with a non-zero return code.
    pub failed_calls: u64,
    /// Calls made from inside another intercepted call.
    pub nested_calls: u64,
    /// Distinct threads.
    pub threads: u64,
    /// Time from the first to the last call, ns.
    pub span_ns: u64,
    /// Distinct blobs stored and their bytes.
    pub blobs: CopyStats,
    /// Of which code images.
    pub code_images: CopyStats,
    /// Runtime registrations (annotations): host stub → kernel, host variable → device variable.
    pub registrations: super::Registrations,
}

#[derive(Default)]
pub(crate) struct StatsBuilder {
    s: Stats,
    levels: HashMap<&'static str, u64>,
    functions: HashMap<(&'static str, String, bool), u64>,
    kernel_names: KernelNames,
    launched: HashSet<u64>,
    threads: HashSet<u64>,
    first_ts: Option<u64>,
    last_ts: u64,
    /// The recorder's arena: base and size (0 when none).
    pub(crate) arena: (u64, u64),
    allocated: Vec<(u64, u64)>,
}

fn size_arg(r: &CallRecord, kinds: &[ArgKind]) -> u64 {
    r.args
        .iter()
        .zip(kinds)
        .find_map(|(v, k)| match (k, v) {
            (ArgKind::Size, Value::Size(x) | Value::U64(x)) => Some(*x),
            _ => None,
        })
        .unwrap_or(0)
}

impl StatsBuilder {
    pub(crate) fn add(&mut self, r: &CallRecord) {
        let s = &mut self.s;
        s.calls += 1;
        *self.levels.entry(r.level.name()).or_insert(0) += 1;
        let modeled = matches!(r.function, Function::Known(_));
        let represented = r.calls_represented();
        *self.functions.entry((r.level.name(), r.function.name().to_string(), modeled)).or_insert(0) += represented;
        if r.status != 0 {
            s.failed_calls += 1;
        }
        if r.parent.is_some() {
            s.nested_calls += 1;
        }
        if self.threads.len() < 1 << 16 {
            self.threads.insert(r.thread);
        }
        self.first_ts.get_or_insert(r.timestamp_ns);
        self.last_ts = self.last_ts.max(r.timestamp_ns);
        let Some(f) = r.function.api() else {
            s.unmodeled_calls += represented;
            return;
        };
        if r.is_summary() {
            // The recorder's count of calls it did not record one by one, under a name today's
            // table models: counted above as the calls it stands for; it has no arguments to
            // learn sizes, kernels or copies from.
            return;
        }
        if f.group == Group::Registration {
            s.registrations.add(f, r);
            return;
        }
        let kinds: Vec<ArgKind> = f.args.iter().map(|a| a.kind).collect();
        let (up, down) = transfer_bytes(r);
        match f.group {
            Group::Launch if f.name != "cuLaunchHostFunc" => {
                s.kernel_launches += 1;
                if let Some(k) = KernelNames::launched(r) {
                    if self.launched.len() < 1 << 20 {
                        self.launched.insert(k);
                    }
                }
            }
            Group::Set => s.memsets += 1,
            _ => {}
        }
        if f.name == "cuGraphLaunch" {
            s.graph_launches += 1;
        }
        if kinds.contains(&ArgKind::Image) || kinds.contains(&ArgKind::ImageFile) {
            s.module_loads += 1;
        }
        // Handle → kernel name, from the look-ups.
        self.kernel_names.observe(r);
        match f.sync {
            SyncClass::AllocatesDevice => {
                let bytes = if f.name == "cuMemAddressReserve" { 0 } else { size_arg(r, &kinds) };
                s.allocations.add(bytes);
                if r.status == 0 && f.name != "cuMemAddressReserve" && f.name != "cuMemCreate" {
                    let (base, size) = self.arena;
                    if let Some(Value::DevPtr(p)) = r.results.first() {
                        if self.allocated.len() < 1 << 22 {
                            self.allocated.push((*p, bytes));
                        }
                        if s.allocation_list.len() < 4096 {
                            s.allocation_list.push((r.seq, r.thread, *p, bytes));
                        }
                    }
                    match r.results.first() {
                        Some(Value::DevPtr(p)) if *p >= base && *p - base < size => s.allocations_in_arena += 1,
                        Some(Value::DevPtr(_)) => s.allocations_outside_arena += 1,
                        _ => {}
                    }
                }
            }
            SyncClass::FreesDevice => s.frees += 1,
            SyncClass::HostToDevice => s.h2d.add(up),
            SyncClass::DeviceToHost | SyncClass::DeviceToHostAsync => s.d2h.add(down),
            SyncClass::CopyAnyDirection | SyncClass::CopyAnyDirectionAsync if down > 0 => s.d2h.add(down),
            SyncClass::CopyAnyDirection | SyncClass::CopyAnyDirectionAsync if up > 0 => s.h2d.add(up),
            _ if f.group == Group::Copy => s.d2d.add(size_arg(r, &kinds)),
            _ => {}
        }
    }

    pub(crate) fn add_blob_part(&mut self, p: &BlobPart) {
        if p.offset == 0 {
            self.s.blobs.add(p.total_len);
            if p.kind == BlobKind::CodeImage {
                self.s.code_images.add(p.total_len);
            }
        }
    }

    pub(crate) fn finish(mut self) -> Stats {
        self.allocated.sort_unstable();
        let flat: Vec<u8> =
            self.allocated.iter().flat_map(|&(a, n)| [a.to_le_bytes(), n.to_le_bytes()]).flatten().collect();
        self.s.allocation_digest = format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&flat));
        let mut levels: Vec<_> = self.levels.into_iter().collect();
        levels.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        self.s.by_level = levels;
        let mut fns: Vec<FunctionCount> = self
            .functions
            .into_iter()
            .map(|((level, name, modeled), count)| FunctionCount { level, name, count, modeled })
            .collect();
        fns.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.name.cmp(&b.name)));
        let slot = |name: &str| {
            let rest = name.strip_prefix(crate::model::EXPORT_TABLE_SLOT)?;
            let (uuid, slot) = rest.rsplit_once(':')?;
            Some((uuid.to_string(), slot.parse::<u32>().ok()?))
        };
        for f in fns.iter().filter(|f| !f.modeled) {
            match slot(&f.name) {
                Some((uuid, n)) => {
                    self.s.export_table_slots.push((uuid, n, f.count));
                    self.s.unmodeled_calls = self.s.unmodeled_calls.saturating_sub(f.count);
                }
                None => self.s.unmodeled.push((f.name.clone(), f.count)),
            }
        }
        self.s.export_table_slots.sort();
        self.s.by_function = fns;
        self.s.unique_kernels = self.launched.len() as u64;
        let names: HashSet<&str> = self.launched.iter().filter_map(|h| self.kernel_names.get(*h)).collect();
        self.s.unique_kernel_names = names.len() as u64;
        self.s.threads = self.threads.len() as u64;
        self.s.span_ns = self.last_ts.saturating_sub(self.first_ts.unwrap_or(0));
        self.s
    }
}

#[cfg(test)]
mod tests {
    use gpuless_analyzer::api::{ApiLevel, HandleKind, Variant};

    use super::*;

    /// The recorder's end-of-recording summaries count as the calls they stand for, also under a
    /// name that resolves to an entry of the table (`cuCtxGetDevice(calls=323)`), and lend no
    /// arguments to the per-call statistics.
    #[test]
    fn summaries_count_as_the_calls_they_stand_for() {
        let known = Function::resolve("cuCtxGetDevice", Variant::BASE);
        assert!(matches!(known, Function::Known(_)));
        let mut summary = CallRecord::new(10, ApiLevel::Driver, known.clone());
        summary.timestamp_ns = 5_000;
        summary.args = vec![Value::U64(323)];
        let mut other = CallRecord::new(11, ApiLevel::Driver, Function::Other("cuFakeUnmodeled".into()));
        other.args = vec![Value::U64(2)];
        let mut call = CallRecord::new(3, ApiLevel::Driver, known);
        call.thread = 77;
        call.duration_ns = 40;
        call.args = vec![Value::HostPtr(0x7ffd_0000)];
        call.results = vec![Value::Handle(HandleKind::Device, 0)];
        let mut folded = call.clone();
        folded.seq = 4;
        folded.duration_ns = 0;
        folded.repeat = 9;
        let recs = [call, folded, summary, other];
        let kinds: Vec<bool> = recs.iter().map(CallRecord::is_summary).collect();
        assert_eq!(kinds, [false, false, true, true]);
        let represented: Vec<u64> = recs.iter().map(CallRecord::calls_represented).collect();
        assert_eq!(represented, [1, 10, 323, 2]);
        let mut b = StatsBuilder::default();
        for r in &recs {
            b.add(r);
        }
        let s = b.finish();
        let count = |n: &str| s.by_function.iter().find(|f| f.name == n).map(|f| (f.count, f.modeled));
        assert_eq!(count("cuCtxGetDevice"), Some((1 + 10 + 323, true)));
        assert_eq!(count("cuFakeUnmodeled"), Some((2, false)));
        assert_eq!((s.calls, s.unmodeled_calls), (4, 2));
    }

    #[test]
    fn export_table_slots_are_listed_apart_from_unmodeled_calls() {
        let slot = |seq, name: &str, n| {
            let mut r = CallRecord::new(
                seq,
                ApiLevel::Driver,
                Function::Other(format!("{}{name}", crate::model::EXPORT_TABLE_SLOT)),
            );
            r.args = vec![Value::U64(n)];
            r
        };
        let mut other = CallRecord::new(3, ApiLevel::Driver, Function::Other("cuFakeUnmodeled".into()));
        other.args = vec![Value::U64(2)];
        let mut b = StatsBuilder::default();
        for r in [slot(1, "6bd5fb6c-aa:8", 40), slot(2, "6bd5fb6c-aa:1", 3), other] {
            b.add(&r);
        }
        let s = b.finish();
        assert_eq!(s.export_table_slots, [("6bd5fb6c-aa".to_string(), 1, 3), ("6bd5fb6c-aa".to_string(), 8, 40)]);
        assert_eq!(s.unmodeled, [("cuFakeUnmodeled".to_string(), 2)]);
        assert_eq!(s.unmodeled_calls, 2);
    }
}
