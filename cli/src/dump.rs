//! `gpuless dump TRACE.gl`: the records of a trace, one line each (or JSON Lines), with decoded
//! arguments and results (`gpuless_traces::dump`).
//!
//! Records are numbered by their position in the file (0-based; the recorder writes each
//! thread's records in batches, so file order is not always `seq` order). `--from N` is the
//! first index printed (inclusive), `--to M` the end (exclusive); `--thread T` keeps the records
//! of one OS thread. Handles are numbered over the whole file, whatever the filters.
//!
//! A damaged or truncated trace is printed up to the damage, then the reader's error is returned
//! (exit code 2). A closed pipe ends the output quietly (`main` treats it as success).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context};
use gpuless_traces::dump::{Decoder, TEXT_HEADER};
use gpuless_traces::{ChunkBody, ReaderOptions, TraceReader};

/// Most distinct threads remembered for the "no such thread" message.
const THREADS_MAX: usize = 1 << 16;

/// Options of `gpuless dump`.
#[derive(Debug, Clone, Default)]
pub struct DumpOptions {
    /// First record index printed (inclusive).
    pub from: Option<u64>,
    /// End of the printed range (exclusive).
    pub to: Option<u64>,
    /// Only this OS thread's records.
    pub thread: Option<u64>,
    /// JSON Lines instead of text.
    pub json: bool,
}

/// Print the records of `path` selected by `opts` on stdout.
pub fn run(path: &Path, opts: &DumpOptions) -> anyhow::Result<()> {
    let shown = path.display();
    let from = opts.from.unwrap_or(0);
    if let Some(to) = opts.to {
        if from > to {
            bail!("{shown}: --from {from} is after --to {to} (the range is FROM inclusive to TO exclusive)");
        }
    }
    let reader = TraceReader::open(path, ReaderOptions::default()).with_context(|| format!("{shown}"))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    if !opts.json {
        writeln!(out, "{TEXT_HEADER}")?;
    }
    let mut decoder = Decoder::new();
    let mut threads = BTreeSet::new();
    let mut index = 0u64;
    let mut thread_seen = false;
    let mut stopped_early = false;
    'chunks: for chunk in reader {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                out.flush()?;
                return Err(
                    anyhow::Error::new(e).context(format!("{shown}: records from index {index} on could not be read"))
                );
            }
        };
        let ChunkBody::Calls(calls) = chunk.body else { continue };
        for r in &calls {
            if opts.to.is_some_and(|to| index >= to) && (opts.thread.is_none() || thread_seen) {
                stopped_early = true;
                break 'chunks;
            }
            decoder.observe(r);
            if threads.len() < THREADS_MAX {
                threads.insert(r.thread);
            }
            thread_seen |= opts.thread == Some(r.thread);
            let in_range = index >= from && opts.to.is_none_or(|to| index < to);
            if in_range && opts.thread.is_none_or(|t| t == r.thread) {
                let rec = decoder.describe(index, r);
                if opts.json {
                    // Serialized first: a closed pipe is then a plain I/O error for `main`.
                    let mut line = serde_json::to_vec(&rec)?;
                    line.push(b'\n');
                    out.write_all(&line)?;
                } else {
                    writeln!(out, "{rec}")?;
                }
            }
            index += 1;
        }
    }
    out.flush()?;
    if let Some(t) = opts.thread {
        if !thread_seen {
            let list: Vec<String> = threads.iter().map(u64::to_string).collect();
            bail!("{shown}: no records of thread {t}; the trace's threads are {}", list.join(", "));
        }
    }
    if !stopped_early && from > 0 && from >= index {
        bail!("{shown}: --from {from} is past the last record (the trace has {index} records)");
    }
    Ok(())
}
