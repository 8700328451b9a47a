//! `GPULESS_REMOTE_WAITS=PATH`: one JSON line per wait of the session, written at exit — what
//! the program waited for, how long, how much of it the server spent executing, and how long
//! the program ran between answers — to see where remote latency goes in a hot loop.

use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// Environment: where the wait log goes (unset: nothing is kept).
const ENV_WAITS: &str = "GPULESS_REMOTE_WAITS";
/// Waits kept at most (the first ones; a hot loop's repeat after a few thousand).
const MAX: usize = 200_000;

/// One wait.
struct Note {
    name: &'static str,
    /// Microseconds since the session started when the wait began.
    at_us: u64,
    /// Microseconds since the previous answer (the program's own work and the calls it made).
    between_us: u64,
    /// Records sent with the waiting segment, and since the previous answer in all.
    records: u64,
    sent_since: u64,
    /// Microseconds from sending the waiting segment to its answer, and the executor's
    /// execution time over everything since the previous answer (from the answer).
    wait_us: u64,
    exec_us: u64,
    /// Bytes sent to the server so far in the session (frames, blobs included).
    bytes_up: u64,
}

struct Log {
    start: Instant,
    last_answer: Instant,
    notes: Vec<Note>,
}

fn log() -> Option<&'static Mutex<Log>> {
    static L: OnceLock<Option<Mutex<Log>>> = OnceLock::new();
    L.get_or_init(|| {
        std::env::var_os(ENV_WAITS).map(|_| {
            let now = Instant::now();
            Mutex::new(Log { start: now, last_answer: now, notes: Vec::new() })
        })
    })
    .as_ref()
}

/// Whether waits are being noted (`GPULESS_REMOTE_WAITS` set).
pub(crate) fn on() -> bool {
    log().is_some()
}

/// Notes a wait that sent `records` records with it (`sent_since` since the last answer) and
/// got its answer after `wait_us`, the executor reporting `exec_us`; `bytes_up` were sent in
/// the session so far.
pub(crate) fn note(name: &'static str, records: u64, sent_since: u64, began: Instant, exec_us: u64, bytes_up: u64) {
    let Some(l) = log() else { return };
    let mut l = l.lock().unwrap_or_else(|e| e.into_inner());
    let now = Instant::now();
    let n = Note {
        name,
        at_us: began.duration_since(l.start).as_micros() as u64,
        between_us: began.saturating_duration_since(l.last_answer).as_micros() as u64,
        records,
        sent_since,
        wait_us: now.duration_since(began).as_micros() as u64,
        exec_us,
        bytes_up,
    };
    l.last_answer = now;
    if l.notes.len() < MAX {
        l.notes.push(n);
    }
}

/// Writes the log (at exit).
pub(crate) fn write() {
    let (Some(l), Some(path)) = (log(), std::env::var_os(ENV_WAITS)) else { return };
    let l = l.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = String::new();
    for n in &l.notes {
        out.push_str(&format!(
            "{{\"call\":\"{}\",\"at_us\":{},\"between_us\":{},\"records\":{},\"sent_since\":{},\"wait_us\":{},\"exec_us\":{},\"bytes_up\":{}}}\n",
            n.name, n.at_us, n.between_us, n.records, n.sent_since, n.wait_us, n.exec_us, n.bytes_up
        ));
    }
    let _ = std::fs::write(path, out);
}
