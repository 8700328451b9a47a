//! Tests on the real nvcc 13.0 outputs in testdata/bin (built by testdata/cuda/build.sh).

use std::path::PathBuf;

use gpuless_fatbin::*;

fn testdata(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/bin").join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn summary(bytes: &[u8]) -> Vec<(String, &'static str, &'static str)> {
    all_entries(bytes, 0).unwrap().iter().map(|e| (e.arch_name(), e.kind.as_str(), e.compression.as_str())).collect()
}

#[test]
fn every_compress_mode_parses_and_decompresses_to_the_same_code() {
    let limits = Limits::default();
    let plain = testdata("params.none.fatbin");
    let reference: Vec<Vec<u8>> =
        all_entries(&plain, 0).unwrap().iter().map(|e| e.payload(&limits).unwrap().into_owned()).collect();
    assert_eq!(
        summary(&plain).iter().map(|s| s.0.as_str()).collect::<Vec<_>>(),
        ["sm_80", "compute_90", "sm_90", "sm_90a", "sm_100"]
    );
    let mut seen = std::collections::HashSet::new();
    for mode in ["none", "speed", "balance", "size"] {
        let bytes = testdata(&format!("params.{mode}.fatbin"));
        let entries = all_entries(&bytes, 0).unwrap();
        assert_eq!(entries.len(), reference.len(), "{mode}");
        for (e, want) in entries.iter().zip(&reference) {
            seen.insert(e.compression);
            let got = e.payload(&limits).unwrap();
            // Plain payloads are padded to 8 bytes; PTX may be padded differently.
            let n = got.len().min(want.len());
            assert_eq!(&got[..n], &want[..n], "{mode} {}", e.arch_name());
            assert!(got.len().abs_diff(want.len()) < 8, "{mode} {}", e.arch_name());
            assert_eq!(got.len() as u64, e.size);
        }
    }
    assert!(seen.contains(&Compression::Lz4) && seen.contains(&Compression::Zstd) && seen.contains(&Compression::None));
}

#[test]
fn arch_specific_and_family_flags() {
    let bytes = testdata("params.none.fatbin");
    let entries = all_entries(&bytes, 0).unwrap();
    let a = entries.iter().find(|e| e.arch_name() == "sm_90a").unwrap();
    assert_eq!(a.arch.variant, Variant::Specific);
    assert_eq!(a.kind, EntryKind::Elf);
    let ptx = entries.iter().find(|e| e.kind == EntryKind::Ptx).unwrap();
    assert!(ptx.payload(&Limits::default()).unwrap().windows(11).any(|w| w == b".target sm_"));
}

#[test]
fn selection_follows_driver_rules() {
    let bytes = testdata("params.none.fatbin");
    let entries = all_entries(&bytes, 0).unwrap();
    let pick = |sm| select(&entries, sm).map(|c| (entries[c.index].arch_name(), c.jit));
    assert_eq!(pick(90).unwrap(), ("sm_90a".into(), false));
    assert_eq!(pick(80).unwrap(), ("sm_80".into(), false));
    assert_eq!(pick(89).unwrap(), ("sm_80".into(), false));
    assert_eq!(pick(100).unwrap(), ("sm_100".into(), false));
    assert_eq!(pick(103).unwrap(), ("sm_100".into(), false));
    assert_eq!(pick(120).unwrap(), ("compute_90".into(), true));
    let err = pick(75).unwrap_err().to_string();
    assert!(err.contains("sm_75") && err.contains("sm_80"), "{err}");
}

#[test]
fn host_elf_files_hold_fatbins() {
    for (file, archs) in [
        ("vecadd", &["sm_80", "sm_90"][..]),
        ("libkernels.so", &["sm_80", "compute_90", "sm_90", "sm_90a", "sm_100"][..]),
        ("rdc_app", &["sm_90"][..]),
    ] {
        let bytes = testdata(file);
        assert!(is_elf(&bytes));
        let sections = fatbin_sections(&bytes).unwrap();
        assert!(!sections.is_empty(), "{file}");
        let mut names = Vec::new();
        for s in &sections {
            for e in all_entries(s.bytes, s.file_offset).unwrap() {
                assert!(e.offset >= s.file_offset && e.offset < s.file_offset + s.bytes.len() as u64);
                names.push(e.arch_name());
            }
        }
        for a in archs {
            assert!(names.iter().any(|n| n == a), "{file}: {a} missing from {names:?}");
        }
    }
}

#[test]
fn images_are_classified_and_trimmed_from_a_bound() {
    let fat = testdata("params.none.fatbin");
    let mut padded = fat.clone();
    padded.extend_from_slice(&[0xAA; 100]);
    match Image::classify(&padded).unwrap() {
        Image::Fatbin(b) => assert_eq!(b.len(), fat.len()),
        other => panic!("{other:?}"),
    }
    let cubin = testdata("params.sm_90.cubin");
    let mut padded = cubin.clone();
    padded.extend_from_slice(&[0x55; 64]);
    // SAFETY: `padded` is alive and readable for its length.
    match unsafe { Image::from_ptr(padded.as_ptr(), padded.len()) }.unwrap() {
        Image::Cubin(b) => assert_eq!(b.len(), cubin.len()),
        other => panic!("{other:?}"),
    }
    let ptx = b".version 9.0\n.target sm_90\n\0garbage";
    assert!(matches!(Image::classify(ptx).unwrap(), Image::Ptx(t) if t.len() == 27));
    let mut w = Vec::new();
    w.extend_from_slice(&WRAPPER_MAGIC.to_le_bytes());
    w.extend_from_slice(&1u32.to_le_bytes());
    w.extend_from_slice(&0x1234u64.to_le_bytes());
    w.extend_from_slice(&0u64.to_le_bytes());
    assert_eq!(Image::classify(&w).unwrap().wrapper().unwrap().data, 0x1234);
    assert!(Image::classify(&cubin[..100]).is_err());
    assert!(Image::classify(b"\x01\x02\x03\x04\xff").is_err());
}

#[test]
fn every_truncation_is_an_error_or_a_prefix_never_a_panic() {
    let fat = testdata("params.size.fatbin");
    assert!(all_entries(&[], 0).unwrap().is_empty());
    for cut in 1..fat.len() {
        let e = all_entries(&fat[..cut], 0).expect_err("a cut container must fail").to_string();
        assert!(e.contains("offset"), "{e}");
    }
}
