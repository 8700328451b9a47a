//! Parameter layouts and resources read from the real nvcc 13.0 binaries in testdata/bin.

use std::path::PathBuf;

use gpuless_analyzer::cubin::{analyze_cubin, Kernel};
use gpuless_analyzer::{analyze, InputKind, NoProgress, Options};

fn testdata(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/bin").join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn layout(k: &Kernel) -> Vec<(u32, u32)> {
    k.params.iter().map(|p| (p.offset, p.size)).collect()
}

fn kernel<'a>(ks: &'a [Kernel], name: &str) -> &'a Kernel {
    ks.iter().find(|k| k.name == name).unwrap_or_else(|| panic!("{name} missing"))
}

#[test]
fn layouts_match_the_c_abi() {
    let c = analyze_cubin(&testdata("params.sm_90.cubin"), None).unwrap();
    assert_eq!(c.sm, 90);
    let ks = &c.kernels;
    assert_eq!(ks.len(), 9);
    let mixed = kernel(ks, "mixed");
    assert_eq!(layout(mixed), [(0, 8), (8, 4), (16, 16), (32, 8), (40, 1)]);
    assert_eq!(mixed.param_bytes, 41);
    assert_eq!(mixed.arch, "sm_90");
    let scalars = kernel(ks, "scalars");
    assert_eq!(layout(scalars), [(0, 1), (2, 2), (4, 4), (8, 8), (16, 4), (24, 8), (32, 1), (33, 1), (40, 8)]);
    let structs = kernel(ks, "structs");
    assert_eq!(layout(structs), [(0, 12), (12, 24), (48, 80), (128, 1), (136, 8)]);
    assert_eq!(structs.param_bytes, 144);
    let none = kernel(ks, "no_params");
    assert!(none.params.is_empty());
    assert_eq!(none.param_bytes, 0);
    let big = kernel(ks, "big_struct_by_value");
    assert_eq!(layout(big), [(0, 80), (80, 80), (160, 80), (240, 4), (248, 8)]);
    let t = kernel(ks, "_Z11scale_arrayIdLi4EEvPT_S0_i");
    assert_eq!(t.demangled, "void scale_array<double, 4>(double*, double, int)");
    assert_eq!(layout(t), [(0, 8), (8, 8), (16, 4)]);
    let b = kernel(ks, "_ZN2ns7boundedENS_4PairEPS0_");
    assert_eq!(b.demangled, "ns::bounded(ns::Pair, ns::Pair*)");
    assert_eq!(layout(b), [(0, 16), (16, 8)]);
    assert_eq!(b.max_threads, Some([256, 1, 1]));
    // 2,048 bytes of `tile`; the section also holds the 1 KB reserved window on sm_90.
    assert_eq!(b.shared_bytes, 2048);
    assert_eq!(b.shared_section_bytes, 3072);
    assert!(ks.iter().all(|k| k.registers.is_some_and(|r| r > 0)));
    let names: Vec<_> = c.globals.iter().map(|g| (g.name.as_str(), g.size)).collect();
    assert!(names.contains(&("g_scale", 16)) && names.contains(&("g_counter", 4)), "{names:?}");
}

#[test]
fn no_cap_on_parameter_count_or_size() {
    let c = analyze_cubin(&testdata("many_params.sm_90.cubin"), None).unwrap();
    let many = kernel(&c.kernels, "many_params");
    assert_eq!(many.params.len(), 301);
    assert!(many.params.iter().enumerate().all(|(i, p)| p.ordinal as usize == i));
    // p_i: int, double, char repeating, after the 8-byte pointer.
    assert_eq!(layout(many)[..5], [(0, 8), (8, 4), (16, 8), (24, 1), (28, 4)]);
    let huge = kernel(&c.kernels, "huge_param");
    assert_eq!(layout(huge), [(0, 8000), (8000, 8)]);
    assert_eq!(huge.param_bytes, 8008);
}

#[test]
fn cluster_attributes() {
    let c = analyze_cubin(&testdata("cluster.sm_90a.cubin"), Some("sm_90a")).unwrap();
    let k = kernel(&c.kernels, "clustered");
    assert_eq!(k.cluster_dims, Some([2, 1, 1]));
    assert_eq!(k.arch, "sm_90a");
    let b = kernel(&c.kernels, "bounded128");
    assert_eq!(b.max_threads, Some([128, 1, 1]));
}

#[test]
fn every_file_kind_and_the_arch_filter() {
    let opts = |arch: Option<&str>| Options { arch: arch.map(str::to_string), ..Options::default() };
    for mode in ["none", "speed", "balance", "size"] {
        let r = analyze(&testdata(&format!("params.{mode}.fatbin")), &opts(None), &NoProgress).unwrap();
        assert_eq!(r.kind, InputKind::Fatbin);
        assert_eq!(r.entries.len(), 5);
        assert_eq!(r.kernels.len(), 4 * 9, "{mode}: sm_80, sm_90, sm_90a, sm_100 cubins");
        let sm90 = analyze(&testdata(&format!("params.{mode}.fatbin")), &opts(Some("sm_90")), &NoProgress).unwrap();
        assert_eq!(sm90.entries.len(), 1);
        assert!(sm90.kernels.iter().all(|k| k.arch == "sm_90"));
        assert_eq!(layout(kernel(&sm90.kernels, "mixed")), [(0, 8), (8, 4), (16, 16), (32, 8), (40, 1)]);
    }
    let lib = analyze(&testdata("libkernels.so"), &opts(Some("sm_100")), &NoProgress).unwrap();
    assert_eq!(lib.kind, InputKind::ElfHost);
    let saxpy = kernel(&lib.kernels, "_Z5saxpyifPKfPf");
    assert_eq!(layout(saxpy), [(0, 4), (4, 4), (8, 8), (16, 8)]);
    let rdc = analyze(&testdata("rdc_app"), &opts(None), &NoProgress).unwrap();
    let linked: Vec<_> = rdc.kernels.iter().filter(|k| !k.relocatable).map(|k| k.name.as_str()).collect();
    assert_eq!(linked, ["_Z10rdc_kernelPfii"], "the device link keeps only what the host registers and uses");
    assert!(rdc.kernels.iter().any(|k| k.relocatable && k.name == "_Z9rdc_otherPdd"));
    assert_eq!(rdc.entries.iter().filter(|e| e.relocatable).count(), 2);
    let exe = analyze(&testdata("vecadd"), &opts(None), &NoProgress).unwrap();
    assert_eq!(exe.kernels.len(), 2);
    let cubin = analyze(&testdata("params.sm_90.cubin"), &opts(None), &NoProgress).unwrap();
    assert_eq!((cubin.kind, cubin.kernels.len()), (InputKind::Cubin, 9));
    assert!(analyze(b"hello world", &opts(None), &NoProgress).is_err());
}

#[test]
fn layouts_agree_across_archs() {
    // The driver oracle can only load sm_90 code on the H200; the C ABI layout is the same on
    // every arch, so sm_80, sm_90a and sm_100 cubins must agree with the oracle-checked sm_90.
    let r = analyze(&testdata("params.size.fatbin"), &Options::default(), &NoProgress).unwrap();
    for k in &r.kernels {
        let reference = r.kernels.iter().find(|o| o.name == k.name && o.arch == "sm_90").unwrap();
        assert_eq!(
            (k.params.clone(), k.param_bytes),
            (reference.params.clone(), reference.param_bytes),
            "{} {}",
            k.arch,
            k.name
        );
    }
}
