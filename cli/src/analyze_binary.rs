//! `gpuless analyze` on a host ELF, fatbin or cubin: a readable table or `--json`.

use std::io::{self, Write};
use std::path::Path;

use anyhow::Context;
use gpuless_analyzer::cubin::Kernel;
use gpuless_analyzer::{analyze, Options, Report};
use gpuless_fatbin::MappedFile;

use crate::progress::Bar;

/// Parameters shown per kernel in the table before eliding the rest.
const TABLE_PARAMS: usize = 12;

/// Analyzes `path` and prints the report to stdout.
pub fn run(path: &Path, arch: Option<&str>, json: bool, progress: bool) -> anyhow::Result<()> {
    let file = MappedFile::open(path)?;
    let release = |b: &[u8]| file.release(b);
    let opts = Options { arch: arch.map(str::to_string), release: Some(&release), ..Options::default() };
    let bar = Bar::new("analyzing", progress);
    let report = analyze(file.bytes(), &opts, &bar).with_context(|| path.display().to_string())?;
    bar.finish();
    let stdout = io::stdout().lock();
    let mut out = io::BufWriter::with_capacity(1 << 20, stdout);
    let written = if json {
        serde_json::to_writer(&mut out, &report).map_err(io::Error::from).and_then(|_| writeln!(out))
    } else {
        write_table(&mut out, path, &report)
    };
    match written.and_then(|_| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

fn write_table(out: &mut impl Write, path: &Path, r: &Report) -> io::Result<()> {
    let kind = serde_json::to_value(r.kind).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
    writeln!(out, "{}: {kind}, {} entries, {} kernels", path.display(), r.entries.len(), r.kernels.len())?;
    if !r.entries.is_empty() {
        writeln!(out)?;
        writeln!(
            out,
            "{:>10}  {:<4} {:<12} {:<11} {:>12} {:>12}",
            "OFFSET", "KIND", "ARCH", "COMPRESSION", "STORED", "BYTES"
        )?;
        for e in &r.entries {
            writeln!(
                out,
                "{:>#10x}  {:<4} {:<12} {:<11} {:>12} {:>12}{}",
                e.offset,
                e.kind,
                e.arch,
                e.compression,
                e.stored_bytes,
                e.bytes,
                if e.relocatable { "  relocatable (-rdc)" } else { "" }
            )?;
        }
    }
    if !r.kernels.is_empty() {
        writeln!(out)?;
        writeln!(
            out,
            "{:<8} {:>5} {:>7} {:>6}  {:<44} LAYOUT (offset:size)",
            "ARCH", "REGS", "SMEM", "PARAMS", "KERNEL"
        )?;
        for k in &r.kernels {
            writeln!(
                out,
                "{:<8} {:>5} {:>7} {:>6}  {:<44} {}",
                k.arch,
                k.registers.map_or("-".into(), |v| v.to_string()),
                k.shared_bytes,
                k.param_bytes,
                k.demangled,
                layout(k)
            )?;
        }
    }
    Ok(())
}

fn layout(k: &Kernel) -> String {
    let mut s: Vec<String> = k.params.iter().take(TABLE_PARAMS).map(|p| format!("{}:{}", p.offset, p.size)).collect();
    if k.params.len() > TABLE_PARAMS {
        s.push(format!("... (+{} more)", k.params.len() - TABLE_PARAMS));
    }
    if s.is_empty() {
        "(none)".into()
    } else {
        s.join(" ")
    }
}
