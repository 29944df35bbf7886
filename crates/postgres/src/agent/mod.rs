//! The monitor's agent for PostgreSQL servers: one persistent connection per server, and a
//! check that reads in one round trip what the monitor places servers by — whether the server
//! is in recovery (a standby), its WAL position, and how far a standby's replay is behind —
//! then, on a standby, its WAL receiver (state and upstream).
//!
//! Lag is the time since the last transaction the standby replayed, but only while it has
//! received WAL it has not replayed yet: a standby that replayed everything it received is not
//! lagging, however long the primary has been idle (the idle-primary guard). A standby whose
//! WAL receiver is not streaming has an unknown lag, as a MariaDB replica whose I/O thread is
//! not connected.
//!
//! The operations failover, switchover and rejoin are made of (promotion, repointing,
//! fencing, telling whether a former primary diverged) are in `ops.rs`.

pub(crate) mod connection;
pub mod conninfo;
mod ops;
mod rewind;

use crate::backend::PgConn;
use connection::{first_row, login, rows, Login, OP_TIMEOUT};
pub use rewind::RewindCommand;
use sluice_core::Server;
use sluice_monitor::agent::{
    alive_unless_unreachable, within, Agent, AgentError, AgentResult, BoxFuture, ReplicaStatus,
    Report, Threads,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Checks a server: recovery, its position (a primary's current WAL position, a standby's
/// replay position), a standby's received position, replay paused, lag in seconds (0 when
/// everything received is replayed; -1 when nothing was replayed yet), and a primary's
/// timeline (from the name of its current WAL file); whether it refuses writes, a primary's
/// `synchronous_standby_names`, and what a standby streams as (`primary_conninfo`, read by
/// members of `pg_read_all_settings`, and `cluster_name`).
const CHECK: &str = "SELECT pg_is_in_recovery(), \
     CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END, \
     pg_last_wal_receive_lsn(), \
     CASE WHEN pg_is_in_recovery() THEN pg_is_wal_replay_paused() END, \
     CASE WHEN NOT pg_is_in_recovery() THEN 0 \
          WHEN pg_last_wal_receive_lsn() IS NULL OR pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn() THEN 0 \
          ELSE COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - pg_last_xact_replay_timestamp()), -1) END, \
     CASE WHEN NOT pg_is_in_recovery() THEN ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END, \
     current_setting('default_transaction_read_only'), \
     CASE WHEN NOT pg_is_in_recovery() THEN current_setting('synchronous_standby_names') END, \
     CASE WHEN pg_is_in_recovery() THEN current_setting('primary_conninfo') END, \
     current_setting('cluster_name')";

/// A primary's standbys and whether its commits wait for them.
const STANDBYS: &str = "SELECT application_name, sync_state FROM pg_stat_replication";

/// A standby's WAL receiver: its state and where it streams from (`sender_host` and
/// `sender_port` are shown to superusers and members of `pg_read_all_stats`).
const RECEIVER: &str =
    "SELECT status, sender_host, sender_port, received_tli FROM pg_stat_wal_receiver";

/// The monitor's agent for PostgreSQL.
pub struct PgAgent {
    /// Login (user, password, TLS); the user and password are replaced on reload.
    creds: parking_lot::Mutex<Login>,
    /// Check connections, one per server; taken out while in use (a check that times out
    /// drops its connection with it).
    probes: parking_lot::Mutex<HashMap<Arc<str>, PgConn>>,
    /// `synchronous_standby_names` of the last primary checked: a standby promoted in its
    /// place gets it when it has none of its own.
    synchronous_names: parking_lot::Mutex<String>,
    /// The `primary_conninfo` of standbys whose replication [`Agent::detach`] stopped.
    detached: parking_lot::Mutex<HashMap<Arc<str>, String>>,
    /// `[failover] rewind_command`, if set.
    rewind_command: parking_lot::Mutex<Option<RewindCommand>>,
    /// Rewinds running or finished.
    rewinds: rewind::Rewinds,
}

impl PgAgent {
    /// An agent logging in as `user` with `password`, over TLS with `tls` (`[pool] tls`).
    pub fn new(
        user: String,
        password: String,
        tls: Option<sluice_runtime::tls::BackendTls>,
    ) -> PgAgent {
        PgAgent {
            creds: parking_lot::Mutex::new(Login {
                user,
                password,
                tls,
            }),
            probes: parking_lot::Mutex::new(HashMap::new()),
            synchronous_names: Default::default(),
            detached: Default::default(),
            rewind_command: Default::default(),
            rewinds: Default::default(),
        }
    }

    /// The command that makes a former primary a standby (a reload may change it).
    pub fn set_rewind_command(&self, command: Option<RewindCommand>) {
        *self.rewind_command.lock() = command;
    }

    /// New credentials (a reload): connections opened from now on use them.
    pub fn set_credentials(&self, user: String, password: String) {
        {
            let mut creds = self.creds.lock();
            (creds.user, creds.password) = (user, password);
        }
        self.probes.lock().clear();
    }

    async fn connect(&self, server: &Server) -> AgentResult<PgConn> {
        let who = self.creds.lock().clone();
        login(&server.address, &who).await
    }

    /// The `application_name` a standby streams under (its primary lists it by that name
    /// in `pg_stat_replication`): from its `primary_conninfo` (the one it had before the
    /// monitor emptied it), else `cluster_name`, else PostgreSQL's default.
    fn streams_as(&self, server: &str, primary_conninfo: String, cluster_name: String) -> String {
        let info = match primary_conninfo {
            c if c.is_empty() => self
                .detached
                .lock()
                .get(server)
                .cloned()
                .unwrap_or_default(),
            c => c,
        };
        match conninfo::application_name(&info) {
            n if !n.is_empty() => n,
            _ if !cluster_name.is_empty() => cluster_name,
            _ => "walreceiver".into(),
        }
    }

    async fn check(&self, server: &Server) -> AgentResult<Report> {
        let pooled = self.probes.lock().remove(&server.name);
        let mut conn = match pooled {
            Some(c) => c,
            None => self.connect(server).await.map_err(|e| {
                match self.rewinds.failure(&server.name) {
                    Some(why) => e.context(format!("after a failed rewind ({why})")),
                    None => e,
                }
            })?,
        };
        let started = Instant::now();
        let row = first_row(&mut conn, CHECK).await?;
        let rtt = started.elapsed();
        let field = |i: usize| row.get(i).cloned().flatten().unwrap_or_default();
        let in_recovery = field(0) == "t";
        let mut report = Report {
            rtt,
            read_only: in_recovery,
            replica: None,
            position: field(1),
            limited: None,
            version: conn
                .params
                .get("server_version")
                .cloned()
                .unwrap_or_default(),
            timeline: field(5).parse().ok(),
            synchronous: None,
        };
        report.read_only |= field(6) == "on";
        if !in_recovery {
            let names = field(7);
            if !names.trim().is_empty() {
                report.synchronous = Some(synchronous_standbys(&rows(&mut conn, STANDBYS).await?));
            }
            *self.synchronous_names.lock() = names;
        }
        if in_recovery {
            let paused = field(3) == "t";
            let lag_s: f64 = field(4).parse().unwrap_or(-1.0);
            let receiver = match rows(&mut conn, RECEIVER).await {
                Ok(rows) => rows.into_iter().next(),
                Err(e) if e.kind != sluice_monitor::agent::ErrorKind::Unreachable => {
                    report.limited = Some(format!("cannot read pg_stat_wal_receiver: {e}"));
                    None
                }
                Err(e) => return Err(e),
            };
            let get = |r: &Option<Vec<Option<String>>>, i: usize| {
                r.as_ref().and_then(|r| r.get(i).cloned().flatten())
            };
            let status = get(&receiver, 0).unwrap_or_default();
            let source = match (get(&receiver, 1), get(&receiver, 2)) {
                (Some(h), Some(p)) => format!("{h}:{p}"),
                _ => String::new(),
            };
            let streaming = status == "streaming";
            report.timeline = get(&receiver, 3).and_then(|t| t.parse().ok());
            if receiver.is_some() && source.is_empty() && report.limited.is_none() {
                report.limited = Some(
                    "pg_stat_wal_receiver hides the upstream: grant pg_monitor to the monitor user"
                        .into(),
                );
            }
            report.replica = Some(ReplicaStatus {
                source,
                io_running: receiver.is_some(),
                io_connected: streaming,
                sql_running: !paused,
                lag: (streaming && lag_s >= 0.0).then(|| Duration::from_secs_f64(lag_s)),
                received: field(2),
                name: self.streams_as(&server.name, field(8), field(9)),
                error: (!streaming).then(|| {
                    if receiver.is_none() {
                        "no WAL receiver is running".to_string()
                    } else {
                        format!("WAL receiver {status}")
                    }
                }),
            });
        }
        self.probes.lock().insert(server.name.clone(), conn);
        Ok(report)
    }
}

impl Agent for PgAgent {
    fn probe<'a>(&'a self, server: &'a Server) -> BoxFuture<'a, AgentResult<Report>> {
        Box::pin(async move { alive_unless_unreachable(self.check(server).await) })
    }

    fn compare(&self, a: &str, b: &str) -> std::cmp::Ordering {
        lsn(a).cmp(&lsn(b))
    }

    fn distance(&self, ahead: &str, behind: &str) -> Option<u64> {
        let (a, b) = (lsn(ahead), lsn(behind));
        (a != 0 && b != 0).then(|| a.saturating_sub(b))
    }

    /// A standby has caught up with `position` once it has *received* it (flushed it to its
    /// WAL): promotion replays everything received before it ends recovery, and the
    /// position received can lie past the last complete record (a primary that died in the
    /// middle of one), which replay never reaches.
    fn catch_up<'a>(
        &'a self,
        server: &'a Server,
        position: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, AgentResult<()>> {
        const AT: &str = "SELECT CASE WHEN pg_is_in_recovery() THEN GREATEST(pg_last_wal_replay_lsn(), pg_last_wal_receive_lsn()) ELSE pg_current_wal_lsn() END";
        Box::pin(async move {
            let target = lsn(position);
            let deadline = Instant::now() + timeout;
            // One connection for the whole wait, not a login per look.
            let mut conn = within(OP_TIMEOUT, self.connect(server)).await?;
            loop {
                let at = within(OP_TIMEOUT, first_row(&mut conn, AT))
                    .await?
                    .into_iter()
                    .next()
                    .flatten()
                    .unwrap_or_default();
                if lsn(&at) >= target {
                    return Ok(());
                }
                if Instant::now() >= deadline {
                    return Err(AgentError::failed(format!(
                        "received up to {at}, not {position}, within {} ms",
                        timeout.as_millis()
                    )));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    }

    fn detach<'a>(
        &'a self,
        server: &'a Server,
        _source_failed: bool,
        _which: Threads,
    ) -> BoxFuture<'a, AgentResult<()>> {
        Box::pin(self.stop_receiving(server))
    }

    fn resume<'a>(&'a self, server: &'a Server, _which: Threads) -> BoxFuture<'a, AgentResult<()>> {
        Box::pin(self.receive_again(server))
    }

    fn promote<'a>(&'a self, server: &'a Server) -> BoxFuture<'a, AgentResult<()>> {
        Box::pin(self.make_primary(server))
    }

    fn replicate_from<'a>(
        &'a self,
        replica: &'a Server,
        primary: &'a Server,
        _fresh: bool,
    ) -> BoxFuture<'a, AgentResult<()>> {
        Box::pin(self.follow(replica, primary))
    }

    fn set_read_only<'a>(&'a self, server: &'a Server, on: bool) -> BoxFuture<'a, AgentResult<()>> {
        Box::pin(self.fence(server, on))
    }

    fn errant<'a>(
        &'a self,
        server: &'a Server,
        primary: &'a Server,
    ) -> BoxFuture<'a, AgentResult<Option<String>>> {
        Box::pin(self.diverged(server, primary))
    }

    fn write_position<'a>(&'a self, server: &'a Server) -> BoxFuture<'a, AgentResult<String>> {
        Box::pin(self.value(server, "SELECT pg_current_wal_lsn()"))
    }

    fn missing_privileges<'a>(
        &'a self,
        server: &'a Server,
    ) -> BoxFuture<'a, AgentResult<Vec<String>>> {
        Box::pin(self.lacking(server))
    }

    fn fast_forward<'a>(
        &'a self,
        replica: &'a Server,
        source: &'a Server,
        position: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, AgentResult<()>> {
        Box::pin(self.fetch_from(replica, source, position, timeout))
    }

    fn repairs_divergence(&self) -> bool {
        self.rewind_command.lock().is_some()
    }

    fn reported_replicas<'a>(
        &'a self,
        primary: &'a Server,
    ) -> BoxFuture<'a, AgentResult<Vec<sluice_monitor::agent::ReportedReplica>>> {
        Box::pin(async move {
            let work = async {
                let mut conn = self.connect(primary).await?;
                let rows = rows(
                    &mut conn,
                    "SELECT application_name, host(client_addr) FROM pg_stat_replication WHERE client_addr IS NOT NULL",
                )
                .await?;
                Ok(rows
                    .into_iter()
                    .map(|r| sluice_monitor::agent::ReportedReplica {
                        name: r.first().cloned().flatten().unwrap_or_default(),
                        host: r.get(1).cloned().flatten().unwrap_or_default(),
                        port: None,
                    })
                    .collect())
            };
            within(OP_TIMEOUT, work).await
        })
    }
}

/// The standbys a primary reports as synchronous (`sync` or `quorum`), by name. A name
/// that synchronous and other standbys share cannot tell them apart: then none is named.
fn synchronous_standbys(rows: &[Vec<Option<String>>]) -> Vec<String> {
    let col = |r: &Vec<Option<String>>, i: usize| r.get(i).cloned().flatten().unwrap_or_default();
    let sync = |state: &str| matches!(state, "sync" | "quorum");
    let names: Vec<String> = rows
        .iter()
        .filter(|r| sync(&col(r, 1)))
        .map(|r| col(r, 0))
        .collect();
    let ambiguous = rows
        .iter()
        .any(|r| !sync(&col(r, 1)) && names.contains(&col(r, 0)));
    if ambiguous {
        Vec::new()
    } else {
        names
    }
}

/// A WAL position (`X/Y`, two hexadecimal halves) as a number; 0 if it is not one.
pub fn lsn(s: &str) -> u64 {
    let Some((hi, lo)) = s.split_once('/') else {
        return 0;
    };
    match (u64::from_str_radix(hi, 16), u64::from_str_radix(lo, 16)) {
        (Ok(hi), Ok(lo)) if hi <= u64::from(u32::MAX) && lo <= u64::from(u32::MAX) => hi << 32 | lo,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::{lsn, synchronous_standbys};

    #[test]
    fn lsns_compare_as_numbers() {
        assert_eq!(lsn("0/0"), 0);
        assert_eq!(lsn("1/0"), 1 << 32);
        assert!(lsn("0/A") < lsn("0/10"));
        assert!(lsn("0/FFFFFFFF") < lsn("1/0"));
        assert_eq!(lsn(""), 0);
        assert_eq!(lsn("x/1"), 0);
        assert_eq!(lsn("100000000/0"), 0);
    }

    #[test]
    fn synchronous_standbys_are_named_only_when_their_names_tell_them_apart() {
        let row = |n: &str, s: &str| vec![Some(n.to_string()), Some(s.to_string())];
        assert_eq!(
            synchronous_standbys(&[row("a", "sync"), row("b", "potential")]),
            vec!["a".to_string()]
        );
        assert_eq!(
            synchronous_standbys(&[row("a", "quorum"), row("b", "quorum")]),
            vec!["a".to_string(), "b".to_string()]
        );
        let same = [row("walreceiver", "sync"), row("walreceiver", "potential")];
        assert!(synchronous_standbys(&same).is_empty());
        assert!(synchronous_standbys(&[row("a", "async")]).is_empty());
    }
}
