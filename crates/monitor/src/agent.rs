//! What the monitor needs from a database protocol: checking a server, and the few
//! replication operations failover, switchover and rejoin are made of. The MySQL crate
//! implements it for MariaDB (GTIDs, `SHOW ALL SLAVES STATUS`, `read_only`).

use sluice_core::Server;
use std::cmp::Ordering;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A boxed future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One check of one server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Round-trip time of the check.
    pub rtt: Duration,
    /// The server refuses writes (`read_only`).
    pub read_only: bool,
    /// Its replication, if it is configured as a replica.
    pub replica: Option<ReplicaStatus>,
    /// What it has committed (MariaDB: `gtid_current_pos`).
    pub position: String,
    /// The server answered but the check could not read everything (the monitor user lacks
    /// a privilege, or the server refused the login): it is alive, but its role is unknown.
    pub limited: Option<String>,
}

/// Replication state of a replica.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicaStatus {
    /// `host:port` of its source.
    pub source: String,
    /// The receiving thread runs (or is connecting).
    pub io_running: bool,
    /// The receiving thread is connected to the source.
    pub io_connected: bool,
    /// The applying thread runs.
    pub sql_running: bool,
    /// Lag behind the source (unknown while not connected).
    pub lag: Option<Duration>,
    /// What it has received (MariaDB: `Gtid_IO_Pos`); it will apply all of it.
    pub received: String,
    /// The last replication error, if any.
    pub error: Option<String>,
}

/// Operations on servers, implemented per protocol.
pub trait Agent: Send + Sync + 'static {
    /// Checks a server.
    fn probe<'a>(&'a self, server: &'a Server) -> BoxFuture<'a, Result<Report, String>>;
    /// Compares positions: `Greater` if `a` has more than `b`.
    fn compare(&self, a: &str, b: &str) -> Ordering;
    /// Waits until `server` has applied everything up to `position` (its relay log, or a
    /// primary's binlog position), without restarting its replication.
    fn catch_up<'a>(
        &'a self,
        server: &'a Server,
        position: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<(), String>>;
    /// Stops a replica's replication (receiving and applying), keeping its configuration.
    /// `source_failed`: its source is known dead or hung, so do not wait for it.
    fn detach<'a>(
        &'a self,
        server: &'a Server,
        source_failed: bool,
    ) -> BoxFuture<'a, Result<(), String>>;
    /// Starts again the replication that [`Agent::detach`] stopped.
    fn resume<'a>(&'a self, server: &'a Server) -> BoxFuture<'a, Result<(), String>>;
    /// Makes a replica the primary: stops and forgets its replication, makes it writable.
    fn promote<'a>(&'a self, server: &'a Server) -> BoxFuture<'a, Result<(), String>>;
    /// Points a replica at `primary` and starts replication. `fresh`: it had no replication
    /// configured (a former primary): give it credentials and start from its own position.
    fn replicate_from<'a>(
        &'a self,
        replica: &'a Server,
        primary: &'a Server,
        fresh: bool,
    ) -> BoxFuture<'a, Result<(), String>>;
    /// Sets `read_only`.
    fn set_read_only<'a>(
        &'a self,
        server: &'a Server,
        on: bool,
    ) -> BoxFuture<'a, Result<(), String>>;
    /// Transactions `server` has that `primary` lacks (errant transactions), described, or
    /// `None` if its history is a prefix of the primary's.
    fn errant<'a>(
        &'a self,
        server: &'a Server,
        primary: &'a Server,
    ) -> BoxFuture<'a, Result<Option<String>, String>>;
    /// A primary's current write position (what a replica must reach in a switchover).
    fn write_position<'a>(&'a self, server: &'a Server) -> BoxFuture<'a, Result<String, String>>;
    /// Privileges the monitor's user lacks on `server` for failover, switchover and rejoin.
    fn missing_privileges<'a>(
        &'a self,
        _server: &'a Server,
    ) -> BoxFuture<'a, Result<Vec<String>, String>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// True if a replica's `source` (`host:port` as its replication is configured) is the server
/// at `address`. Loopback spellings are treated as one host.
pub fn same_endpoint(source: &str, address: &str) -> bool {
    fn split(a: &str) -> (&str, &str) {
        a.rsplit_once(':').unwrap_or((a, ""))
    }
    fn loopback(h: &str) -> bool {
        matches!(h, "localhost" | "127.0.0.1" | "::1" | "[::1]")
    }
    let ((h1, p1), (h2, p2)) = (split(source), split(address));
    p1 == p2 && (h1.eq_ignore_ascii_case(h2) || (loopback(h1) && loopback(h2)))
}
