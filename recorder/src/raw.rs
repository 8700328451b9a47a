//! Raw calls: the cheap form of a record, for the calls a program makes most.
//!
//! A launch, a memset, an event record or a device-to-device copy has arguments that are all
//! plain words, plus the kernel's parameter bytes for a launch. The recording thread keeps only
//! those words, the parameter bytes and the call's facts ([`RawCall`]); the trace writer's thread
//! turns them into a [`CallRecord`] with the API table ([`RawCall::into_record`]). Building the
//! typed record on the program's thread cost about two thirds of a recorded launch.

use std::sync::OnceLock;

use gpuless_analyzer::api::{self, ApiFunction, ArgKind, Direction, HandleKind, SyncClass};
use gpuless_traces::{CallRecord, Function, KernelParams, Value};

use crate::capture::{self, Layout};
use crate::hooks::HOOKS;

/// Most arguments a raw call keeps (`cuLaunchKernel` has 11).
pub const MAX_WORDS: usize = 11;

/// [`RawCall::parent`] of a call made outside any other hooked call.
pub const NO_PARENT: u64 = u64::MAX;
/// [`RawCall::config_at`] of a call without a launch configuration.
pub use crate::capture::NO_CONFIG;

/// How a function's calls are kept raw.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// `void** kernelParams` argument and the function-handle argument it belongs to.
    params: Option<(u8, u8)>,
    /// `void** extra` argument: a call passing one is recorded the full way.
    extra: Option<u8>,
    /// `const CUlaunchConfig*` argument (`cuLaunchKernelEx`), read at the call.
    config: Option<u8>,
}

fn make_plan(f: &ApiFunction) -> Option<Plan> {
    // cuInit opens the trace: it takes the full path in `record::hooked`.
    if f.args.len() > MAX_WORDS
        || f.name == "cuInit"
        || crate::arena::op(f.id).is_some()
        || matches!(f.sync, SyncClass::DeviceToHostAsync | SyncClass::DeviceToHost)
    {
        return None;
    }
    let prims = capture::plans(f);
    let mut plan = Plan { params: None, extra: None, config: None };
    for (i, a) in f.args.iter().enumerate() {
        if a.dir != Direction::In {
            return None;
        }
        match a.kind {
            ArgKind::KernelParams => {
                let func = f.args.iter().position(|a| a.kind == ArgKind::Handle(HandleKind::Function))?;
                plan.params = Some((i as u8, func as u8));
            }
            ArgKind::Extra => plan.extra = Some(i as u8),
            ArgKind::Struct("CUlaunchConfig") => plan.config = Some(i as u8),
            k => {
                capture::word_value(k, prims.get(i).copied()?, 0)?;
            }
        }
    }
    Some(plan)
}

/// The raw plan of API function `id`, if its calls can be kept raw.
pub fn plan(id: api::ApiId) -> Option<&'static Plan> {
    static PLANS: OnceLock<Vec<Option<Plan>>> = OnceLock::new();
    PLANS.get_or_init(|| api::functions().iter().map(make_plan).collect()).get(usize::from(id.0))?.as_ref()
}

impl Plan {
    /// Whether this call (its raw arguments) can be kept raw.
    pub fn fits(&self, raw: &[u64]) -> bool {
        self.extra.is_none_or(|i| raw.get(usize::from(i)).copied().unwrap_or(0) == 0)
    }

    /// Appends the kernel parameters of a launch to `bytes`: where they start, how many bytes,
    /// and their layout.
    ///
    /// # Safety
    /// `raw` are the arguments the program passed, in the API table's order, and the call has
    /// not returned to the program yet.
    pub unsafe fn params(&self, raw: &[u64], bytes: &mut Vec<u8>, lane: &crate::lane::Lane) -> Option<Params> {
        let (p, func) = self.params?;
        let p = raw.get(usize::from(p)).copied().unwrap_or(0);
        if p == 0 {
            return None;
        }
        let handle = raw.get(usize::from(func)).copied().unwrap_or(0);
        // SAFETY: forwarded: `p` is the launch's kernelParams, read by the driver too.
        let (start, layout) = unsafe { capture::pack(handle, p, bytes, lane) };
        Some(Params { start: start as u32, len: (bytes.len() - start) as u32, layout })
    }

    /// The launch configuration of a `cuLaunchKernelEx`, stashed in `bytes` with its attributes
    /// after it: where it starts, or [`NO_CONFIG`].
    ///
    /// # Safety
    /// As [`Plan::params`].
    pub unsafe fn config(&self, raw: &[u64], bytes: &mut Vec<u8>) -> u32 {
        let Some(i) = self.config else { return NO_CONFIG };
        let p = raw.get(usize::from(i)).copied().unwrap_or(0);
        // SAFETY: forwarded: the launch's `CUlaunchConfig`, read by the driver too.
        capture::RawConfig::stash(bytes, |bytes| unsafe { capture::read_config(p, bytes) })
    }
}

/// A launch's packed parameters: where they lie in the batch's bytes, and their layout.
pub struct Params {
    start: u32,
    len: u32,
    layout: Layout,
}

/// One call's facts, kept until the writer thread builds its record: 152 bytes, so that a
/// launch writes three cache lines of its thread's batch (its thread is the batch's).
pub struct RawCall {
    /// Sequence number.
    pub seq: u64,
    /// Nanoseconds since the start, at entry.
    pub timestamp_ns: u64,
    /// Enclosing hooked call, or [`NO_PARENT`].
    pub parent: u64,
    /// Nanoseconds in the call (saturating).
    pub duration_ns: u32,
    /// The driver's answer.
    pub status: i32,
    /// Hook slot (function and variant).
    pub slot: u16,
    /// Where the launch configuration (`cuLaunchKernelEx`) was stashed in the batch's bytes, its
    /// attributes after it, or [`NO_CONFIG`] (`capture::RawConfig::stash`).
    pub config_at: u32,
    /// The argument words, `args.len()` of them.
    pub words: [u64; MAX_WORDS],
    /// Packed kernel parameters (in the batch's bytes) and their layout.
    pub params: Option<Params>,
}

impl RawCall {
    /// The record this call stands for; `bytes` are its batch's bytes, `thread` the batch's
    /// thread.
    pub fn into_record(self, bytes: &[u8], thread: u64) -> CallRecord {
        let hook = &HOOKS[usize::from(self.slot)];
        let f = api::get(hook.func);
        let prims = f.map(capture::plans).unwrap_or(&[]);
        let mut params = self.params;
        let config = capture::RawConfig::unstash(bytes, self.config_at);
        let args = f
            .map(|f| f.args)
            .unwrap_or(&[])
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let w = self.words.get(i).copied().unwrap_or(0);
                match a.kind {
                    ArgKind::KernelParams => match params.take() {
                        Some(p) => {
                            let (s, n) = (p.start as usize, p.len as usize);
                            let bytes = bytes.get(s..s + n).unwrap_or_default().to_vec();
                            Value::KernelParams(KernelParams { bytes, layout: p.layout.to_vec() })
                        }
                        None if w == 0 => Value::Null,
                        None => Value::HostPtr(w),
                    },
                    ArgKind::Extra => Value::Null,
                    ArgKind::Struct(_) => config.as_ref().map_or(Value::Null, |c| capture::config_value(c, bytes)),
                    k => capture::word_value(k, prims.get(i).copied().unwrap_or(capture::Prim::Value(None)), w)
                        .unwrap_or(Value::U64(w)),
                }
            })
            .collect();
        CallRecord {
            seq: self.seq,
            thread,
            timestamp_ns: self.timestamp_ns,
            duration_ns: u64::from(self.duration_ns),
            level: f.map_or(api::ApiLevel::Driver, |f| f.level),
            parent: (self.parent != NO_PARENT).then_some(self.parent),
            function: Function::Known(hook.func),
            variant: hook.variant,
            status: self.status,
            args,
            results: Vec::new(),
            repeat: 0,
        }
    }
}

/// A record as a thread keeps it until the writer has it.
pub enum Rec {
    /// Built on the recording thread.
    Full(CallRecord),
    /// Built by the writer.
    Raw(RawCall),
    /// A folded query's repeats (`fold.rs`), built by the writer.
    Repeats(crate::fold::Repeats),
}

impl Rec {
    /// The record; `bytes` are its batch's bytes, `thread` the batch's thread.
    pub fn into_record(self, bytes: &[u8], thread: u64) -> CallRecord {
        match self {
            Rec::Full(r) => r,
            Rec::Raw(r) => r.into_record(bytes, thread),
            Rec::Repeats(r) => r.into_record(),
        }
    }
}

#[cfg(test)]
mod tests {
    /// A launch's record fills three cache lines of the batch, not four.
    #[test]
    fn a_raw_call_is_at_most_three_cache_lines() {
        assert!(std::mem::size_of::<super::RawCall>() <= 160, "{}", std::mem::size_of::<super::RawCall>());
        assert!(std::mem::size_of::<super::Rec>() <= 160, "{}", std::mem::size_of::<super::Rec>());
    }
}
