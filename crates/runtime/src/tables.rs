//! The tables behind every admin surface — the HTTP API, the dashboard (which reads the API)
//! and the SQL `SHOW …` commands of each protocol's admin port — built once here. Each
//! surface only renders these rows (JSON objects, or result-set cells) in its own format.

use crate::registry::Registry;
use sluice_core::balance::Balance;
use sluice_core::{
    Cluster, DigestStats, DigestTable, HistogramSnapshot, Observed, PoolStats, Protocol, Server,
};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// A topology and the protocol its servers speak.
pub type ClusterOf = (Protocol, Arc<dyn Cluster>);

/// One server: its configuration, what the monitor observed, and its pools.
pub struct ServerRow {
    /// The protocol it speaks.
    pub protocol: Protocol,
    /// The server.
    pub server: Arc<Server>,
    /// What its checks observed last.
    pub observed: Observed,
    /// Connections lent out now, across hostgroups.
    pub pool_in_use: u32,
    /// Idle pooled connections, across hostgroups.
    pub pool_idle: u32,
}

/// Every server of every protocol, each topology's in configuration order.
pub fn servers(clusters: &[ClusterOf]) -> Vec<ServerRow> {
    let mut rows = Vec::new();
    for (protocol, cluster) in clusters {
        let pools: Vec<PoolStats> = cluster
            .hostgroup_views()
            .iter()
            .flat_map(|h| h.pool_stats())
            .collect();
        for server in cluster.servers().iter() {
            let mine = pools.iter().filter(|p| Arc::ptr_eq(&p.server, server));
            let (in_use, idle) = mine.fold((0, 0), |(u, i), p| (u + p.in_use, i + p.idle));
            rows.push(ServerRow {
                protocol: *protocol,
                observed: server.observed(),
                server: server.clone(),
                pool_in_use: in_use,
                pool_idle: idle,
            });
        }
    }
    rows
}

/// One server's pool in one hostgroup.
pub struct PoolRow {
    /// The protocol its connections speak.
    pub protocol: Protocol,
    /// The hostgroup.
    pub hostgroup: Arc<str>,
    /// The pool.
    pub stats: PoolStats,
}

/// Every pool, hostgroup by hostgroup.
pub fn pools(clusters: &[ClusterOf]) -> Vec<PoolRow> {
    let mut rows = Vec::new();
    for (protocol, cluster) in clusters {
        for h in cluster.hostgroup_views() {
            for stats in h.pool_stats() {
                rows.push(PoolRow {
                    protocol: *protocol,
                    hostgroup: h.name().clone(),
                    stats,
                });
            }
        }
    }
    rows
}

/// One hostgroup.
pub struct HostgroupRow {
    /// The protocol its servers speak.
    pub protocol: Protocol,
    /// Its name.
    pub name: Arc<str>,
    /// How it balances.
    pub balance: Balance,
    /// Its servers' names.
    pub servers: Vec<String>,
    /// Connections lent out now.
    pub pool_in_use: u32,
    /// Idle pooled connections.
    pub pool_idle: u32,
    /// Statements waiting for a connection now.
    pub waiting: usize,
    /// Statements that gave up waiting.
    pub queue_timeouts: u64,
    /// Latency of the statements it served.
    pub latency: HistogramSnapshot,
}

/// Every hostgroup of every protocol.
pub fn hostgroups(clusters: &[ClusterOf]) -> Vec<HostgroupRow> {
    let mut rows = Vec::new();
    for (protocol, cluster) in clusters {
        for h in cluster.hostgroup_views() {
            let pools = h.pool_stats();
            rows.push(HostgroupRow {
                protocol: *protocol,
                name: h.name().clone(),
                balance: h.balance(),
                servers: h.servers().iter().map(|s| s.name.to_string()).collect(),
                pool_in_use: pools.iter().map(|p| p.in_use).sum(),
                pool_idle: pools.iter().map(|p| p.idle).sum(),
                waiting: h.waiting(),
                queue_timeouts: h.queue_timeouts(),
                latency: h.latency().snapshot(),
            });
        }
    }
    rows
}

/// The name of a balancing method, as configured.
pub fn balance_name(b: Balance) -> &'static str {
    match b {
        Balance::Weighted => "weighted",
        Balance::LeastOutstanding => "least_outstanding",
    }
}

/// One query rule.
pub struct RuleRow {
    /// The protocol of the topology it routes in.
    pub protocol: Protocol,
    /// Its name.
    pub name: String,
    /// Its pattern.
    pub pattern: String,
    /// Where it sends what matches.
    pub hostgroup: String,
    /// Only for this user.
    pub user: Option<String>,
    /// Only in this schema.
    pub schema: Option<String>,
    /// Statements it matched.
    pub hits: u64,
}

/// Every query rule, in order.
pub fn rules(clusters: &[ClusterOf]) -> Vec<RuleRow> {
    let mut rows = Vec::new();
    for (protocol, cluster) in clusters {
        rows.extend(cluster.router().rules().iter().map(|r| RuleRow {
            protocol: *protocol,
            name: r.name.clone(),
            pattern: r.pattern.clone(),
            hostgroup: r.hostgroup.to_string(),
            user: r.user.clone(),
            schema: r.schema.clone(),
            hits: r.hits.load(Relaxed),
        }));
    }
    rows
}

/// One client session.
pub struct SessionRow {
    /// Its id.
    pub id: u32,
    /// The protocol it speaks.
    pub protocol: Protocol,
    /// Its user.
    pub user: String,
    /// The client's address.
    pub client: String,
    /// Seconds since it connected.
    pub connected_s: u64,
    /// Why it holds its backend connection (none: it is not pinned).
    pub pinned_by: Vec<&'static str>,
    /// The server of the backend connection serving it, if any.
    pub backend: Option<String>,
    /// That connection's thread id on the server.
    pub backend_thread: Option<u32>,
    /// The statement in flight (truncated).
    pub statement: Option<String>,
    /// Milliseconds it has run.
    pub statement_ms: Option<u64>,
}

/// Every session, by id.
pub fn sessions(registry: &Registry) -> Vec<SessionRow> {
    let mut rows: Vec<SessionRow> = registry
        .all()
        .iter()
        .map(|h| {
            let cur = h.current();
            SessionRow {
                id: h.id,
                protocol: h.protocol,
                user: h.user.to_string(),
                client: h.peer.to_string(),
                connected_s: h.connected.elapsed().as_secs(),
                pinned_by: h.pin_reasons(),
                backend: cur.backend.as_ref().map(|(s, _)| s.name.to_string()),
                backend_thread: cur.backend.as_ref().map(|(_, t)| *t),
                statement: cur.statement.as_ref().map(|(s, _)| {
                    let shown = &s[..s.len().min(crate::registry::STATEMENT_SHOWN)];
                    String::from_utf8_lossy(shown).into_owned()
                }),
                statement_ms: cur
                    .statement
                    .as_ref()
                    .map(|(_, t)| t.elapsed().as_millis() as u64),
            }
        })
        .collect();
    rows.sort_by_key(|s| s.id);
    rows
}

/// How digests are ordered (largest first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DigestOrder {
    /// By executions.
    Count,
    /// By total time.
    Time,
    /// By errors.
    Errors,
    /// By rows sent.
    Rows,
    /// By 99th-percentile latency.
    P99,
}

impl DigestOrder {
    /// From its name in the API (`count`, `time`, `errors`, `rows`, `p99`).
    pub fn parse(name: &str) -> Option<DigestOrder> {
        Some(match name {
            "count" => DigestOrder::Count,
            "time" => DigestOrder::Time,
            "errors" => DigestOrder::Errors,
            "rows" => DigestOrder::Rows,
            "p99" => DigestOrder::P99,
            _ => return None,
        })
    }
}

/// The `limit` largest digest entries by `order`.
pub fn digests(table: &DigestTable, order: DigestOrder, limit: usize) -> Vec<DigestStats> {
    let mut all = table.snapshot();
    match order {
        DigestOrder::Count => all.sort_by_key(|e| std::cmp::Reverse(e.count)),
        DigestOrder::Time => all.sort_by_key(|e| std::cmp::Reverse(e.sum_us)),
        DigestOrder::Errors => all.sort_by_key(|e| std::cmp::Reverse(e.errors)),
        DigestOrder::Rows => all.sort_by_key(|e| std::cmp::Reverse(e.rows_sent)),
        DigestOrder::P99 => all.sort_by_key(|e| std::cmp::Reverse(e.quantile(0.99))),
    }
    all.truncate(limit);
    all
}
