//! The monitor's agent for MariaDB: checks over one persistent connection per server, and the
//! replication operations failover, switchover and rejoin are made of (GTID-based).

pub mod gtid;

use crate::backend::stmt_cache::StmtCache;
use crate::backend::{BackendConn, BackendError};
use sluice_core::Server;
use sluice_monitor::agent::{Agent, BoxFuture, ReplicaStatus, Report};
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

    async fn connect(&self, server: &Server) -> Result<BackendConn, Failure> {
        let c = self.creds.lock().clone();
        BackendConn::connect_with(
            &server.address,
            &c.user,
            &c.password,
            0,
            StmtCache::new(0, Default::default()),
            self.tls.as_ref(),
        )
        .await
        .map_err(|e| match e.code {
            Some(code) => Failure::Answered(format!(
                "{} refused the monitor's login: {} ({code})",
                server.name, e.message
            )),
            None => Failure::Down(e.message),
        })
    }

    async fn check(&self, server: &Server) -> Result<Report, Failure> {
        let pooled = self.probes.lock().remove(&server.name);
        let mut conn = match pooled {
            Some(c) => c,
            None => self.connect(server).await?,
        };
        let started = Instant::now();
        let vars = conn
            .query_rows("SELECT @@read_only, @@gtid_current_pos")
            .await
            .map_err(failure)?;
        let rtt = started.elapsed();
        let row = vars.into_iter().next().unwrap_or_default();
        let field = |i: usize| row.get(i).cloned().flatten().unwrap_or_default();
        let mut report = Report {
            rtt,
            read_only: field(0) == "1",
            replica: None,
            position: field(1),
            limited: None,
        };
        match conn.query_table("SHOW ALL SLAVES STATUS").await {
            Ok((names, rows)) => report.replica = replica_status(&names, &rows),
            Err(BackendError::Server { code, message, .. }) => {
                report.limited = Some(format!(
                    "cannot read replication status: {message} ({code})"
                ));
            }
            Err(e) => return Err(Failure::Down(e.to_string())),
        }
        self.probes.lock().insert(server.name.clone(), conn);
        Ok(report)
    }

    /// Runs statements on a fresh connection, within [`OP_TIMEOUT`].
    async fn run(&self, server: &Server, statements: &[String]) -> Result<(), String> {
        let work = async {
            let mut conn = self.connect(server).await.map_err(|f| f.message())?;
            for s in statements {
                conn.exec(s).await.map_err(|e| format!("{s}: {e}"))?;
            }
            Ok(())
        };
        within(OP_TIMEOUT, work).await
    }

    async fn value(&self, server: &Server, sql: &str) -> Result<String, String> {
        let work = async {
            let mut conn = self.connect(server).await.map_err(|f| f.message())?;
            let rows = conn
                .query_rows(sql)
                .await
                .map_err(|e| format!("{sql}: {e}"))?;
            Ok(rows
                .into_iter()
                .next()
                .and_then(|r| r.into_iter().next())
                .flatten()
                .unwrap_or_default())
        };
        within(OP_TIMEOUT, work).await
    }
}

/// Why a check failed: the server is down (no answer, refused, hung), or it answered with
/// an error (it is alive).
enum Failure {
    Down(String),
    Answered(String),
}

impl Failure {
    fn message(self) -> String {
        match self {
            Failure::Down(m) | Failure::Answered(m) => m,
        }
    }
}

fn failure(e: BackendError) -> Failure {
    match e {
        BackendError::Server { code, message, .. } => {
            Failure::Answered(format!("{message} ({code})"))
        }
        other => Failure::Down(other.to_string()),
    }
}

async fn within<T>(
    limit: Duration,
    f: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    match tokio::time::timeout(limit, f).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {} ms", limit.as_millis())),
    }
}

/// The default replication connection's state from `SHOW ALL SLAVES STATUS`.
fn replica_status(names: &[String], rows: &[Vec<Option<String>>]) -> Option<ReplicaStatus> {
    let col = |row: &Vec<Option<String>>, name: &str| -> String {
        names
            .iter()
            .position(|n| n.eq_ignore_ascii_case(name))
            .and_then(|i| row.get(i).cloned().flatten())
            .unwrap_or_default()
    };
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
    })
}

/// `host:port` split for CHANGE MASTER.
fn host_port(address: &str) -> Result<(&str, u16), String> {
    let (h, p) = address
        .rsplit_once(':')
        .ok_or_else(|| format!("{address} has no port"))?;
    let h = h.trim_start_matches('[').trim_end_matches(']');
    Ok((
        h,
        p.parse().map_err(|_| format!("{address} has a bad port"))?,
    ))
}

/// Quotes a string literal.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

impl Agent for MariaDbAgent {
    fn probe<'a>(&'a self, server: &'a Server) -> BoxFuture<'a, Result<Report, String>> {
        Box::pin(async move {
            match self.check(server).await {
                Ok(r) => Ok(r),
                Err(Failure::Down(m)) => Err(m),
                // It answered: alive, but the monitor cannot tell its role.
                Err(Failure::Answered(m)) => Ok(Report {
                    limited: Some(m),
                    ..Report::default()
                }),
            }
        })
    }

    fn compare(&self, a: &str, b: &str) -> std::cmp::Ordering {
        gtid::compare(a, b)
    }

    fn catch_up<'a>(
        &'a self,
        server: &'a Server,
        position: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let work = async {
                let mut conn = self.connect(server).await.map_err(|f| f.message())?;
                loop {
                    let rows = conn
                        .query_rows("SELECT @@gtid_current_pos")
                        .await
                        .map_err(|e| e.to_string())?;
                    let current = rows
                        .into_iter()
                        .next()
                        .and_then(|r| r.into_iter().next())
                        .flatten()
                        .unwrap_or_default();
                    if gtid::includes(&current, position) {
                        return Ok(());
                    }
                    // Still applying? A stopped applier will never get there.
                    let (names, rows) = conn
                        .query_table("SHOW ALL SLAVES STATUS")
                        .await
                        .map_err(|e| e.to_string())?;
                    match replica_status(&names, &rows) {
                        Some(rs) if rs.sql_running => {}
                        Some(rs) => {
                            return Err(format!(
                                "its replication applier is stopped at {current}{}",
                                rs.error.map(|e| format!(": {e}")).unwrap_or_default()
                            ))
                        }
                        None => {
                            return Err(format!("it does not replicate and has only {current}"))
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            };
            within(timeout, work).await
        })
    }

    fn detach<'a>(
        &'a self,
        server: &'a Server,
        source_failed: bool,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            if !source_failed {
                return self.run(server, &["STOP ALL SLAVES".into()]).await;
            }
            // A semi-synchronous replica stopping its receiver first logs in to the source to
            // end its binlog dump, waiting up to rpl_semi_sync_slave_kill_conn_timeout (5 s by
            // default; about 2 s measured) for a source that hangs. It is known dead here:
            // wait at most 1 s (0 would mean no limit), then restore the setting.
            self.run(
                server,
                &[
                    "SET @sluice_kct=@@GLOBAL.rpl_semi_sync_slave_kill_conn_timeout".into(),
                    "SET GLOBAL rpl_semi_sync_slave_kill_conn_timeout=1".into(),
                    "STOP ALL SLAVES".into(),
                    "SET GLOBAL rpl_semi_sync_slave_kill_conn_timeout=@sluice_kct".into(),
                ],
            )
            .await
        })
    }

    fn resume<'a>(&'a self, server: &'a Server) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move { self.run(server, &["START ALL SLAVES".into()]).await })
    }

    fn promote<'a>(&'a self, server: &'a Server) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.run(
                server,
                &[
                    "STOP ALL SLAVES".into(),
                    "RESET SLAVE ALL".into(),
                    // Semi-synchronous replication (replicas acknowledge): the new primary
                    // waits for acknowledgements, as the old one did.
                    "SET GLOBAL rpl_semi_sync_master_enabled=@@rpl_semi_sync_slave_enabled".into(),
                    "SET GLOBAL read_only=0".into(),
                ],
            )
            .await
        })
    }

    fn replicate_from<'a>(
        &'a self,
        replica: &'a Server,
        primary: &'a Server,
        fresh: bool,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let (host, port) = host_port(&primary.address)?;
            let mut change = format!(
                "CHANGE MASTER TO MASTER_HOST={}, MASTER_PORT={port}, MASTER_USE_GTID=slave_pos",
                quote(host)
            );
            // A replica does not wait for acknowledgements of what it applies.
            let mut statements = vec![
                "SET GLOBAL read_only=1".to_string(),
                "SET GLOBAL rpl_semi_sync_master_enabled=0".into(),
                "STOP SLAVE".into(),
            ];
            if fresh {
                // A former primary: it continues from what it committed itself.
                let (user, password) = &self.creds.lock().replication.clone();
                change.push_str(&format!(
                    ", MASTER_USER={}, MASTER_PASSWORD={}, MASTER_CONNECT_RETRY=1",
                    quote(user),
                    quote(password)
                ));
                statements.push("SET GLOBAL gtid_slave_pos=@@gtid_binlog_pos".into());
            }
            statements.push(change);
            statements.push("START SLAVE".into());
            self.run(replica, &statements).await
        })
    }

    fn set_read_only<'a>(
        &'a self,
        server: &'a Server,
        on: bool,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.run(server, &[format!("SET GLOBAL read_only={}", u8::from(on))])
                .await
        })
    }

    fn errant<'a>(
        &'a self,
        server: &'a Server,
        primary: &'a Server,
    ) -> BoxFuture<'a, Result<Option<String>, String>> {
        Box::pin(async move {
            let mine = self.value(server, "SELECT @@gtid_binlog_state").await?;
            let theirs = self.value(primary, "SELECT @@gtid_binlog_state").await?;
            let missing = gtid::missing_from(&mine, &theirs);
            Ok((!missing.is_empty()).then(|| gtid::format(&missing)))
        })
    }

    fn write_position<'a>(&'a self, server: &'a Server) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move { self.value(server, "SELECT @@gtid_binlog_pos").await })
    }

    fn missing_privileges<'a>(
        &'a self,
        server: &'a Server,
    ) -> BoxFuture<'a, Result<Vec<String>, String>> {
        Box::pin(async move {
            let work = async {
                let mut conn = self.connect(server).await.map_err(|f| f.message())?;
                let rows = conn
                    .query_rows("SHOW GRANTS FOR CURRENT_USER()")
                    .await
                    .map_err(|e| e.to_string())?;
                let global: Vec<String> = rows
                    .into_iter()
                    .filter_map(|r| r.into_iter().next().flatten())
                    .filter(|g| g.contains(" ON *.* "))
                    .collect();
                Ok(missing_from_grants(&global, {
                    let c = self.creds.lock();
                    c.replication.0 == c.user
                }))
            };
            within(OP_TIMEOUT, work).await
        })
    }
}

/// Global privileges failover, switchover and rejoin need that `grants` (lines of
/// `SHOW GRANTS` for `*.*`) do not give. `replicates`: the same user is the replication user.
fn missing_from_grants(grants: &[String], replicates: bool) -> Vec<String> {
    let text = grants.join(" ").to_ascii_uppercase();
    if text.contains("GRANT ALL PRIVILEGES ON *.*") {
        return Vec::new();
    }
    // (privilege, its other name, what it is needed for)
    let mut needed = vec![
        ("REPLICA MONITOR", "SLAVE MONITOR", "SHOW ALL SLAVES STATUS"),
        (
            "REPLICATION SLAVE ADMIN",
            "REPLICATION SLAVE ADMIN",
            "STOP/START SLAVE, CHANGE MASTER",
        ),
        ("RELOAD", "RELOAD", "RESET SLAVE ALL when promoting"),
        ("READ_ONLY ADMIN", "READ_ONLY ADMIN", "SET GLOBAL read_only"),
        (
            "REPLICATION MASTER ADMIN",
            "REPLICATION MASTER ADMIN",
            "SET GLOBAL rpl_semi_sync_master_enabled",
        ),
    ];
    if replicates {
        needed.push((
            "REPLICATION SLAVE",
            "REPLICATION SLAVE",
            "replicating, when a former primary rejoins",
        ));
    }
    let has = |p: &str| {
        text.match_indices(p).any(|(i, _)| {
            // Whole privilege names only ("REPLICATION SLAVE" is a prefix of "… ADMIN").
            let after = &text[i + p.len()..];
            after.starts_with(',') || after.starts_with(" ON ")
        })
    };
    needed
        .into_iter()
        .filter(|(a, b, _)| !has(a) && !has(b))
        .map(|(a, _, why)| format!("{a} ({why})"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn privileges_from_grants() {
        let g = |s: &str| vec![s.to_string()];
        assert!(
            missing_from_grants(&g("GRANT ALL PRIVILEGES ON *.* TO `app`@`%`"), true).is_empty()
        );
        let full = "GRANT RELOAD, REPLICATION SLAVE, BINLOG MONITOR, SLAVE MONITOR, REPLICATION SLAVE ADMIN, REPLICATION MASTER ADMIN, READ_ONLY ADMIN ON *.* TO `monitor`@`%` IDENTIFIED BY PASSWORD '*x'";
        assert!(missing_from_grants(&g(full), true).is_empty());
        let partial = "GRANT REPLICATION SLAVE ADMIN, SLAVE MONITOR ON *.* TO `monitor`@`%`";
        let missing = missing_from_grants(&g(partial), true);
        assert_eq!(missing.len(), 4, "{missing:?}");
        assert!(missing[0].starts_with("RELOAD"));
        assert!(missing.iter().any(|m| m.starts_with("REPLICATION SLAVE (")));
        assert_eq!(missing_from_grants(&g(partial), false).len(), 3);
    }
}
