//! Retry schedules: each failed attempt doubles the wait, up to a ceiling.

use std::time::Duration;
use tokio::time::Instant;

/// Longest wait between two attempts.
pub(crate) const CEILING: Duration = Duration::from_secs(30);

/// The wait after `failures` failed attempts: `base`, doubled per further failure, at most
/// [`CEILING`] (and never less than `base`).
pub(crate) fn delay(base: Duration, failures: u32) -> Duration {
    let doubled = base.saturating_mul(1u32 << failures.saturating_sub(1).min(16));
    doubled.min(CEILING.max(base))
}

/// A retry schedule for one thing.
#[derive(Clone, Debug, Default)]
pub(crate) struct Schedule {
    /// Failed attempts in a row.
    pub failures: u32,
    /// No attempt before this.
    pub next: Option<Instant>,
}

impl Schedule {
    /// True if an attempt may start now.
    pub fn due(&self, now: Instant) -> bool {
        self.next.is_none_or(|t| now >= t)
    }

    /// Records a failed attempt; returns the wait before the next one.
    pub fn failed(&mut self, base: Duration, now: Instant) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let d = delay(base, self.failures);
        self.next = Some(now + d);
        d
    }

    /// Time until the next attempt may start, if one is scheduled.
    pub fn remaining(&self, now: Instant) -> Option<Duration> {
        self.next.map(|t| t.saturating_duration_since(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_ceiling() {
        let b = Duration::from_secs(1);
        assert_eq!(delay(b, 1), b);
        assert_eq!(delay(b, 2), 2 * b);
        assert_eq!(delay(b, 3), 4 * b);
        assert_eq!(delay(b, 10), CEILING);
        assert_eq!(delay(b, u32::MAX), CEILING);
        // A base above the ceiling is kept.
        assert_eq!(delay(Duration::from_secs(60), 3), Duration::from_secs(60));
    }

    #[test]
    fn schedule_waits_after_failures() {
        let now = Instant::now();
        let mut s = Schedule::default();
        assert!(s.due(now));
        let d = s.failed(Duration::from_millis(100), now);
        assert_eq!(d, Duration::from_millis(100));
        assert!(!s.due(now));
        assert!(s.due(now + d));
        assert_eq!(
            s.failed(Duration::from_millis(100), now),
            Duration::from_millis(200)
        );
    }
}
