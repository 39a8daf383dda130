//! Spinners for CLI work that takes more than a moment (opening a remote dataset and planning
//! a mount, fetching a remote shard for `cat`): shown on stderr only when stderr is a
//! terminal, so scripts, pipes and logs never see them.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// A spinner with `message` and the elapsed time, ticking on its own thread; `None` when
/// stderr is not a terminal. Dropping it clears the line.
pub fn spinner(message: impl Into<String>) -> Option<Spinner> {
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return None;
    }
    let bar = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        bar.set_style(style);
    }
    bar.set_message(message.into());
    bar.enable_steady_tick(Duration::from_millis(120));
    Some(Spinner(bar))
}

/// A running spinner (see [`spinner`]).
pub struct Spinner(ProgressBar);

impl Drop for Spinner {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}
