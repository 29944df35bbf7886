//! The monitor's agent for MariaDB: checks over one persistent connection per server, and the
//! replication operations failover, switchover and rejoin are made of (GTID-based, in
//! `ops.rs`; each one all or nothing).

mod grants;
pub mod gtid;
mod ops;

use crate::backend::stmt_cache::StmtCache;
use crate::backend::{BackendConn, BackendError};
use sluice_core::Server;
use sluice_monitor::agent::{
    alive_unless_unreachable, within, Agent, AgentError, AgentResult, BoxFuture, ReplicaStatus,
    Report, Threads,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Time allowed for one replication operation (promote, repoint, fence).
const OP_TIMEOUT: Duration = Duration::from_secs(5);

/// Who the agent logs in as.
#[derive(Clone)]
struct Credentials {
    user: String,
    password: String,
    replication: (String, String),
}

/// MariaDB agent.
pub struct MariaDbAgent {
    /// Login (user, password), and the credentials a server that had no replication
    /// configured replicates with; replaced on reload.
    creds: parking_lot::Mutex<Credentials>,
    /// Check connections, one per server; taken out while in use (a check that times out
    /// drops its connection with it).
    probes: parking_lot::Mutex<HashMap<Arc<str>, BackendConn>>,
    /// TLS to the servers (`[pool] tls`).
    tls: Option<crate::backend::BackendTls>,
}

impl MariaDbAgent {
    /// An agent logging in as `user`; rejoining servers replicate as `replication`.
    pub fn new(
        user: String,
        password: String,
        replication: (String, String),
        tls: Option<crate::backend::BackendTls>,
    ) -> MariaDbAgent {
        MariaDbAgent {
            creds: parking_lot::Mutex::new(Credentials {
                user,
                password,
                replication,
            }),
            probes: parking_lot::Mutex::new(HashMap::new()),
            tls,
        }
    }

    /// New credentials (a reload): checks log in with them from now on.
    pub fn set_credentials(&self, user: String, password: String, replication: (String, String)) {
        *self.creds.lock() = Credentials {
            user,
            password,
            replication,
        };
        self.probes.lock().clear();
    }

    async fn connect(&self, server: &Server) -> AgentResult<BackendConn> {
        let c = self.creds.lock().clone();
        BackendConn::login_only(
            &server.address,
            &c.user,
            &c.password,
            0,
            StmtCache::new(0, Default::default()),
            self.tls.as_ref(),
        )
        .await
        .map_err(|e| match e.code {
            Some(code) => {
                let msg = format!(
                    "{} refused the monitor's login: {} ({code})",
                    server.name, e.message
                );
                if is_denied(code) {
                    AgentError::denied(msg)
                } else {
                    AgentError::failed(msg)
                }
            }
            None => AgentError::unreachable(e.message),
        })
    }

    async fn check(&self, server: &Server) -> AgentResult<Report> {
        let pooled = self.probes.lock().remove(&server.name);
        let mut conn = match pooled {
            Some(c) => c,
            None => self.connect(server).await?,
        };
        let started = Instant::now();
        let vars = conn
            .query_rows("SELECT @@read_only, @@gtid_current_pos")
            .await
            .map_err(agent_error)?;
        let rtt = started.elapsed();
        let row = vars.into_iter().next().unwrap_or_default();
        let field = |i: usize| row.get(i).cloned().flatten().unwrap_or_default();
        let mut report = Report {
            rtt,
            read_only: field(0) == "1",
            replica: None,
            position: field(1),
            limited: None,
            version: conn.server_version.clone(),
            timeline: None,
            synchronous: None,
        };
        match conn.query_table("SHOW ALL SLAVES STATUS").await {
            Ok((names, rows)) => report.replica = replica_status(&names, &rows),
            Err(BackendError::Server { code, message, .. }) => {
                report.limited = Some(format!(
                    "cannot read replication status: {message} ({code})"
                ));
            }
            Err(e) => return Err(agent_error(e)),
        }
        self.probes.lock().insert(server.name.clone(), conn);
        Ok(report)
    }

    /// Runs statements on a fresh connection, within [`OP_TIMEOUT`].
    async fn run(&self, server: &Server, statements: &[String]) -> AgentResult<()> {
        let work = async {
            let mut conn = self.connect(server).await?;
            for s in statements {
                conn.exec(s).await.map_err(|e| agent_error(e).context(s))?;
            }
            Ok(())
        };
        within(OP_TIMEOUT, work).await
    }

    /// Ends the client sessions on `server` (a former primary being fenced) and waits until
    /// they are gone: a COMMIT its clients sent before it hung may still be waiting to run
    /// when it thaws, and must either run before its history is compared with the primary's
    /// (and be found errant) or never. Sessions the monitor's user may not see or end are
    /// left (without `PROCESS` and `CONNECTION ADMIN` it sees only its own), and so are the
    /// monitor's own.
    async fn end_client_sessions(&self, server: &Server) -> AgentResult<()> {
        const OTHERS: &str = "SELECT ID FROM information_schema.PROCESSLIST \
             WHERE USER NOT IN ('system user', SUBSTRING_INDEX(CURRENT_USER(), '@', 1)) \
             AND COMMAND NOT IN ('Binlog Dump', 'Binlog Dump GTID', 'Daemon')";
        let work = async {
            let mut conn = self.connect(server).await?;
            let rows = conn
                .query_rows(OTHERS)
                .await
                .map_err(|e| agent_error(e).context(OTHERS))?;
            let ids: Vec<u64> = rows
                .iter()
                .filter_map(|r| r.first()?.as_deref()?.parse().ok())
                .collect();
            let mut ended = Vec::new();
            for id in ids {
                // Gone already, or not the user's to end: either way not waited for.
                if conn.exec(&format!("KILL CONNECTION {id}")).await.is_ok() {
                    ended.push(id.to_string());
                }
            }
            if ended.is_empty() {
                return Ok(());
            }
            let left = format!(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID IN ({})",
                ended.join(", ")
            );
            // A COMMIT under way completes before its session goes (bounded by OP_TIMEOUT).
            while first_value(&mut conn, &left).await? != "0" {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(())
        };
        within(OP_TIMEOUT, work).await
    }

    /// The first column of the first row of `sql`, on a fresh connection.
    async fn value(&self, server: &Server, sql: &str) -> AgentResult<String> {
        let work = async {
            let mut conn = self.connect(server).await?;
            first_value(&mut conn, sql).await
        };
        within(OP_TIMEOUT, work).await
    }
}

/// The first column of the first row of `sql`.
async fn first_value(conn: &mut BackendConn, sql: &str) -> AgentResult<String> {
    let rows = conn
        .query_rows(sql)
        .await
        .map_err(|e| agent_error(e).context(sql))?;
    Ok(rows
        .into_iter()
        .next()
        .and_then(|r| r.into_iter().next())
        .flatten()
        .unwrap_or_default())
}

/// MariaDB errors that mean the user lacks a privilege (or cannot log in).
fn is_denied(code: u16) -> bool {
    matches!(code, 1044 | 1045 | 1142 | 1143 | 1227 | 1370)
}

/// An agent error from a backend error: the server answered (a privilege it refused, or
/// another error), or the connection broke.
fn agent_error(e: BackendError) -> AgentError {
    match e {
        BackendError::Server { code, message, .. } => {
            let msg = format!("{message} ({code})");
            if is_denied(code) {
                AgentError::denied(msg)
            } else {
                AgentError::failed(msg)
            }
        }
        BackendError::Protocol(m) => AgentError::failed(format!("malformed answer: {m}")),
        other => AgentError::unreachable(other.to_string()),
    }
}

/// The column `name` of `row` (empty when absent or NULL).
fn col(names: &[String], row: &[Option<String>], name: &str) -> String {
    names
        .iter()
        .position(|n| n.eq_ignore_ascii_case(name))
        .and_then(|i| row.get(i).cloned().flatten())
        .unwrap_or_default()
}

/// The default replication connection's state from `SHOW ALL SLAVES STATUS`.
fn replica_status(names: &[String], rows: &[Vec<Option<String>>]) -> Option<ReplicaStatus> {
    let col = |row: &Vec<Option<String>>, name: &str| col(names, row, name);
    let row = rows
        .iter()
        .find(|r| col(r, "Connection_name").is_empty())
        .or_else(|| rows.first())?;
    let io = col(row, "Slave_IO_Running");
    let sql = col(row, "Slave_SQL_Running");
    let error = [col(row, "Last_SQL_Error"), col(row, "Last_IO_Error")]
        .into_iter()
        .find(|e| !e.is_empty());
    Some(ReplicaStatus {
        source: format!("{}:{}", col(row, "Master_Host"), col(row, "Master_Port")),
        io_running: io.eq_ignore_ascii_case("Yes")
            || io.eq_ignore_ascii_case("Connecting")
            || io.eq_ignore_ascii_case("Preparing"),
        io_connected: io.eq_ignore_ascii_case("Yes"),
        sql_running: sql.eq_ignore_ascii_case("Yes"),
        lag: col(row, "Seconds_Behind_Master")
            .parse()
            .ok()
            .map(Duration::from_secs),
        received: col(row, "Gtid_IO_Pos"),
        error,
        name: String::new(),
    })
}

impl Agent for MariaDbAgent {
    fn probe<'a>(&'a self, server: &'a Server) -> BoxFuture<'a, AgentResult<Report>> {
        Box::pin(async move { alive_unless_unreachable(self.check(server).await) })
    }

    fn compare(&self, a: &str, b: &str) -> std::cmp::Ordering {
        gtid::compare(a, b)
    }

    fn catch_up<'a>(
        &'a self,
        server: &'a Server,
        position: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, AgentResult<()>> {
        Box::pin(self.catch_up_to(server, position, timeout))
    }

    fn detach<'a>(
        &'a self,
        server: &'a Server,
        source_failed: bool,
        which: Threads,
    ) -> BoxFuture<'a, AgentResult<()>> {
        Box::pin(self.stop_replication(server, source_failed, which))
    }

    fn resume<'a>(&'a self, server: &'a Server, which: Threads) -> BoxFuture<'a, AgentResult<()>> {
        let sql = match which {
            Threads::Receiving => "START ALL SLAVES IO_THREAD",
            // Starts what is not running (with the applier running, only the receiver).
            Threads::All => "START ALL SLAVES",
        };
        Box::pin(async move { self.run(server, &[sql.into()]).await })
    }

    fn promote<'a>(&'a self, server: &'a Server) -> BoxFuture<'a, AgentResult<()>> {
        Box::pin(self.make_primary(server))
    }

    fn replicate_from<'a>(
        &'a self,
        replica: &'a Server,
        primary: &'a Server,
        fresh: bool,
    ) -> BoxFuture<'a, AgentResult<()>> {
        Box::pin(self.follow(replica, primary, fresh))
    }

    fn set_read_only<'a>(&'a self, server: &'a Server, on: bool) -> BoxFuture<'a, AgentResult<()>> {
        Box::pin(async move {
            self.run(server, &[format!("SET GLOBAL read_only={}", u8::from(on))])
                .await
        })
    }

    fn errant<'a>(
        &'a self,
        server: &'a Server,
        primary: &'a Server,
    ) -> BoxFuture<'a, AgentResult<Option<String>>> {
        Box::pin(async move {
            self.end_client_sessions(server).await?;
            let mine = self.value(server, "SELECT @@gtid_binlog_state").await?;
            let theirs = self.value(primary, "SELECT @@gtid_binlog_state").await?;
            let missing = gtid::missing_from(&mine, &theirs);
            Ok((!missing.is_empty()).then(|| gtid::format(&missing)))
        })
    }

    fn write_position<'a>(&'a self, server: &'a Server) -> BoxFuture<'a, AgentResult<String>> {
        Box::pin(async move { self.value(server, "SELECT @@gtid_binlog_pos").await })
    }

    fn reported_replicas<'a>(
        &'a self,
        primary: &'a Server,
    ) -> BoxFuture<'a, AgentResult<Vec<sluice_monitor::agent::ReportedReplica>>> {
        Box::pin(async move {
            let work = async {
                let mut conn = self.connect(primary).await?;
                let (names, rows) = conn
                    .query_table("SHOW REPLICA HOSTS")
                    .await
                    .map_err(agent_error)?;
                Ok(rows
                    .iter()
                    .map(|r| sluice_monitor::agent::ReportedReplica {
                        name: col(&names, r, "Server_id"),
                        host: col(&names, r, "Host"),
                        port: col(&names, r, "Port").parse().ok().filter(|p| *p > 0),
                    })
                    .filter(|r| !r.host.is_empty())
                    .collect())
            };
            within(OP_TIMEOUT, work).await
        })
    }

    fn missing_privileges<'a>(
        &'a self,
        server: &'a Server,
    ) -> BoxFuture<'a, AgentResult<Vec<String>>> {
        Box::pin(async move {
            let work = async {
                let mut conn = self.connect(server).await?;
                let rows = conn
                    .query_rows("SHOW GRANTS FOR CURRENT_USER()")
                    .await
                    .map_err(agent_error)?;
                let global: Vec<String> = rows
                    .into_iter()
                    .filter_map(|r| r.into_iter().next().flatten())
                    .filter(|g| g.contains(" ON *.* "))
                    .collect();
                Ok(grants::missing_from_grants(&global, {
                    let c = self.creds.lock();
                    c.replication.0 == c.user
                }))
            };
            within(OP_TIMEOUT, work).await
        })
    }
}
