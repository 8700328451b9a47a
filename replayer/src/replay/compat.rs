//! Before anything runs: can this GPU run the trace's code? Every code image the trace loads
//! is checked against the device's SM (the entry the driver would pick: SASS for this SM or an
//! older one of the same major, else PTX it can JIT), and the kernels of the images that have
//! nothing for it are named in the error, with what to do.

use gpuless_analyzer::api::{ArgKind, Direction};
use gpuless_fatbin::{select, Arch, Image, Limits};
use gpuless_traces::Value;

use super::LoadedTrace;

/// Images that cannot run on SM `device_sm`: one line per image (call, what it holds, kernels).
/// Code images are the arguments the API table marks `image` (stored as a blob) or `imagefile`
/// (stored as `[path, blob]`) of the calls that succeeded when recorded (a replay skips the
/// others).
pub fn incompatible_code(trace: &LoadedTrace, device_sm: u32) -> Vec<String> {
    let mut out = Vec::new();
    for rec in trace.calls.iter().filter(|r| r.status == 0) {
        let Some(f) = rec.function.api() else { continue };
        for (a, v) in f.args.iter().zip(&rec.args) {
            let blob = match (a.kind, a.dir, v) {
                (_, Direction::Out, _) => continue,
                (ArgKind::Image, _, Value::Blob(b)) => b,
                (ArgKind::ImageFile, _, Value::List(items)) => match items.get(1) {
                    Some(Value::Blob(b)) => b,
                    _ => continue,
                },
                _ => continue,
            };
            let Some(bytes) = trace.blobs.get(&blob.hash) else { continue };
            if let Some(problem) = image_problem(bytes, device_sm) {
                out.push(format!("call #{} {} ({}): {problem}", rec.seq, f.name, a.name));
            }
        }
    }
    out
}

/// What this image lacks for SM `device_sm`, or `None` when the driver can load it.
fn image_problem(bytes: &[u8], device_sm: u32) -> Option<String> {
    match Image::classify(bytes).ok()? {
        Image::Fatbin(b) => {
            let entries = gpuless_fatbin::all_entries(b, 0).ok()?;
            if select(&entries, device_sm).is_ok() {
                return None;
            }
            let mut archs: Vec<String> = entries.iter().map(|e| e.arch_name()).collect();
            archs.sort();
            archs.dedup();
            let mut kernels = Vec::new();
            for e in entries.iter().filter(|e| e.kind == gpuless_fatbin::EntryKind::Elf) {
                if let Ok(p) = e.payload(&Limits::default()) {
                    if let Ok(c) = gpuless_analyzer::cubin::analyze_cubin(&p, None) {
                        kernels.extend(c.kernels.into_iter().map(|k| k.name));
                    }
                }
            }
            kernels.sort();
            kernels.dedup();
            Some(format!("holds {} ({})", archs.join(", "), kernel_list(&kernels)))
        }
        Image::Cubin(b) => {
            let c = gpuless_analyzer::cubin::analyze_cubin(b, None).ok()?;
            let arch = Arch::from_entry(c.sm, 0);
            if arch.sass_runs_on(device_sm) {
                return None;
            }
            let names: Vec<String> = c.kernels.into_iter().map(|k| k.name).collect();
            Some(format!("a cubin for sm_{} ({})", c.sm, kernel_list(&names)))
        }
        Image::Ptx(_) | Image::Wrapper(_) => None,
    }
}

fn kernel_list(names: &[String]) -> String {
    match names.len() {
        0 => "no kernels".into(),
        n if n <= 8 => format!("kernels {}", names.join(", ")),
        n => format!("kernels {}, ... ({n} in all)", names[..8].join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(name: &str) -> LoadedTrace {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/traces").join(name);
        super::super::load(&p).unwrap()
    }

    /// vecadd.gl was recorded on an H200 from a binary built for sm_90 only.
    #[test]
    fn sm_90_code_runs_here_and_not_on_an_a100() {
        let t = trace("vecadd.gl");
        assert!(incompatible_code(&t, 90).is_empty());
        let problems = incompatible_code(&t, 80);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("sm_90") && problems[0].contains("vector_add"), "{problems:?}");
        assert!(problems[0].contains("cuLibraryLoadData (code)"), "{problems:?}");
        // A load that failed when recorded is not replayed, so its code does not matter.
        let mut t = t;
        for r in t.calls.iter_mut().filter(|r| r.function.name() == "cuLibraryLoadData") {
            r.status = 209; // CUDA_ERROR_NO_BINARY_FOR_GPU
        }
        assert!(incompatible_code(&t, 80).is_empty());
    }

    /// Images are found by the table's argument kinds: a load from a file (`imagefile`) is
    /// stored as `[path, blob]`.
    #[test]
    fn image_files_are_checked_too() {
        use gpuless_traces::{CallRecord, Function};
        let mut t = trace("vecadd.gl");
        let i = t.calls.iter().position(|r| r.function.name() == "cuLibraryLoadData").unwrap();
        let Some(Value::Blob(code)) = t.calls[i].args.get(1).cloned() else { panic!("{:?}", t.calls[i].args) };
        let f = gpuless_analyzer::api::by_name("cuLibraryLoadFromFile").unwrap();
        let mut r = CallRecord::new(t.calls[i].seq, f.level, Function::Known(f.id));
        r.args = f.args.iter().map(|_| Value::Null).collect();
        r.args[1] = Value::List(vec![Value::Str("/tmp/k.cubin".into()), Value::Blob(code)]);
        t.calls[i] = r;
        assert!(incompatible_code(&t, 90).is_empty());
        let problems = incompatible_code(&t, 80);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("cuLibraryLoadFromFile (fileName)"), "{problems:?}");
    }
}
