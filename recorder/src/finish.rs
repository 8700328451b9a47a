//! The end of a recording, at process exit (`state.rs` registers the `atexit` handler, lent
//! this at load by `init.rs`), at a fatal signal or at `_exit` (`signals.rs`, `exits.rs`):
//! copies still pending are completed, every thread's records handed over, the unmodeled
//! functions' call counts recorded, then the writer closes the trace with its index.

use gpuless_traces::{CallRecord, Function, Value};

use crate::{batches, pending, sink, state, unmodeled};

/// Ends the recording: unmodeled call counts, then the index; runs at process exit.
pub fn finish() {
    // A process that made no driver call (a shell, a helper tool, one that only registered
    // kernels with cudart) leaves no trace behind.
    if state::in_forked_child() {
        // A forked child's copy of the parent's writer has no thread behind it: finishing it
        // would wait for nothing. The parent finishes the trace.
        return;
    }
    let only_annotations = state::seqs_given() == state::annotations();
    if state::trace_path().is_none() || (only_annotations && unmodeled::counts().0.is_empty()) {
        return;
    }
    sink::open(None);
    pending::flush_unsynchronized();
    batches::flush_all();
    let (counts, overflow) = unmodeled::counts();
    for (name, calls) in counts.into_iter().filter(|&(_, c)| c > 0) {
        let level = unmodeled::level_of(&name);
        let mut r = CallRecord::new(state::next_seq(), level, Function::Other(name));
        r.timestamp_ns = state::now_ns();
        r.args = vec![Value::U64(calls)];
        batches::emit(r);
    }
    for name in overflow {
        let level = unmodeled::level_of(&name);
        let mut r = CallRecord::new(state::next_seq(), level, Function::Other(name));
        r.args = vec![Value::Null];
        batches::emit(r);
    }
    batches::flush_all();
    crate::diag::report(path_name, unmodeled::trampolines());
    sink::close();
}

/// Finishes the trace now (a fatal signal is being handled); later calls pass through.
pub fn finish_now() {
    finish();
    state::disable();
}

/// The recording path of API function `id`'s hooked calls, as the self-time report names it.
fn path_name(id: gpuless_analyzer::api::ApiId) -> &'static str {
    if crate::fold::plan(id).is_some() {
        "fold"
    } else if crate::raw::plan(id).is_some() {
        "raw"
    } else {
        "full"
    }
}
