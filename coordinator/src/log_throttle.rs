//! Repeated warnings about one source (a client's rejected messages, a peer's refused
//! connections), logged once per interval with a count, so that a client flooding the
//! coordinator within its rate limit cannot flood the log as well (issue 28).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How often one source's repeated warnings are logged.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// Sources followed at once; past it the table starts afresh (a first warning each again).
const MAX_SOURCES: usize = 4096;

/// Per source: when it was last logged, and how many of its warnings were held back since.
#[derive(Debug)]
pub struct LogThrottle {
    every: Duration,
    sources: HashMap<String, (Instant, u64)>,
}

impl Default for LogThrottle {
    fn default() -> Self {
        Self::new(INTERVAL)
    }
}

impl LogThrottle {
    /// A throttle that logs each source at most once every `every`.
    pub fn new(every: Duration) -> Self {
        LogThrottle {
            every,
            sources: HashMap::new(),
        }
    }

    /// Whether a warning from `source` at `now` is to be logged: `Some(n)`, with `n` the
    /// warnings of that source held back since the last one logged; `None`: hold it back (it is
    /// counted).
    pub fn admit(&mut self, source: &str, now: Instant) -> Option<u64> {
        if let Some((last, held)) = self.sources.get_mut(source) {
            if now.saturating_duration_since(*last) < self.every {
                *held += 1;
                return None;
            }
            let n = *held;
            *last = now;
            *held = 0;
            return Some(n);
        }
        if self.sources.len() >= MAX_SOURCES {
            self.sources.clear();
        }
        self.sources.insert(source.to_string(), (now, 0));
        Some(0)
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
    fn once_per_interval_per_source_with_the_count_held_back() {
        let mut t = LogThrottle::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(t.admit("c5", at(0)), Some(0));
        for s in 1..10 {
            assert_eq!(t.admit("c5", at(s)), None, "second {s}");
        }
        // Another source is its own.
        assert_eq!(t.admit("c6", at(3)), Some(0));
        assert_eq!(t.admit("c5", at(10)), Some(9));
        assert_eq!(t.admit("c5", at(15)), None);
        assert_eq!(t.admit("c5", at(21)), Some(1));
        assert_eq!(t.held_back(0), "");
        assert_eq!(t.held_back(3), " (3 more like it held back in the last 10s)");
    }

    #[test]
    fn the_table_is_bounded() {
        let mut t = LogThrottle::new(Duration::from_secs(10));
        let now = Instant::now();
        for i in 0..MAX_SOURCES + 10 {
            assert_eq!(t.admit(&format!("ip{i}"), now), Some(0));
        }
        assert!(t.sources.len() <= MAX_SOURCES);
    }
}
