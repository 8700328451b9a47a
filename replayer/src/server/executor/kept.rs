//! What an executor keeps from one session for the next session of the same function (warm
//! functions: the function set up) or of the same program (warm constants: the uploads that
//! still hold their blob, resident on the GPU — [`crate::replay::resident`]).

use crate::replay::stream::{Carried, Stream};

use super::Functions;

/// Kept after a session, while the executor waits for the next.
pub(super) enum Kept {
    /// A function set up ([`super::Control::Warm`]).
    Function(Box<Functions>),
    /// A program's resident uploads ([`super::Control::KeptProgram`]).
    Program {
        /// The program, as its Hello named it.
        program: String,
        /// Its memory.
        carried: Box<Carried>,
    },
}

/// What a new session finds of what was `kept`: the function, for a session of the same
/// function without an arena of its own (`announced`); the memory, for a live session of the
/// same `program`. Anything else is let go.
pub(super) fn take(
    kept: Option<(Kept, std::time::Duration)>,
    announced: Option<&str>,
    program: Option<&str>,
    client_arena: bool,
    arena: Option<(u64, u64)>,
) -> (Option<Functions>, Option<Carried>) {
    match kept.map(|(k, _)| k) {
        Some(Kept::Function(mut f)) if !client_arena && announced.is_some() && f.prepared_name() == announced => {
            f.reuse();
            (Some(*f), None)
        }
        // Its memory is at its arena's addresses: a session over another arena (a server of a
        // session across several servers gets a part of the client's) starts from nothing.
        Some(Kept::Program { program: p, carried }) if program == Some(p.as_str()) && carried.arena() == arena => {
            (None, Some(*carried))
        }
        Some(Kept::Program { carried, .. }) => {
            carried.give_back();
            (None, None)
        }
        _ => (None, None),
    }
}

/// Ends `session`'s stream keeping its resident uploads ([`Stream::keep`]); returns them with
/// the upload bytes the session did not copy, or `None` (logged) when the device failed.
pub(super) fn keep(stream: Stream, session: u64) -> Option<(Carried, u64)> {
    let (copies, skipped) = stream.resident_skipped();
    match stream.keep() {
        Ok(c) => {
            // The executor's stderr is the server's log.
            eprintln!(
                "gpuless executor: session {session}: {copies} uploads ({skipped} bytes) were resident from the last \
                 session of the program; {} bytes stay resident for the next",
                c.resident_bytes
            );
            Some((c, skipped))
        }
        Err(e) => {
            eprintln!("gpuless executor: session {session}: its uploads cannot be kept: {e}");
            None
        }
    }
}
