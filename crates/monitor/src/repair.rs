//! Servers the monitor has to put back or move, retried with backoff: replication it stopped
//! and could not restart, a replica that must follow a new primary, a former primary to
//! rejoin, a `read_only` it must set back. A failing repair is reported once (and again when
//! its error changes), not on every round.

use crate::backoff::Schedule;
use crate::status::RepairView;
use crate::Monitor;
use sluice_core::Server;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Shortest wait before a failed repair is tried again.
const BASE: Duration = Duration::from_secs(1);

/// What has to be done to a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Start the replication the monitor stopped.
    Restart,
    /// Follow the primary.
    Follow,
    /// Rejoin as a replica (a former primary).
    Rejoin,
    /// Set `read_only` back to this value.
    ReadOnly(bool),
}

impl Action {
    fn as_str(self) -> &'static str {
        match self {
            Action::Restart => "restart replication",
            Action::Follow => "follow the primary",
            Action::Rejoin => "rejoin as a replica",
            Action::ReadOnly(true) => "set read_only=1",
            Action::ReadOnly(false) => "set read_only=0",
        }
    }
}

struct Repair {
    action: Action,
    schedule: Schedule,
    last_error: Option<String>,
}

/// Pending repairs, one per server.
#[derive(Default)]
pub(crate) struct Repairs {
    map: HashMap<Arc<str>, Repair>,
}

impl Repairs {
    /// True if the monitor stopped this server's replication and has not restarted it.
    pub fn restarting(&self, server: &str) -> bool {
        self.map
            .get(server)
            .is_some_and(|r| r.action == Action::Restart)
    }

    /// The pending action for a server.
    pub fn action(&self, server: &str) -> Option<Action> {
        self.map.get(server).map(|r| r.action)
    }

    /// True unless `action` on `server` failed recently and waits for its next attempt.
    pub fn due(&self, server: &str, action: Action, now: Instant) -> bool {
        match self.map.get(server) {
            Some(r) if r.action == action => r.schedule.due(now),
            _ => true,
        }
    }

    /// Records a failure; returns true if it is worth reporting (first failure of this
    /// action, or a new error).
    fn failed(&mut self, server: &Arc<str>, action: Action, error: &str, now: Instant) -> bool {
        let r = self.map.entry(server.clone()).or_insert(Repair {
            action,
            schedule: Schedule::default(),
            last_error: None,
        });
        if r.action != action {
            *r = Repair {
                action,
                schedule: Schedule::default(),
                last_error: None,
            };
        }
        let new = r.last_error.as_deref() != Some(error);
        r.last_error = Some(error.to_string());
        r.schedule.failed(BASE, now);
        new
    }

    /// Forgets a repair that is done (or no longer needed).
    pub fn done(&mut self, server: &str, action: Action) -> bool {
        if self.action(server) == Some(action) {
            self.map.remove(server);
            return true;
        }
        false
    }

    /// For the admin API.
    pub fn views(&self) -> Vec<RepairView> {
        let mut v: Vec<RepairView> = self
            .map
            .iter()
            .map(|(name, r)| RepairView {
                server: name.to_string(),
                action: r.action.as_str(),
                attempts: r.schedule.failures,
                last_error: r.last_error.clone(),
            })
            .collect();
        v.sort_by(|a, b| a.server.cmp(&b.server));
        v
    }
}

impl Monitor {
    /// Records that `action` on `s` failed; it is retried with backoff. Reported as an event
    /// the first time and whenever the error changes.
    pub(crate) fn repair_failed(&self, s: &Arc<Server>, action: Action, error: &str) {
        self.stats.repair_failures.fetch_add(1, Relaxed);
        let report = self
            .state
            .lock()
            .repairs
            .failed(&s.name, action, error, Instant::now());
        if report {
            self.events.push(
                "repair",
                format!(
                    "{}: cannot {} yet: {error}; retrying with backoff",
                    s.name,
                    action.as_str()
                ),
            );
        }
    }

    /// Records that `action` on `s` succeeded (reported if it had failed before).
    pub(crate) fn repair_done(&self, s: &Arc<Server>, action: Action) {
        if self.state.lock().repairs.done(&s.name, action) {
            self.events
                .push("repair", format!("{}: {} done", s.name, action.as_str()));
        }
    }

    /// True if `action` on `s` may be attempted now.
    pub(crate) fn repair_due(&self, s: &Server, action: Action) -> bool {
        self.state
            .lock()
            .repairs
            .due(&s.name, action, Instant::now())
    }
}
