//! `--dry-run` on what the replayer executes beyond plain copies and launches: async copies on
//! their streams (the committed H200 streams trace), CUDA graphs built explicitly and by stream
//! capture, arrays with 2D/3D copies and texture objects, and module globals whose size the
//! program did not ask for. Traces are built here in the recorder's format (argument values
//! named as in the API table) and broken on purpose: each break must be reported.

use std::collections::HashMap;
use std::path::Path;

use gpuless_analyzer::api::structs::{self, Copy, Dims, Side};
use gpuless_analyzer::api::{self, HandleKind, Variant};
use gpuless_replayer::replay::dryrun::{dry_run, DryRunReport};
use gpuless_replayer::replay::{load, LoadedTrace};
use gpuless_traces::{BlobRef, CallRecord, Function, Hash128, KernelParams, TraceMeta, Value};

/// A trace under construction.
#[derive(Default)]
struct Builder {
    calls: Vec<CallRecord>,
    blobs: HashMap<Hash128, Vec<u8>>,
}

impl Builder {
    /// Appends a call of `name` (symbol version `version`), with arguments and results by name;
    /// the others are `Null`.
    fn call(&mut self, name: &str, version: u8, args: &[(&str, Value)], results: &[(&str, Value)]) -> &mut Self {
        let f =
            api::lookup(name, Variant { version, per_thread: false }).unwrap_or_else(|| panic!("{name} v{version}"));
        let mut r = CallRecord::new(self.calls.len() as u64, f.level, Function::Known(f.id));
        r.variant = Variant { version, per_thread: false };
        let find = |list: &[(&str, Value)], n: &str| list.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone());
        r.args = f.args.iter().map(|a| find(args, a.name).unwrap_or(Value::Null)).collect();
        r.results = f.out_args().map(|(_, a)| find(results, a.name).unwrap_or(Value::Null)).collect();
        for (k, _) in args.iter().chain(results) {
            assert!(f.args.iter().any(|a| a.name == *k), "{name} has no argument {k}");
        }
        self.calls.push(r);
        self
    }

    fn blob(&mut self, data: &[u8]) -> Value {
        let hash = Hash128::of(data);
        self.blobs.insert(hash, data.to_vec());
        Value::Blob(BlobRef { hash, len: data.len() as u64 })
    }

    fn trace(&self) -> LoadedTrace {
        let blobs = self.blobs.iter().map(|(h, b)| (*h, b.clone().into())).collect();
        LoadedTrace { meta: TraceMeta::default(), calls: self.calls.clone(), blobs, lost: None }
    }
}

fn h(kind: HandleKind, v: u64) -> Value {
    Value::Handle(kind, v)
}

fn first(r: &DryRunReport) -> &str {
    r.violations.first().map(String::as_str).unwrap_or("")
}

const LIB: u64 = 0x10;
const KERNEL: u64 = 0x20;
const STREAM: u64 = 0x30;
const BUF: u64 = 0x7e00_0000_0000;
const OUT: u64 = 0x7e00_0010_0000;

/// A library with one kernel, two 1 MiB allocations and a non-blocking stream.
fn setup(b: &mut Builder) {
    let image = b.blob(b"\x7fELF not a real cubin");
    b.call("cuLibraryLoadData", 1, &[("code", image)], &[("library", h(HandleKind::Library, LIB))])
        .call(
            "cuLibraryGetKernel",
            1,
            &[("library", h(HandleKind::Library, LIB)), ("name", Value::Str("k".into()))],
            &[("pKernel", h(HandleKind::Kernel, KERNEL))],
        )
        .call("cuMemAlloc", 2, &[("bytesize", Value::Size(1 << 20))], &[("dptr", Value::DevPtr(BUF))])
        .call("cuMemAlloc", 2, &[("bytesize", Value::Size(1 << 20))], &[("dptr", Value::DevPtr(OUT))])
        .call("cuStreamCreate", 1, &[("Flags", Value::U64(1))], &[("phStream", h(HandleKind::Stream, STREAM))]);
}

fn params(ptr: u64) -> Value {
    let mut bytes = ptr.to_le_bytes().to_vec();
    bytes.extend_from_slice(&7u32.to_le_bytes());
    Value::KernelParams(KernelParams { bytes, layout: vec![(0, 8), (8, 4)] })
}

/// The bytes of a `CUDA_KERNEL_NODE_PARAMS` (v2) launching `func`.
fn node_struct(func: u64) -> Vec<u8> {
    let mut s = vec![0u8; 72];
    s[0..8].copy_from_slice(&func.to_le_bytes());
    for (i, v) in [4u32, 1, 1, 256, 1, 1, 0].iter().enumerate() {
        s[8 + 4 * i..12 + 4 * i].copy_from_slice(&v.to_le_bytes());
    }
    s[40..48].copy_from_slice(&0x7fff_0000_1000u64.to_le_bytes()); // the program's kernelParams
    s
}

fn node_params(func: u64, ptr: u64) -> Value {
    Value::List(vec![Value::Bytes(node_struct(func)), params(ptr), Value::Null])
}

fn nodes(list: &[u64]) -> Value {
    Value::Bytes(list.iter().flat_map(|n| n.to_le_bytes()).collect())
}

/// A device-to-device `CUDA_MEMCPY3D` of `n` bytes.
fn copy3d_d2d(dst: u64, src: u64, n: u64) -> Value {
    let mut b = vec![0u8; Dims::Three.size()];
    let side = |p| Side { memory_type: structs::MEMORYTYPE_DEVICE, device: p, pitch: n, height: 1, ..Side::default() };
    Copy::write_side(Dims::Three, &mut b, false, &side(src));
    Copy::write_side(Dims::Three, &mut b, true, &side(dst));
    b[176..184].copy_from_slice(&n.to_le_bytes());
    b[184..192].copy_from_slice(&1u64.to_le_bytes());
    b[192..200].copy_from_slice(&1u64.to_le_bytes());
    Value::List(vec![Value::Bytes(b), Value::Null])
}

/// graph.cu's shape: a captured graph (memset, launch, async D2H) and an explicit one (two
/// kernel nodes and a memcpy node), instantiated, launched, one node's parameters changed.
fn graph_trace() -> Builder {
    use HandleKind::{Graph, GraphExec, GraphNode, Stream};
    let mut b = Builder::default();
    setup(&mut b);
    let s = h(Stream, STREAM);
    b.call("cuStreamBeginCapture", 2, &[("hStream", s.clone()), ("mode", Value::U64(0))], &[])
        .call(
            "cuMemsetD32Async",
            1,
            &[
                ("dstDevice", Value::DevPtr(BUF)),
                ("ui", Value::U64(0)),
                ("N", Value::U64(1024)),
                ("hStream", s.clone()),
            ],
            &[],
        )
        .call(
            "cuLaunchKernel",
            1,
            &[("f", h(HandleKind::Function, KERNEL)), ("hStream", s.clone()), ("kernelParams", params(BUF))],
            &[],
        )
        .call(
            "cuMemcpyDtoHAsync",
            2,
            &[
                ("dstHost", Value::HostPtr(0x1000)),
                ("srcDevice", Value::DevPtr(BUF)),
                ("ByteCount", Value::Size(4096)),
                ("hStream", s.clone()),
            ],
            &[],
        )
        .call("cuStreamEndCapture", 1, &[("hStream", s.clone())], &[("phGraph", h(Graph, 0x100))])
        .call("cuGraphGetNodes", 1, &[("hGraph", h(Graph, 0x100))], &[("numNodes", Value::U64(3))])
        .call("cuGraphInstantiateWithFlags", 1, &[("hGraph", h(Graph, 0x100))], &[("phGraphExec", h(GraphExec, 0x200))])
        .call("cuGraphUpload", 1, &[("hGraphExec", h(GraphExec, 0x200)), ("hStream", s.clone())], &[])
        .call("cuGraphLaunch", 1, &[("hGraphExec", h(GraphExec, 0x200)), ("hStream", s.clone())], &[])
        .call("cuStreamSynchronize", 1, &[("hStream", s.clone())], &[])
        .call("cuGraphCreate", 1, &[("flags", Value::U64(0))], &[("phGraph", h(Graph, 0x101))])
        .call(
            "cuGraphAddKernelNode",
            2,
            &[
                ("hGraph", h(Graph, 0x101)),
                ("numDependencies", Value::U64(0)),
                ("nodeParams", node_params(KERNEL, BUF)),
            ],
            &[("phGraphNode", h(GraphNode, 0x300))],
        )
        .call(
            "cuGraphAddKernelNode",
            2,
            &[
                ("hGraph", h(Graph, 0x101)),
                ("dependencies", nodes(&[0x300])),
                ("numDependencies", Value::U64(1)),
                ("nodeParams", node_params(KERNEL, BUF)),
            ],
            &[("phGraphNode", h(GraphNode, 0x301))],
        )
        .call(
            "cuGraphAddMemcpyNode",
            1,
            &[
                ("hGraph", h(Graph, 0x101)),
                ("dependencies", nodes(&[0x301])),
                ("numDependencies", Value::U64(1)),
                ("copyParams", copy3d_d2d(OUT, BUF, 1 << 20)),
            ],
            &[("phGraphNode", h(GraphNode, 0x302))],
        )
        .call("cuGraphInstantiateWithFlags", 1, &[("hGraph", h(Graph, 0x101))], &[("phGraphExec", h(GraphExec, 0x201))])
        .call(
            "cuGraphExecKernelNodeSetParams",
            2,
            &[
                ("hGraphExec", h(GraphExec, 0x201)),
                ("hNode", h(GraphNode, 0x300)),
                ("nodeParams", node_params(KERNEL, OUT)),
            ],
            &[],
        )
        .call("cuGraphLaunch", 1, &[("hGraphExec", h(GraphExec, 0x201)), ("hStream", s.clone())], &[])
        .call("cuGraphExecDestroy", 1, &[("hGraphExec", h(GraphExec, 0x200))], &[])
        .call("cuGraphDestroy", 1, &[("hGraph", h(Graph, 0x100))], &[]);
    b
}

#[test]
fn graphs_built_explicitly_and_by_capture_are_modelled() {
    let b = graph_trace();
    let r = dry_run(&b.trace());
    assert_eq!(r.violation_count, 0, "{:?}", r.violations);
    // Every graph call, the capture and the async copies are checked, not skipped.
    assert!(r.checked >= 20, "{r:?}");

    let find = |b: &Builder, name: &str, nth: usize| {
        b.calls.iter().enumerate().filter(|(_, c)| c.function.name() == name).nth(nth).map(|(i, _)| i).unwrap()
    };
    let arg = |b: &Builder, i: usize, n: &str| {
        b.calls[i].function.api().unwrap().args.iter().position(|a| a.name == n).unwrap()
    };

    // A kernel node recorded by a recorder that kept only the struct (no parameters).
    let mut t = graph_trace();
    let i = find(&t, "cuGraphAddKernelNode", 0);
    let a = arg(&t, i, "nodeParams");
    t.calls[i].args[a] = Value::Bytes(node_struct(KERNEL));
    let r = dry_run(&t.trace());
    assert!(first(&r).contains("cuGraphAddKernelNode") && first(&r).contains("not recorded"), "{r:?}");

    // A kernel node launching a kernel never loaded.
    let mut t = graph_trace();
    let i = find(&t, "cuGraphAddKernelNode", 1);
    let a = arg(&t, i, "nodeParams");
    t.calls[i].args[a] = node_params(0x9999, BUF);
    let r = dry_run(&t.trace());
    assert!(first(&r).contains("never loaded"), "{r:?}");

    // A dependency on a node that does not exist.
    let mut t = graph_trace();
    let i = find(&t, "cuGraphAddMemcpyNode", 0);
    let a = arg(&t, i, "dependencies");
    t.calls[i].args[a] = nodes(&[0x3ff]);
    let r = dry_run(&t.trace());
    assert!(first(&r).contains("cuGraphAddMemcpyNode") && first(&r).contains("unknown graph node"), "{r:?}");

    // A memcpy node reaching past its allocation.
    let mut t = graph_trace();
    let i = find(&t, "cuGraphAddMemcpyNode", 0);
    let a = arg(&t, i, "copyParams");
    t.calls[i].args[a] = copy3d_d2d(OUT, BUF, 2 << 20);
    let r = dry_run(&t.trace());
    assert!(first(&r).contains("outside every live allocation"), "{r:?}");

    // Launching an executable graph that was destroyed.
    let mut t = graph_trace();
    t.call(
        "cuGraphLaunch",
        1,
        &[("hGraphExec", h(HandleKind::GraphExec, 0x200)), ("hStream", h(HandleKind::Stream, STREAM))],
        &[],
    );
    let r = dry_run(&t.trace());
    assert!(first(&r).contains("cuGraphLaunch") && first(&r).contains("unknown executable graph"), "{r:?}");

    // A captured copy on a stream that was never created.
    let mut t = graph_trace();
    t.calls.retain(|c| c.function.name() != "cuStreamCreate");
    let r = dry_run(&t.trace());
    assert!(r.violations.iter().any(|v| v.contains("cuMemsetD32Async") && v.contains("unknown stream")), "{r:?}");
}

const ARRAY: u64 = 0x400;
const TEX: u64 = 0x500;

/// A 2D copy between host rows and an array or pitched memory.
fn copy2d(src: Side, dst: Side, width: u64, height: u64, host: Option<Value>) -> Value {
    let mut b = vec![0u8; Dims::Two.size()];
    Copy::write_side(Dims::Two, &mut b, false, &src);
    Copy::write_side(Dims::Two, &mut b, true, &dst);
    b[112..120].copy_from_slice(&width.to_le_bytes());
    b[120..128].copy_from_slice(&height.to_le_bytes());
    Value::List(vec![Value::Bytes(b), host.unwrap_or(Value::Null)])
}

fn host_side() -> Side {
    Side { memory_type: structs::MEMORYTYPE_HOST, host: 0x5000, pitch: 256, ..Side::default() }
}

fn array_side() -> Side {
    Side { memory_type: structs::MEMORYTYPE_ARRAY, array: ARRAY, ..Side::default() }
}

/// texture.cu's shape: an array filled from host rows, a texture object over it, a kernel
/// reading the texture, the array copied back to the host; a pitched allocation filled by a
/// 2D copy.
fn texture_trace() -> Builder {
    let mut b = Builder::default();
    setup(&mut b);
    let rows = b.blob(&[7u8; 256 * 32]);
    let mut res = vec![0u8; 144];
    res[8..16].copy_from_slice(&ARRAY.to_le_bytes());
    b.call(
        "cuArrayCreate",
        2,
        &[("pAllocateArray", Value::Bytes(vec![0; 24]))],
        &[("pHandle", h(HandleKind::Array, ARRAY))],
    )
    .call("cuMemcpy2DUnaligned", 2, &[("pCopy", copy2d(host_side(), array_side(), 256, 32, Some(rows.clone())))], &[])
    .call(
        "cuTexObjectCreate",
        1,
        &[("pResDesc", Value::Bytes(res)), ("pTexDesc", Value::Bytes(vec![0; 64]))],
        &[("pTexObject", h(HandleKind::TexObject, TEX))],
    )
    .call("cuLaunchKernel", 1, &[("f", h(HandleKind::Function, KERNEL)), ("kernelParams", params(TEX))], &[])
    .call(
        "cuMemcpy2DUnaligned",
        2,
        &[("pCopy", copy2d(array_side(), host_side(), 256, 32, None))],
        &[("pCopy", Value::Digest(BlobRef { hash: Hash128::of(b"x"), len: 256 * 32 }))],
    )
    .call(
        "cuMemcpy2D",
        2,
        &[(
            "pCopy",
            copy2d(
                host_side(),
                Side { memory_type: structs::MEMORYTYPE_DEVICE, device: OUT, pitch: 512, ..Side::default() },
                256,
                32,
                Some(rows),
            ),
        )],
        &[],
    )
    .call("cuTexObjectDestroy", 1, &[("texObject", h(HandleKind::TexObject, TEX))], &[])
    .call("cuArrayDestroy", 1, &[("hArray", h(HandleKind::Array, ARRAY))], &[]);
    b
}

#[test]
fn arrays_2d_copies_and_texture_objects_are_modelled() {
    let b = texture_trace();
    let r = dry_run(&b.trace());
    assert_eq!(r.violation_count, 0, "{:?}", r.violations);
    assert!(r.checked >= 12, "{r:?}");
    let pos = |b: &Builder, name: &str| b.calls.iter().position(|c| c.function.name() == name).unwrap();

    // A host-to-array copy whose host rows were not stored (a recorder before 2D/3D capture).
    let mut t = texture_trace();
    let i = pos(&t, "cuMemcpy2DUnaligned");
    t.calls[i].args[0] = copy2d(host_side(), array_side(), 256, 32, None);
    let r = dry_run(&t.trace());
    assert!(first(&r).contains("cuMemcpy2DUnaligned") && first(&r).contains("host bytes were not recorded"), "{r:?}");

    // Rows beyond the pitched allocation: 32 rows of pitch 64 KiB overrun 1 MiB.
    let mut t = texture_trace();
    let i = pos(&t, "cuMemcpy2D");
    let Value::List(items) = &t.calls[i].args[0] else { panic!() };
    let rows = items[1].clone();
    let dst = Side { memory_type: structs::MEMORYTYPE_DEVICE, device: OUT, pitch: 64 << 10, ..Side::default() };
    t.calls[i].args[0] = copy2d(host_side(), dst, 256, 32, Some(rows));
    let r = dry_run(&t.trace());
    assert!(first(&r).contains("cuMemcpy2D") && first(&r).contains("outside every live allocation"), "{r:?}");

    // A texture over an array that does not exist.
    let mut t = texture_trace();
    t.calls.remove(pos(&t, "cuArrayCreate"));
    let r = dry_run(&t.trace());
    assert!(r.violations.iter().any(|v| v.contains("cuTexObjectCreate") && v.contains("unknown array")), "{r:?}");

    // Destroying a texture object twice.
    let mut t = texture_trace();
    t.call("cuTexObjectDestroy", 1, &[("texObject", h(HandleKind::TexObject, TEX))], &[]);
    let r = dry_run(&t.trace());
    assert!(first(&r).contains("unknown texture object"), "{r:?}");
}

#[test]
fn global_sizes_come_from_the_image_when_the_program_did_not_ask() {
    let cubin =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/bin/params.sm_90.cubin")).unwrap();
    const G: u64 = 0x7f00_0000_0000;
    let build = |bytes: u64| {
        let mut b = Builder::default();
        let image = b.blob(&cubin);
        b.call("cuLibraryLoadData", 1, &[("code", image)], &[("library", h(HandleKind::Library, LIB))]).call(
            "cuLibraryGetGlobal",
            1,
            &[("library", h(HandleKind::Library, LIB)), ("name", Value::Str("g_scale".into()))],
            &[("dptr", Value::DevPtr(G))], // `bytes` passed as NULL by the program
        );
        let payload = b.blob(&vec![1u8; bytes as usize]);
        b.call(
            "cuMemcpyHtoD",
            2,
            &[("dstDevice", Value::DevPtr(G)), ("srcHost", payload), ("ByteCount", Value::Size(bytes))],
            &[],
        );
        b
    };
    let r = dry_run(&build(16).trace());
    assert_eq!(r.violation_count, 0, "g_scale holds 16 bytes: {:?}", r.violations);
    let r = dry_run(&build(17).trace());
    assert!(first(&r).contains("cuMemcpyHtoD") && first(&r).contains("outside every live allocation"), "{r:?}");
}

#[test]
fn h200_streams_trace_async_copies_need_their_streams() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/traces/streams.gl");
    let t = load(&path).unwrap();
    let r = dry_run(&t);
    assert_eq!(r.violation_count, 0, "{:?}", r.violations);
    // Every async copy, set, event and stream call is checked.
    let async_calls = t.calls.iter().filter(|c| c.function.name().ends_with("Async")).count() as u64;
    assert!(async_calls >= 14 && r.checked >= async_calls + 20, "{async_calls} async calls, {r:?}");

    // The non-blocking stream the pipeline's copies run on, never created.
    let mut t = t;
    let i = t.calls.iter().position(|c| c.function.name() == "cuStreamCreateWithPriority").unwrap();
    t.calls.remove(i);
    let r = dry_run(&t);
    assert!(first(&r).contains("cuMemsetD8Async") && first(&r).contains("unknown stream"), "{r:?}");
    assert!(r.violations.iter().any(|v| v.contains("cuMemcpyDtoHAsync")), "{r:?}");
}

fn real(name: &str) -> LoadedTrace {
    load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/traces").join(name)).unwrap()
}

fn arg_of<'a>(c: &'a CallRecord, name: &str) -> &'a Value {
    let i = c.function.api().unwrap().args.iter().position(|a| a.name == name).unwrap();
    &c.args[i]
}

/// graph.cu, globals.cu and texture.cu recorded on the H200 (testdata/cuda/suite; replayed and
/// verified there: 3, 5 and 6 device-to-host results equal). The model accepts them, and what
/// the replay needs was recorded: kernel node parameters, the captured copy's hash, the host
/// rows of 2D/3D copies, the hash of a 3D copy into host memory.
#[test]
fn h200_graph_texture_and_globals_traces_are_consistent() {
    for name in ["graph.gl", "texture.gl", "globals.gl"] {
        let r = dry_run(&real(name));
        assert_eq!(r.violation_count, 0, "{name}: {:?}", r.violations);
        assert!(r.checked >= 40, "{name}: {r:?}");
    }
    let g = real("graph.gl");
    let of = |t: &LoadedTrace, n: &str| t.calls.iter().filter(|c| c.function.name() == n).cloned().collect::<Vec<_>>();
    let nodes = of(&g, "cuGraphAddKernelNode");
    assert_eq!(nodes.len(), 2);
    for n in &nodes {
        let Value::List(items) = arg_of(n, "nodeParams") else { panic!("{n:?}") };
        assert!(matches!(&items[1], Value::KernelParams(kp) if kp.layout.len() == 3), "{items:?}");
    }
    let captured = of(&g, "cuMemcpyDtoHAsync");
    assert!(matches!(captured[0].results[0], Value::Digest(_)), "hashed at the first synchronization after launch 1");
    // cudaGraphAddNode (twice: memcpy, memset, kernel): the tagged union's bytes, followed by the
    // member the recorder follows (kernel parameters; the copy struct and its host source).
    let generic = of(&g, "cuGraphAddNode");
    assert_eq!(generic.len(), 6);
    let types: Vec<u32> = generic
        .iter()
        .map(|n| match arg_of(n, "nodeParams") {
            Value::List(items) => match &items[0] {
                Value::Bytes(b) => u32::from_le_bytes(b[0..4].try_into().unwrap()),
                other => panic!("{other:?}"),
            },
            Value::Bytes(b) => u32::from_le_bytes(b[0..4].try_into().unwrap()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(types, [1, 2, 0, 1, 2, 0], "memcpy, memset, kernel; twice");
    let Value::List(kernel) = arg_of(&generic[2], "nodeParams") else { panic!() };
    let Value::List(member) = &kernel[1] else { panic!("{kernel:?}") };
    assert!(matches!(&member[1], Value::KernelParams(kp) if kp.layout.len() == 3), "{member:?}");
    let Value::List(memcpy) = arg_of(&generic[0], "nodeParams") else { panic!() };
    assert!(matches!(&memcpy[1], Value::List(c) if matches!(&c[0], Value::Bytes(b) if b.len() == 200)), "{memcpy:?}");
    assert!(matches!(arg_of(&generic[1], "nodeParams"), Value::Bytes(b) if b.len() == 256));
    for name in ["cuStreamBeginCaptureToGraph", "cuGraphExecUpdate", "cuGraphExecKernelNodeSetParams"] {
        assert!(!of(&g, name).is_empty(), "{name}");
    }
    let t = real("texture.gl");
    let copies = of(&t, "cuMemcpy3D");
    assert!(matches!(arg_of(&copies[0], "pCopy"), Value::List(items) if matches!(items[1], Value::Blob(_))));
    assert!(matches!(copies.last().unwrap().results[0], Value::Digest(_)));
    // The program never asked cuLibraryGetGlobal for sizes: the model reads them from the cubin.
    let gl = real("globals.gl");
    assert!(of(&gl, "cuLibraryGetGlobal").iter().all(|c| c.results[1] == Value::Null));
}

#[test]
fn h200_traces_broken_are_caught() {
    let pos = |t: &LoadedTrace, n: &str| t.calls.iter().position(|c| c.function.name() == n).unwrap();
    // A kernel node without its parameters (what the recorder stored before).
    let mut g = real("graph.gl");
    let i = pos(&g, "cuGraphAddKernelNode");
    let f = g.calls[i].function.api().unwrap();
    let a = f.args.iter().position(|a| a.name == "nodeParams").unwrap();
    let Value::List(items) = g.calls[i].args[a].clone() else { panic!() };
    g.calls[i].args[a] = items[0].clone();
    let r = dry_run(&g);
    assert!(first(&r).contains("cuGraphAddKernelNode") && first(&r).contains("not recorded"), "{r:?}");
    // A generic kernel node with the union's bytes alone.
    let mut g = real("graph.gl");
    let i = g.calls.iter().position(|c| c.function.name() == "cuGraphAddNode" && matches!(arg_of(c, "nodeParams"), Value::List(l) if matches!(&l[1], Value::List(m) if matches!(m.get(1), Some(Value::KernelParams(_)))))).unwrap();
    let a = g.calls[i].function.api().unwrap().args.iter().position(|a| a.name == "nodeParams").unwrap();
    let Value::List(items) = g.calls[i].args[a].clone() else { panic!() };
    g.calls[i].args[a] = items[0].clone();
    let r = dry_run(&g);
    assert!(first(&r).contains("cuGraphAddNode") && first(&r).contains("not recorded"), "{r:?}");
    // The capture's stream never created.
    let mut g = real("graph.gl");
    let i = pos(&g, "cuStreamCreate");
    g.calls.remove(i);
    let r = dry_run(&g);
    assert!(first(&r).contains("cuStreamBeginCapture") && first(&r).contains("unknown stream"), "{r:?}");
    // The host rows of the first 3D copy missing from the file.
    let mut t = real("texture.gl");
    let i = pos(&t, "cuMemcpy3D");
    let Value::List(items) = arg_of(&t.calls[i], "pCopy").clone() else { panic!() };
    let Value::Blob(b) = items[1] else { panic!() };
    t.blobs.remove(&b.hash);
    let r = dry_run(&t);
    assert!(first(&r).contains("cuMemcpy3D") && first(&r).contains("missing"), "{r:?}");
    // A global's cubin gone: its size is unknown, the copies into it are reported.
    let mut gl = real("globals.gl");
    let i = pos(&gl, "cuLibraryLoadData");
    let Value::Blob(b) = *arg_of(&gl.calls[i], "code") else { panic!() };
    let zeros = vec![0u8; gl.blobs[&b.hash].len()];
    gl.blobs.insert(b.hash, zeros.into());
    let r = dry_run(&gl);
    assert!(r.violations.iter().any(|v| v.contains("outside every live allocation")), "{r:?}");
}

/// `CUgraphNodeParams` bytes of node type `ty`, with `member` written at the union (offset 16).
fn node_union(ty: u32, member: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; structs::NODE_PARAMS_SIZE];
    b[0..4].copy_from_slice(&ty.to_le_bytes());
    b[16..16 + member.len()].copy_from_slice(member);
    b
}

/// A memset node of `width` 4-byte elements at `dst`.
fn memset_union(dst: u64, width: u64) -> Value {
    let mut m = vec![0u8; 48];
    m[0..8].copy_from_slice(&dst.to_le_bytes());
    m[8..16].copy_from_slice(&(width * 4).to_le_bytes()); // pitch
    m[20..24].copy_from_slice(&4u32.to_le_bytes()); // elementSize
    m[24..32].copy_from_slice(&width.to_le_bytes());
    m[32..40].copy_from_slice(&1u64.to_le_bytes()); // height
    Value::Bytes(node_union(2, &m))
}

/// graph.cu's second part: nodes added with cuGraphAddNode (kernel, memset, memcpy, empty, event
/// record), a kernel captured into the same graph with cuStreamBeginCaptureToGraph, the graph
/// instantiated, updated with cuGraphExecUpdate and launched.
fn generic_node_trace() -> Builder {
    use HandleKind::{Event, Graph, GraphExec, GraphNode, Stream};
    let mut b = graph_trace();
    let s = h(Stream, STREAM);
    let g = h(Graph, 0x102);
    let add = |b: &mut Builder, version: u8, deps: &[u64], params: Value, node: u64| {
        let mut args = vec![("hGraph", g.clone()), ("numDependencies", Value::U64(deps.len() as u64))];
        if !deps.is_empty() {
            args.push(("dependencies", nodes(deps)));
        }
        args.push(("nodeParams", params));
        b.call("cuGraphAddNode", version, &args, &[("phGraphNode", h(GraphNode, node))]);
    };
    let kernel = Value::List(vec![Value::Bytes(node_union(0, &node_struct(KERNEL))), node_params(KERNEL, BUF)]);
    let Value::List(copy) = copy3d_d2d(OUT, BUF, 4096) else { unreachable!() };
    let Value::Bytes(copy_struct) = &copy[0] else { unreachable!() };
    let mut memcpy_member = vec![0u8; 16];
    memcpy_member.extend_from_slice(copy_struct);
    let memcpy = Value::List(vec![Value::Bytes(node_union(1, &memcpy_member)), Value::List(copy.clone())]);
    b.call("cuEventCreate", 1, &[("Flags", Value::U64(0))], &[("phEvent", h(Event, 0x600))]).call(
        "cuGraphCreate",
        1,
        &[("flags", Value::U64(0))],
        &[("phGraph", g.clone())],
    );
    add(&mut b, 2, &[], kernel, 0x310);
    add(&mut b, 2, &[0x310], memset_union(BUF, 1024), 0x311);
    add(&mut b, 1, &[0x311], memcpy, 0x312);
    add(&mut b, 2, &[0x312], Value::Bytes(node_union(5, &[])), 0x313);
    add(&mut b, 2, &[0x313], Value::Bytes(node_union(7, &0x600u64.to_le_bytes())), 0x314);
    b.call(
        "cuStreamBeginCaptureToGraph",
        1,
        &[
            ("hStream", s.clone()),
            ("hGraph", g.clone()),
            ("dependencies", nodes(&[0x314])),
            ("dependencyData", Value::Bytes(vec![0; 8])),
            ("numDependencies", Value::U64(1)),
            ("mode", Value::U64(0)),
        ],
        &[],
    )
    .call(
        "cuLaunchKernel",
        1,
        &[("f", h(HandleKind::Function, KERNEL)), ("hStream", s.clone()), ("kernelParams", params(OUT))],
        &[],
    )
    .call("cuStreamEndCapture", 1, &[("hStream", s.clone())], &[("phGraph", g.clone())])
    .call("cuGraphInstantiateWithFlags", 1, &[("hGraph", g.clone())], &[("phGraphExec", h(GraphExec, 0x202))])
    .call("cuGraphExecUpdate", 2, &[("hGraphExec", h(GraphExec, 0x202)), ("hGraph", g.clone())], &[])
    .call("cuGraphExecUpdate", 1, &[("hGraphExec", h(GraphExec, 0x202)), ("hGraph", g)], &[])
    .call("cuGraphLaunch", 1, &[("hGraphExec", h(GraphExec, 0x202)), ("hStream", s)], &[]);
    b
}

#[test]
fn generic_nodes_capture_into_a_graph_and_exec_updates_are_modelled() {
    let base = generic_node_trace();
    let r = dry_run(&base.trace());
    assert_eq!(r.violation_count, 0, "{:?}", r.violations);
    assert!(r.checked >= dry_run(&graph_trace().trace()).checked + 12, "{r:?}");

    let nth = |b: &Builder, name: &str, n: usize| {
        b.calls.iter().enumerate().filter(|(_, c)| c.function.name() == name).nth(n).map(|(i, _)| i).unwrap()
    };
    let set = |b: &mut Builder, i: usize, arg: &str, v: Value| {
        let a = b.calls[i].function.api().unwrap().args.iter().position(|a| a.name == arg).unwrap();
        b.calls[i].args[a] = v;
    };
    let broken = |n: usize, arg: &str, v: Value| {
        let mut t = generic_node_trace();
        let i = nth(&t, "cuGraphAddNode", n);
        set(&mut t, i, arg, v);
        dry_run(&t.trace())
    };

    // A host node is re-created (a no-op host function in a replay; the client's in a session).
    let r = broken(1, "nodeParams", Value::Bytes(node_union(3, &[])));
    assert_eq!(r.violation_count, 0, "{r:?}");
    // Node types a replay cannot execute are named.
    let r = broken(1, "nodeParams", Value::Bytes(node_union(10, &[])));
    assert!(first(&r).contains("memory allocation node"), "{r:?}");
    // A memset node past its allocation (4 MiB into 1 MiB).
    let r = broken(1, "nodeParams", memset_union(BUF, 1 << 20));
    assert!(first(&r).contains("memset node") && first(&r).contains("outside every live allocation"), "{r:?}");
    // A kernel node whose parameters were not followed (the union's bytes alone).
    let r = broken(0, "nodeParams", Value::Bytes(node_union(0, &node_struct(KERNEL))));
    assert!(first(&r).contains("cuGraphAddNode") && first(&r).contains("not recorded"), "{r:?}");
    // A kernel node of a kernel never loaded.
    let k = Value::List(vec![Value::Bytes(node_union(0, &node_struct(0x9999))), node_params(0x9999, BUF)]);
    assert!(first(&broken(0, "nodeParams", k)).contains("never loaded"));
    // A memcpy node whose member reaches past the allocation.
    let Value::List(copy) = copy3d_d2d(OUT, BUF, 2 << 20) else { unreachable!() };
    let m = Value::List(vec![Value::Bytes(node_union(1, &[])), Value::List(copy)]);
    assert!(first(&broken(2, "nodeParams", m)).contains("outside every live allocation"));
    // An event record node of an unknown event; a dependency on an unknown node.
    let r = broken(4, "nodeParams", Value::Bytes(node_union(7, &0x601u64.to_le_bytes())));
    assert!(first(&r).contains("event record node uses unknown event"), "{r:?}");
    let r = broken(3, "dependencies", nodes(&[0x3ff]));
    assert!(first(&r).contains("unknown graph node"), "{r:?}");

    // Capture into a graph that does not exist.
    let mut t = generic_node_trace();
    let i = nth(&t, "cuStreamBeginCaptureToGraph", 0);
    set(&mut t, i, "hGraph", h(HandleKind::Graph, 0x1ff));
    let r = dry_run(&t.trace());
    assert!(first(&r).contains("cuStreamBeginCaptureToGraph") && first(&r).contains("unknown graph"), "{r:?}");

    // Updating an executable graph that was never instantiated.
    let mut t = generic_node_trace();
    let i = nth(&t, "cuGraphExecUpdate", 1);
    set(&mut t, i, "hGraphExec", h(HandleKind::GraphExec, 0x2ff));
    let r = dry_run(&t.trace());
    assert!(first(&r).contains("cuGraphExecUpdate") && first(&r).contains("unknown executable graph"), "{r:?}");
}
