//! `gpuless analyze TRACE.gl`: statistics and synchronization analysis of a trace file.
//!
//! Prints readable tables (or JSON with `--json`), optionally writes figures (`--plot DIR`).
//! A damaged or truncated trace is analyzed up to the damage, then the reader's error is
//! returned (exit code 2) so that scripts notice.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use gpuless_traces::analysis::{self, TraceAnalysis};
use gpuless_traces::{ReaderOptions, TraceReader};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::analyze_pieces as pieces;

/// Options of `gpuless analyze` for trace files.
#[derive(Debug, Clone, Default)]
pub struct TraceAnalyzeOpts {
    /// Print JSON instead of tables.
    pub json: bool,
    /// Write SVG and PNG figures into this directory.
    pub plot_dir: Option<PathBuf>,
    /// Write the timeline (Chrome trace-event JSON) to this file.
    pub perfetto: Option<PathBuf>,
    /// Survey what cached-trace execution would make of the trace (`--pieces`).
    pub pieces: bool,
    /// Survey what warm constants would keep and skip (`--resident`).
    pub resident: bool,
    /// Draw a progress bar on stderr (only when it is a terminal).
    pub progress: bool,
}

/// Analyze one trace file and print the result on stdout.
pub fn analyze_trace(path: &Path, opts: &TraceAnalyzeOpts) -> anyhow::Result<()> {
    let reader = TraceReader::open(path, ReaderOptions::default()).with_context(|| format!("{}", path.display()))?;
    let total = reader.progress().1.unwrap_or(0);
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
    if opts.progress && std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::stderr());
    }
    if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:40}] {bytes}/{total_bytes} ({elapsed})") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message("reading trace");
    let (a, err) = analysis::analyze(reader, &mut |pos, _| bar.set_position(pos));
    bar.finish_and_clear();

    let survey = if opts.pieces { Some(pieces::survey_trace(path)?) } else { None };
    let resident = if opts.resident { Some(crate::analyze_resident::survey_trace(path)?) } else { None };
    let mut out = std::io::stdout().lock();
    if opts.json {
        let mut v = serde_json::to_value(&a)?;
        if let (Some(s), Some(o)) = (&survey, v.as_object_mut()) {
            o.insert("pieces".to_string(), serde_json::to_value(s)?);
        }
        if let (Some(s), Some(o)) = (&resident, v.as_object_mut()) {
            o.insert("resident".to_string(), serde_json::to_value(s)?);
        }
        serde_json::to_writer_pretty(&mut out, &v)?;
        writeln!(out)?;
    } else {
        print_tables(&mut out, path, &a)?;
        if let Some(s) = &survey {
            pieces::print(&mut out, s)?;
        }
        if let Some(s) = &resident {
            crate::analyze_resident::print(&mut out, s)?;
        }
    }
    out.flush()?;
    if let Some(dir) = &opts.plot_dir {
        let p = analysis::plot::write_plots(&a, dir)?;
        for w in &p.warnings {
            eprintln!("gpuless: warning: {w}");
        }
        for f in &p.files {
            eprintln!("wrote {}", f.display());
        }
    }
    if let Some(file) = &opts.perfetto {
        write_perfetto(path, file)?;
    }
    match err {
        Some(e) => {
            Err(anyhow::Error::new(e).context(format!("{}: analysis covers only the complete chunks", path.display())))
        }
        None => Ok(()),
    }
}

/// Write the timeline of the trace at `path` to `file` (`--perfetto`); what was written goes to
/// stderr. A damaged trace gets the timeline of what precedes the damage (the analysis reports
/// the error).
fn write_perfetto(path: &Path, file: &Path) -> anyhow::Result<()> {
    let reader = TraceReader::open(path, ReaderOptions::default()).with_context(|| format!("{}", path.display()))?;
    let (t, _err) = analysis::perfetto::timeline(reader);
    let f = std::fs::File::create(file).with_context(|| format!("--perfetto {}", file.display()))?;
    let mut w = std::io::BufWriter::new(f);
    serde_json::to_writer(&mut w, &t).with_context(|| format!("writing {}", file.display()))?;
    w.flush().with_context(|| format!("writing {}", file.display()))?;
    let count = |ph: &str| t.trace_events.iter().filter(|e| e.ph == ph).count();
    eprintln!(
        "wrote {}: {} calls, {} device-memory samples, {} metadata events",
        file.display(),
        count("X"),
        count("C"),
        count("M")
    );
    Ok(())
}

/// What an unmodeled function is when the table models its base name: an older form with
/// another signature (the legacy 32-bit symbols such as the bare `cuMemAlloc`), passed through,
/// or a version newer than this table (`cuCtxGetFlags_v2`, `BASE@unexported-version`).
fn unmodeled_hint(name: &str) -> Option<String> {
    use gpuless_analyzer::api;
    if let Some(base) = name.strip_suffix("@unexported-version") {
        return api::by_name(base).map(|_| format!("(a version of {base} newer than this table)"));
    }
    let (base, version, _) = api::parse::split_symbol(name);
    let (newest, _) = api::newest(base)?;
    Some(if version > newest {
        format!("(a version of {base} newer than this table)")
    } else {
        format!("(an older form of {base} with another signature, passed through)")
    })
}

fn bytes(b: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", units.get(i).unwrap_or(&"B"))
    }
}

fn print_tables(out: &mut impl Write, path: &Path, a: &TraceAnalysis) -> std::io::Result<()> {
    let m = &a.meta;
    let i = &a.integrity;
    let s = &a.stats;
    let damaged = format!(
        "DAMAGED: {} chunk{} skipped{}",
        i.damaged_chunks,
        if i.damaged_chunks == 1 { "" } else { "s" },
        if i.finished { ", the rest read to the index" } else { "" }
    );
    let state = if i.damaged_chunks > 0 {
        damaged.as_str()
    } else if i.error.is_some() {
        "DAMAGED"
    } else if i.finished {
        "finished"
    } else {
        "unfinished (no index: the recording did not end normally)"
    };
    writeln!(out, "trace       {} (format {}, {} chunks, {})", path.display(), m.format_version, i.chunks, state)?;
    let ver = |v: i32| if v > 0 { format!("{}.{}", v / 1000, (v % 1000) / 10) } else { "unknown".into() };
    writeln!(
        out,
        "recorded    by {}; driver {}, CUDA {}; {} (sm_{})",
        m.tool_version,
        ver(m.driver_version),
        ver(m.cuda_version),
        m.gpu_name,
        m.sm
    )?;
    if !m.command_line.is_empty() {
        writeln!(out, "command     {}", m.command_line.join(" "))?;
    }
    if m.arena_base != 0 {
        writeln!(
            out,
            "arena       {:#x}..{:#x}: {} allocations inside (exact at replay), {} outside",
            m.arena_base,
            m.arena_base + m.arena_size,
            s.allocations_in_arena,
            s.allocations_outside_arena
        )?;
    } else {
        writeln!(out, "arena       none: the recorder served no allocations from its arena")?;
    }
    if let Some(e) = &i.error {
        if i.damaged_chunks > 0 {
            writeln!(
                out,
                "DAMAGED     {} chunk(s) skipped ({} searched for the next chunk header); first: {e}",
                i.damaged_chunks,
                bytes(i.skipped_bytes as f64)
            )?;
        }
        if !i.finished {
            let lost = i.file_bytes.map(|f| f.saturating_sub(i.good_bytes)).unwrap_or(0);
            writeln!(out, "LOST        {} after offset {}", bytes(lost as f64), i.good_bytes)?;
        }
    }
    let levels: Vec<String> = s.by_level.iter().map(|(l, c)| format!("{l} {c}")).collect();
    writeln!(
        out,
        "calls       {} ({}); {} threads; {} nested; {} failed; span {:.3} s",
        s.calls,
        levels.join(", "),
        s.threads,
        s.nested_calls,
        s.failed_calls,
        s.span_ns as f64 / 1e9
    )?;
    writeln!(out)?;
    writeln!(out, "{:<22} {:>10} {:>12}", "", "count", "bytes")?;
    let row = |out: &mut dyn Write, name: &str, count: u64, b: Option<u64>| {
        let b = b.map(|b| bytes(b as f64)).unwrap_or_default();
        writeln!(out, "{name:<22} {count:>10} {b:>12}")
    };
    row(out, "kernel launches", s.kernel_launches, None)?;
    row(out, "unique kernels", s.unique_kernels, None)?;
    row(out, "  with known names", s.unique_kernel_names, None)?;
    row(out, "graph launches", s.graph_launches, None)?;
    row(out, "allocations", s.allocations.count, Some(s.allocations.bytes))?;
    row(out, "  in the arena", s.allocations_in_arena, None)?;
    row(out, "  outside the arena", s.allocations_outside_arena, None)?;
    row(out, "frees", s.frees, None)?;
    row(out, "H2D copies", s.h2d.count, Some(s.h2d.bytes))?;
    row(out, "D2H copies", s.d2h.count, Some(s.d2h.bytes))?;
    row(out, "D2D copies", s.d2d.count, Some(s.d2d.bytes))?;
    row(out, "memsets", s.memsets, None)?;
    row(out, "module loads", s.module_loads, None)?;
    let g = &s.registrations;
    if g.fatbins + g.functions + g.variables > 0 {
        // Runtime annotations: host stub -> kernel name (listed with --json).
        row(out, "registered fatbins", g.fatbins, None)?;
        row(out, "  kernels", g.functions, None)?;
        row(out, "  variables", g.variables, None)?;
    }
    row(out, "blobs stored", s.blobs.count, Some(s.blobs.bytes))?;
    row(out, "  code images", s.code_images.count, Some(s.code_images.bytes))?;
    row(out, "unmodeled calls", s.unmodeled_calls, None)?;
    let listed = &s.unmodeled[..s.unmodeled.len().min(10)];
    let width = listed.iter().map(|(n, _)| n.len()).max().unwrap_or(0).max(20);
    for (name, c) in listed {
        match unmodeled_hint(name) {
            Some(h) => writeln!(out, "  {name:<width$} {c:>10}  {h}")?,
            None => writeln!(out, "  {name:<width$} {c:>10}")?,
        }
    }
    if s.unmodeled.len() > listed.len() {
        writeln!(out, "  ... and {} more functions (--json lists all)", s.unmodeled.len() - listed.len())?;
    }
    if !s.export_table_slots.is_empty() {
        let calls: u64 = s.export_table_slots.iter().map(|e| e.2).sum();
        row(out, "export-table calls", calls, None)?;
        let mut tables: Vec<&str> = s.export_table_slots.iter().map(|e| e.0.as_str()).collect();
        tables.dedup();
        for t in tables {
            let slots: Vec<String> = s
                .export_table_slots
                .iter()
                .filter(|e| e.0 == t && e.2 > 0)
                .map(|e| format!("{}×{}", e.1, e.2))
                .collect();
            writeln!(
                out,
                "  {t}  slot×calls: {}",
                if slots.is_empty() { "none called".into() } else { slots.join(" ") }
            )?;
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "{:<13} {:>8} {:>7} {:>11} {:>11} {:>9} {:>7} {:>7} {:>8}",
        "policy", "syncs", "%", "up/sync", "down/sync", "seg mean", "median", "p90", "max"
    )?;
    for r in &a.sync {
        writeln!(
            out,
            "{:<13} {:>8} {:>6.2}% {:>11} {:>11} {:>9.1} {:>7} {:>7} {:>8}",
            r.policy,
            r.syncs,
            r.sync_percent,
            bytes(r.bytes_up_per_sync),
            bytes(r.bytes_down_per_sync),
            r.segments.mean,
            r.segments.median,
            r.segments.p90,
            r.segments.max
        )?;
    }
    for r in &a.sync {
        let reasons: Vec<String> = r.reasons.iter().map(|(k, v)| format!("{k} {v}")).collect();
        writeln!(out, "  {:<11} {}", r.policy, reasons.join(", "))?;
    }
    writeln!(out)?;
    writeln!(out, "{:>8}  {:<8} function", "calls", "level")?;
    for f in s.by_function.iter().take(25) {
        let mark = if f.modeled { "" } else { "  (unmodeled)" };
        writeln!(out, "{:>8}  {:<8} {}{mark}", f.count, f.level, f.name)?;
    }
    if s.by_function.len() > 25 {
        writeln!(out, "     ...  {} more functions (--json lists all)", s.by_function.len() - 25)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::unmodeled_hint;

    #[test]
    fn unmodeled_versions_of_modeled_functions_are_explained() {
        assert_eq!(
            unmodeled_hint("cuMemAlloc").as_deref(),
            Some("(an older form of cuMemAlloc with another signature, passed through)")
        );
        assert_eq!(
            unmodeled_hint("cuMemcpyHtoD").as_deref(),
            Some("(an older form of cuMemcpyHtoD with another signature, passed through)")
        );
        assert_eq!(unmodeled_hint("cuMemAlloc_v9").as_deref(), Some("(a version of cuMemAlloc newer than this table)"));
        assert_eq!(
            unmodeled_hint("cuCtxGetDevice@unexported-version").as_deref(),
            Some("(a version of cuCtxGetDevice newer than this table)")
        );
        assert_eq!(unmodeled_hint("cudnnBackendExecute"), None);
        assert_eq!(unmodeled_hint("cuFakeUnmodeled"), None);
    }
}
