//! What the monitor needs from a database protocol: checking a server, and the few
//! replication operations failover, switchover and rejoin are made of. The MySQL crate
//! implements it for MariaDB (GTIDs, `SHOW ALL SLAVES STATUS`, `read_only`).
//!
//! Every operation that changes a server either completes or leaves the server as it found
//! it (and says so when it could not): the monitor undoes whole procedures step by step, and
//! relies on each step being all or nothing.

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
    /// The version string the server sends in its handshake, byte for byte.
    pub version: String,
    /// The timeline its WAL is on (PostgreSQL; a standby's is the one it receives), when
    /// known.
    pub timeline: Option<u32>,
    /// A primary whose commits wait for standbys (PostgreSQL `synchronous_standby_names`):
    /// the names ([`ReplicaStatus::name`]) of the standbys it reports as synchronous. Only
    /// these may replace it. `None` when its commits wait for no standby.
    pub synchronous: Option<Vec<String>>,
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
    /// The name it replicates under, as its source reports it (PostgreSQL:
    /// `application_name`); empty when unknown.
    pub name: String,
}

/// A replica as its primary reports it (for `[[discovery]] from_primary`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportedReplica {
    /// Its name (PostgreSQL `application_name`; MariaDB `server_id`).
    pub name: String,
    /// The host it connects from, or reports (MariaDB `report_host`).
    pub host: String,
    /// The port it reports (MariaDB `report_port`); PostgreSQL reports none.
    pub port: Option<u16>,
}

/// What kind of failure an agent operation met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The server could not be reached, the connection broke, or it did not answer in time.
    Unreachable,
    /// The server refused: the monitor's user lacks a privilege (or cannot log in).
    Denied,
    /// Anything else the server answered with, or a precondition that does not hold.
    Failed,
}

/// A failed agent operation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct AgentError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// What happened, for events and logs.
    pub message: String,
}

impl AgentError {
    /// The server could not be reached or did not answer.
    pub fn unreachable(message: impl Into<String>) -> AgentError {
        AgentError {
            kind: ErrorKind::Unreachable,
            message: message.into(),
        }
    }
    /// The monitor's user lacks a privilege.
    pub fn denied(message: impl Into<String>) -> AgentError {
        AgentError {
            kind: ErrorKind::Denied,
            message: message.into(),
        }
    }
    /// Any other failure.
    pub fn failed(message: impl Into<String>) -> AgentError {
        AgentError {
            kind: ErrorKind::Failed,
            message: message.into(),
        }
    }
    /// The same error with `context` in front of its message.
    pub fn context(self, context: impl std::fmt::Display) -> AgentError {
        AgentError {
            kind: self.kind,
            message: format!("{context}: {}", self.message),
        }
    }
}

/// Which replication threads an operation concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threads {
    /// The receiver only (the applier goes on with what was received).
    Receiving,
    /// Receiving and applying.
    All,
}

/// Result of an agent operation.
pub type AgentResult<T> = Result<T, AgentError>;

/// Operations on servers, implemented per protocol.
pub trait Agent: Send + Sync + 'static {
    /// Checks a server. `Err` only when it could not be reached (a server that answers with
    /// an error is alive: `Ok` with [`Report::limited`]).
    fn probe<'a>(&'a self, server: &'a Server) -> BoxFuture<'a, AgentResult<Report>>;
    /// Compares positions: `Greater` if `a` has more than `b`.
    fn compare(&self, a: &str, b: &str) -> Ordering;
    /// How many bytes position `behind` is behind `ahead`, for protocols whose positions
    /// count bytes (PostgreSQL's WAL); `None` for the others (GTIDs).
    fn distance(&self, _ahead: &str, _behind: &str) -> Option<u64> {
        None
    }
    /// Waits until `server` has applied everything up to `position` (its relay log, or a
    /// primary's binlog position), without restarting its replication. Changes nothing.
    fn catch_up<'a>(
        &'a self,
        server: &'a Server,
        position: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, AgentResult<()>>;
    /// Stops a replica's replication threads (`which`), keeping its configuration so that
    /// [`Agent::resume`] starts them again. `source_failed`: its source is known dead or
    /// hung, so do not wait for it. Settings changed to stop faster are restored, also when
    /// the stop fails.
    ///
    /// Stopping only the receiver keeps what the replica received: its applier goes on with
    /// it. (On MariaDB, restarting a replica whose threads are *both* stopped discards its
    /// relay log, which a dead source cannot send again: stop both only once it has applied
    /// everything.)
    fn detach<'a>(
        &'a self,
        server: &'a Server,
        source_failed: bool,
        which: Threads,
    ) -> BoxFuture<'a, AgentResult<()>>;
    /// Starts again the replication threads (`which`) that [`Agent::detach`] stopped.
    fn resume<'a>(&'a self, server: &'a Server, which: Threads) -> BoxFuture<'a, AgentResult<()>>;
    /// Makes a detached replica the primary: writable (and acknowledging semi-synchronously
    /// as the old primary did), then its replication configuration forgotten — the last step,
    /// so that on any failure the settings it changed are restored and [`Agent::resume`]
    /// can still restart its replication.
    fn promote<'a>(&'a self, server: &'a Server) -> BoxFuture<'a, AgentResult<()>>;
    /// Points a replica at `primary` and starts replication. `fresh`: it had no replication
    /// configured (a former primary): give it credentials and start from its own position.
    fn replicate_from<'a>(
        &'a self,
        replica: &'a Server,
        primary: &'a Server,
        fresh: bool,
    ) -> BoxFuture<'a, AgentResult<()>>;
    /// Sets `read_only`.
    fn set_read_only<'a>(&'a self, server: &'a Server, on: bool) -> BoxFuture<'a, AgentResult<()>>;
    /// Transactions `server` has that `primary` lacks (errant transactions), described, or
    /// `None` if its history is a prefix of the primary's. `server` is a former primary being
    /// fenced: the agent may first end its client sessions, so that nothing they sent before
    /// it hung commits there after the comparison.
    fn errant<'a>(
        &'a self,
        server: &'a Server,
        primary: &'a Server,
    ) -> BoxFuture<'a, AgentResult<Option<String>>>;
    /// A primary's current write position (what a replica must reach in a switchover).
    fn write_position<'a>(&'a self, server: &'a Server) -> BoxFuture<'a, AgentResult<String>>;
    /// Privileges the monitor's user lacks on `server` for failover, switchover and rejoin,
    /// each with what it is needed for.
    fn missing_privileges<'a>(
        &'a self,
        _server: &'a Server,
    ) -> BoxFuture<'a, AgentResult<Vec<String>>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    /// True if [`Agent::replicate_from`] can also bring back a server whose history diverged
    /// from the primary's ([`Agent::errant`] found something): PostgreSQL with a configured
    /// `rewind_command`. Otherwise a diverged server is kept out until someone repairs it.
    fn repairs_divergence(&self) -> bool {
        false
    }
    /// Makes `replica` fetch from `source` (another replica of the same failed primary)
    /// what it received beyond its own position, up to `position`, within `timeout`; it
    /// stops receiving from `source` only when [`Agent::detach`] says so. For protocols
    /// where a replica can stream from another (PostgreSQL cascading replication).
    fn fast_forward<'a>(
        &'a self,
        _replica: &'a Server,
        _source: &'a Server,
        _position: &'a str,
        _timeout: Duration,
    ) -> BoxFuture<'a, AgentResult<()>> {
        Box::pin(async { Err(AgentError::failed("not supported for this protocol")) })
    }
    /// The replicas connected to `primary`, as it reports them.
    fn reported_replicas<'a>(
        &'a self,
        _primary: &'a Server,
    ) -> BoxFuture<'a, AgentResult<Vec<ReportedReplica>>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// A check's result as [`Agent::probe`] returns it: a server that could not be reached is an
/// error; one that answered with any other failure is alive, with its role unknown
/// ([`Report::limited`]).
pub fn alive_unless_unreachable(checked: AgentResult<Report>) -> AgentResult<Report> {
    match checked {
        Err(e) if e.kind != ErrorKind::Unreachable => Ok(Report {
            limited: Some(e.message),
            ..Report::default()
        }),
        other => other,
    }
}

/// `f`, or an [`ErrorKind::Unreachable`] error if it takes longer than `limit`.
pub async fn within<T>(limit: Duration, f: impl Future<Output = AgentResult<T>>) -> AgentResult<T> {
    match tokio::time::timeout(limit, f).await {
        Ok(r) => r,
        Err(_) => Err(AgentError::unreachable(format!(
            "no answer within {} ms",
            limit.as_millis()
        ))),
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
