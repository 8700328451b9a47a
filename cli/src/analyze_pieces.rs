//! `gpuless analyze --pieces TRACE.gl`: what cached-trace execution would make of a recorded
//! program (`gpuless_traces::protocol::piece::survey`), as a table or a JSON field.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use gpuless_analyzer::api::ApiLevel;
use gpuless_traces::protocol::piece::survey::{self, Survey, LENGTH_CLASSES};
use gpuless_traces::{CallRecord, ChunkBody, ReaderOptions, TraceReader};

/// The trace's driver records in call order. A damaged trace is read up to the damage (the
/// analysis reports the error).
pub fn driver_records(path: &Path) -> anyhow::Result<Vec<CallRecord>> {
    let reader = TraceReader::open(path, ReaderOptions::default()).with_context(|| format!("{}", path.display()))?;
    let mut records = Vec::new();
    for chunk in reader {
        let Ok(c) = chunk else { break };
        if let ChunkBody::Calls(calls) = c.body {
            records.extend(calls.into_iter().filter(|r| r.level == ApiLevel::Driver));
        }
    }
    records.sort_by_key(|r| r.seq);
    Ok(records)
}

/// Surveys the trace's driver records.
pub fn survey_trace(path: &Path) -> anyhow::Result<Survey> {
    Ok(survey::survey(driver_records(path)?))
}

/// The survey as readable lines.
pub fn print(out: &mut impl Write, s: &Survey) -> std::io::Result<()> {
    let pct = |a: u64, b: u64| if b == 0 { 0.0 } else { 100.0 * a as f64 / b as f64 };
    writeln!(out)?;
    writeln!(out, "cached execution (what `gpuless serve --cached-execution on` would run as graphs)")?;
    writeln!(
        out,
        "  records sent      {} ({} capturable, {:.1}%)",
        s.records_sent,
        s.records_capturable,
        pct(s.records_capturable, s.records_sent)
    )?;
    let mut lower = 1;
    let classes: Vec<String> = LENGTH_CLASSES
        .iter()
        .zip(s.lengths)
        .map(|(&hi, n)| {
            let label = if hi == lower { format!("{hi}") } else { format!("{lower}-{hi}") };
            lower = hi + 1;
            format!("{label}: {n}")
        })
        .collect();
    writeln!(out, "  pieces            {} (records: {})", s.pieces, classes.join(", "))?;
    writeln!(
        out,
        "  long enough       {} pieces: {} distinct ({} seen once), {} shapes ({} seen once)",
        s.pieces_long_enough, s.keys, s.keys_once, s.shapes, s.shapes_once
    )?;
    let c = s.counts;
    writeln!(
        out,
        "  would run         {} by graph, {} captured, {} record by record; {} records by graphs ({:.1}% of capturable)",
        c.graph,
        c.captured,
        c.eager,
        c.records_graph,
        100.0 * s.graph_share
    )?;
    writeln!(out, "  pieces ended by")?;
    for (why, n) in s.ended_by.iter().take(12) {
        writeln!(out, "    {n:>8}  {why}")?;
    }
    if s.ended_by.len() > 12 {
        writeln!(out, "    ... and {} more (--json lists all)", s.ended_by.len() - 12)?;
    }
    Ok(())
}
