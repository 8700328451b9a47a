//! The composition root: what the layers above lend the layers below, wired once when the
//! loader maps this library (`.init_array`). Each is an inherent upward call, inverted:
//! - the process's exit (`atexit`, registered by `state.rs`) runs the recording's end
//!   (`finish.rs`);
//! - the signal thread (`signals.rs`) and `_exit` (`exits.rs`) finish the trace and the
//!   session ([`finish_process`]);
//!
//! In client mode the layers below the backends reach the client's "driver" and blob store
//! through `mode.rs` as well; that is lent by the ways into client mode themselves
//! (`remote::install`: a hooked call, NVML, the runtime's registrations), since another
//! object's constructor may call in before this library's runs, and client mode is decided
//! from the environment at the first call, not at load.

use crate::{finish, remote, signals, state};

/// Finishes the trace and the session now (a fatal signal or `_exit`); later calls pass
/// through.
pub(crate) fn finish_process() {
    finish::finish_now();
    remote::finish_at_signal();
}

/// Lends every registration point its function.
fn wire() {
    crate::fault_report::init();
    state::on_exit(finish::finish);
    signals::on_finish(finish_process);
}

extern "C" fn wire_at_load() {
    wire();
}

/// Runs [`wire`] when the loader maps this library, before the program's code.
#[used]
#[unsafe(link_section = ".init_array")]
static WIRE_AT_LOAD: extern "C" fn() = wire_at_load;
