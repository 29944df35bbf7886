//! Which managed server is what: finding the primary, placing replicas, fencing a server that
//! is writable but not the primary, rejoining it as a replica when its history allows, and
//! carrying out repairs the monitor owes (replication it stopped, a replica to repoint).
//!
//! Only a reachable server is given the primary role: a primary that stops answering keeps
//! being "the primary to replace" for failover, but leaves the writer hostgroup.

use crate::agent::Threads;
use crate::repair::Action;
use crate::Monitor;
use sluice_core::{Health, Role, Server};
use std::sync::Arc;

impl Monitor {
    /// With no primary known: the writable, non-replicating server that replicas follow (or
    /// the only writable one); failing that, the unreachable server the replicas follow (a
    /// primary that is down at start, for failover to replace).
    pub(crate) fn discover_primary(&self) {
        let managed: Vec<Arc<Server>> = self
            .cluster
            .servers()
            .iter()
            .filter(|s| s.managed)
            .cloned()
            .collect();
        let reports: Vec<(Arc<Server>, crate::agent::Report)> = managed
            .iter()
            .filter_map(|s| self.report(s).map(|r| (s.clone(), r)))
            .collect();
        let writable: Vec<&Arc<Server>> = reports
            .iter()
            .filter(|(_, r)| !r.read_only && r.replica.is_none())
            .map(|(s, _)| s)
            .collect();
        let followed = |s: &Server| {
            reports.iter().any(|(_, r)| {
                r.replica
                    .as_ref()
                    .is_some_and(|rs| crate::agent::same_endpoint(&rs.source, &s.address))
            })
        };
        let pick = writable
            .iter()
            .find(|s| followed(s))
            .or_else(|| {
                if writable.len() == 1 {
                    writable.first()
                } else {
                    None
                }
            })
            .map(|s| (*s).clone())
            .or_else(|| {
                // A read-only primary (set read-only by hand) that replicas follow is still
                // the primary of this cluster.
                reports
                    .iter()
                    .find(|(s, r)| r.replica.is_none() && followed(s))
                    .map(|(s, _)| s.clone())
            });
        if let Some(p) = pick {
            self.events
                .push("role", format!("{} is the primary", p.name));
            self.set_primary(Some(p));
            return;
        }
        // Down at start: the server the replicas follow (a failover may replace it); it
        // gets the primary role only once it answers.
        if let Some(p) = managed
            .iter()
            .find(|s| !self.reachable(s) && followed(s))
            .cloned()
        {
            self.events.push(
                "role",
                format!(
                    "{} is the primary the replicas follow, but it does not answer",
                    p.name
                ),
            );
            self.set_primary(Some(p));
        }
    }

    /// Gives the primary its role (and writes) while it answers.
    pub(crate) fn place_primary(&self) {
        let Some(primary) = self.primary() else {
            return;
        };
        if !self.reachable(&primary) {
            return;
        }
        if let Some(r) = self.report(&primary) {
            self.state.lock().synchronous = r.synchronous;
        }
        if primary.observed().role != Role::Primary {
            self.set_role(&primary, Role::Primary);
        }
        // A primary that came back before a failover could complete takes writes again.
        if let Health::Offline { reason } = primary.health() {
            if reason == "failed primary" {
                primary.set_offline(None);
            }
        }
    }

    /// Places every managed server but the primary: replicas of the primary in the reader
    /// hostgroup; replicas of someone else repointed; writable or stand-alone servers fenced,
    /// then rejoined or kept out. Carries out the repairs the monitor owes, with backoff.
    pub(crate) async fn place_others(&self) {
        let Some(primary) = self.primary() else {
            return;
        };
        let primary_up = self.reachable(&primary);
        let others: Vec<Arc<Server>> = self
            .cluster
            .servers()
            .iter()
            .filter(|s| s.managed && !Arc::ptr_eq(s, &primary))
            .cloned()
            .collect();
        for s in others {
            let Some(rep) = self.report(&s) else { continue }; // unreachable: leave it
            let owed = self.state.lock().repairs.action(&s.name);
            if let Some(Action::ReadOnly(on)) = owed {
                self.repair_read_only(&s, on, rep.read_only).await;
            }
            match &rep.replica {
                Some(rs) if crate::agent::same_endpoint(&rs.source, &primary.address) => {
                    if s.observed().role != Role::Replica {
                        self.set_role(&s, Role::Replica);
                    }
                    if matches!(s.health(), Health::Offline { .. }) {
                        s.set_offline(None);
                    }
                    let stopped = !rs.io_running || !rs.sql_running;
                    self.repair_done_if(&s, Action::Follow);
                    self.repair_done_if(&s, Action::Rejoin);
                    if !stopped {
                        self.repair_done_if(&s, Action::Restart);
                    } else if owed == Some(Action::Restart) && self.repair_due(&s, Action::Restart)
                    {
                        match self.agent.resume(&s, Threads::All).await {
                            Ok(()) => self.repair_done(&s, Action::Restart),
                            Err(e) => self.repair_failed(&s, Action::Restart, &e.message),
                        }
                    }
                }
                Some(rs) if rs.source.is_empty() && owed.is_none() => {
                    // No upstream at all (a PostgreSQL standby with no WAL receiver): an
                    // operator's doing, not the monitor's to change; it takes no reads.
                }
                Some(rs) => {
                    // Following another server (a former primary): follow the primary, once
                    // it answers.
                    if (!self.settings().failover && !self.settings().rejoin)
                        || !primary_up
                        || !self.repair_due(&s, Action::Follow)
                    {
                        continue;
                    }
                    match self.agent.replicate_from(&s, &primary, false).await {
                        Ok(()) => {
                            self.events.push(
                                "rejoin",
                                format!(
                                    "{} replicated from {}; repointed to primary {}",
                                    s.name, rs.source, primary.name
                                ),
                            );
                            self.state.lock().repairs.done(&s.name, Action::Follow);
                            self.state.lock().repairs.done(&s.name, Action::Restart);
                        }
                        Err(e) => self.repair_failed(&s, Action::Follow, &e.message),
                    }
                }
                None => {
                    self.fence_and_rejoin(&s, &primary, primary_up, rep.read_only)
                        .await
                }
            }
        }
    }

    fn repair_done_if(&self, s: &Arc<Server>, action: Action) {
        let owed = self.state.lock().repairs.action(&s.name);
        if owed == Some(action) {
            self.repair_done(s, action);
        }
    }

    /// A `read_only` the monitor must set back (a rolled-back switchover).
    async fn repair_read_only(&self, s: &Arc<Server>, on: bool, is: bool) {
        if on == is {
            self.repair_done(s, Action::ReadOnly(on));
            return;
        }
        if !self.repair_due(s, Action::ReadOnly(on)) {
            return;
        }
        match self.agent.set_read_only(s, on).await {
            Ok(()) => self.repair_done(s, Action::ReadOnly(on)),
            Err(e) => self.repair_failed(s, Action::ReadOnly(on), &e.message),
        }
    }

    /// A managed server that is not the primary and does not replicate: it must never take
    /// writes. Make it read-only; rejoin it as a replica if everything it has, the primary has
    /// (tried with backoff while that fails); otherwise keep it out of service and say why.
    async fn fence_and_rejoin(
        &self,
        s: &Arc<Server>,
        primary: &Arc<Server>,
        primary_up: bool,
        read_only: bool,
    ) {
        if s.observed().role == Role::Fenced && s.monitor_block().is_none() {
            // Fenced for divergence earlier: nothing changes until someone repairs it.
            if let Health::Offline { reason } = s.health() {
                if reason.starts_with("errant") {
                    return;
                }
            }
        }
        if !read_only {
            match self.agent.set_read_only(s, true).await {
                Ok(()) => self.events.push(
                    "fence",
                    format!(
                        "{} was writable but is not the primary: set read-only",
                        s.name
                    ),
                ),
                Err(e) => {
                    self.events
                        .push("fence", format!("cannot set {} read-only: {e}", s.name));
                    s.set_offline(Some(format!(
                        "writable former primary, could not fence: {e}"
                    )));
                    self.set_role(s, Role::Fenced);
                    return;
                }
            }
        }
        if !self.settings().rejoin {
            s.set_offline(Some("former primary (rejoin disabled)".into()));
            self.set_role(s, Role::Fenced);
            return;
        }
        if !primary_up || !self.repair_due(s, Action::Rejoin) {
            // Out of service until it follows the primary.
            if s.observed().role != Role::Fenced {
                s.set_offline(Some("not replicating: waiting to rejoin".into()));
                self.set_role(s, Role::Fenced);
            }
            return;
        }
        match self.agent.errant(s, primary).await {
            Ok(None) => self.rejoin(s, primary).await,
            Ok(Some(diverged)) if self.agent.repairs_divergence() => {
                self.events.push(
                    "fence",
                    format!(
                        "{} diverged from the primary {} ({diverged}): bringing it back with rewind_command",
                        s.name, primary.name
                    ),
                );
                self.rejoin(s, primary).await;
            }
            Ok(Some(errant)) => {
                if !matches!(s.health(), Health::Offline { reason } if reason.starts_with("errant"))
                {
                    self.events.push(
                        "fence",
                        format!("{} has transactions the primary {} lacks ({errant}): kept out of service", s.name, primary.name),
                    );
                }
                s.set_offline(Some(format!("errant transactions: {errant}")));
                self.set_role(s, Role::Fenced);
            }
            Err(e) => {
                s.set_offline(Some(format!("cannot compare histories: {e}")));
                self.set_role(s, Role::Fenced);
                self.repair_failed(s, Action::Rejoin, &format!("cannot compare histories: {e}"));
            }
        }
    }

    /// Makes a fenced former primary a replica of `primary` (retried with backoff while that
    /// fails; out of service meanwhile).
    async fn rejoin(&self, s: &Arc<Server>, primary: &Arc<Server>) {
        match self.agent.replicate_from(s, primary, true).await {
            Ok(()) => {
                self.events.push(
                    "rejoin",
                    format!("{} rejoined as a replica of {}", s.name, primary.name),
                );
                self.state.lock().repairs.done(&s.name, Action::Rejoin);
                // A reader before it takes traffic (see the switchover's swap): never online
                // while still in the writer hostgroup.
                self.set_role(s, Role::Replica);
                s.set_offline(None);
            }
            Err(e) => {
                s.set_offline(Some(format!("rejoin failed: {e}")));
                self.set_role(s, Role::Fenced);
                self.repair_failed(s, Action::Rejoin, &e.message);
            }
        }
    }
}
