//! Can the monitor's user carry out a failover at all? Checked at start, after a reload, and
//! again before a failover attempt; while a privilege is missing, failover is refused (said
//! at start, in the API and in events) instead of being discovered half-way through.

use crate::Monitor;
use std::time::Duration;
use tokio::time::Instant;

/// A check older than this is repeated before a failover attempt.
const FRESH: Duration = Duration::from_secs(10);

/// The last check of the monitor user's privileges.
#[derive(Default)]
pub(crate) struct Preflight {
    /// Per server: what is missing and what for.
    problems: Vec<String>,
    /// When it ran (none yet: it runs at the next round).
    checked: Option<Instant>,
    /// Run again at the next round (reload, new credentials).
    recheck: bool,
}

impl Preflight {
    /// Check again at the next round.
    pub fn recheck_now(&mut self) {
        self.recheck = true;
    }

    /// What is missing, per server.
    pub fn problems(&self) -> &[String] {
        &self.problems
    }
}

impl Monitor {
    /// Runs the check at the first round, and when asked to.
    pub(crate) async fn preflight_if_due(&self) {
        let s = self.settings();
        if !s.failover && !s.rejoin {
            return;
        }
        let due = {
            let st = self.state.lock();
            st.preflight.checked.is_none() || st.preflight.recheck
        };
        if due {
            self.check_privileges().await;
        }
    }

    /// Before a failover attempt: checks again unless the last check is recent and found
    /// nothing missing (a refusal is re-checked at every attempt: the operator may have
    /// granted the privileges meanwhile).
    pub(crate) async fn preflight_fresh(&self) {
        let stale = {
            let st = self.state.lock();
            !st.preflight.problems.is_empty()
                || st.preflight.checked.is_none_or(|t| t.elapsed() >= FRESH)
        };
        if stale {
            self.check_privileges().await;
        }
    }

    /// Why a failover would fail with the monitor's user, if it would.
    pub(crate) fn failover_refusal(&self) -> Option<String> {
        let st = self.state.lock();
        let p = st.preflight.problems();
        (!p.is_empty()).then(|| format!("the monitor's user lacks privileges: {}", p.join("; ")))
    }

    /// Reads the monitor user's privileges on every reachable managed server.
    async fn check_privileges(&self) {
        let servers: Vec<_> = self
            .cluster
            .servers()
            .iter()
            .filter(|s| s.managed && self.reachable(s))
            .cloned()
            .collect();
        let mut problems = Vec::new();
        for s in servers {
            match self.agent.missing_privileges(&s).await {
                Ok(missing) if missing.is_empty() => {}
                Ok(missing) => problems.push(format!("on {}: {}", s.name, missing.join(", "))),
                Err(e) => {
                    tracing::debug!(server = %s.name, error = %e, "cannot read the monitor's grants")
                }
            }
        }
        let changed = {
            let mut st = self.state.lock();
            let changed = st.preflight.problems != problems;
            st.preflight = Preflight {
                problems: problems.clone(),
                checked: Some(Instant::now()),
                recheck: false,
            };
            changed
        };
        if !changed {
            return;
        }
        let failover = self.settings().failover;
        if problems.is_empty() {
            self.events.push(
                "config",
                "the monitor's user has every privilege failover, switchover and rejoin need"
                    .into(),
            );
            return;
        }
        let consequence = if failover {
            "automatic failover is refused until they are granted"
        } else {
            "switchover and rejoin will fail"
        };
        tracing::warn!(
            "the monitor's user lacks privileges ({}); {consequence}",
            problems.join("; ")
        );
        self.events.push(
            "config",
            format!(
                "the monitor's user lacks privileges ({}); {consequence}",
                problems.join("; ")
            ),
        );
    }
}
