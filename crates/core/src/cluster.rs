//! A running topology seen through a trait object, whatever protocol its pools speak: what
//! the monitor needs (the servers, where each one serves, a few things done to a server's
//! pools), and what the runtime's upkeep and the admin views read. [`Topology`] and
//! [`Hostgroup`] implement it for every connection type, so the monitor, the runtime and the
//! admin hold a `dyn Cluster` and are generic over nothing.

use crate::balance::Balance;
use crate::hostgroup::{Hostgroup, PoolStats};
use crate::router::Router;
use crate::server::{Role, Server};
use crate::stats::LatencyHistogram;
use crate::topology::Topology;
use sluice_config::Config;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A hostgroup, whatever its connections are.
pub trait HostgroupView: Send + Sync {
    /// Its name.
    fn name(&self) -> &Arc<str>;
    /// How it balances.
    fn balance(&self) -> Balance;
    /// Its servers.
    fn servers(&self) -> Vec<Arc<Server>>;
    /// A snapshot of each server's pool.
    fn pool_stats(&self) -> Vec<PoolStats>;
    /// Statements waiting for a connection now.
    fn waiting(&self) -> usize;
    /// Statements that gave up waiting.
    fn queue_timeouts(&self) -> u64;
    /// Latency of the statements it served.
    fn latency(&self) -> &LatencyHistogram;
}

impl<C: Send + 'static> HostgroupView for Hostgroup<C> {
    fn name(&self) -> &Arc<str> {
        &self.name
    }
    fn balance(&self) -> Balance {
        Hostgroup::balance(self)
    }
    fn servers(&self) -> Vec<Arc<Server>> {
        Hostgroup::servers(self)
    }
    fn pool_stats(&self) -> Vec<PoolStats> {
        Hostgroup::pool_stats(self)
    }
    fn waiting(&self) -> usize {
        Hostgroup::waiting(self)
    }
    fn queue_timeouts(&self) -> u64 {
        self.queue_timeouts
            .load(std::sync::atomic::Ordering::Relaxed)
    }
    fn latency(&self) -> &LatencyHistogram {
        &self.latency
    }
}

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
    /// Its hostgroups, in configuration order.
    fn hostgroup_views(&self) -> Vec<Arc<dyn HostgroupView>>;
    /// The query rules and routing.
    fn router(&self) -> &Router;
    /// Closes idle connections past their idle timeout; how many per hostgroup.
    fn close_idle(&self, now: Instant) -> Vec<(Arc<str>, usize)>;
    /// Applies a reloaded configuration (servers, weights, hostgroups, rules, pool settings);
    /// what changed.
    fn apply(&self, old: &Config, new: &Config) -> Vec<String>;
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

    fn hostgroup_views(&self) -> Vec<Arc<dyn HostgroupView>> {
        self.hostgroups()
            .iter()
            .map(|h| h.clone() as Arc<dyn HostgroupView>)
            .collect()
    }

    fn router(&self) -> &Router {
        &self.router
    }

    fn close_idle(&self, now: Instant) -> Vec<(Arc<str>, usize)> {
        self.hostgroups()
            .iter()
            .map(|h| (h.name.clone(), h.close_idle(now)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    fn apply(&self, old: &Config, new: &Config) -> Vec<String> {
        Topology::apply(self, old, new)
    }
}
