//! Recording a check: what the server is observed to be, and whether it may take traffic.
//!
//! One failed check takes nothing out of service: a server takes no traffic only after
//! `failure_threshold` failed checks in a row, and a check that timed out while the monitor's
//! own thread was starved of CPU does not count at all (it says nothing about the server).

use crate::agent::{self, AgentError, ReplicaStatus, Report};
use crate::Monitor;
use sluice_core::{Role, Server};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// What one check produced (one per server per round, consumed at once: not worth a box).
#[allow(clippy::large_enum_variant)]
pub(crate) enum Outcome {
    /// The agent answered (the server's report, or why it could not be reached).
    Checked(Result<Report, AgentError>),
    /// The check's time limit passed.
    TimedOut,
}

impl Monitor {
    /// Records a check's result. A failed check counts from when its round started (a hung
    /// server is silent from then on). `starved`: the monitor's thread waited this long for a
    /// CPU during the round, so time-outs are inconclusive.
    pub(crate) fn apply(
        &self,
        s: &Arc<Server>,
        outcome: Outcome,
        started: Instant,
        starved: Option<Duration>,
    ) {
        let settings = self.settings();
        let mut st = self.state.lock();
        let r = match outcome {
            Outcome::Checked(r) => r,
            Outcome::TimedOut => {
                let v = st.views.entry(s.name.clone()).or_default();
                if starved.is_some() && v.inconclusive < settings.failure_threshold {
                    v.inconclusive += 1;
                    self.stats.starved_checks.fetch_add(1, Relaxed);
                    tracing::debug!(server = %s.name, starved_ms = starved.unwrap_or_default().as_millis() as u64,
                        "check timed out while the monitor waited for a CPU; not counted");
                    return;
                }
                Err(AgentError::unreachable(format!(
                    "no answer within {} ms",
                    settings.timeout.as_millis()
                )))
            }
        };
        let now = Instant::now();
        let primary = st.primary.clone();
        // The primary's position at its last answer: how far behind a replica is, in bytes,
        // for protocols whose positions count bytes. When its last check failed (a slow
        // answer), the position it had before: it has only moved on since, so a replica
        // that was too far behind that stays out, rather than taking reads for a round.
        let primary_position =
            primary
                .as_ref()
                .filter(|p| !Arc::ptr_eq(p, s))
                .and_then(
                    |p| match st.views.get(&p.name).and_then(|v| v.last.as_ref()) {
                        Some(Ok(r)) => Some(r.position.clone()),
                        _ => Some(p.observed().position).filter(|pos| !pos.is_empty()),
                    },
                );
        let primary_up = primary.as_ref().is_some_and(|p| {
            matches!(
                st.views.get(&p.name).and_then(|v| v.last.as_ref()),
                Some(Ok(_))
            )
        });
        let ours_stopped = st.repairs.restarting(&s.name);
        let v = st.views.entry(s.name.clone()).or_default();
        let mut o = s.observed();
        o.checked = Some(now.into_std());
        match &r {
            Ok(rep) => {
                v.first_fail = None;
                v.failures = 0;
                v.inconclusive = 0;
                if v.declared_failed {
                    s.clear_declared_failed();
                }
                v.declared_failed = false;
                o.reachable = true;
                o.rtt = Some(rep.rtt);
                o.read_only = Some(rep.read_only);
                o.position = rep.position.clone();
                o.timeline = rep.timeline;
                s.set_version(&rep.version);
                o.source = rep.replica.as_ref().map(|r| r.source.clone());
                o.replication_running = rep.replica.as_ref().map(|r| r.io_running && r.sql_running);
                o.lag = rep.replica.as_ref().and_then(|r| r.lag);
                o.lag_bytes = rep.replica.as_ref().and_then(|_| {
                    self.agent
                        .distance(primary_position.as_deref()?, &rep.position)
                });
                if !s.managed {
                    // Servers with a configured hostgroup: their role is only shown (the
                    // monitor decides nothing from it).
                    o.role = if rep.replica.is_some() {
                        Role::Replica
                    } else if !rep.read_only {
                        Role::Primary
                    } else {
                        Role::Unknown
                    };
                }
                o.error = rep
                    .limited
                    .clone()
                    .or_else(|| rep.replica.as_ref().and_then(|r| r.error.clone()));
                let primary = primary.as_deref().filter(|p| !std::ptr::eq(*p, &**s));
                // Following another server sluice knows (a former primary), not the primary.
                let follows_other = rep.replica.as_ref().is_some_and(|rs| {
                    primary.is_some_and(|p| !agent::same_endpoint(&rs.source, &p.address))
                        && self.cluster.servers().iter().any(|o| {
                            o.managed
                                && !std::ptr::eq(&**o, &**s)
                                && agent::same_endpoint(&rs.source, &o.address)
                        })
                });
                let following = Following {
                    primary,
                    primary_up,
                    follows_other,
                    stopped_by_us: ours_stopped,
                };
                s.set_monitor_block(rep.replica.as_ref().and_then(|rs| {
                    replica_verdict(rs, s.max_lag(), &following)
                        .or_else(|| bytes_verdict(o.lag_bytes, s.max_lag_bytes()))
                }));
            }
            Err(e) => {
                let since = *v.first_fail.get_or_insert(started);
                v.failures = v.failures.saturating_add(1);
                o.reachable = false;
                o.rtt = None;
                o.error = Some(e.message.clone());
                if v.failures >= settings.failure_threshold {
                    s.set_monitor_block(Some(format!(
                        "unreachable ({} checks failed): {}",
                        v.failures, e.message
                    )));
                }
                // Declared failed after the detection time: statements waiting on it give
                // up, and its idle pooled connections are dropped.
                if !v.declared_failed && now.duration_since(since) >= settings.detection_time {
                    v.declared_failed = true;
                    // Said before statements in flight fail, so that they can tell why.
                    s.declare_failed(format!(
                        "the monitor declared it failed after {} ms without an answer{}",
                        now.duration_since(since).as_millis(),
                        if settings.failover {
                            "; a failover follows if it is the primary"
                        } else {
                            ""
                        }
                    ));
                    self.cluster.drop_idle(s);
                }
            }
        }
        v.last = Some(r);
        s.set_observed(o);
    }
}

/// What a replica's verdict depends on besides its own replication status.
pub(crate) struct Following<'a> {
    /// The primary it should follow (none while unknown or during a failover).
    pub primary: Option<&'a Server>,
    /// The primary answered its last check.
    pub primary_up: bool,
    /// It replicates from another server sluice manages, not from the primary.
    pub follows_other: bool,
    /// Its replication was stopped by the monitor itself (a failover step it is undoing).
    pub stopped_by_us: bool,
}

/// Why a replica should take no reads, if it should not: replication broken, not following
/// the primary, or lagging beyond `max_lag`. While the primary is down a replica whose
/// receiver only reconnects (or that the monitor itself stopped) is as fresh as any: it keeps
/// serving reads.
pub(crate) fn replica_verdict(
    rs: &ReplicaStatus,
    max_lag: Option<Duration>,
    f: &Following<'_>,
) -> Option<String> {
    let follows_primary = f
        .primary
        .is_some_and(|p| agent::same_endpoint(&rs.source, &p.address));
    if let Some(p) = f.primary {
        if f.primary_up && f.follows_other {
            return Some(format!(
                "replicates from {}, not from the primary {}",
                rs.source, p.name
            ));
        }
    }
    let source_up = f.primary_up && follows_primary;
    if !rs.io_connected && source_up && rs.error.is_some() {
        return Some(format!(
            "replication cannot connect to its source {}: {}",
            rs.source,
            rs.error.as_deref().unwrap_or_default()
        ));
    }
    if !rs.sql_running || !rs.io_running {
        let ours = f.stopped_by_us && !f.primary_up && rs.error.is_none();
        if !ours {
            return Some(format!(
                "replication broken (receiving: {}, applying: {}){}",
                yes_no(rs.io_running),
                yes_no(rs.sql_running),
                rs.error
                    .as_ref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ));
        }
    }
    match (rs.lag, max_lag) {
        (Some(lag), Some(max)) if lag > max => Some(format!(
            "replication lag {} s > {} s",
            lag.as_secs(),
            max.as_secs_f64()
        )),
        _ => None,
    }
}

/// Why a replica should take no reads for the bytes of WAL it is behind the primary, if it
/// should not.
pub(crate) fn bytes_verdict(lag: Option<u64>, max: Option<u64>) -> Option<String> {
    match (lag, max) {
        (Some(lag), Some(max)) if lag > max => {
            Some(format!("replication lag {lag} bytes > {max} bytes"))
        }
        _ => None,
    }
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}
