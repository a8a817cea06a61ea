//! Repeated warnings about one source (a client's rejected messages, a user's refused
//! connections): the first [`BURST`] of an interval are logged, the rest held back and counted in
//! the next one logged, so that a client flooding the coordinator within its rate limit cannot
//! flood the log as well (issue 28).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The interval.
pub const INTERVAL: Duration = Duration::from_secs(10);
/// Warnings of one source logged per interval.
pub const BURST: u64 = 10;

/// Sources followed at once; past it the table starts afresh (a first warning each again).
const MAX_SOURCES: usize = 4096;

/// Per source: when its interval began, how many warnings it logged in it, and how many were
/// held back since the last one logged.
#[derive(Debug)]
pub struct LogThrottle {
    every: Duration,
    burst: u64,
    sources: HashMap<String, Window>,
}

#[derive(Debug)]
struct Window {
    start: Instant,
    logged: u64,
    held: u64,
}

impl Default for LogThrottle {
    fn default() -> Self {
        Self::new(INTERVAL, BURST)
    }
}

impl LogThrottle {
    /// A throttle that logs at most `burst` warnings of each source every `every`.
    pub fn new(every: Duration, burst: u64) -> Self {
        LogThrottle {
            every,
            burst: burst.max(1),
            sources: HashMap::new(),
        }
    }

    /// Whether a warning from `source` at `now` is to be logged: `Some(n)`, with `n` the
    /// warnings of that source held back since the last one logged; `None`: hold it back (it is
    /// counted).
    pub fn admit(&mut self, source: &str, now: Instant) -> Option<u64> {
        if !self.sources.contains_key(source) && self.sources.len() >= MAX_SOURCES {
            self.sources.clear();
        }
        let w = self.sources.entry(source.to_string()).or_insert(Window {
            start: now,
            logged: 0,
            held: 0,
        });
        if now.saturating_duration_since(w.start) >= self.every {
            w.start = now;
            w.logged = 0;
        }
        if w.logged >= self.burst {
            w.held += 1;
            return None;
        }
        w.logged += 1;
        Some(std::mem::take(&mut w.held))
    }

    /// The tail of a throttled warning that [`LogThrottle::admit`] let through with `held`: how
    /// many were held back before it (nothing for none).
    pub fn held_back(&self, held: u64) -> String {
        if held == 0 {
            String::new()
        } else {
            format!(
                " ({held} more like it held back in the last {}s)",
                self.every.as_secs()
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_per_interval_per_source_with_the_count_held_back() {
        let mut t = LogThrottle::new(Duration::from_secs(10), 2);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(t.admit("c5", at(0)), Some(0));
        assert_eq!(t.admit("c5", at(1)), Some(0));
        for s in 2..10 {
            assert_eq!(t.admit("c5", at(s)), None, "second {s}");
        }
        // Another source is its own.
        assert_eq!(t.admit("c6", at(3)), Some(0));
        // A new interval: the 8 held back are told with the first of it.
        assert_eq!(t.admit("c5", at(10)), Some(8));
        assert_eq!(t.admit("c5", at(11)), Some(0));
        assert_eq!(t.admit("c5", at(12)), None);
        assert_eq!(t.admit("c5", at(21)), Some(1));
        assert_eq!(t.held_back(0), "");
        assert_eq!(
            t.held_back(3),
            " (3 more like it held back in the last 10s)"
        );
    }

    #[test]
    fn the_table_is_bounded() {
        let mut t = LogThrottle::new(Duration::from_secs(10), 1);
        let now = Instant::now();
        for i in 0..MAX_SOURCES + 10 {
            assert_eq!(t.admit(&format!("ip{i}"), now), Some(0));
        }
        assert!(t.sources.len() <= MAX_SOURCES);
    }
}
