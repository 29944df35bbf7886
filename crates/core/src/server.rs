//! A backend server as the core sees it: identity, weight, limits, health and counters.
//! Nothing here knows the wire protocol.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Health of a server from the proxy's point of view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// Takes traffic.
    Online,
    /// Failed recently; skipped until `until`, then tried again.
    Shunned {
        /// Why it was shunned (the connection error).
        reason: String,
        /// When it may be tried again.
        until: Instant,
    },
    /// Taken out of service; takes no new traffic until put back.
    Offline {
        /// Why.
        reason: String,
    },
}

/// Prepared statements the proxy keeps open on one server, against a budget set below the
/// server's own limit (MySQL's `max_prepared_stmt_count` counts every client together).
#[derive(Debug, Default)]
pub struct StmtBudget {
    held: AtomicU64,
    limit: AtomicU64,
}

impl StmtBudget {
    /// Statements held now.
    pub fn held(&self) -> u64 {
        self.held.load(Relaxed)
    }
    /// The budget (0: not known yet, no limit).
    pub fn limit(&self) -> u64 {
        self.limit.load(Relaxed)
    }
    /// Sets the budget.
    pub fn set_limit(&self, n: u64) {
        self.limit.store(n, Relaxed)
    }
    /// Counts statements opened (positive) or closed (negative).
    pub fn add(&self, n: i64) {
        if n >= 0 {
            self.held.fetch_add(n as u64, Relaxed);
        } else {
            let _ = self.held.fetch_update(Relaxed, Relaxed, |h| {
                Some(h.saturating_sub(n.unsigned_abs()))
            });
        }
    }
    /// True when at or over the budget.
    pub fn is_full(&self) -> bool {
        let limit = self.limit();
        limit > 0 && self.held() >= limit
    }
}

/// A server in one hostgroup.
#[derive(Debug)]
pub struct Server {
    /// Stable name for logs and stats: `address` (plus `@hostgroup` when listed twice).
    pub name: Arc<str>,
    /// `host:port` to connect to.
    pub address: Arc<str>,
    /// The hostgroup it serves.
    pub hostgroup: Arc<str>,
    weight: AtomicU32,
    max_connections: AtomicU32,
    health: Mutex<Health>,
    /// Counters, updated without locks.
    pub stats: ServerStats,
    /// Prepared statements held on this server by the proxy's connections.
    pub stmt_budget: Arc<StmtBudget>,
}

/// Per-server counters.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Statements (commands) sent to this server.
    pub queries: AtomicU64,
    /// Statements that ended in an error from the server or the connection.
    pub errors: AtomicU64,
    /// Backend connections opened.
    pub connects: AtomicU64,
    /// Backend connection attempts that failed.
    pub connect_errors: AtomicU64,
    /// Statements classified as reads that this server answered.
    pub reads: AtomicU64,
    /// Statements classified as writes that this server answered.
    pub writes: AtomicU64,
}

impl Server {
    /// A new, online server.
    pub fn new(address: &str, hostgroup: &str, weight: u32, max_connections: u32) -> Server {
        Server {
            name: Arc::from(address),
            address: Arc::from(address),
            hostgroup: Arc::from(hostgroup),
            weight: AtomicU32::new(weight),
            max_connections: AtomicU32::new(max_connections.max(1)),
            health: Mutex::new(Health::Online),
            stats: ServerStats::default(),
            stmt_budget: Arc::new(StmtBudget::default()),
        }
    }

    /// Current weight (0 means no new traffic).
    pub fn weight(&self) -> u32 {
        self.weight.load(Relaxed)
    }
    /// Changes the weight.
    pub fn set_weight(&self, w: u32) {
        self.weight.store(w, Relaxed)
    }
    /// Connection limit.
    pub fn max_connections(&self) -> u32 {
        self.max_connections.load(Relaxed)
    }
    /// Changes the connection limit (existing connections above it close as they come back).
    pub fn set_max_connections(&self, n: u32) {
        self.max_connections.store(n.max(1), Relaxed)
    }

    /// Current health.
    pub fn health(&self) -> Health {
        self.health.lock().clone()
    }

    /// True if new statements may be sent here now (a shunned server whose retry time has
    /// come is usable again: the next connection attempt decides).
    pub fn is_usable(&self) -> bool {
        if self.weight() == 0 {
            return false;
        }
        match &*self.health.lock() {
            Health::Online => true,
            Health::Shunned { until, .. } => Instant::now() >= *until,
            Health::Offline { .. } => false,
        }
    }

    /// Marks the server failed for `retry_after`.
    pub fn shun(&self, reason: String, retry_after: Duration) {
        let mut h = self.health.lock();
        if !matches!(*h, Health::Offline { .. }) {
            if !matches!(*h, Health::Shunned { .. }) {
                tracing::warn!(server = %self.name, hostgroup = %self.hostgroup, %reason, "server shunned");
            }
            *h = Health::Shunned {
                reason,
                until: Instant::now() + retry_after,
            };
        }
    }

    /// Marks the server as answering again.
    pub fn mark_online(&self) {
        let mut h = self.health.lock();
        if matches!(*h, Health::Shunned { .. }) {
            tracing::info!(server = %self.name, hostgroup = %self.hostgroup, "server back online");
            *h = Health::Online;
        }
    }

    /// Takes the server out of service, or puts it back.
    pub fn set_offline(&self, reason: Option<String>) {
        *self.health.lock() = match reason {
            Some(reason) => Health::Offline { reason },
            None => Health::Online,
        };
    }
}
