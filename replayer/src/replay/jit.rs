//! A client's JIT links (`gpuless_traces::protocol::link`): each `gpulessLink` record is one
//! step of a link the client names by a handle it made up. The session keeps, per handle, a
//! link state of the driver ([`Links`]), created with the link's options and buffers of its own
//! where the driver writes (the logs, the wall time); an add runs `cuLinkAddData` on it (the
//! driver checks and compiles the input then), a completion `cuLinkComplete`, and both answer
//! with the driver's status, the image (a completion's) and what the driver wrote into the
//! options since the link's last answer, as an output under the record's sequence number. A
//! creation is not answered: its failure is the answer to the link's next add or completion. A
//! step the driver refuses is an answer, not a failed record. The session's end destroys the
//! links left.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CString};

use cudarc::driver::sys;
use gpuless_analyzer::api::jit::{self, JitValue};
use gpuless_traces::protocol::link::{JitList, JitOption, LinkAnswer, LinkInput, LinkRequest, Written, LINK};
use gpuless_traces::CallRecord;

use super::{LoadedTrace, ReplayError, Report, State};

type Create = unsafe extern "C" fn(u32, *mut u32, *mut *mut c_void, *mut *mut c_void) -> sys::CUresult;
type AddData = unsafe extern "C" fn(
    *mut c_void,
    u32,
    *mut c_void,
    usize,
    *const c_char,
    u32,
    *mut u32,
    *mut *mut c_void,
) -> sys::CUresult;
type Complete = unsafe extern "C" fn(*mut c_void, *mut *mut c_void, *mut usize) -> sys::CUresult;
type Destroy = unsafe extern "C" fn(*mut c_void) -> sys::CUresult;

/// `CUDA_ERROR_NOT_SUPPORTED`: an option that names the client's own memory, or a driver
/// without the linker.
const NOT_SUPPORTED: i32 = 801;
/// `CUDA_ERROR_INVALID_HANDLE`: a link the session did not create, or destroyed.
const INVALID_HANDLE: i32 = 400;
/// Most bytes of a log buffer the executor gives the driver.
const MAX_LOG: u64 = 16 << 20;
/// A log buffer's size when the program gave none (what the driver then writes is not known).
const MIN_LOG: u64 = 64 << 10;
/// What buffers the driver writes hold before it does: the bytes that differ afterwards, it
/// wrote.
const UNWRITTEN: u8 = 0xff;

/// Executes a `gpulessLink` record: an add's or a completion's answer goes to the record's
/// output.
pub(crate) fn call(
    st: &mut State,
    trace: &LoadedTrace,
    rec: &CallRecord,
    report: &mut Report,
) -> Result<(), ReplayError> {
    st.last_call = Some((rec.seq, LINK));
    let bad = |problem: String| ReplayError::Inconsistent { seq: rec.seq, what: LINK.into(), problem };
    let req = LinkRequest::from_args(&rec.args).map_err(|e| bad(e.to_string()))?;
    // SAFETY (all steps): the session's context is current.
    let answer = match &req {
        LinkRequest::Create { link, options } => {
            unsafe { st.links.create(*link, options, rec.seq) };
            None
        }
        LinkRequest::Add { link, input } => {
            let data = trace.blobs.get(&input.data.hash).map(|b| &**b).filter(|d| d.len() as u64 == input.data.len);
            let data = data.ok_or_else(|| bad("the input's bytes are not in the session".into()))?;
            Some(unsafe { st.links.add(*link, input, data, rec.seq) })
        }
        LinkRequest::Complete { link } => Some(unsafe { st.links.complete(*link, rec.seq) }),
        LinkRequest::Destroy { link } => {
            st.links.destroy(*link);
            None
        }
    };
    if let (Some(a), Some(o)) = (answer, report.outputs.as_mut()) {
        o.push((rec.seq, a.encode()));
    }
    report.executed += 1;
    Ok(())
}

/// The driver's linker.
#[derive(Clone, Copy)]
struct Linker {
    create: Create,
    add: AddData,
    complete: Complete,
    destroy: Destroy,
}

/// The driver's linker, if it has one.
fn linker(seq: u64) -> Option<Linker> {
    // SAFETY: the driver's entry points by their C signatures (enums as integers).
    unsafe {
        Some(Linker {
            create: super::raw::raw_fn::<Create>(b"cuLinkCreate_v2\0", seq).ok()?,
            add: super::raw::raw_fn::<AddData>(b"cuLinkAddData_v2\0", seq).ok()?,
            complete: super::raw::raw_fn::<Complete>(b"cuLinkComplete\0", seq).ok()?,
            destroy: super::raw::raw_fn::<Destroy>(b"cuLinkDestroy\0", seq).ok()?,
        })
    }
}

/// One link of the session.
enum Link {
    /// A link state of the driver, and the options it was created with (the driver writes
    /// through them until the state is destroyed).
    Live { state: *mut c_void, options: Options, destroy: Destroy },
    /// Its creation failed: the status, and what the driver wrote into the options then (given
    /// with the first answer).
    Failed { status: i32, written: Vec<Written> },
}

/// The session's links, by the client's handles; dropping them destroys the live ones.
#[derive(Default)]
pub(crate) struct Links(HashMap<u64, Link>);

impl Drop for Links {
    fn drop(&mut self) {
        self.destroy_all();
    }
}

impl Links {
    /// Destroys every link left (the session ends).
    pub(crate) fn destroy_all(&mut self) {
        for (_, l) in self.0.drain() {
            if let Link::Live { state, destroy, .. } = l {
                // SAFETY: a state the driver made and nothing destroyed yet.
                unsafe { destroy(state) };
            }
        }
    }

    /// `cuLinkDestroy` of `link` (nothing for a link the session does not hold).
    fn destroy(&mut self, link: u64) {
        if let Some(Link::Live { state, destroy, .. }) = self.0.remove(&link) {
            // SAFETY: a state the driver made and nothing destroyed yet.
            unsafe { destroy(state) };
        }
    }

    /// `cuLinkCreate` with `options` for `link` (a handle used again replaces its link).
    ///
    /// # Safety
    /// The session's context is current.
    unsafe fn create(&mut self, link: u64, options: &[JitOption], seq: u64) {
        self.destroy(link);
        let made = match (linker(seq), Options::new(options)) {
            (Some(l), Some(mut o)) => {
                let mut state = std::ptr::null_mut();
                let (n, ids, slots) = o.arrays();
                // SAFETY: option arrays and buffers owned by `o`, whose heap memory stays where
                // it is while the state lives (it is kept with it).
                let status = unsafe { (l.create)(n, ids, slots, &mut state) } as i32;
                if status == 0 {
                    Link::Live { state, options: o, destroy: l.destroy }
                } else {
                    Link::Failed { status, written: o.take_written() }
                }
            }
            _ => Link::Failed { status: NOT_SUPPORTED, written: Vec::new() },
        };
        self.0.insert(link, made);
    }

    /// The answer of a step of `link`: `step`'s status on a live state, what the driver wrote
    /// into the link's options; the creation's failure; `INVALID_HANDLE` for a link the session
    /// does not hold.
    fn step(&mut self, link: u64, step: impl FnOnce(*mut c_void) -> (i32, Vec<u8>)) -> LinkAnswer {
        match self.0.get_mut(&link) {
            None => LinkAnswer { status: INVALID_HANDLE, ..LinkAnswer::default() },
            Some(Link::Failed { status, written }) => {
                LinkAnswer { status: *status, image: Vec::new(), written: std::mem::take(written) }
            }
            Some(Link::Live { state, options, .. }) => {
                let (status, image) = step(*state);
                LinkAnswer { status, image, written: options.take_written() }
            }
        }
    }

    /// `cuLinkAddData` of `input` (its bytes `data`) to `link`.
    ///
    /// # Safety
    /// The session's context is current.
    unsafe fn add(&mut self, link: u64, input: &LinkInput, data: &[u8], seq: u64) -> LinkAnswer {
        let Some(l) = linker(seq) else { return LinkAnswer { status: NOT_SUPPORTED, ..LinkAnswer::default() } };
        self.step(link, |state| {
            let Some(mut io) = Options::new(&input.options).filter(Options::plain) else {
                return (NOT_SUPPORTED, Vec::new());
            };
            let name = CString::new(input.name.replace('\0', "")).unwrap_or_default();
            let (n, ids, slots) = io.arrays();
            let ptr = data.as_ptr().cast_mut().cast();
            // SAFETY: a live state; the input's bytes, which the driver reads only (and keeps no
            // reference to), its name and option arrays, owned here.
            let status = unsafe { (l.add)(state, input.kind, ptr, data.len(), name.as_ptr(), n, ids, slots) };
            (status as i32, Vec::new())
        })
    }

    /// `cuLinkComplete` of `link`: the status and the image.
    ///
    /// # Safety
    /// The session's context is current.
    unsafe fn complete(&mut self, link: u64, seq: u64) -> LinkAnswer {
        let Some(l) = linker(seq) else { return LinkAnswer { status: NOT_SUPPORTED, ..LinkAnswer::default() } };
        self.step(link, |state| {
            let (mut cubin, mut size) = (std::ptr::null_mut(), 0usize);
            // SAFETY: a live state and out-pointers of ours.
            let status = unsafe { (l.complete)(state, &mut cubin, &mut size) } as i32;
            let image = if status == 0 && !cubin.is_null() {
                // SAFETY: the driver's image of `size` bytes, valid until the state is destroyed.
                unsafe { std::slice::from_raw_parts(cubin.cast::<u8>(), size) }.to_vec()
            } else {
                Vec::new()
            };
            (status, image)
        })
    }
}

/// Options as the driver gets them: ids, slots, what each slot held when passed or last
/// answered, the executor's buffer a slot points to and what it held when last answered.
struct Options {
    ids: Vec<u32>,
    slots: Vec<*mut c_void>,
    passed: Vec<u64>,
    buffers: Vec<Option<Vec<u8>>>,
    seen: Vec<Option<Vec<u8>>>,
    /// The arrays the driver reads for list options (their slots point into them; heap
    /// storage, so it stays where it is while the options live).
    lists: Vec<ListStore>,
}

/// One list option's array as the driver reads it: C strings and the pointers to them, or
/// addresses.
struct ListStore {
    _names: Vec<std::ffi::CString>,
    pointers: Vec<u64>,
}

impl ListStore {
    /// The array for `list`; `None` for a name with a NUL inside.
    fn new(list: &JitList) -> Option<ListStore> {
        match list {
            JitList::Names(names) => {
                let names: Vec<std::ffi::CString> =
                    names.iter().map(|n| std::ffi::CString::new(n.clone()).ok()).collect::<Option<_>>()?;
                let pointers = names.iter().map(|c| c.as_ptr() as u64).collect();
                Some(ListStore { _names: names, pointers })
            }
            JitList::Addresses(addrs) => Some(ListStore { _names: Vec::new(), pointers: addrs.clone() }),
        }
    }
}

impl Options {
    /// The driver's arrays for `opts`: plain values as given (a log's size at most
    /// [`MAX_LOG`]), buffers of the executor's for the logs and the wall time, arrays of its own
    /// for the lists the client copied. `None` when an option is unknown, or a list option came
    /// without its list (a recorded slot: the recording's pointer).
    fn new(opts: &[JitOption]) -> Option<Options> {
        let size_of = |id: u32| opts.iter().find(|o| o.id == id).map(|o| log_size(o.value));
        let mut o = Options {
            ids: Vec::new(),
            slots: Vec::new(),
            passed: Vec::new(),
            buffers: Vec::new(),
            seen: Vec::new(),
            lists: Vec::new(),
        };
        for opt in opts {
            let (value, buffer) = match jit::value_of(opt.id)? {
                JitValue::Plain
                    if matches!(opt.id, jit::INFO_LOG_BUFFER_SIZE_BYTES | jit::ERROR_LOG_BUFFER_SIZE_BYTES) =>
                {
                    (log_size(opt.value), None)
                }
                JitValue::Plain => (opt.value, None),
                JitValue::Log { size } => (0, Some(vec![UNWRITTEN; size_of(size).unwrap_or(0).max(MIN_LOG) as usize])),
                JitValue::Float => (0, Some(vec![UNWRITTEN; 8])),
                JitValue::Names { .. } | JitValue::Addresses { .. } => {
                    let store = ListStore::new(opt.list.as_ref()?)?;
                    let at = store.pointers.as_ptr() as u64;
                    o.lists.push(store);
                    (at, None)
                }
            };
            o.ids.push(opt.id);
            o.buffers.push(buffer);
            o.passed.push(value);
        }
        // The slots point into the buffers, which stay where they are from here on.
        o.slots = o
            .buffers
            .iter_mut()
            .zip(&o.passed)
            .map(|(b, &v)| b.as_mut().map_or(v as *mut c_void, |b| b.as_mut_ptr().cast()))
            .collect();
        o.passed = o.slots.iter().map(|&s| s as u64).collect();
        o.seen = o.buffers.clone();
        Some(o)
    }

    /// Whether the driver writes nothing through these options' pointers.
    fn plain(&self) -> bool {
        self.buffers.iter().all(Option::is_none)
    }

    /// (count, ids, slots) for the driver: null arrays for no options.
    fn arrays(&mut self) -> (u32, *mut u32, *mut *mut c_void) {
        if self.ids.is_empty() {
            return (0, std::ptr::null_mut(), std::ptr::null_mut());
        }
        (self.ids.len() as u32, self.ids.as_mut_ptr(), self.slots.as_mut_ptr())
    }

    /// What the driver wrote since the last call: slots it overwrote, bytes it wrote into the
    /// buffers (from a buffer's start to the last byte that changed). What is answered is seen
    /// from then on; a wall time's buffer is made unwritten again, so that the driver's next
    /// write of it is found even where it writes the same value.
    fn take_written(&mut self) -> Vec<Written> {
        let mut out = Vec::new();
        for i in 0..self.ids.len() {
            let now = self.slots[i] as u64;
            let slot = (now != self.passed[i]).then_some(now);
            self.passed[i] = now;
            let wall = self.ids[i] == jit::WALL_TIME;
            let bytes = match (&mut self.buffers[i], &mut self.seen[i]) {
                (Some(b), Some(seen)) => {
                    let end = b.iter().zip(seen.iter()).rposition(|(x, y)| x != y);
                    // A wall time is a float: its 4 bytes, whichever of them changed.
                    let end = end.map(|e| if wall { e.max(3) } else { e });
                    let bytes = end.map(|e| b[..=e].to_vec());
                    if wall {
                        b.fill(UNWRITTEN);
                    } else if let Some(e) = end {
                        seen[..=e].copy_from_slice(&b[..=e]);
                    }
                    bytes
                }
                _ => None,
            };
            if slot.is_some() || bytes.is_some() {
                out.push(Written { option: i as u32, slot, bytes });
            }
        }
        out
    }
}

/// A log size option's value (an `unsigned int` in the slot), at most [`MAX_LOG`].
fn log_size(v: u64) -> u64 {
    u64::from(v as u32).min(MAX_LOG)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The logs and the wall time get buffers of the executor's; log sizes are bounded; what
    /// the driver wrote is found by what changed.
    #[test]
    fn options_point_where_the_driver_writes_and_changes_are_found() {
        let opts = [
            JitOption::plain(jit::WALL_TIME, 0x7000_0000),
            JitOption::plain(jit::INFO_LOG_BUFFER, 0x7100_0000),
            JitOption::plain(jit::INFO_LOG_BUFFER_SIZE_BYTES, 1 << 40 | 100),
            JitOption::plain(12, 1),
        ];
        let mut o = Options::new(&opts).unwrap();
        assert!(!o.plain());
        assert_eq!(o.passed[2], 100, "the low 32 bits: an unsigned int");
        assert_eq!(o.passed[3], 1);
        assert_eq!(o.buffers[1].as_ref().unwrap().len() as u64, MIN_LOG);
        assert!(o.take_written().is_empty(), "nothing written yet");
        // The driver writes the log, its size into the size's slot, the wall time through its
        // pointer.
        unsafe {
            let log = o.slots[1].cast::<u8>();
            std::ptr::copy_nonoverlapping(c"ok".as_ptr().cast::<u8>(), log, 3);
            *o.slots[0].cast::<f32>() = 0.25;
        }
        o.slots[2] = 2usize as *mut c_void;
        let w = o.take_written();
        assert_eq!(w.len(), 3, "{w:?}");
        assert_eq!(w[0], Written { option: 0, slot: None, bytes: Some(0.25f32.to_le_bytes().to_vec()) });
        assert_eq!(w[1], Written { option: 1, slot: None, bytes: Some(b"ok\0".to_vec()) });
        assert_eq!(w[2], Written { option: 2, slot: Some(2), bytes: None });
        // What was answered is not answered again (the link's next step).
        assert!(o.take_written().is_empty(), "answered already");
        // The next step: a shorter log over the last one, the same wall time written again, the
        // same log size.
        unsafe {
            *o.slots[1].cast::<u8>() = 0;
            *o.slots[0].cast::<f32>() = 0.25;
        }
        let w = o.take_written();
        assert_eq!(w.len(), 2, "{w:?}");
        assert_eq!(w[0], Written { option: 0, slot: None, bytes: Some(0.25f32.to_le_bytes().to_vec()) });
        assert_eq!(w[1], Written { option: 1, slot: None, bytes: Some(b"\0".to_vec()) });
        o.slots[2] = 5usize as *mut c_void;
        assert_eq!(o.take_written(), [Written { option: 2, slot: Some(5), bytes: None }]);
        // The client's own memory is not served; nor is an option cuda.h does not know.
        // A list option without its list (a recorded slot) and an unknown option.
        assert!(Options::new(&[JitOption::plain(18, 0)]).is_none());
        assert!(Options::new(&[JitOption::plain(jit::NUM_OPTIONS, 0)]).is_none());
        // Lists: the slots point to arrays of the executor's holding the client's entries.
        let names =
            JitOption { id: 17, value: 0x7100, list: Some(JitList::Names(vec![b"g_a".to_vec(), b"g_b".to_vec()])) };
        let addrs = JitOption {
            id: 18,
            value: 0x7200,
            list: Some(JitList::Addresses(vec![0x6400_0000_0100, 0x6400_0000_0200])),
        };
        let o = Options::new(&[names, addrs, JitOption::plain(19, 2)]).unwrap();
        // SAFETY: the arrays `Options::new` made, two entries each.
        unsafe {
            let n = o.slots[0] as *const *const std::ffi::c_char;
            assert_eq!(std::ffi::CStr::from_ptr(*n.add(1)).to_bytes(), b"g_b");
            assert_eq!(*(o.slots[1] as *const u64).add(1), 0x6400_0000_0200);
        }
        assert_eq!(o.slots[2] as u64, 2);
        // A name with a NUL inside cannot be given to the driver.
        let bad = JitOption { id: 25, value: 1, list: Some(JitList::Names(vec![b"a\0b".to_vec()])) };
        assert!(Options::new(&[bad, JitOption::plain(26, 1)]).is_none());
        let (n, ids, _) = Options::new(&[]).unwrap().arrays();
        assert_eq!((n, ids.is_null()), (0, true));
    }
}
