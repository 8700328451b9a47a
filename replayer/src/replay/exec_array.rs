//! CUDA arrays, 2D/3D copies, array copies, 2D memsets, texture and surface objects at replay.
//!
//! 2D/3D copies are recorded as their struct's bytes plus, when the source is host memory, the
//! packed host rows as a blob; a synchronous copy into host memory has the packed rows' hash as
//! its result (`gpuless_analyzer::api::structs`). At replay the host side points at a packed
//! buffer, device sides are translated through the memory map and array sides through the
//! array map. Resource descriptors of texture and surface objects are translated the same way;
//! the objects' recorded handles map to live ones, and kernel parameters holding a handle that
//! changed are rewritten (`Objects::translate_handles`).

use std::ffi::c_void;

use cudarc::driver::sys;
use gpuless_analyzer::api::structs::{self, Copy, Dims, Resource, Side};
use gpuless_analyzer::api::HandleKind;
use gpuless_traces::Value;

use super::args::{word, Call};
use super::blobs::blob;
use super::dry_model::Model;
use super::objects::capturing;
use super::raw::raw_fn;
use super::results::verify_value;
use super::{check, LoadedTrace, ReplayError, Report, State};

/// A struct's recorded bytes in 8-byte-aligned memory of at least `size` bytes (zero-padded).
pub(crate) fn aligned_struct(b: &[u8], size: usize) -> Vec<u64> {
    let mut v = vec![0u64; b.len().max(size).div_ceil(8)];
    as_bytes(&mut v)[..b.len()].copy_from_slice(b);
    v
}

/// The bytes of an aligned buffer.
pub(crate) fn as_bytes(v: &mut [u64]) -> &mut [u8] {
    // SAFETY: u64 has no padding and any byte pattern is valid for u8.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), v.len() * 8) }
}

/// Where a copy's host destination lands at replay.
enum HostDst {
    Owned(Vec<u8>),
    Pinned(*const u8, usize),
}

/// A copy struct ready for the driver.
pub(crate) struct Prepared {
    buf: Vec<u64>,
    dst: Option<HostDst>,
    /// A host source the client reads late (client mode: a graph's memcpy node reads host
    /// memory at every launch): the pinned staging buffer the copy reads, and its length.
    pub late: Option<(*mut u8, usize)>,
}

impl Prepared {
    pub fn ptr(&self) -> *const c_void {
        self.buf.as_ptr().cast()
    }

    pub fn host_destination(&self) -> bool {
        self.dst.is_some()
    }

    /// The pinned buffer a graph node writes the host side into, and its length.
    pub fn pinned_destination(&self) -> Option<(*const u8, usize)> {
        match self.dst {
            Some(HostDst::Pinned(p, n)) => Some((p, n)),
            _ => None,
        }
    }

    fn dst_bytes(&self) -> &[u8] {
        match &self.dst {
            Some(HostDst::Owned(v)) => v,
            // SAFETY: pinned memory of this length owned by the replay.
            Some(HostDst::Pinned(p, n)) => unsafe { std::slice::from_raw_parts(*p, *n) },
            None => &[],
        }
    }
}

/// A recorded copy struct: its bytes and the stored host source, if any.
pub(crate) fn copy_value(v: Option<&Value>) -> Option<(&[u8], Option<&Value>)> {
    match v {
        Some(Value::List(items)) => match items.first() {
            Some(Value::Bytes(b)) => Some((b, items.get(1).filter(|v| !matches!(v, Value::Null)))),
            _ => None,
        },
        Some(Value::Bytes(b)) => Some((b, None)),
        _ => None,
    }
}

fn recorded_host_result(v: Option<&Value>) -> bool {
    matches!(v, Some(Value::Digest(_) | Value::Blob(_)))
}

impl State {
    fn array(&self, c: &Call<'_>, h: u64) -> Result<sys::CUarray, ReplayError> {
        self.objects.arrays.get(&h).copied().ok_or_else(|| c.inconsistent(format!("unknown array {h:#x}")))
    }

    fn live_side(&self, c: &Call<'_>, s: &Side) -> Result<Side, ReplayError> {
        let mut s = *s;
        match s.memory_type {
            structs::MEMORYTYPE_ARRAY => s.array = self.array(c, s.array)? as u64,
            structs::MEMORYTYPE_HOST => {
                return Err(c.inconsistent("the host side of a 2D/3D copy was not recorded".into()));
            }
            _ => s.device = self.mem.translate(s.device),
        }
        Ok(s)
    }
}

/// Builds the live copy struct of `c`'s argument `arg`. `keep`: host buffers must outlive the
/// call (graph nodes, captured copies): pinned memory owned by the replay.
pub(crate) fn prepare(
    st: &mut State,
    trace: &LoadedTrace,
    c: &Call<'_>,
    arg: &str,
    dims: Dims,
    keep: bool,
) -> Result<Prepared, ReplayError> {
    let v = copy_value(c.arg(arg)).ok_or_else(|| c.missing(arg))?;
    prepare_value(st, trace, c, v, c.result(arg), dims, keep)
}

/// [`prepare`] for a copy struct recorded as `(bytes, host source)` (an argument, or a member
/// of a tagged union), with the call's recorded result for it.
pub(crate) fn prepare_value(
    st: &mut State,
    trace: &LoadedTrace,
    c: &Call<'_>,
    (bytes, src_blob): (&[u8], Option<&Value>),
    result: Option<&Value>,
    dims: Dims,
    keep: bool,
) -> Result<Prepared, ReplayError> {
    let seq = c.rec.seq;
    let mut buf = aligned_struct(bytes, dims.size());
    let copy = Copy::parse(dims, as_bytes(&mut buf)).ok_or_else(|| c.inconsistent("copy struct too short".into()))?;
    let mut late = None;
    let src = match src_blob {
        Some(Value::HostPtr(_)) if keep => {
            let n = copy.packed_len().ok_or_else(|| c.inconsistent("copy extent too large".into()))? as usize;
            let p = st.objects.pinned(n, seq)?;
            late = Some((p, n));
            copy.packed_side(p as u64)
        }
        Some(v) => {
            let data = blob(trace, c, Some(v))?;
            let p = if keep {
                let p = st.objects.pinned(data.len(), seq)?;
                // SAFETY: a fresh buffer of this length.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
                // A graph node reads it at every launch: a recorded launch may bring new bytes.
                st.objects.staged.insert(seq, (p, data.len()));
                p.cast_const()
            } else {
                data.as_ptr()
            };
            copy.packed_side(p as u64)
        }
        None => st.live_side(c, &copy.src)?,
    };
    // A synchronous copy into host memory has its hash as the result; a stream-ordered one or a
    // graph node has none: host memory is then known by its memory type alone.
    let host_dst = recorded_host_result(result) || copy.dst.memory_type == structs::MEMORYTYPE_HOST;
    let (dst, dst_buf) = if host_dst {
        let n = copy.packed_len().ok_or_else(|| c.inconsistent("copy extent too large".into()))? as usize;
        if keep {
            let p = st.objects.pinned(n, seq)?;
            (copy.packed_side(p as u64), Some(HostDst::Pinned(p, n)))
        } else {
            let mut v = vec![0u8; n];
            (copy.packed_side(v.as_mut_ptr() as u64), Some(HostDst::Owned(v)))
        }
    } else {
        (st.live_side(c, &copy.dst)?, None)
    };
    let b = as_bytes(&mut buf);
    Copy::write_side(dims, b, false, &src);
    Copy::write_side(dims, b, true, &dst);
    Ok(Prepared { buf, dst: dst_buf, late })
}

type ArrayCreateV1 = unsafe extern "C" fn(*mut sys::CUarray, *const c_void) -> sys::CUresult;

/// Executes an array, 2D/3D copy or texture record; `Ok(false)` when `c` is none of them.
pub(crate) fn call(
    st: &mut State,
    trace: &LoadedTrace,
    c: &Call<'_>,
    report: &mut Report,
) -> Result<bool, ReplayError> {
    let (seq, name) = (c.rec.seq, c.f.name);
    let stream = c.arg("hStream").and_then(word).map(|s| st.stream(s)).transpose()?;
    // SAFETY (whole match): driver calls with live handles and structs built here.
    unsafe {
        match name {
            "cuArrayCreate" | "cuArray3DCreate" => {
                let Some(Value::Bytes(b)) = c.arg("pAllocateArray") else { return Err(c.missing("pAllocateArray")) };
                let desc = aligned_struct(b, std::mem::size_of::<sys::CUDA_ARRAY3D_DESCRIPTOR>());
                let mut a = std::ptr::null_mut();
                let r = match (name, c.rec.variant.version) {
                    // The bare symbols take the 32-bit descriptors: their bytes are a prefix.
                    ("cuArrayCreate", 1) => {
                        raw_fn::<ArrayCreateV1>(b"cuArrayCreate\0", seq)?(&mut a, desc.as_ptr().cast())
                    }
                    ("cuArray3DCreate", 1) => {
                        raw_fn::<ArrayCreateV1>(b"cuArray3DCreate\0", seq)?(&mut a, desc.as_ptr().cast())
                    }
                    ("cuArrayCreate", _) => sys::cuArrayCreate_v2(&mut a, desc.as_ptr().cast()),
                    _ => sys::cuArray3DCreate_v2(&mut a, desc.as_ptr().cast()),
                };
                check(r, seq, name)?;
                st.objects.arrays.insert(c.out_word("pHandle")?, a);
            }
            "cuArrayDestroy" => {
                if let Some(a) = st.objects.arrays.remove(&c.word("hArray")?) {
                    sys::cuArrayDestroy(a);
                }
            }
            "cuMipmappedArrayCreate" => {
                let Some(Value::Bytes(b)) = c.arg("pMipmappedArrayDesc") else {
                    return Err(c.missing("pMipmappedArrayDesc"));
                };
                let desc = aligned_struct(b, std::mem::size_of::<sys::CUDA_ARRAY3D_DESCRIPTOR>());
                let mut a = std::ptr::null_mut();
                check(
                    sys::cuMipmappedArrayCreate(&mut a, desc.as_ptr().cast(), c.word("numMipmapLevels")? as u32),
                    seq,
                    name,
                )?;
                st.objects.mipmapped.insert(c.out_word("pHandle")?, a);
            }
            "cuMipmappedArrayGetLevel" => {
                let h = c.word("hMipmappedArray")?;
                let m = *st
                    .objects
                    .mipmapped
                    .get(&h)
                    .ok_or_else(|| c.inconsistent(format!("unknown mipmapped array {h:#x}")))?;
                let mut a = std::ptr::null_mut();
                check(sys::cuMipmappedArrayGetLevel(&mut a, m, c.word("level")? as u32), seq, name)?;
                st.objects.arrays.insert(c.out_word("pLevelArray")?, a);
            }
            "cuMipmappedArrayDestroy" => {
                if let Some(m) = st.objects.mipmapped.remove(&c.word("hMipmappedArray")?) {
                    sys::cuMipmappedArrayDestroy(m);
                }
            }
            "cuMemcpy2D" | "cuMemcpy2DUnaligned" | "cuMemcpy3D" | "cuMemcpy2DAsync" | "cuMemcpy3DAsync" => {
                if c.rec.variant.version < 2 {
                    return Err(c.inconsistent("the bare v1 symbol (32-bit copy struct) is not replayed".into()));
                }
                let dims = if name.starts_with("cuMemcpy3D") { Dims::Three } else { Dims::Two };
                let keep = stream.is_some_and(capturing);
                let copy = prepare(st, trace, c, "pCopy", dims, keep)?;
                let p = copy.ptr();
                let r = match (name, stream) {
                    ("cuMemcpy2D", _) => sys::cuMemcpy2D_v2(p.cast()),
                    ("cuMemcpy2DUnaligned", _) => sys::cuMemcpy2DUnaligned_v2(p.cast()),
                    ("cuMemcpy3D", _) => sys::cuMemcpy3D_v2(p.cast()),
                    ("cuMemcpy2DAsync", Some(s)) => sys::cuMemcpy2DAsync_v2(p.cast(), s),
                    (_, Some(s)) => sys::cuMemcpy3DAsync_v2(p.cast(), s),
                    (_, None) => return Err(c.missing("hStream")),
                };
                check(r, seq, name)?;
                if stream.is_none() {
                    st.copied_in();
                }
                if copy.host_destination() {
                    match stream {
                        // Into host memory on a stream a graph captures: the rows arrive at
                        // every launch of the graph, not compared.
                        Some(_) if keep => report.results_unverified += 1,
                        // Stream-ordered into host memory: waited for and compared at once with
                        // the rows the recorder hashed at the synchronization that covered it.
                        Some(s) => {
                            check(sys::cuStreamSynchronize(s), seq, name)?;
                            verify_value(st, seq, name, c.result("pCopy"), copy.dst_bytes(), trace, report);
                        }
                        None => verify_value(st, seq, name, c.result("pCopy"), copy.dst_bytes(), trace, report),
                    }
                }
            }
            "cuMemcpyHtoA" | "cuMemcpyHtoAAsync" => {
                let data = blob(trace, c, c.arg("srcHost"))?;
                let a = st.array(c, c.word("dstArray")?)?;
                let off = c.word("dstOffset")? as usize;
                let r = match stream {
                    Some(s) if capturing(s) => {
                        let p = st.objects.pinned(data.len(), seq)?;
                        std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len());
                        sys::cuMemcpyHtoAAsync_v2(a, off, p.cast(), data.len(), s)
                    }
                    Some(s) => sys::cuMemcpyHtoAAsync_v2(a, off, data.as_ptr().cast(), data.len(), s),
                    None => sys::cuMemcpyHtoA_v2(a, off, data.as_ptr().cast(), data.len()),
                };
                check(r, seq, name)?;
                if stream.is_none() {
                    st.copied_in();
                }
            }
            "cuMemcpyAtoH" | "cuMemcpyAtoHAsync" => {
                let a = st.array(c, c.word("srcArray")?)?;
                let (off, n) = (c.word("srcOffset")? as usize, c.word("ByteCount")? as usize);
                let mut host = vec![0u8; n];
                match stream {
                    Some(s) => {
                        check(sys::cuMemcpyAtoHAsync_v2(host.as_mut_ptr().cast(), a, off, n, s), seq, name)?;
                        check(sys::cuStreamSynchronize(s), seq, name)?;
                    }
                    None => check(sys::cuMemcpyAtoH_v2(host.as_mut_ptr().cast(), a, off, n), seq, name)?,
                }
                verify_value(st, seq, name, c.result("dstHost"), &host, trace, report);
            }
            "cuMemcpyDtoA" => {
                let a = st.array(c, c.word("dstArray")?)?;
                let src = st.mem.translate(c.word("srcDevice")?);
                check(
                    sys::cuMemcpyDtoA_v2(a, c.word("dstOffset")? as usize, src, c.word("ByteCount")? as usize),
                    seq,
                    name,
                )?;
            }
            "cuMemcpyAtoD" => {
                let a = st.array(c, c.word("srcArray")?)?;
                let dst = st.mem.translate(c.word("dstDevice")?);
                check(
                    sys::cuMemcpyAtoD_v2(dst, a, c.word("srcOffset")? as usize, c.word("ByteCount")? as usize),
                    seq,
                    name,
                )?;
            }
            "cuMemcpyAtoA" => {
                let (d, s) = (st.array(c, c.word("dstArray")?)?, st.array(c, c.word("srcArray")?)?);
                let (doff, soff, n) =
                    (c.word("dstOffset")? as usize, c.word("srcOffset")? as usize, c.word("ByteCount")? as usize);
                check(sys::cuMemcpyAtoA_v2(d, doff, s, soff, n), seq, name)?;
            }
            "cuMemsetD2D8" | "cuMemsetD2D16" | "cuMemsetD2D32" | "cuMemsetD2D8Async" | "cuMemsetD2D16Async"
            | "cuMemsetD2D32Async" => {
                let dst = st.mem.translate(c.word("dstDevice")?);
                let (pitch, w, h) =
                    (c.word("dstPitch")? as usize, c.word("Width")? as usize, c.word("Height")? as usize);
                let r = match (name.trim_end_matches("Async"), stream) {
                    ("cuMemsetD2D8", None) => sys::cuMemsetD2D8_v2(dst, pitch, c.word("uc")? as u8, w, h),
                    ("cuMemsetD2D16", None) => sys::cuMemsetD2D16_v2(dst, pitch, c.word("us")? as u16, w, h),
                    ("cuMemsetD2D32", None) => sys::cuMemsetD2D32_v2(dst, pitch, c.word("ui")? as u32, w, h),
                    ("cuMemsetD2D8", Some(s)) => sys::cuMemsetD2D8Async(dst, pitch, c.word("uc")? as u8, w, h, s),
                    ("cuMemsetD2D16", Some(s)) => sys::cuMemsetD2D16Async(dst, pitch, c.word("us")? as u16, w, h, s),
                    (_, Some(s)) => sys::cuMemsetD2D32Async(dst, pitch, c.word("ui")? as u32, w, h, s),
                    (_, None) => return Err(c.missing("hStream")),
                };
                check(r, seq, name)?;
            }
            "cuTexObjectCreate" | "cuSurfObjectCreate" => {
                let res = resource_desc(st, c)?;
                let mut live = 0u64;
                let r = if name == "cuTexObjectCreate" {
                    let Some(Value::Bytes(t)) = c.arg("pTexDesc") else { return Err(c.missing("pTexDesc")) };
                    let tex = aligned_struct(t, std::mem::size_of::<sys::CUDA_TEXTURE_DESC>());
                    let view = match c.arg("pResViewDesc") {
                        Some(Value::Bytes(v)) => {
                            Some(aligned_struct(v, std::mem::size_of::<sys::CUDA_RESOURCE_VIEW_DESC>()))
                        }
                        _ => None,
                    };
                    let view_ptr = view.as_ref().map_or(std::ptr::null(), |v| v.as_ptr().cast());
                    sys::cuTexObjectCreate(&mut live, res.as_ptr().cast(), tex.as_ptr().cast(), view_ptr)
                } else {
                    sys::cuSurfObjectCreate(&mut live, res.as_ptr().cast())
                };
                check(r, seq, name)?;
                let out = if name == "cuTexObjectCreate" { "pTexObject" } else { "pSurfObject" };
                st.objects.add_texture(c.out_word(out)?, live);
            }
            "cuTexObjectDestroy" => {
                if let Some(t) = st.objects.remove_texture(c.word("texObject")?) {
                    sys::cuTexObjectDestroy(t);
                }
            }
            "cuSurfObjectDestroy" => {
                if let Some(t) = st.objects.remove_texture(c.word("surfObject")?) {
                    sys::cuSurfObjectDestroy(t);
                }
            }
            _ => return Ok(false),
        }
    }
    report.executed += 1;
    Ok(true)
}

/// The live `CUDA_RESOURCE_DESC` of a texture or surface object.
fn resource_desc(st: &State, c: &Call<'_>) -> Result<Vec<u64>, ReplayError> {
    let Some(Value::Bytes(b)) = c.arg("pResDesc") else { return Err(c.missing("pResDesc")) };
    let mut desc = aligned_struct(b, std::mem::size_of::<sys::CUDA_RESOURCE_DESC>());
    let bytes = as_bytes(&mut desc);
    let live = match structs::resource(bytes) {
        Resource::Array(h) => st.array(c, h)? as u64,
        Resource::Mipmapped(h) => {
            *st.objects.mipmapped.get(&h).ok_or_else(|| c.inconsistent(format!("unknown mipmapped array {h:#x}")))?
                as u64
        }
        Resource::Memory(p) => st.mem.translate(p),
        Resource::Other(t) => return Err(c.inconsistent(format!("unknown resource type {t}"))),
    };
    structs::set_resource(bytes, live);
    Ok(desc)
}

/// Dry run: a 2D/3D copy's sides are live (device ranges, arrays) or recorded (host source).
pub(crate) fn copy_ok(m: &Model, trace: &LoadedTrace, c: &Call<'_>, arg: &str, dims: Dims) -> Result<(), String> {
    let v = copy_value(c.arg(arg)).ok_or_else(|| c.missing(arg).to_string())?;
    copy_value_ok(m, trace, v, c.result(arg), dims)
}

/// [`copy_ok`] for a copy struct recorded as `(bytes, host source)` with its recorded result.
pub(crate) fn copy_value_ok(
    m: &Model,
    trace: &LoadedTrace,
    (bytes, src_blob): (&[u8], Option<&Value>),
    result: Option<&Value>,
    dims: Dims,
) -> Result<(), String> {
    let copy = Copy::parse(dims, bytes).ok_or("copy struct too short")?;
    let side_ok = |s: &Side, what: &str| -> Result<(), String> {
        match s.memory_type {
            structs::MEMORYTYPE_ARRAY if m.has(HandleKind::Array, s.array) => Ok(()),
            structs::MEMORYTYPE_ARRAY => Err(format!("{what} is unknown array {:#x}", s.array)),
            structs::MEMORYTYPE_HOST => Err(format!("{what} host bytes were not recorded")),
            _ => {
                let slice = s.pitch.saturating_mul(s.height);
                let start = s
                    .device
                    .saturating_add(s.z.saturating_mul(slice))
                    .saturating_add(s.y.saturating_mul(s.pitch))
                    .saturating_add(s.x);
                let len = copy.depth.max(1).saturating_sub(1).saturating_mul(slice)
                    + copy.height.max(1).saturating_sub(1).saturating_mul(s.pitch)
                    + copy.width;
                if m.inside(start, len) {
                    Ok(())
                } else {
                    Err(format!("{what} {start:#x}..+{len} lies outside every live allocation"))
                }
            }
        }
    };
    match src_blob {
        Some(v) => super::dry_model::blob_ok(trace, Some(v), "host source of a 2D/3D copy")?,
        None => side_ok(&copy.src, "source")?,
    }
    if !(recorded_host_result(result) || copy.dst.memory_type == structs::MEMORYTYPE_HOST) {
        side_ok(&copy.dst, "destination")?;
    }
    Ok(())
}

/// The dry-run model of the calls above; `None` when `c` is none of them.
pub(crate) fn check_dry(m: &mut Model, trace: &LoadedTrace, c: &Call<'_>) -> Option<Result<(), String>> {
    use HandleKind::{Array, MipmappedArray, SurfObject, TexObject};
    let name = c.f.name;
    let w = |n: &str| c.word(n).map_err(|e| e.to_string());
    let ow = |n: &str| c.out_word(n).map_err(|e| e.to_string());
    let need = |m: &Model, k: HandleKind, h: u64, what: &str| {
        if m.has(k, h) {
            Ok(())
        } else {
            Err(format!("uses unknown {what} {h:#x}"))
        }
    };
    let stream_ok = |m: &Model| match c.arg("hStream").and_then(word) {
        Some(s) if !m.stream_ok(s) => Err(format!("uses unknown stream {s:#x}")),
        _ => Ok(()),
    };
    Some(match name {
        "cuArrayCreate" | "cuArray3DCreate" => ow("pHandle").map(|a| m.add(Array, a)),
        "cuArrayDestroy" => w("hArray").and_then(|a| need(m, Array, a, "array").map(|_| m.remove(Array, a))),
        "cuMipmappedArrayCreate" => ow("pHandle").map(|a| m.add(MipmappedArray, a)),
        "cuMipmappedArrayGetLevel" => w("hMipmappedArray")
            .and_then(|h| need(m, MipmappedArray, h, "mipmapped array"))
            .and_then(|_| ow("pLevelArray"))
            .map(|a| m.add(Array, a)),
        "cuMipmappedArrayDestroy" => w("hMipmappedArray")
            .and_then(|a| need(m, MipmappedArray, a, "mipmapped array").map(|_| m.remove(MipmappedArray, a))),
        "cuMemcpy2D" | "cuMemcpy2DUnaligned" | "cuMemcpy3D" | "cuMemcpy2DAsync" | "cuMemcpy3DAsync" => {
            let dims = if name.starts_with("cuMemcpy3D") { Dims::Three } else { Dims::Two };
            stream_ok(m).and_then(|_| copy_ok(m, trace, c, "pCopy", dims))
        }
        "cuMemcpyHtoA" | "cuMemcpyHtoAAsync" => {
            super::dry_model::blob_ok(trace, c.arg("srcHost"), "host-to-array payload")
                .and_then(|_| w("dstArray"))
                .and_then(|a| need(m, Array, a, "array"))
                .and_then(|_| stream_ok(m))
        }
        "cuMemcpyAtoH" | "cuMemcpyAtoHAsync" => {
            w("srcArray").and_then(|a| need(m, Array, a, "array")).and_then(|_| stream_ok(m))
        }
        "cuMemcpyDtoA" => w("dstArray").and_then(|a| need(m, Array, a, "array")).and_then(|_| {
            let (p, n) = (w("srcDevice")?, w("ByteCount")?);
            m.inside(p, n).then_some(()).ok_or(format!("source {p:#x}..+{n} lies outside every live allocation"))
        }),
        "cuMemcpyAtoD" => w("srcArray").and_then(|a| need(m, Array, a, "array")).and_then(|_| {
            let (p, n) = (w("dstDevice")?, w("ByteCount")?);
            m.inside(p, n).then_some(()).ok_or(format!("destination {p:#x}..+{n} lies outside every live allocation"))
        }),
        "cuMemcpyAtoA" => w("dstArray")
            .and_then(|a| need(m, Array, a, "array"))
            .and_then(|_| w("srcArray"))
            .and_then(|a| need(m, Array, a, "array")),
        "cuMemsetD2D8" | "cuMemsetD2D16" | "cuMemsetD2D32" | "cuMemsetD2D8Async" | "cuMemsetD2D16Async"
        | "cuMemsetD2D32Async" => (|| {
            let elem = if name.contains("D2D8") {
                1
            } else if name.contains("D2D16") {
                2
            } else {
                4
            };
            let (p, pitch, width, h) = (w("dstDevice")?, w("dstPitch")?, w("Width")?, w("Height")?);
            let n = h.max(1).saturating_sub(1).saturating_mul(pitch).saturating_add(width.saturating_mul(elem));
            stream_ok(m)?;
            m.inside(p, n).then_some(()).ok_or(format!("destination {p:#x}..+{n} lies outside every live allocation"))
        })(),
        "cuTexObjectCreate" | "cuSurfObjectCreate" => (|| {
            let Some(Value::Bytes(b)) = c.arg("pResDesc") else {
                return Err("resource descriptor not recorded".to_string());
            };
            match structs::resource(b) {
                Resource::Array(h) => need(m, Array, h, "array")?,
                Resource::Mipmapped(h) => need(m, MipmappedArray, h, "mipmapped array")?,
                Resource::Memory(p) if m.inside(p, 1) => {}
                Resource::Memory(p) => {
                    return Err(format!("resource memory {p:#x} lies outside every live allocation"))
                }
                Resource::Other(t) => return Err(format!("unknown resource type {t}")),
            }
            if name == "cuTexObjectCreate" {
                ow("pTexObject").map(|t| m.add(TexObject, t))
            } else {
                ow("pSurfObject").map(|t| m.add(SurfObject, t))
            }
        })(),
        "cuTexObjectDestroy" => {
            w("texObject").and_then(|t| need(m, TexObject, t, "texture object").map(|_| m.remove(TexObject, t)))
        }
        "cuSurfObjectDestroy" => {
            w("surfObject").and_then(|t| need(m, SurfObject, t, "surface object").map(|_| m.remove(SurfObject, t)))
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::*;

    fn put(b: &mut [u8], at: usize, v: u64) {
        b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }

    /// The byte offsets `gpuless_analyzer::api::structs` uses agree with cudarc's definitions.
    #[test]
    fn copy_and_resource_layouts_match_the_driver_structs() {
        type C3 = sys::CUDA_MEMCPY3D_st;
        type C2 = sys::CUDA_MEMCPY2D_st;
        assert_eq!(size_of::<C3>(), Dims::Three.size());
        assert_eq!(size_of::<C2>(), Dims::Two.size());
        let mut b = vec![0u8; size_of::<C3>()];
        for (at, v) in [
            (offset_of!(C3, srcXInBytes), 1),
            (offset_of!(C3, srcY), 2),
            (offset_of!(C3, srcZ), 3),
            (offset_of!(C3, srcHost), 4),
            (offset_of!(C3, srcDevice), 5),
            (offset_of!(C3, srcArray), 6),
            (offset_of!(C3, srcPitch), 7),
            (offset_of!(C3, srcHeight), 8),
            (offset_of!(C3, dstXInBytes), 11),
            (offset_of!(C3, dstY), 12),
            (offset_of!(C3, dstZ), 13),
            (offset_of!(C3, dstHost), 14),
            (offset_of!(C3, dstDevice), 15),
            (offset_of!(C3, dstArray), 16),
            (offset_of!(C3, dstPitch), 17),
            (offset_of!(C3, dstHeight), 18),
            (offset_of!(C3, WidthInBytes), 21),
            (offset_of!(C3, Height), 22),
            (offset_of!(C3, Depth), 23),
        ] {
            put(&mut b, at, v);
        }
        b[offset_of!(C3, srcMemoryType)] = 1;
        b[offset_of!(C3, dstMemoryType)] = 3;
        let c = Copy::parse(Dims::Three, &b).unwrap();
        let s = (c.src.x, c.src.y, c.src.z, c.src.host, c.src.device, c.src.array, c.src.pitch, c.src.height);
        assert_eq!(s, (1, 2, 3, 4, 5, 6, 7, 8));
        let d = (c.dst.x, c.dst.y, c.dst.z, c.dst.host, c.dst.device, c.dst.array, c.dst.pitch, c.dst.height);
        assert_eq!(d, (11, 12, 13, 14, 15, 16, 17, 18));
        assert_eq!((c.src.memory_type, c.dst.memory_type, c.width, c.height, c.depth), (1, 3, 21, 22, 23));

        let mut b = vec![0u8; size_of::<C2>()];
        for (at, v) in [
            (offset_of!(C2, srcXInBytes), 1),
            (offset_of!(C2, srcY), 2),
            (offset_of!(C2, srcHost), 4),
            (offset_of!(C2, srcDevice), 5),
            (offset_of!(C2, srcArray), 6),
            (offset_of!(C2, srcPitch), 7),
            (offset_of!(C2, dstXInBytes), 11),
            (offset_of!(C2, dstY), 12),
            (offset_of!(C2, dstHost), 14),
            (offset_of!(C2, dstDevice), 15),
            (offset_of!(C2, dstArray), 16),
            (offset_of!(C2, dstPitch), 17),
            (offset_of!(C2, WidthInBytes), 21),
            (offset_of!(C2, Height), 22),
        ] {
            put(&mut b, at, v);
        }
        b[offset_of!(C2, srcMemoryType)] = 2;
        b[offset_of!(C2, dstMemoryType)] = 4;
        let c = Copy::parse(Dims::Two, &b).unwrap();
        let s = (c.src.x, c.src.y, c.src.host, c.src.device, c.src.array, c.src.pitch, c.src.memory_type);
        assert_eq!(s, (1, 2, 4, 5, 6, 7, 2));
        let d = (c.dst.x, c.dst.y, c.dst.host, c.dst.device, c.dst.array, c.dst.pitch, c.dst.memory_type);
        assert_eq!(d, (11, 12, 14, 15, 16, 17, 4));
        assert_eq!((c.width, c.height, c.depth), (21, 22, 1));

        type R = sys::CUDA_RESOURCE_DESC_st;
        assert_eq!(offset_of!(R, resType), structs::RESOURCE_TYPE_AT);
        assert_eq!(offset_of!(R, res), structs::RESOURCE_HANDLE_AT);
        type K = sys::CUDA_KERNEL_NODE_PARAMS_v2_st;
        assert_eq!(size_of::<sys::CUDA_KERNEL_NODE_PARAMS_v1>(), structs::KERNEL_NODE_V1);
        assert_eq!(offset_of!(K, kernelParams), structs::KERNEL_NODE_PARAMS_AT);
        assert_eq!(offset_of!(K, extra), structs::KERNEL_NODE_EXTRA_AT);
        assert_eq!(offset_of!(K, kern), structs::KERNEL_NODE_KERN_AT);
        assert_eq!(offset_of!(K, gridDimX), 8);
        assert_eq!(offset_of!(K, sharedMemBytes), 32);
    }
}
