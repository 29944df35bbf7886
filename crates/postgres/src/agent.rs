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
//! Promotion, repointing and fencing are not done by this agent yet: the front end runs the
//! monitor for PostgreSQL with failover and rejoin off, and the operations say so if called.

use crate::backend::connect::open_as;
use crate::backend::PgConn;
use crate::wire::error_fields;
use sluice_core::Server;
use sluice_monitor::agent::{
    alive_unless_unreachable, within, Agent, AgentError, AgentResult, BoxFuture, ReplicaStatus,
    Report, Threads,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The database the monitor logs in to.
const MONITOR_DATABASE: &str = "postgres";

/// Checks a server: recovery, its position (a primary's current WAL position, a standby's
/// replay position), a standby's received position, replay paused, lag in seconds (0 when
/// everything received is replayed; -1 when nothing was replayed yet), and a primary's
/// timeline (from the name of its current WAL file).
const CHECK: &str = "SELECT pg_is_in_recovery(), \
     CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END, \
     pg_last_wal_receive_lsn(), \
     CASE WHEN pg_is_in_recovery() THEN pg_is_wal_replay_paused() END, \
     CASE WHEN NOT pg_is_in_recovery() THEN 0 \
          WHEN pg_last_wal_receive_lsn() IS NULL OR pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn() THEN 0 \
          ELSE COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - pg_last_xact_replay_timestamp()), -1) END, \
     CASE WHEN NOT pg_is_in_recovery() THEN ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END";

/// A standby's WAL receiver: its state and where it streams from (`sender_host` and
/// `sender_port` are shown to superusers and members of `pg_read_all_stats`).
const RECEIVER: &str =
    "SELECT status, sender_host, sender_port, received_tli FROM pg_stat_wal_receiver";

/// How long an operation may take.
const OP_TIMEOUT: Duration = Duration::from_secs(5);

/// The monitor's agent for PostgreSQL.
pub struct PgAgent {
    /// Login (user, password); replaced on reload.
    creds: parking_lot::Mutex<(String, String)>,
    /// Check connections, one per server; taken out while in use (a check that times out
    /// drops its connection with it).
    probes: parking_lot::Mutex<HashMap<Arc<str>, PgConn>>,
}

impl PgAgent {
    /// An agent logging in as `user` with `password`.
    pub fn new(user: String, password: String) -> PgAgent {
        PgAgent {
            creds: parking_lot::Mutex::new((user, password)),
            probes: parking_lot::Mutex::new(HashMap::new()),
        }
    }

    /// New credentials (a reload): connections opened from now on use them.
    pub fn set_credentials(&self, user: String, password: String) {
        *self.creds.lock() = (user, password);
        self.probes.lock().clear();
    }

    async fn connect(&self, server: &Server) -> AgentResult<PgConn> {
        let (user, password) = self.creds.lock().clone();
        open_as(&server.address, &user, &password, MONITOR_DATABASE)
            .await
            .map_err(|e| {
                if e.server_down {
                    AgentError::unreachable(e.message)
                } else {
                    AgentError::denied(format!("monitor login as \"{user}\": {}", e.message))
                }
            })
    }

    async fn check(&self, server: &Server) -> AgentResult<Report> {
        let pooled = self.probes.lock().remove(&server.name);
        let mut conn = match pooled {
            Some(c) => c,
            None => self.connect(server).await?,
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
        };
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

    /// The first column of the first row of `sql`, on a fresh connection.
    async fn value(&self, server: &Server, sql: &str) -> AgentResult<String> {
        let work = async {
            let mut conn = self.connect(server).await?;
            let row = first_row(&mut conn, sql).await?;
            Ok(row.into_iter().next().flatten().unwrap_or_default())
        };
        within(OP_TIMEOUT, work).await
    }
}

/// Operations the PostgreSQL agent does not do yet.
fn not_yet(what: &str) -> AgentError {
    AgentError::failed(format!(
        "{what} is not implemented for PostgreSQL servers yet"
    ))
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

    fn catch_up<'a>(
        &'a self,
        server: &'a Server,
        position: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, AgentResult<()>> {
        const AT: &str = "SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END";
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
                        "replayed up to {at}, not {position}, within {} ms",
                        timeout.as_millis()
                    )));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    }

    fn detach<'a>(
        &'a self,
        _server: &'a Server,
        _source_failed: bool,
        _which: Threads,
    ) -> BoxFuture<'a, AgentResult<()>> {
        Box::pin(async { Err(not_yet("stopping a standby's replication")) })
    }

    fn resume<'a>(
        &'a self,
        _server: &'a Server,
        _which: Threads,
    ) -> BoxFuture<'a, AgentResult<()>> {
        Box::pin(async { Err(not_yet("resuming a standby's replication")) })
    }

    fn promote<'a>(&'a self, _server: &'a Server) -> BoxFuture<'a, AgentResult<()>> {
        Box::pin(async { Err(not_yet("promotion")) })
    }

    fn replicate_from<'a>(
        &'a self,
        _replica: &'a Server,
        _primary: &'a Server,
        _fresh: bool,
    ) -> BoxFuture<'a, AgentResult<()>> {
        Box::pin(async { Err(not_yet("repointing a standby")) })
    }

    fn set_read_only<'a>(
        &'a self,
        _server: &'a Server,
        _on: bool,
    ) -> BoxFuture<'a, AgentResult<()>> {
        Box::pin(async { Err(not_yet("fencing")) })
    }

    fn errant<'a>(
        &'a self,
        _server: &'a Server,
        _primary: &'a Server,
    ) -> BoxFuture<'a, AgentResult<Option<String>>> {
        Box::pin(async { Err(not_yet("checking a returning server's history")) })
    }

    fn write_position<'a>(&'a self, server: &'a Server) -> BoxFuture<'a, AgentResult<String>> {
        Box::pin(self.value(server, "SELECT pg_current_wal_lsn()"))
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

/// The first row of `sql` (an empty row if it returned none).
async fn first_row(conn: &mut PgConn, sql: &str) -> AgentResult<Vec<Option<String>>> {
    Ok(rows(conn, sql)
        .await?
        .into_iter()
        .next()
        .unwrap_or_default())
}

/// The rows of a simple query, as text.
async fn rows(conn: &mut PgConn, sql: &str) -> AgentResult<Vec<Vec<Option<String>>>> {
    let mut w = crate::wire::Writer::new();
    w.begin(b'Q');
    w.cstr(sql);
    w.end();
    let broken = |e: std::io::Error| AgentError::unreachable(format!("monitor connection: {e}"));
    conn.send(w.as_bytes()).await.map_err(broken)?;
    let mut out = Vec::new();
    let mut failure = None;
    loop {
        let (tag, body) = conn.next_owned().await.map_err(broken)?;
        match tag {
            b'D' => {
                out.push(data_row(&body).ok_or_else(|| {
                    AgentError::unreachable("monitor connection: malformed DataRow")
                })?)
            }
            b'E' => {
                let fields = error_fields(&body).unwrap_or_default();
                let get = |c: u8| fields.iter().find(|(k, _)| *k == c).map(|(_, v)| v.clone());
                let code = get(b'C').unwrap_or_default();
                let message = format!("{} ({code})", get(b'M').unwrap_or_default());
                failure = Some(if code == "42501" || code.starts_with("28") {
                    AgentError::denied(message)
                } else {
                    AgentError::failed(message)
                });
            }
            b'S' => conn.note_parameter(&body),
            b'Z' => break,
            _ => {}
        }
    }
    match failure {
        Some(e) => Err(e.context(sql)),
        None => Ok(out),
    }
}

/// A DataRow's columns as text (`None` for NULL).
fn data_row(body: &[u8]) -> Option<Vec<Option<String>>> {
    let n = u16::from_be_bytes(body.get(..2)?.try_into().ok()?);
    let mut at = 2;
    let mut cols = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let len = i32::from_be_bytes(body.get(at..at + 4)?.try_into().ok()?);
        at += 4;
        if len < 0 {
            cols.push(None);
            continue;
        }
        let v = body.get(at..at + len as usize)?;
        at += len as usize;
        cols.push(Some(String::from_utf8_lossy(v).into_owned()));
    }
    Some(cols)
}

#[cfg(test)]
mod tests {
    use super::{data_row, lsn};

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
    fn data_rows_parse_with_nulls_and_refuse_truncation() {
        let mut b = vec![0, 2];
        b.extend_from_slice(&1i32.to_be_bytes());
        b.push(b't');
        b.extend_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(data_row(&b), Some(vec![Some("t".into()), None]));
        assert_eq!(data_row(&b[..b.len() - 1]), None);
    }
}
