//! `gpuless replay --mig/--create/--emulate` flag handling, without a GPU. Nothing here can
//! create a MIG instance: `--create` is only ever combined with flags that clap rejects.

mod support;
use support::gpuless;

use std::path::PathBuf;

fn trace() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/traces/vecadd.gl").to_string_lossy().into_owned()
}

#[test]
fn partition_flags_are_documented() {
    let (code, out, _) = gpuless(&["replay", "--help"]);
    assert_eq!(code, 0);
    for flag in ["--mig <PROFILE>", "--create", "--emulate", "--exact-sms", "soft partition"] {
        assert!(out.contains(flag), "{flag}: {out}");
    }
    assert!(!out.contains("--mig-created"), "hidden flag shown: {out}");
}

#[test]
fn flag_combinations_are_checked_before_anything_runs() {
    let t = trace();
    let cases: [(&[&str], &str); 5] = [
        (&["replay", "--create", &t], "--mig"),
        (&["replay", "--emulate", &t], "--mig"),
        (&["replay", "--mig", "3g.71gb", "--create", "--emulate", &t], "cannot be used with"),
        (&["replay", "--mig", "3g.71gb", "--exact-sms", &t], "--emulate"),
        (&["replay", "--mig", "3g.71gb", "--dry-run", &t], "cannot be used with"),
    ];
    for (args, needle) in cases {
        let (code, out, err) = gpuless(args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
    }
}

#[test]
fn without_nvml_mig_is_a_clean_error() {
    // Only meaningful where NVML is absent (CI); on a GPU machine this would query the GPU.
    if gpuless_replayer::partition::nvml::query().is_ok() {
        return;
    }
    let t = trace();
    for args in [vec!["replay", "--mig", "3g.71gb", &t], vec!["replay", "--mig", "1g.18gb", "--emulate", &t]] {
        let (code, _, err) = gpuless(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("--mig needs NVML") && err.contains("NVML is not available"), "{args:?}: {err}");
    }
}
