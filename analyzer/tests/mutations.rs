//! Random corruptions of real binaries: every outcome is a result, never a panic or a hang.

use std::path::PathBuf;

use gpuless_analyzer::cubin::analyze_cubin;
use gpuless_analyzer::{analyze, NoProgress, Options};
use gpuless_fatbin::Limits;
use proptest::prelude::*;

fn testdata(name: &str) -> Vec<u8> {
    std::fs::read(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/bin").join(name)).unwrap()
}

fn mutate(mut bytes: Vec<u8>, edits: &[(usize, u8)], cut: Option<usize>) -> Vec<u8> {
    let n = bytes.len();
    for &(pos, val) in edits {
        bytes[pos % n] = val;
    }
    if let Some(c) = cut {
        bytes.truncate(c % (n + 1));
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn corrupted_fatbins(edits in prop::collection::vec((any::<usize>(), any::<u8>()), 1..8), cut in prop::option::of(any::<usize>())) {
        let opts = Options { limits: Limits { max_uncompressed: 16 << 20 }, ..Options::default() };
        for f in ["params.size.fatbin", "params.speed.fatbin", "params.none.fatbin"] {
            let _ = analyze(&mutate(testdata(f), &edits, cut), &opts, &NoProgress);
        }
    }

    #[test]
    fn corrupted_cubins(edits in prop::collection::vec((any::<usize>(), any::<u8>()), 1..8), cut in prop::option::of(any::<usize>())) {
        let _ = analyze_cubin(&mutate(testdata("params.sm_90.cubin"), &edits, cut), None);
    }

    #[test]
    fn corrupted_nv_info_region(edits in prop::collection::vec((0x15fcusize..0x1b94, any::<u8>()), 1..16)) {
        // Offsets inside the .nv.info sections of params.sm_90.cubin (see readelf -S).
        let _ = analyze_cubin(&mutate(testdata("params.sm_90.cubin"), &edits, None), None);
    }
}
