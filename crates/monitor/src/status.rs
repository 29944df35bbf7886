//! What the monitor reports about itself: counters for metrics, and a status for the admin
//! API (is failover possible, why not, what it is still repairing).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The step at which a failover attempt stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailoverStep {
    /// The monitor's user lacks privileges a failover needs: not attempted.
    Refused,
    /// No replica could take over.
    NoCandidate,
    /// The coordinator did not approve.
    NotApproved,
    /// Stopping the candidate's replication failed.
    Detach,
    /// The candidate did not apply what it had received.
    CatchUp,
    /// Making the candidate writable failed.
    Promote,
}

impl FailoverStep {
    /// Every step, in metric order.
    pub const ALL: [FailoverStep; 6] = [
        FailoverStep::Refused,
        FailoverStep::NoCandidate,
        FailoverStep::NotApproved,
        FailoverStep::Detach,
        FailoverStep::CatchUp,
        FailoverStep::Promote,
    ];

    /// Lower-case name (metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            FailoverStep::Refused => "refused",
            FailoverStep::NoCandidate => "no_candidate",
            FailoverStep::NotApproved => "not_approved",
            FailoverStep::Detach => "detach",
            FailoverStep::CatchUp => "catch_up",
            FailoverStep::Promote => "promote",
        }
    }

    fn index(self) -> usize {
        FailoverStep::ALL
            .iter()
            .position(|s| *s == self)
            .unwrap_or(0)
    }
}

/// Counters.
#[derive(Debug, Default)]
pub struct MonitorStats {
    /// Failovers completed.
    pub failovers: AtomicU64,
    /// Switchovers completed.
    pub switchovers: AtomicU64,
    /// Switchovers that failed (and were undone).
    pub switchover_failures: AtomicU64,
    /// Duration of the last failover, from the decision to writes flowing again, in ms.
    pub last_failover_ms: AtomicU64,
    /// Check rounds run.
    pub rounds: AtomicU64,
    /// Checks that timed out while the monitor's own thread was starved of CPU: not counted
    /// as the server's failure.
    pub starved_checks: AtomicU64,
    /// Repairs (restarting replication, repointing, rejoining) that failed and will be
    /// retried.
    pub repair_failures: AtomicU64,
    failover_failures: [AtomicU64; FailoverStep::ALL.len()],
}

impl MonitorStats {
    /// Counts a failover attempt that stopped at `step`.
    pub(crate) fn failover_failed(&self, step: FailoverStep) {
        self.failover_failures[step.index()].fetch_add(1, Relaxed);
    }

    /// Failover attempts that stopped at `step`.
    pub fn failover_failures(&self, step: FailoverStep) -> u64 {
        self.failover_failures[step.index()].load(Relaxed)
    }
}

/// A server the monitor still has to put back or move.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepairView {
    /// The server.
    pub server: String,
    /// What it must do (`restart replication`, `follow the primary`, `rejoin`).
    pub action: &'static str,
    /// Attempts that failed so far.
    pub attempts: u32,
    /// The last attempt's error.
    pub last_error: Option<String>,
}

/// The monitor's own state, for the admin API.
#[derive(Clone, Debug, Default)]
pub struct MonitorStatus {
    /// Automatic failover is configured.
    pub failover_enabled: bool,
    /// Why failover would not be carried out now (the monitor's user lacks privileges), if
    /// it would not.
    pub failover_refused: Option<String>,
    /// Problems found with the monitor's privileges, per server.
    pub warnings: Vec<String>,
    /// The last failed failover attempt, if the primary has not been seen since.
    pub last_failover_error: Option<String>,
    /// Failed failover attempts since the primary was last seen.
    pub failover_attempts: u32,
    /// Milliseconds until the next failover attempt may start, while one is postponed.
    pub next_failover_in_ms: Option<u64>,
    /// Servers still to be put back or moved.
    pub repairs: Vec<RepairView>,
}

impl crate::Monitor {
    /// The monitor's own state, for the admin API.
    pub fn status(&self) -> MonitorStatus {
        let settings = self.settings();
        let refused = self.failover_refusal();
        let st = self.state.lock();
        let now = tokio::time::Instant::now();
        MonitorStatus {
            failover_enabled: settings.failover,
            failover_refused: refused.filter(|_| settings.failover),
            warnings: st.preflight.problems().to_vec(),
            last_failover_error: st.failover.last_error.clone(),
            failover_attempts: st.failover.schedule.failures,
            next_failover_in_ms: st
                .failover
                .schedule
                .remaining(now)
                .filter(|d| !d.is_zero())
                .map(|d| d.as_millis() as u64),
            repairs: st.repairs.views(),
        }
    }
}
