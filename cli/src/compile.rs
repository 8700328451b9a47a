//! `gpuless compile`: a recording of one inference made into a function file (`.gfn`,
//! `gpuless_replayer::function`) — its set-up and body, the blobs they use, and its signature;
//! with two or more recordings, refused unless their bodies are the same but for their input
//! bytes. `--show` prints a function file's signature after checking the file is whole.

use std::path::{Path, PathBuf};

use anyhow::Context;
use gpuless_analyzer::api::SyncClass;
use gpuless_replayer::function::{self, Manifest};
use gpuless_replayer::replay::{load, LoadedTrace};
use gpuless_traces::writer::{TraceWriter, WriterOptions};
use gpuless_traces::{BlobKind, Value};

/// Compiles `traces` (the first is the function; the others are compared with it) into `out`.
pub fn run(traces: &[PathBuf], out: &Path) -> anyhow::Result<()> {
    let first = traces.first().context("no trace given")?;
    let t = load(first).with_context(|| first.display().to_string())?;
    let others = traces[1..]
        .iter()
        .map(|p| load(p).with_context(|| p.display().to_string()))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let refs: Vec<_> = others.iter().collect();
    let (keep, manifest) = function::compile(&t, &refs).map_err(|e| anyhow::anyhow!("{}: {e}", first.display()))?;
    // The function's records and the blobs they refer to, as a trace of their own (written
    // beside the output, moved into it, removed whatever happens).
    let tmp = out.with_extension("gfn.part");
    let r = write_records(&t, &keep, &tmp, first).and_then(|()| Ok(function::write(out, &manifest, &tmp)?));
    let _ = std::fs::remove_file(&tmp);
    r?;
    print(out, &manifest);
    Ok(())
}

/// Writes records `keep` of `t` and the blobs they carry as a trace at `path`.
fn write_records(t: &LoadedTrace, keep: &[usize], path: &Path, source: &Path) -> anyhow::Result<()> {
    let w = TraceWriter::create(path, &t.meta, WriterOptions::default())
        .with_context(|| format!("writing {}", path.display()))?;
    let mut written = std::collections::HashSet::new();
    for &i in keep {
        let r = &t.calls[i];
        let kind = match r.function.api().map(|f| f.sync) {
            Some(SyncClass::CreatesHandle) => BlobKind::CodeImage,
            _ => BlobKind::HostToDevice,
        };
        for v in &r.args {
            if let Value::Blob(b) = v {
                if written.insert(b.hash) {
                    let bytes = t
                        .blobs
                        .get(&b.hash)
                        .with_context(|| format!("{}: blob {} is missing", source.display(), b.hash))?;
                    w.blob(kind, bytes)?;
                }
            }
        }
        w.record(r.clone())?;
    }
    w.finish()?;
    Ok(())
}

/// `--show`: reads `path` (checking it whole) and prints its signature.
pub fn show(path: &Path) -> anyhow::Result<()> {
    let f = function::open(path)?;
    print(path, &f.manifest);
    Ok(())
}

fn print(path: &Path, m: &Manifest) {
    println!("function   {} (format {}, sm_{})", path.display(), m.format, m.sm);
    println!("from       {}", m.command);
    println!(
        "records    {} set-up, {} body; {} kernels; {} recording(s) compared",
        m.setup_records,
        m.body_records,
        m.kernels.len(),
        m.recordings_compared
    );
    println!("code       {} images kept, {} left out (none of their kernels runs)", m.images, m.images_left_out);
    if m.host_words > 0 {
        println!(
            "host words {} kernel parameter words differ between the recordings but address nothing on the device \
             (host pointers, padding): the first's are kept",
            m.host_words
        );
    }
    for p in &m.inputs {
        println!("input      {} B to {:#x} ({} #{})", p.bytes, p.address, p.call, p.seq);
    }
    for p in &m.outputs {
        println!("output     {} B from {:#x} ({} #{})", p.bytes, p.address, p.call, p.seq);
    }
}
