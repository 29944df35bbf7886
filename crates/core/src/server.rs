//! A backend server as the core sees it: identity, weight, limits, health and counters.
//! Nothing here knows the wire protocol.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// What a server is in the replication topology, as the monitor sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Role {
    /// Not checked yet, or unreachable since the proxy started.
    #[default]
    Unknown,
    /// The writable primary.
    Primary,
    /// A replica.
    Replica,
    /// A former primary kept out of service (read-only; its history diverged, or it is not
    /// rejoined yet).
    Fenced,
}

impl Role {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Unknown => "unknown",
            Role::Primary => "primary",
            Role::Replica => "replica",
            Role::Fenced => "fenced",
        }
    }
}

/// The monitor's last view of a server.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// Role.
    pub role: Role,
    /// The last check reached it.
    pub reachable: bool,
    /// Round-trip time of the last check.
    pub rtt: Option<Duration>,
    /// `read_only`.
    pub read_only: Option<bool>,
    /// Replication lag, for a replica whose replication runs.
    pub lag: Option<Duration>,
    /// Bytes of WAL it is behind the primary (PostgreSQL standbys).
    pub lag_bytes: Option<u64>,
    /// The timeline its WAL is on (PostgreSQL), when known.
    pub timeline: Option<u32>,
    /// `host:port` it replicates from.
    pub source: Option<String>,
    /// Replication threads running (for a replica).
    pub replication_running: Option<bool>,
    /// Replication position (GTIDs for MariaDB).
    pub position: String,
    /// When it was last checked.
    pub checked: Option<Instant>,
    /// The last check's error, or the replication error.
    pub error: Option<String>,
}

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

/// A server in one hostgroup.
#[derive(Debug)]
pub struct Server {
    /// Stable name for logs and stats: `address` (plus `@hostgroup` when listed twice).
    pub name: Arc<str>,
    /// `host:port` to connect to.
    pub address: Arc<str>,
    /// The hostgroup it serves now (changes with its role when the monitor manages it).
    hostgroup: Mutex<Arc<str>>,
    /// Its writer/reader membership follows the monitor's view of the replication topology.
    pub managed: bool,
    /// Found by `[[discovery]]` (which source), not listed in the configuration file.
    pub discovered: Option<Arc<str>>,
    /// Replication lag above which it takes no reads.
    max_lag: Mutex<Option<Duration>>,
    /// Bytes of WAL behind the primary above which it takes no reads (PostgreSQL).
    max_lag_bytes: Mutex<Option<u64>>,
    weight: AtomicU32,
    max_connections: AtomicU32,
    health: Mutex<Health>,
    /// `health` is not Online (written under its lock): read without the lock by
    /// [`Server::is_usable`], which runs several times per statement.
    unhealthy: AtomicBool,
    /// `monitor_block` is set (written under its lock), for the same reason.
    blocked: AtomicBool,
    /// Counters, updated without locks.
    pub stats: ServerStats,
    /// Why the monitor keeps it from taking traffic (lag, broken replication, unreachable).
    monitor_block: Mutex<Option<String>>,
    /// Why the monitor declared it failed, until it answers again.
    declared_failed: Mutex<Option<String>>,
    observed: Mutex<Observed>,
    /// The version string it sends in its handshake, byte for byte, once seen.
    version: Mutex<Option<Arc<str>>>,
    /// Bumped when the server is declared failed: statements in flight on it give up.
    failures: watch::Sender<u64>,
    /// Notified at the same time, for the [`crate::FailedWatch`]es of its connections.
    failures_notify: Arc<tokio::sync::Notify>,
    /// Bumped when the server is taken out of service.
    draining: watch::Sender<u64>,
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
            hostgroup: Mutex::new(Arc::from(hostgroup)),
            managed: false,
            discovered: None,
            max_lag: Mutex::new(None),
            max_lag_bytes: Mutex::new(None),
            weight: AtomicU32::new(weight),
            max_connections: AtomicU32::new(max_connections.max(1)),
            health: Mutex::new(Health::Online),
            unhealthy: AtomicBool::new(false),
            blocked: AtomicBool::new(false),
            stats: ServerStats::default(),
            monitor_block: Mutex::new(None),
            declared_failed: Mutex::new(None),
            observed: Mutex::new(Observed::default()),
            version: Mutex::new(None),
            failures: watch::channel(0).0,
            failures_notify: Arc::default(),
            draining: watch::channel(0).0,
        }
    }

    /// Replication lag above which it takes no reads.
    pub fn max_lag(&self) -> Option<Duration> {
        *self.max_lag.lock()
    }

    /// Changes the lag limit (a reload).
    pub fn set_max_lag(&self, lag: Option<Duration>) {
        *self.max_lag.lock() = lag;
    }

    /// Bytes of WAL behind the primary above which it takes no reads.
    pub fn max_lag_bytes(&self) -> Option<u64> {
        *self.max_lag_bytes.lock()
    }

    /// Changes the WAL-bytes lag limit (a reload).
    pub fn set_max_lag_bytes(&self, bytes: Option<u64>) {
        *self.max_lag_bytes.lock() = bytes;
    }

    /// The hostgroup it serves now.
    pub fn hostgroup(&self) -> Arc<str> {
        self.hostgroup.lock().clone()
    }

    /// Records the hostgroup it serves now.
    pub fn set_hostgroup(&self, name: &str) {
        *self.hostgroup.lock() = Arc::from(name);
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
        if self.weight() == 0 || self.blocked.load(Relaxed) {
            return false;
        }
        if !self.unhealthy.load(Relaxed) {
            return true;
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
                tracing::warn!(server = %self.name, hostgroup = %self.hostgroup(), %reason, "server shunned");
            }
            *h = Health::Shunned {
                reason,
                until: Instant::now() + retry_after,
            };
            self.unhealthy.store(true, Relaxed);
        }
    }

    /// Marks the server as answering again.
    pub fn mark_online(&self) {
        let mut h = self.health.lock();
        if matches!(*h, Health::Shunned { .. }) {
            tracing::info!(server = %self.name, hostgroup = %self.hostgroup(), "server back online");
            *h = Health::Online;
            self.unhealthy.store(false, Relaxed);
        }
    }

    /// The monitor's verdict: `Some(reason)` keeps the server from taking new traffic until
    /// cleared with `None`.
    ///
    /// Only a change between taking traffic and not is logged: a dead server's error text
    /// may differ from one check to the next, and the reason shown is simply updated.
    pub fn set_monitor_block(&self, reason: Option<String>) {
        let mut b = self.monitor_block.lock();
        match (&*b, &reason) {
            (None, Some(r)) => {
                tracing::warn!(server = %self.name, reason = %r, "monitor: server takes no traffic")
            }
            (Some(_), None) => {
                tracing::info!(server = %self.name, "monitor: server takes traffic again")
            }
            _ => {}
        }
        self.blocked.store(reason.is_some(), Relaxed);
        *b = reason;
    }

    /// Why the monitor keeps it from traffic, if it does.
    pub fn monitor_block(&self) -> Option<String> {
        self.monitor_block.lock().clone()
    }

    /// The monitor's last view.
    pub fn observed(&self) -> Observed {
        self.observed.lock().clone()
    }

    /// Records the monitor's view.
    pub fn set_observed(&self, o: Observed) {
        *self.observed.lock() = o;
    }

    /// The version string it sends in its handshake (as last seen by the monitor or a
    /// connection), if seen yet.
    pub fn version(&self) -> Option<Arc<str>> {
        self.version.lock().clone()
    }

    /// Records the version string it sent in a handshake.
    pub fn set_version(&self, v: &str) {
        if v.is_empty() {
            return;
        }
        let mut cur = self.version.lock();
        if cur.as_deref() != Some(v) {
            *cur = Some(Arc::from(v));
        }
    }

    /// Declares the server failed: statements in flight on it stop waiting for it.
    pub fn fail_in_flight(&self) {
        self.failures.send_modify(|n| *n += 1);
        self.failures_notify.notify_waiters();
    }

    /// Declares the server failed, saying why (kept until [`Server::clear_declared_failed`],
    /// so that statements failed in flight can tell their clients), then fails what is in
    /// flight on it.
    pub fn declare_failed(&self, why: String) {
        *self.declared_failed.lock() = Some(why);
        self.fail_in_flight();
    }

    /// Why connections to it are being lost, if the monitor knows, as a clause for error
    /// messages (`"; …"`, or empty). The most precise first: replaced by a failover,
    /// declared failed (a failover may follow), then merely found unreachable.
    pub fn failure_note(&self) -> String {
        match (self.health(), self.declared_failed(), self.monitor_block()) {
            (Health::Offline { reason }, _, _) if reason == "failed primary" => {
                "; the server stopped answering and a failover replaced it".into()
            }
            (_, Some(why), _) => format!("; {why}"),
            (_, None, Some(block)) if block.starts_with("unreachable") => {
                format!("; the monitor finds it {block}")
            }
            _ => String::new(),
        }
    }

    /// It answers again.
    pub fn clear_declared_failed(&self) {
        self.declared_failed.lock().take();
    }

    /// Why the monitor declared it failed, while it has not answered since.
    pub fn declared_failed(&self) -> Option<String> {
        self.declared_failed.lock().clone()
    }

    /// A receiver that changes when [`Server::fail_in_flight`] is called.
    pub fn failure_watch(&self) -> watch::Receiver<u64> {
        self.failures.subscribe()
    }

    /// What a connection to it watches while it waits for it: [`Server::fail_in_flight`]
    /// from now on.
    pub fn failed_watch(&self) -> crate::FailedWatch {
        crate::FailedWatch::new(self.failures.subscribe(), self.failures_notify.clone())
    }

    /// State as operators see it: `ONLINE`, `SHUNNED (reason)`, `OFFLINE (reason)`.
    pub fn state_text(&self) -> String {
        match self.state() {
            (state, Some(reason)) => format!("{state} ({reason})"),
            (state, None) => state.into(),
        }
    }

    /// `ONLINE`, `SHUNNED` (no traffic for now: the monitor's verdict, or refused
    /// connections) or `OFFLINE`, with the reason when there is one.
    pub fn state(&self) -> (&'static str, Option<String>) {
        if let Some(r) = self.monitor_block() {
            return ("SHUNNED", Some(r));
        }
        match self.health() {
            Health::Online if self.weight() == 0 => ("ONLINE", Some("weight 0".into())),
            Health::Online => ("ONLINE", None),
            Health::Shunned { reason, until } if Instant::now() < until => {
                ("SHUNNED", Some(reason))
            }
            Health::Shunned { .. } => ("ONLINE", None),
            Health::Offline { reason } => ("OFFLINE", Some(reason)),
        }
    }

    /// Takes the server out of service, or puts it back.
    pub fn set_offline(&self, reason: Option<String>) {
        let offline = reason.is_some();
        let mut h = self.health.lock();
        *h = match reason {
            Some(reason) => Health::Offline { reason },
            None => Health::Online,
        };
        self.unhealthy.store(offline, Relaxed);
        drop(h);
        if offline {
            self.draining.send_modify(|n| *n += 1);
        }
    }

    /// A receiver that changes when the server is taken out of service: sessions give back
    /// connections to it that they keep only for convenience (a switchover is draining it).
    pub fn drain_watch(&self) -> watch::Receiver<u64> {
        self.draining.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Collects what is logged.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_changing_reason_is_not_logged_again() {
        let out = Captured::default();
        let w = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || w.clone())
            .with_ansi(false)
            .finish();
        let s = Server::new("10.0.0.1:3306", "reader", 1, 10);
        tracing::subscriber::with_default(subscriber, || {
            for i in 0..5 {
                s.set_monitor_block(Some(format!("unreachable: attempt {i} refused")));
            }
            s.set_monitor_block(None);
            s.set_monitor_block(None);
        });
        let text = String::from_utf8_lossy(&out.0.lock()).into_owned();
        assert_eq!(text.matches("takes no traffic").count(), 1, "{text}");
        assert_eq!(text.matches("takes traffic again").count(), 1, "{text}");
        assert!(
            text.contains("attempt 0"),
            "the first reason is logged: {text}"
        );
    }
}
