//! What the recorder stores for 2D/3D copies and graph kernel nodes, without a GPU: a C program
//! (tests/fake/copies.c) reaches the stand-in libcuda (tests/fake/libcuda.c) through
//! cuGetProcAddress with the real recorder preloaded. A copy from host memory must carry the
//! host rows it read, packed without pitch padding; a copy to host memory must have the packed
//! rows' hash as its result; a kernel node must carry its parameters laid out by
//! cuFuncGetParamInfo (the struct itself only holds pointers to them).

use std::path::Path;

use gpuless_analyzer::api::structs::{self, Copy, Dims};
use gpuless_traces::{Hash128, ReaderOptions, TraceReader, Value};

mod common;
use common::{cc, native_and_recorded};

#[test]
fn host_rows_of_2d_3d_copies_and_kernel_node_parameters_are_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake");
    let fake = dir.path().join("libcuda.so.1");
    cc(&["-O2", "-shared", "-fPIC", "-o", fake.to_str().unwrap(), src.join("libcuda.c").to_str().unwrap()]);
    let prog = dir.path().join("copies");
    cc(&["-O2", "-o", prog.to_str().unwrap(), src.join("copies.c").to_str().unwrap(), "-ldl"]);
    let trace = dir.path().join("t.gl");
    native_and_recorded(&prog, dir.path());

    let reader = TraceReader::open(&trace, ReaderOptions { blob_data: true, check_blob_refs: true }).unwrap();
    let (calls, blobs) = reader.read_all().unwrap();
    let of = |name: &str| calls.iter().filter(|c| c.function.name() == name).collect::<Vec<_>>();
    let copies = of("cuMemcpy2D");
    assert_eq!(copies.len(), 2, "{calls:#?}");

    // Host → device: rows 1..4, columns 4..19 of a pitch-24 image, packed: 16·row + column.
    let up = copies[0];
    assert_eq!(up.variant.version, 2);
    let Value::List(items) = &up.args[0] else { panic!("{:?}", up.args) };
    let Value::Bytes(s) = &items[0] else { panic!("{items:?}") };
    let c = Copy::parse(Dims::Two, s).unwrap();
    assert_eq!((c.src.memory_type, c.width, c.height, c.src.pitch), (structs::MEMORYTYPE_HOST, 16, 4, 24));
    let Value::Blob(b) = &items[1] else { panic!("host rows not stored: {items:?}") };
    let want: Vec<u8> = (1..5).flat_map(|r| (0..16).map(move |col| (16 * r + col) as u8)).collect();
    assert_eq!(blobs[&b.hash], want, "packed rows, without the 0xee padding");
    assert_eq!(up.results, [Value::Null], "a copy to device memory brings nothing back");

    // Device → host (pitch 32): the packed rows' hash is the result.
    let down = copies[1];
    let Value::List(items) = &down.args[0] else { panic!() };
    assert_eq!(items[1], Value::Null, "the source is device memory");
    assert_eq!(down.results, [Value::Digest(gpuless_traces::BlobRef { hash: Hash128::of(&want), len: 64 })]);

    // 3D: slices 1..2 of 5 rows of pitch 10, 3 rows of 8 bytes from column 2.
    let v = of("cuMemcpy3D");
    let Value::List(items) = &v[0].args[0] else { panic!() };
    let Value::Blob(b) = &items[1] else { panic!("{items:?}") };
    let want: Vec<u8> = (1..3)
        .flat_map(|z| (0..3).flat_map(move |r| (0..8).map(move |x| ((z * 50 + r * 10 + 2 + x) * 7) as u8)))
        .collect();
    assert_eq!(blobs[&b.hash], want);

    // The kernel node: the struct and the parameters (d, 1.5f, 64) at the fake's layout.
    let node = of("cuGraphAddKernelNode");
    assert_eq!(node.len(), 1);
    assert_eq!(node[0].variant.version, 2);
    let f = node[0].function.api().unwrap();
    let i = f.args.iter().position(|a| a.name == "nodeParams").unwrap();
    let Value::List(items) = &node[0].args[i] else { panic!("{:?}", node[0].args) };
    assert!(matches!(&items[0], Value::Bytes(s) if s.len() == 72), "{items:?}");
    let Value::KernelParams(kp) = &items[1] else { panic!("parameters not recorded: {items:?}") };
    assert_eq!(kp.layout, [(0, 8), (8, 4), (12, 4)]);
    let d = calls.iter().find(|c| c.function.name() == "cuMemAlloc").and_then(|c| match c.results[0] {
        Value::DevPtr(p) => Some(p),
        _ => None,
    });
    assert_eq!(kp.bytes[..8], d.unwrap().to_le_bytes());
    assert_eq!(kp.bytes[8..12], 1.5f32.to_le_bytes());
    assert_eq!(kp.bytes[12..16], 64i32.to_le_bytes());
}
