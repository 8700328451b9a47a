//! Helpers shared by the recorder's plumbing tests: the preload library and a C compiler.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The preload library, built now: `cargo test` builds this package's rlib, not its cdylib.
pub fn recorder_lib() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            // target/<profile>/deps/TEST-HASH → target/<profile>
            let exe = std::env::current_exe().unwrap();
            let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
            let target_dir = profile_dir.parent().unwrap();
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut cmd = Command::new(cargo);
            cmd.args(["build", "-p", "gpuless-recorder", "--lib", "--target-dir"]).arg(target_dir);
            if profile_dir.file_name().is_some_and(|n| n == "release") {
                cmd.arg("--release");
            }
            let st = cmd.current_dir(env!("CARGO_MANIFEST_DIR")).status().expect("run cargo");
            assert!(st.success(), "building the recorder cdylib failed");
            profile_dir.join("libgpuless_recorder.so")
        })
        .clone()
}

/// Runs the C compiler; the test fails when it does.
pub fn cc(args: &[&str]) {
    let st = Command::new("cc").args(args).status().expect("a C compiler (cc) is needed for this test");
    assert!(st.success(), "cc {args:?}");
}

/// Runs `prog` natively and under the recorder (trace `dir/t.gl`, the stand-in libcuda in
/// `dir`); both must succeed with the same output.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn native_and_recorded(prog: &Path, dir: &Path) -> (std::process::Output, std::process::Output) {
    let native = Command::new(prog).env("LD_LIBRARY_PATH", dir).output().expect("run natively");
    let recorded = Command::new(prog)
        .env("LD_LIBRARY_PATH", dir)
        .env("LD_PRELOAD", recorder_lib())
        .env("GPULESS_TRACE", dir.join("t.gl"))
        .output()
        .expect("run recorded");
    assert!(native.status.success() && recorded.status.success(), "{native:?} {recorded:?}");
    assert_eq!(native.stdout, recorded.stdout, "the recorder must not change the program's output");
    (native, recorded)
}
