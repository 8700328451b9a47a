//! Launches at replay: a recorded launch's configuration made live, its parameters translated
//! where allocations or objects moved and relocated where the hot body moved a range, and what
//! the replay remembers of the kernels it launched.

use std::ffi::c_void;

use cudarc::driver::sys;
use gpuless_traces::Value;

use super::args::Call;
use super::{check, ReplayError, Report, State};

/// Kernels remembered for mismatch reports.
const RECENT_KERNELS: usize = 4;

/// Parameter bytes as recorded, or a translated copy when a pointer or a texture/surface object
/// in them may live elsewhere now. `layout` is empty for a packed `extra` buffer.
pub(crate) fn translated<'b>(
    st: &State,
    b: &'b [u8],
    layout: &[(u32, u32)],
    report: &mut Report,
) -> std::borrow::Cow<'b, [u8]> {
    if !st.mem.may_translate() && !st.objects.handles_moved() {
        return std::borrow::Cow::Borrowed(b);
    }
    let mut owned = b.to_vec();
    report.params_translated += st.mem.translate_params(&mut owned) as u64;
    report.params_translated += st.objects.translate_handles(&mut owned, layout) as u64;
    std::borrow::Cow::Owned(owned)
}

/// Parameter bytes with the words that point into a range moved for this launch
/// (`State::relocations`, see `dataflow.rs`) pointed at the range's new place.
fn relocated<'b>(st: &State, seq: u64, b: std::borrow::Cow<'b, [u8]>) -> std::borrow::Cow<'b, [u8]> {
    let Some(moves) = st.relocations.get(&seq) else { return b };
    let mut owned = b.into_owned();
    relocate_words(&mut owned, moves);
    std::borrow::Cow::Owned(owned)
}

/// Points every 8-byte-aligned word inside a moved range `[start, end)` at the same offset
/// from the range's new base. Returns how many words changed.
pub(crate) fn relocate_words(bytes: &mut [u8], moves: &[(super::blockhash::Span, u64)]) -> usize {
    let mut n = 0;
    for w in bytes.chunks_exact_mut(8) {
        let v = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
        if let Some(&((start, _), to)) = moves.iter().find(|((start, end), _)| *start <= v && v < *end) {
            w.copy_from_slice(&(to + (v - start)).to_le_bytes());
            n += 1;
        }
    }
    n
}

/// The live `CUlaunchConfig` of a recorded one; its attributes are built in `attrs` (as raw
/// bytes: ids newer than cudarc's enum stay intact), which must outlive the config's use.
pub(crate) fn live_config(
    st: &State,
    cfg: &gpuless_traces::LaunchConfig,
    attrs: &mut Vec<u64>,
) -> Result<sys::CUlaunchConfig, ReplayError> {
    let size = std::mem::size_of::<sys::CUlaunchAttribute>();
    let value_at = std::mem::offset_of!(sys::CUlaunchAttribute, value);
    *attrs = vec![0u64; (cfg.attrs.len() * size).div_ceil(8).max(1)];
    let base = attrs.as_mut_ptr().cast::<u8>();
    for (i, a) in cfg.attrs.iter().enumerate() {
        // SAFETY: entry `i` lies inside `attrs`, sized for every entry.
        unsafe {
            let at = base.add(i * size);
            std::ptr::write_unaligned(at.cast::<u32>(), a.id);
            let n = a.value.len().min(size - value_at);
            std::ptr::copy_nonoverlapping(a.value.as_ptr(), at.add(value_at), n);
        }
    }
    Ok(sys::CUlaunchConfig {
        gridDimX: cfg.grid.x,
        gridDimY: cfg.grid.y,
        gridDimZ: cfg.grid.z,
        blockDimX: cfg.block.x,
        blockDimY: cfg.block.y,
        blockDimZ: cfg.block.z,
        sharedMemBytes: cfg.shared_mem,
        hStream: st.stream(cfg.stream)?,
        attrs: base.cast(),
        numAttrs: cfg.attrs.len() as u32,
    })
}

/// A launch's parameters as the driver takes them: the `kernelParams` bytes (translated or
/// relocated where pointers in them live elsewhere now) and the packed `extra` buffer cuDNN and
/// cuBLAS pass instead. Used by launches and by graph kernel nodes given a repetition's
/// parameters (`piece_graph`).
pub(crate) struct KernelArgs<'b> {
    pub bytes: std::borrow::Cow<'b, [u8]>,
    pub layout: &'b [(u32, u32)],
    pub packed: std::borrow::Cow<'b, [u8]>,
    ptrs: Vec<*mut c_void>,
    packed_len: usize,
    extra_list: [*mut c_void; 5],
}

impl<'b> KernelArgs<'b> {
    /// The parameters of the launch `c`.
    pub fn new(st: &State, c: &Call<'b>, report: &mut Report) -> Result<KernelArgs<'b>, ReplayError> {
        let seq = c.rec.seq;
        let (bytes, layout): (&[u8], &[(u32, u32)]) = match c.arg("kernelParams") {
            Some(Value::KernelParams(kp)) => (&kp.bytes, &kp.layout),
            Some(Value::Null) | None => (&[], &[]),
            Some(other) => return Err(c.inconsistent(format!("kernel parameters not recorded ({other:?})"))),
        };
        // Parameter bytes are used in place unless a pointer in them must be translated (the
        // driver only reads them).
        let bytes = relocated(st, seq, translated(st, bytes, layout, report));
        let packed = match c.arg("extra") {
            Some(Value::Bytes(b)) => relocated(st, seq, translated(st, b, &[], report)),
            _ => std::borrow::Cow::Borrowed(&[][..]),
        };
        let packed_len = packed.len();
        Ok(KernelArgs { bytes, layout, packed, ptrs: Vec::new(), packed_len, extra_list: [std::ptr::null_mut(); 5] })
    }

    /// The `kernelParams` array (null when there are none); valid while `self` is not moved.
    pub fn params(&mut self) -> *mut *mut c_void {
        let base = self.bytes.as_ptr();
        self.ptrs = self.layout.iter().map(|&(off, _)| base.wrapping_add(off as usize).cast_mut().cast()).collect();
        if self.ptrs.is_empty() {
            std::ptr::null_mut()
        } else {
            self.ptrs.as_mut_ptr()
        }
    }

    /// The `extra` list of a packed buffer (null without one); valid while `self` is not
    /// moved.
    pub fn extra(&mut self) -> *mut *mut c_void {
        if self.packed.is_empty() {
            return std::ptr::null_mut();
        }
        // CU_LAUNCH_PARAM_BUFFER_POINTER (1), CU_LAUNCH_PARAM_BUFFER_SIZE (2), CU_LAUNCH_PARAM_END (0)
        self.extra_list = [
            std::ptr::without_provenance_mut(1),
            self.packed.as_ptr().cast_mut().cast(),
            std::ptr::without_provenance_mut(2),
            (&mut self.packed_len as *mut usize).cast(),
            std::ptr::null_mut(),
        ];
        self.extra_list.as_mut_ptr()
    }
}

/// Pinned memory of the recording a launch's parameters point into (8-byte-aligned words):
/// with unified addressing the kernel reads it directly, so it is re-created now as device
/// memory at its recorded address (or translated), zeroed. What the program's host wrote
/// there while the kernel ran (a flag it polls) is not in the trace: such a kernel sees zeros.
pub(crate) fn reach_pinned(st: &mut State, c: &Call<'_>, report: &mut Report) -> Result<(), ReplayError> {
    if st.pinned.is_empty() {
        return Ok(());
    }
    let mut reached = Vec::new();
    let mut scan = |b: &[u8]| {
        for w in b.chunks_exact(8) {
            let v = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
            if let Some((&s, &n)) = st.pinned.range(..=v).next_back().filter(|(&s, &n)| v < s.saturating_add(n)) {
                reached.push((s, n));
            }
        }
    };
    if let Some(Value::KernelParams(kp)) = c.arg("kernelParams") {
        scan(&kp.bytes);
    }
    if let Some(Value::Bytes(b)) = c.arg("extra") {
        scan(b);
    }
    reached.dedup();
    for (s, n) in reached {
        st.pinned.remove(&s);
        let live = st.mem.alloc_shared(s, n, c.rec.seq)?;
        // SAFETY: device memory just made, `n` bytes.
        check(
            unsafe { sys::cuMemsetD8_v2(live, 0, n as usize) },
            c.rec.seq,
            "cuMemsetD8 (pinned memory a kernel reads)",
        )?;
        report.warnings.push(format!(
            "call #{}: a kernel reads pinned host memory at {s:#x} ({n} bytes): re-created as zeroed device memory \
             (what the host wrote there is not in the trace)",
            c.rec.seq
        ));
    }
    Ok(())
}

pub(crate) unsafe fn launch(st: &mut State, c: &Call<'_>, report: &mut Report) -> Result<(), ReplayError> {
    let seq = c.rec.seq;
    let rec_f = c.word("f")?;
    reach_pinned(st, c, report)?;
    let func =
        st.function(rec_f).ok_or_else(|| c.inconsistent(format!("kernel handle {rec_f:#x} was never loaded")))?;
    let mut args = KernelArgs::new(st, c, report)?;
    let (params, extra) = (args.params(), args.extra());
    let r = if c.f.name == "cuLaunchKernelEx" {
        let Some(Value::LaunchConfig(cfg)) = c.arg("config") else { return Err(c.missing("config")) };
        let mut attrs = Vec::new();
        let config = live_config(st, cfg, &mut attrs)?;
        sys::cuLaunchKernelEx(&config, func, params, extra)
    } else {
        let g = |n: &str| c.word(n).map(|v| v as u32);
        let (gx, gy, gz) = (g("gridDimX")?, g("gridDimY")?, g("gridDimZ")?);
        let (bx, by, bz) = (g("blockDimX")?, g("blockDimY")?, g("blockDimZ")?);
        let smem = g("sharedMemBytes")?;
        let stream = st.stream(c.word("hStream")?)?;
        if c.f.name == "cuLaunchCooperativeKernel" {
            sys::cuLaunchCooperativeKernel(func, gx, gy, gz, bx, by, bz, smem, stream, params)
        } else {
            sys::cuLaunchKernel(func, gx, gy, gz, bx, by, bz, smem, stream, params, extra)
        }
    };
    if r != sys::CUresult::CUDA_SUCCESS {
        let attrs: Vec<u32> = match c.arg("config") {
            Some(Value::LaunchConfig(cfg)) => cfg.attrs.iter().map(|a| a.id).collect(),
            _ => Vec::new(),
        };
        let name = st.kernel_name(rec_f);
        let what = format!(
            "{} {name} ({} parameters in {} bytes, extra buffer {} bytes, launch attributes {attrs:?})",
            c.f.name,
            args.layout.len(),
            args.bytes.len(),
            args.packed.len()
        );
        check(r, seq, &what)?;
    }
    launched(st, rec_f, report);
    Ok(())
}

/// Counts a kernel launch and remembers it for mismatch reports.
pub(crate) fn launched(st: &mut State, rec_f: u64, report: &mut Report) {
    report.launches += 1;
    st.recent.push_back(rec_f);
    if st.recent.len() > RECENT_KERNELS {
        st.recent.pop_front();
    }
}
