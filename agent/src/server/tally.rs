//! Warnings a flood of connections would repeat thousands of times: the first is logged at
//! once, the ones after it are counted and logged as one line per interval (by [`Tally::flush`],
//! which the server calls on a timer), so the log says how many without drowning.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a busy tally logs.
pub const EVERY: Duration = Duration::from_secs(10);

/// Builds the line for `n` occurrences, the last with `detail`.
type Describe = fn(n: u64, detail: &str) -> String;

pub struct Tally {
    describe: Describe,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    unlogged: u64,
    detail: String,
    logged_at: Option<Instant>,
}

impl Tally {
    pub fn new(describe: Describe) -> Self {
        Tally { describe, state: Mutex::new(State::default()) }
    }

    /// Counts `n` occurrences; logs now unless a line went out less than [`EVERY`] ago.
    pub fn add(&self, n: u64, detail: impl Into<String>) {
        let line = {
            let mut state = self.lock();
            state.unlogged += n;
            state.detail = detail.into();
            let now = Instant::now();
            if state.logged_at.is_some_and(|t| now.duration_since(t) < EVERY) {
                return;
            }
            state.logged_at = Some(now);
            self.take(&mut state)
        };
        tracing::warn!("{line}");
    }

    /// Logs what was counted since the last line, if anything.
    pub fn flush(&self) {
        let line = {
            let mut state = self.lock();
            if state.unlogged == 0 {
                return;
            }
            state.logged_at = Some(Instant::now());
            self.take(&mut state)
        };
        tracing::warn!("{line}");
    }

    /// The line for what was counted, resetting the count.
    fn take(&self, state: &mut State) -> String {
        let line = (self.describe)(state.unlogged, &state.detail);
        state.unlogged = 0;
        line
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Occurrences not logged yet.
    #[cfg(test)]
    fn unlogged(&self) -> u64 {
        self.lock().unlogged
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_is_logged_at_once_and_the_rest_summed_up_by_flush() {
        let tally = Tally::new(|n, detail| format!("{n} times, last {detail}"));
        tally.add(1, "a");
        assert_eq!(tally.unlogged(), 0, "the first goes out at once");
        tally.add(3, "b");
        tally.add(2, "c");
        assert_eq!(tally.unlogged(), 5, "the next ones wait for the interval");
        assert_eq!((tally.describe)(5, "c"), "5 times, last c");
        tally.flush();
        assert_eq!(tally.unlogged(), 0);
        tally.flush();
        assert_eq!(tally.unlogged(), 0, "nothing new: nothing logged");
    }
}
