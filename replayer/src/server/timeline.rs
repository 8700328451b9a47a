//! `GPULESS_EXECUTOR_TIMELINE=DIR`: each executor writes `DIR/executor-PID.jsonl` at the end of
//! its session — one line per segment (when it arrived, records, decoding, execution and answer
//! times) and one per record that took long to execute — to see where a hot loop's time goes on
//! the server.

use std::time::Instant;

/// Environment: the folder the timelines go to (unset: nothing is kept).
const ENV_TIMELINE: &str = "GPULESS_EXECUTOR_TIMELINE";
/// Lines kept at most.
const MAX: usize = 500_000;
/// A record taking at least this many microseconds to execute gets a line of its own.
const SLOW_US: u64 = 50;

/// The session's timeline (empty and free when not asked for).
pub(crate) struct Timeline {
    start: Instant,
    lines: Option<Vec<String>>,
}

impl Timeline {
    /// A timeline if `GPULESS_EXECUTOR_TIMELINE` is set.
    pub(crate) fn new() -> Timeline {
        Timeline { start: Instant::now(), lines: std::env::var_os(ENV_TIMELINE).map(|_| Vec::new()) }
    }

    /// Whether lines are kept.
    pub(crate) fn on(&self) -> bool {
        self.lines.is_some()
    }

    fn push(&mut self, line: String) {
        if let Some(l) = self.lines.as_mut() {
            if l.len() < MAX {
                l.push(line);
            }
        }
    }

    /// A segment that arrived at `arrived` with `records` records, decoded by `decoded`,
    /// executed by `ran` and (if it asked) answered by `answered`.
    pub(crate) fn segment(
        &mut self,
        arrived: Instant,
        records: usize,
        decoded: Instant,
        ran: Instant,
        answered: Option<Instant>,
    ) {
        if !self.on() {
            return;
        }
        let us = |t: Instant| t.saturating_duration_since(self.start).as_micros() as u64;
        let line = format!(
            "{{\"segment_at_us\":{},\"records\":{records},\"decode_us\":{},\"exec_us\":{},\"answer_us\":{}}}",
            us(arrived),
            decoded.saturating_duration_since(arrived).as_micros(),
            ran.saturating_duration_since(decoded).as_micros(),
            answered.map_or(-1, |a| a.saturating_duration_since(ran).as_micros() as i64),
        );
        self.push(line);
    }

    /// A record (call `seq` of function `name`) that took `us` microseconds, if that is long.
    pub(crate) fn record(&mut self, seq: u64, name: &str, us: u64) {
        if us >= SLOW_US && self.on() {
            self.push(format!("{{\"slow_seq\":{seq},\"call\":\"{name}\",\"us\":{us}}}"));
        }
    }

    /// Writes the timeline (at the session's end).
    pub(crate) fn write(&self) {
        let (Some(lines), Some(dir)) = (self.lines.as_ref(), std::env::var_os(ENV_TIMELINE)) else { return };
        let path = std::path::Path::new(&dir).join(format!("executor-{}.jsonl", std::process::id()));
        let _ = std::fs::write(path, lines.join("\n") + "\n");
    }
}
