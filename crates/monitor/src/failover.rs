//! Automatic failover: promote the replica that received the most, after it applied its relay
//! log; repoint the others; route writes there. Every step is logged with its timing.

use crate::agent::Agent;
use crate::coordinator::Proposal;
use crate::Monitor;
use futures_util::future::join_all;
use sluice_core::{Role, Server};
use std::cmp::Ordering;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl<A: Agent, C: Send + 'static> Monitor<A, C> {
    /// The replicas that could take over from `old`, best first: most received, then least lag.
    pub(crate) fn candidates(&self, old: &Arc<Server>) -> Vec<(Arc<Server>, String)> {
        let mut c: Vec<(Arc<Server>, String, Option<Duration>)> = self
            .topology
            .all()
            .iter()
            .filter(|s| s.managed && !Arc::ptr_eq(s, old))
            .filter(|s| s.observed().role == Role::Replica)
            .filter_map(|s| {
                let rep = self.report(s)?;
                let rs = rep.replica?;
                Some((s.clone(), rs.received, rs.lag))
            })
            .collect();
        c.sort_by(|a, b| match self.agent.compare(&b.1, &a.1) {
            Ordering::Equal => {
                a.2.unwrap_or(Duration::MAX)
                    .cmp(&b.2.unwrap_or(Duration::MAX))
            }
            o => o,
        });
        c.into_iter().map(|(s, pos, _)| (s, pos)).collect()
    }

    /// Steps 1 and 2: the candidate applies everything it received (never restarting its
    /// replication: on MariaDB that would discard the relay log), stops replicating and is
    /// promoted. Each step is logged with its timing.
    async fn take_over(&self, cand: &Arc<Server>, received: &str) -> Result<(), String> {
        let t = Instant::now();
        self.agent
            .catch_up(cand, received, self.settings().catchup_timeout)
            .await
            .map_err(|e| format!("{} could not apply its relay log ({e})", cand.name))?;
        self.events.push(
            "failover",
            format!(
                "{} applied its relay log in {} ms",
                cand.name,
                t.elapsed().as_millis()
            ),
        );
        let t = Instant::now();
        let promoted = match self.agent.detach(cand, true).await {
            Ok(()) => self.agent.promote(cand).await,
            Err(e) => Err(e),
        };
        promoted.map_err(|e| format!("cannot promote {}: {e}", cand.name))?;
        self.events.push(
            "failover",
            format!(
                "{} promoted (read_only=0) in {} ms",
                cand.name,
                t.elapsed().as_millis()
            ),
        );
        Ok(())
    }

    /// A failover step failed: `old` stays the primary (it may come back) and the next
    /// attempt waits one detection time.
    fn postpone(&self, old: Arc<Server>) {
        let mut st = self.state.lock();
        st.primary = Some(old);
        st.retry_failover_at = Some(Instant::now() + self.settings().detection_time);
    }

    /// Replaces the failed primary `old`.
    pub(crate) async fn failover(&self, old: Arc<Server>, down_for: Duration) {
        let started = Instant::now();
        let candidates = self.candidates(&old);
        let Some((cand, received)) = candidates.first().cloned() else {
            self.events.push(
                "failover",
                format!(
                    "primary {} unreachable for {} ms, but no replica can take over",
                    old.name,
                    down_for.as_millis()
                ),
            );
            return;
        };
        let proposal = Proposal {
            primary: old.name.to_string(),
            candidate: cand.name.to_string(),
            down_for_ms: down_for.as_millis(),
        };
        if !self.coordinator.approve(&proposal).await {
            self.events.push(
                "failover",
                format!("failover of {} to {} not approved", old.name, cand.name),
            );
            return;
        }
        self.events.push(
            "failover",
            format!(
                "primary {} unreachable for {} ms: promoting {} (received up to {})",
                old.name,
                down_for.as_millis(),
                cand.name,
                if received.is_empty() {
                    "nothing"
                } else {
                    &received
                }
            ),
        );
        // The old primary takes nothing more; statements in flight on it fail now.
        old.set_offline(Some("failed primary".into()));
        self.set_role(&old, Role::Unknown);
        old.fail_in_flight();
        self.set_primary(None);

        // The other replicas stop receiving from the failed primary meanwhile (it may take a
        // moment: see `Agent::detach`); they follow the new one once it is promoted.
        let others: Vec<Arc<Server>> = candidates.iter().skip(1).map(|(r, _)| r.clone()).collect();
        let detach_others = join_all(others.iter().map(|r| self.agent.detach(r, true)));
        let (detached, taken_over) = tokio::join!(detach_others, self.take_over(&cand, &received));
        if let Err(e) = taken_over {
            self.events
                .push("failover", format!("{e}; failover postponed"));
            // Replication resumes as it was (the old primary may come back).
            for r in others.iter().chain([&cand]) {
                if let Err(e) = self.agent.resume(r).await {
                    self.events.push(
                        "failover",
                        format!("cannot restart replication on {}: {e}", r.name),
                    );
                }
            }
            self.postpone(old);
            return;
        }

        // 3. Writes go there.
        cand.set_monitor_block(None);
        cand.set_offline(None);
        self.set_primary(Some(cand.clone()));
        self.set_role(&cand, Role::Primary);
        let to_writes = started.elapsed();
        self.events.push(
            "failover",
            format!(
                "writes go to {} ({} ms after the decision)",
                cand.name,
                to_writes.as_millis()
            ),
        );

        // 4. The other replicas follow it.
        for (r, d) in others.iter().zip(detached) {
            if let Err(e) = d {
                self.events.push(
                    "failover",
                    format!("{} did not stop replicating from {}: {e}", r.name, old.name),
                );
            }
        }
        let repointed = join_all(others.iter().map(|r| {
            let cand = &cand;
            async move {
                let t = Instant::now();
                let result = self.agent.replicate_from(r, cand, false).await;
                (r.clone(), result, t.elapsed())
            }
        }))
        .await;
        for (r, result, took) in repointed {
            match result {
                Ok(()) => self.events.push(
                    "failover",
                    format!(
                        "{} now replicates from {} ({} ms)",
                        r.name,
                        cand.name,
                        took.as_millis()
                    ),
                ),
                Err(e) => self.events.push(
                    "failover",
                    format!("cannot repoint {} to {}: {e}", r.name, cand.name),
                ),
            }
        }
        self.state.lock().retry_failover_at = None;
        self.stats.failovers.fetch_add(1, Relaxed);
        self.stats
            .last_failover_ms
            .store(to_writes.as_millis() as u64, Relaxed);
        self.events.push(
            "failover",
            format!(
                "failover from {} to {} complete in {} ms",
                old.name,
                cand.name,
                started.elapsed().as_millis()
            ),
        );
    }
}
