//! Was the monitor itself starved? A check that timed out because the monitor's thread could
//! not run (the machine is overloaded) says nothing about the server. Linux counts how long a
//! thread waited, runnable, for a CPU (`/proc/thread-self/schedstat`, second field); if that
//! wait is a large part of a check's time limit, the time-outs of that round do not count.

use std::time::Duration;

/// Share of the check's time limit the monitor's thread may wait for a CPU before its
/// time-outs stop counting as the servers' failures.
const STARVED_SHARE: u32 = 4;

/// Run-queue wait of the current thread so far, if the kernel reports it.
fn runqueue_wait() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// Measures the run-queue wait of the monitor's thread over one round of checks (the checks
/// of a round run concurrently on that one thread).
pub(crate) struct Meter {
    start: Option<Duration>,
}

impl Meter {
    /// Starts measuring on the current thread.
    pub fn start() -> Meter {
        Meter {
            start: runqueue_wait(),
        }
    }

    /// `Some(wait)` if the thread waited for a CPU for more than a quarter of `timeout` since
    /// [`Meter::start`]: time-outs in that span are inconclusive.
    pub fn starved(&self, timeout: Duration) -> Option<Duration> {
        let waited = runqueue_wait()?.checked_sub(self.start?)?;
        is_starved(waited, timeout).then_some(waited)
    }
}

/// The decision, apart from reading the kernel's counter.
pub(crate) fn is_starved(waited: Duration, timeout: Duration) -> bool {
    waited > timeout / STARVED_SHARE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quarter_of_the_limit() {
        let t = Duration::from_millis(500);
        assert!(!is_starved(Duration::from_millis(10), t));
        assert!(!is_starved(Duration::from_millis(125), t));
        assert!(is_starved(Duration::from_millis(126), t));
    }

    #[test]
    fn reads_this_threads_counter() {
        // Linux with scheduler statistics (the machines sluice runs on); elsewhere the
        // meter reports nothing and every time-out counts.
        if std::path::Path::new("/proc/thread-self/schedstat").exists() {
            let m = Meter::start();
            assert!(m.start.is_some());
            assert_eq!(m.starved(Duration::from_secs(3600)), None);
        }
    }
}
