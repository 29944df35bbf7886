//! Automatic failover: promote the replica that received the most, after it applied its relay
//! log; repoint the others; route writes there. Every step is logged with its timing.
//!
//! Until the candidate is writable nothing is final: if a step fails, every replica whose
//! replication was stopped is restarted and the candidate's settings are restored (see
//! `journal.rs`), the replicas keep serving reads, the failed primary is not given the
//! primary role back while it is unreachable, and the next attempt waits with backoff. After
//! the promotion, a replica that cannot be repointed is retried (see `repair.rs`) and takes no
//! reads while it follows the old primary.

use crate::agent::{AgentError, Threads};
use crate::backoff::Schedule;
use crate::coordinator::Proposal;
use crate::journal::{Journal, Undo};
use crate::repair::Action;
use crate::status::FailoverStep;
use crate::Monitor;
use futures_util::future::join_all;
use sluice_core::{Role, Server};
use std::cmp::Ordering;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Failed failover attempts since the primary was last seen, and when the next may start.
/// Orders failover candidates best first: the most received (by `compare`, which says
/// `Greater` when its first position has more), then the least lag (unknown lag last).
pub(crate) fn rank_candidates<S>(
    c: &mut [(S, String, Option<Duration>)],
    compare: impl Fn(&str, &str) -> Ordering,
) {
    c.sort_by(|a, b| match compare(&b.1, &a.1) {
        Ordering::Equal => {
            a.2.unwrap_or(Duration::MAX)
                .cmp(&b.2.unwrap_or(Duration::MAX))
        }
        o => o,
    });
}

/// Whether to fail over now, and how long the primary has been down: only a primary that
/// is unreachable, has been for at least `detection_time`, when no failed attempt asks to
/// wait.
pub(crate) fn failover_due(
    reachable: bool,
    down_for: Option<Duration>,
    detection_time: Duration,
    schedule_due: bool,
) -> Option<Duration> {
    let down_for = down_for.filter(|_| !reachable)?;
    (down_for >= detection_time && schedule_due).then_some(down_for)
}

#[derive(Default)]
pub(crate) struct Attempts {
    pub schedule: Schedule,
    pub last_error: Option<String>,
}

impl Monitor {
    /// The replicas of `old`, best first: most received, then least lag; each with what it
    /// received and whether it may replace `old` in a failover (when `old`'s commits waited
    /// for synchronous standbys, only those may: another standby may lack commits `old`
    /// acknowledged).
    pub(crate) fn candidates(&self, old: &Arc<Server>) -> Vec<(Arc<Server>, String, bool)> {
        let synchronous = self.state.lock().synchronous.clone();
        // ((server, eligible), received, lag)
        type Ranked = ((Arc<Server>, bool), String, Option<Duration>);
        let mut c: Vec<Ranked> = self
            .cluster
            .servers()
            .iter()
            .filter(|s| s.managed && !Arc::ptr_eq(s, old))
            .filter(|s| s.observed().role == Role::Replica)
            .filter_map(|s| {
                let rep = self.report(s)?;
                let rs = rep.replica?;
                let eligible = synchronous.as_ref().is_none_or(|n| n.contains(&rs.name));
                Some(((s.clone(), eligible), rs.received, rs.lag))
            })
            .collect();
        rank_candidates(&mut c, |a, b| self.agent.compare(a, b));
        c.into_iter()
            .map(|((s, eligible), pos, _)| (s, pos, eligible))
            .collect()
    }

    /// Starts a failover if the primary has been down for the detection time, failover is
    /// possible, and no failed attempt asks to wait.
    pub(crate) async fn maybe_failover(&self) {
        let settings = self.settings();
        if !settings.failover {
            return;
        }
        let Some(p) = self.primary() else { return };
        let reachable = self.reachable(&p);
        if reachable {
            // Back (or never gone): a later outage starts with a fresh schedule.
            self.state.lock().failover = Attempts::default();
        }
        let down_for = self.down_for(&p);
        let due = self.state.lock().failover.schedule.due(Instant::now());
        let Some(down_for) = failover_due(reachable, down_for, settings.detection_time, due) else {
            return;
        };
        self.preflight_fresh().await;
        if let Some(why) = self.failover_refusal() {
            self.attempt_failed(&p, None, FailoverStep::Refused, &why, None);
            return;
        }
        self.failover(p, down_for).await;
    }

    /// Records a failover attempt that did not complete (or was not made), schedules the
    /// next one, and says why and what was undone.
    fn attempt_failed(
        &self,
        old: &Arc<Server>,
        cand: Option<&Arc<Server>>,
        step: FailoverStep,
        why: &str,
        undone: Option<String>,
    ) {
        self.stats.failover_failed(step);
        let wait = {
            let mut st = self.state.lock();
            st.failover.last_error = Some(format!("{}: {why}", step.as_str()));
            st.failover
                .schedule
                .failed(self.settings().detection_time, Instant::now())
        };
        let what = match (step, cand) {
            (FailoverStep::Refused, _) => format!("failover of {} refused", old.name),
            (_, Some(c)) => format!(
                "failover of {} to {} failed at step {}",
                old.name,
                c.name,
                step.as_str()
            ),
            (_, None) => format!("failover of {} not possible", old.name),
        };
        let msg = format!(
            "{what}: {why}{}; next attempt in {} ms",
            undone.map(|u| format!("; {u}")).unwrap_or_default(),
            wait.as_millis()
        );
        tracing::warn!("{msg}");
        self.say_why_no_writer(Some(format!(
            "the primary {} does not answer; {msg}",
            old.name
        )));
        self.events.push("failover", msg);
    }

    /// What statements waiting for a writer are told if none turns up.
    fn say_why_no_writer(&self, why: Option<String>) {
        self.cluster.say_why_no_writer(why);
    }

    /// Steps 1 and 2: the candidate applies everything it received (never restarting its
    /// replication: on MariaDB that would discard the relay log), stops replicating and is
    /// promoted. Returns whether its replication was stopped (to restart on failure).
    async fn take_over(
        &self,
        cand: &Arc<Server>,
        received: &str,
    ) -> (bool, Result<(), (FailoverStep, AgentError)>) {
        let t = Instant::now();
        if let Err(e) = self
            .agent
            .catch_up(cand, received, self.settings().catchup_timeout)
            .await
        {
            let e = e.context(format!("{} could not apply its relay log", cand.name));
            return (false, Err((FailoverStep::CatchUp, e)));
        }
        self.events.push(
            "failover",
            format!(
                "{} applied its relay log in {} ms",
                cand.name,
                t.elapsed().as_millis()
            ),
        );
        let t = Instant::now();
        if let Err(e) = self.agent.detach(cand, true, Threads::All).await {
            let e = e.context(format!("cannot stop replication on {}", cand.name));
            return (false, Err((FailoverStep::Detach, e)));
        }
        if let Err(e) = self.agent.promote(cand).await {
            let e = e.context(format!("cannot promote {}", cand.name));
            return (true, Err((FailoverStep::Promote, e)));
        }
        self.events.push(
            "failover",
            format!(
                "{} promoted (read_only=0) in {} ms",
                cand.name,
                t.elapsed().as_millis()
            ),
        );
        (true, Ok(()))
    }

    /// Brings `cand` up to the most any replica received, from that replica, when one has
    /// more than it; returns the position it must apply before promotion. A fast-forward
    /// that fails is reported, and the failover goes on with what `cand` has (a replica that
    /// has more will not be able to follow it: it is reported when it is repointed).
    async fn fast_forward(
        &self,
        cand: &Arc<Server>,
        received: &str,
        candidates: &[(Arc<Server>, String, bool)],
    ) -> String {
        let Some((best, most, _)) = candidates.first() else {
            return received.to_string();
        };
        if Arc::ptr_eq(best, cand) || self.agent.compare(most, received) != Ordering::Greater {
            return received.to_string();
        }
        let t = Instant::now();
        match self
            .agent
            // Bounded tighter than a catch-up: writes wait meanwhile.
            .fast_forward(
                cand,
                best,
                most,
                self.settings().catchup_timeout.min(Duration::from_secs(10)),
            )
            .await
        {
            Ok(()) => {
                self.events.push(
                    "failover",
                    format!(
                        "{} fetched from {} what it lacked (up to {most}, past its own {received}) in {} ms",
                        cand.name,
                        best.name,
                        t.elapsed().as_millis()
                    ),
                );
                most.clone()
            }
            Err(e) => {
                self.events.push(
                    "failover",
                    format!(
                        "{} could not fetch from {} what it lacked (up to {most}): {e}; promoting it with what it has",
                        cand.name, best.name
                    ),
                );
                received.to_string()
            }
        }
    }

    /// Replaces the failed primary `old`.
    pub(crate) async fn failover(&self, old: Arc<Server>, down_for: Duration) {
        let started = Instant::now();
        let candidates = self.candidates(&old);
        let Some((cand, received, _)) = candidates.iter().find(|c| c.2).cloned() else {
            let synchronous = self.state.lock().synchronous.clone();
            let why = match synchronous {
                Some(names) => format!(
                    "unreachable for {} ms, and none of its synchronous standbys ({}) is reachable: another standby may lack commits it acknowledged",
                    down_for.as_millis(),
                    if names.is_empty() { "none identified: give each standby its own application_name".to_string() } else { names.join(", ") }
                ),
                None => format!(
                    "unreachable for {} ms, but no reachable replica can take over",
                    down_for.as_millis()
                ),
            };
            self.attempt_failed(&old, None, FailoverStep::NoCandidate, &why, None);
            return;
        };
        let proposal = Proposal {
            primary: old.name.to_string(),
            candidate: cand.name.to_string(),
            down_for_ms: down_for.as_millis(),
        };
        if !self.coordinator.approve(&proposal).await {
            let why = "not approved by the coordinator";
            self.attempt_failed(&old, Some(&cand), FailoverStep::NotApproved, why, None);
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
        self.say_why_no_writer(Some(format!(
            "the primary {} does not answer; failing over to {}",
            old.name, cand.name
        )));
        old.set_offline(Some("failed primary".into()));
        self.set_role(&old, Role::Unknown);
        old.fail_in_flight();

        // The other replicas stop receiving from the failed primary meanwhile (it may take a
        // moment: see `Agent::detach`), so that a primary that only hung cannot send them
        // what the new one will not have; they go on applying what they received, and follow
        // the new primary once it is promoted.
        let others: Vec<Arc<Server>> = candidates
            .iter()
            .filter(|c| !Arc::ptr_eq(&c.0, &cand))
            .map(|c| c.0.clone())
            .collect();
        let detach_others = join_all(
            others
                .iter()
                .map(|r| self.agent.detach(r, true, Threads::Receiving)),
        );
        // A synchronous candidate may have received less than an asynchronous standby (which
        // could then not follow it): it first fetches what it lacks from the one that has
        // the most, where the protocol can (PostgreSQL: cascading replication).
        let received = self.fast_forward(&cand, &received, &candidates).await;
        let (detached, (cand_detached, taken_over)) =
            tokio::join!(detach_others, self.take_over(&cand, &received));
        let mut journal = Journal::default();
        for (r, d) in others.iter().zip(&detached) {
            match d {
                Ok(()) => journal.push(Undo::Restart(r.clone(), Threads::Receiving)),
                Err(e) => self.events.push(
                    "failover",
                    format!("{} did not stop replicating from {}: {e}", r.name, old.name),
                ),
            }
        }
        if cand_detached {
            journal.push(Undo::Restart(cand.clone(), Threads::All));
        }
        if let Err((step, e)) = taken_over {
            let undone = self.roll_back(journal).await;
            self.attempt_failed(&old, Some(&cand), step, &e.message, Some(undone));
            return;
        }

        // 3. Writes go there: from here on the failover is done.
        cand.set_monitor_block(None);
        cand.set_offline(None);
        self.set_primary(Some(cand.clone()));
        self.set_role(&cand, Role::Primary);
        self.say_why_no_writer(None);
        self.state.lock().failover = Attempts::default();
        let to_writes = started.elapsed();
        self.events.push(
            "failover",
            format!(
                "writes go to {} ({} ms after the decision)",
                cand.name,
                to_writes.as_millis()
            ),
        );

        // 4. The other replicas follow it (one that cannot is retried, and takes no reads
        //    while it follows the old primary).
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
                Err(e) => {
                    r.set_monitor_block(Some(format!(
                        "replicates from {}, not from the primary {}",
                        old.name, cand.name
                    )));
                    self.repair_failed(&r, Action::Follow, &e.message);
                }
            }
        }
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
