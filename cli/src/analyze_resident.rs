//! `gpuless analyze --resident TRACE.gl`: what warm constants (`gpuless serve
//! --program-keep-alive`) would keep after a session of a recorded program and skip in its next
//! session (`gpuless_traces::resident::survey`), as lines or a JSON field.

use std::io::Write;
use std::path::Path;

use gpuless_traces::resident::survey::{self, Survey};
use gpuless_traces::resident::MIN_RESIDENT;

/// Surveys the trace's driver records.
pub fn survey_trace(path: &Path) -> anyhow::Result<Survey> {
    Ok(survey::survey(&crate::analyze_pieces::driver_records(path)?))
}

/// The survey as readable lines.
pub fn print(out: &mut impl Write, s: &Survey) -> std::io::Result<()> {
    let mb = |b: u64| b as f64 / 1e6;
    let pct = |a: u64, b: u64| if b == 0 { 0.0 } else { 100.0 * a as f64 / b as f64 };
    writeln!(out)?;
    writeln!(out, "warm constants (what `gpuless serve --program-keep-alive` would keep for the next session)")?;
    writeln!(out, "  uploads           {} ({:.1} MB)", s.uploads.0, mb(s.uploads.1))?;
    writeln!(out, "  of >= {} KiB      {} ({:.1} MB)", MIN_RESIDENT >> 10, s.large_uploads.0, mb(s.large_uploads.1))?;
    writeln!(
        out,
        "  kept, at most     {} ({:.1} MB; read back and compared before they are kept)",
        s.kept.0,
        mb(s.kept.1)
    )?;
    writeln!(
        out,
        "  next session      {} uploads not copied ({:.1} MB, {:.1}% of the upload bytes)",
        s.skipped.0,
        mb(s.skipped.1),
        pct(s.skipped.1, s.uploads.1)
    )?;
    match &s.first_write {
        Some((seq, f)) => writeln!(out, "  first device write  #{seq} {f}: uploads after it are copied")?,
        None => writeln!(out, "  first device write  none")?,
    }
    Ok(())
}
