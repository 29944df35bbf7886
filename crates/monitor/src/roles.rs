//! Which managed server is what: finding the primary, placing replicas, fencing a server that
//! is writable but not the primary, and rejoining it as a replica when its history allows.

use crate::agent::Agent;
use crate::Monitor;
use sluice_core::{Role, Server};
use std::sync::Arc;

impl<A: Agent, C: Send + 'static> Monitor<A, C> {
    /// With no primary known: the writable, non-replicating server that replicas follow (or
    /// the only writable one).
    pub(crate) fn discover_primary(&self) {
        let managed: Vec<Arc<Server>> = self
            .topology
            .all()
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
            })
            .or_else(|| {
                // Down at start: the server the replicas follow (a failover may replace it).
                managed
                    .iter()
                    .find(|s| self.report(s).is_none() && !self.reachable(s) && followed(s))
                    .cloned()
            });
        if let Some(p) = pick {
            self.events
                .push("role", format!("{} is the primary", p.name));
            self.set_primary(Some(p.clone()));
            self.set_role(&p, Role::Primary);
        }
    }

    /// Places every managed server but the primary: replicas of the primary in the reader
    /// hostgroup; replicas of someone else repointed; writable or stand-alone servers fenced,
    /// then rejoined or kept out.
    pub(crate) async fn place_others(&self) {
        let Some(primary) = self.primary() else {
            return;
        };
        if primary.observed().role != Role::Primary {
            self.set_role(&primary, Role::Primary);
        }
        // A primary that came back before a failover could complete takes writes again.
        if self.reachable(&primary) {
            if let sluice_core::Health::Offline { reason } = primary.health() {
                if reason == "failed primary" {
                    primary.set_offline(None);
                }
            }
        }
        let others: Vec<Arc<Server>> = self
            .topology
            .all()
            .iter()
            .filter(|s| s.managed && !Arc::ptr_eq(s, &primary))
            .cloned()
            .collect();
        for s in others {
            let Some(rep) = self.report(&s) else { continue }; // unreachable: leave it
            let role = s.observed().role;
            match &rep.replica {
                Some(rs) if crate::agent::same_endpoint(&rs.source, &primary.address) => {
                    if role != Role::Replica {
                        self.set_role(&s, Role::Replica);
                    }
                    if matches!(s.health(), sluice_core::Health::Offline { .. }) {
                        s.set_offline(None);
                    }
                }
                Some(rs) => {
                    // Following another server (a former primary): follow the primary.
                    if !self.settings().failover && !self.settings().rejoin {
                        continue;
                    }
                    match self.agent.replicate_from(&s, &primary, false).await {
                        Ok(()) => self.events.push(
                            "rejoin",
                            format!(
                                "{} replicated from {}; repointed to primary {}",
                                s.name, rs.source, primary.name
                            ),
                        ),
                        Err(e) => self.events.push(
                            "rejoin",
                            format!("cannot repoint {} to {}: {e}", s.name, primary.name),
                        ),
                    }
                }
                None => self.fence_and_rejoin(&s, &primary, rep.read_only).await,
            }
        }
    }

    /// A managed server that is not the primary and does not replicate: it must never take
    /// writes. Make it read-only; rejoin it as a replica if everything it has, the primary has;
    /// otherwise keep it out of service and say why.
    async fn fence_and_rejoin(&self, s: &Arc<Server>, primary: &Arc<Server>, read_only: bool) {
        if s.observed().role == Role::Fenced && s.monitor_block().is_none() {
            // Fenced for divergence earlier: nothing changes until someone repairs it.
            if let sluice_core::Health::Offline { reason } = s.health() {
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
        match self.agent.errant(s, primary).await {
            Ok(None) => match self.agent.replicate_from(s, primary, true).await {
                Ok(()) => {
                    self.events.push(
                        "rejoin",
                        format!("{} rejoined as a replica of {}", s.name, primary.name),
                    );
                    s.set_offline(None);
                    self.set_role(s, Role::Replica);
                }
                Err(e) => {
                    self.events.push(
                        "rejoin",
                        format!("cannot rejoin {} to {}: {e}", s.name, primary.name),
                    );
                    s.set_offline(Some(format!("rejoin failed: {e}")));
                    self.set_role(s, Role::Fenced);
                }
            },
            Ok(Some(errant)) => {
                if s.observed().role != Role::Fenced {
                    self.events.push(
                        "fence",
                        format!("{} has transactions the primary {} lacks ({errant}): kept out of service", s.name, primary.name),
                    );
                }
                s.set_offline(Some(format!("errant transactions: {errant}")));
                self.set_role(s, Role::Fenced);
            }
            Err(e) => {
                self.events.push(
                    "rejoin",
                    format!("cannot compare {} with {}: {e}", s.name, primary.name),
                );
                s.set_offline(Some(format!("cannot compare histories: {e}")));
                self.set_role(s, Role::Fenced);
            }
        }
    }
}
