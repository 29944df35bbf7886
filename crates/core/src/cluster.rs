//! What the monitor needs of the running topology, whatever protocol its pools speak: the
//! servers, where each one serves (its role), and a few things done to a server's pools.
//! [`Topology`] implements it for every connection type, so the monitor holds a
//! `dyn Cluster` and is generic over nothing.

use crate::server::{Role, Server};
use crate::topology::Topology;
use std::sync::Arc;
use std::time::Duration;

/// The monitor's view of the topology.
pub trait Cluster: Send + Sync + 'static {
    /// Every configured server, in configuration order.
    fn servers(&self) -> Arc<Vec<Arc<Server>>>;
    /// Places a managed server by its role (writer, reader, neither).
    fn place(&self, server: &Arc<Server>, role: Role);
    /// The managed server configured in the writer hostgroup, if any.
    fn configured_primary(&self) -> Option<Arc<Server>>;
    /// Closes a server's idle pooled connections (it was declared failed).
    fn drop_idle(&self, server: &Arc<Server>);
    /// Connections to `server` lent out now, across hostgroups.
    fn in_use(&self, server: &Arc<Server>) -> u32;
    /// With servers the monitor places: statements wait up to `wait` for a writer while
    /// there is none (a failover, a switchover) instead of failing at once.
    fn hold_writes(&self, wait: Duration);
    /// What statements waiting for a writer are told when none turns up (`None`: nothing
    /// particular).
    fn say_why_no_writer(&self, why: Option<String>);
}

impl<C: Send + 'static> Cluster for Topology<C> {
    fn servers(&self) -> Arc<Vec<Arc<Server>>> {
        self.all()
    }

    fn place(&self, server: &Arc<Server>, role: Role) {
        Topology::place(self, server, role)
    }

    fn configured_primary(&self) -> Option<Arc<Server>> {
        self.primary()
    }

    fn drop_idle(&self, server: &Arc<Server>) {
        for hg in self.hostgroups().iter() {
            hg.drop_idle(server);
        }
    }

    fn in_use(&self, server: &Arc<Server>) -> u32 {
        self.hostgroups()
            .iter()
            .flat_map(|h| h.pool_stats())
            .filter(|p| Arc::ptr_eq(&p.server, server))
            .map(|p| p.in_use)
            .sum()
    }

    fn hold_writes(&self, wait: Duration) {
        if self.all().iter().any(|s| s.managed) {
            if let Some(w) = self.writer() {
                w.set_hold_when_empty(Some(wait));
            }
        }
    }

    fn say_why_no_writer(&self, why: Option<String>) {
        if let Some(w) = self.writer() {
            w.set_vacancy_reason(why);
        }
    }
}
