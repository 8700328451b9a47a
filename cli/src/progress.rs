//! Progress bars on stderr (only when stderr is a terminal).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// An indicatif bar that implements the analyzer's progress interface.
pub struct Bar {
    bar: ProgressBar,
}

impl Bar {
    /// A bar labelled `what`; hidden unless stderr is a terminal and `enabled`.
    pub fn new(what: &str, enabled: bool) -> Bar {
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::hidden());
        if enabled && std::io::stderr().is_terminal() {
            bar.set_draw_target(ProgressDrawTarget::stderr());
        }
        if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({elapsed})") {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(what.to_string());
        Bar { bar }
    }

    /// Removes the bar from the terminal.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl gpuless_analyzer::Progress for Bar {
    fn start(&self, total: u64) {
        self.bar.set_length(total);
    }

    fn advance(&self, n: u64) {
        self.bar.inc(n);
    }
}
