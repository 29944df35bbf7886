//! The replication operations, each all or nothing: a list of statements, each with the
//! statement that undoes it; when one fails, the ones already run are undone newest first on
//! the same connection, and the error says whether that worked.

use super::{agent_error, first_value, gtid, replica_status, within, MariaDbAgent, OP_TIMEOUT};
use crate::backend::BackendConn;
use sluice_core::Server;
use sluice_monitor::agent::{AgentError, AgentResult, Threads};
use std::time::Duration;

/// A statement and what undoes it.
struct Step {
    sql: String,
    undo: Option<String>,
}

fn step(sql: impl Into<String>, undo: Option<String>) -> Step {
    Step {
        sql: sql.into(),
        undo,
    }
}

/// Runs `steps` in order; on a failure, undoes the completed ones (newest first).
async fn run_steps(conn: &mut BackendConn, steps: &[Step]) -> AgentResult<()> {
    for (i, s) in steps.iter().enumerate() {
        if let Err(e) = conn.exec(&s.sql).await {
            let err = agent_error(e).context(&s.sql);
            let mut not_undone = Vec::new();
            for done in steps[..i].iter().rev() {
                if let Some(undo) = &done.undo {
                    if let Err(e) = conn.exec(undo).await {
                        not_undone.push(format!("{undo}: {e}"));
                    }
                }
            }
            return Err(if not_undone.is_empty() {
                err
            } else {
                AgentError {
                    kind: err.kind,
                    message: format!("{}; could not undo: {}", err.message, not_undone.join("; ")),
                }
            });
        }
    }
    Ok(())
}

/// Global settings an operation may change, read before it starts (to set them back).
struct Globals {
    read_only: String,
    semi_sync_source: String,
}

async fn globals(conn: &mut BackendConn) -> AgentResult<Globals> {
    let rows = conn
        .query_rows("SELECT @@GLOBAL.read_only, @@GLOBAL.rpl_semi_sync_master_enabled")
        .await
        .map_err(agent_error)?;
    let row = rows.into_iter().next().unwrap_or_default();
    let get = |i: usize| row.get(i).cloned().flatten().unwrap_or_else(|| "0".into());
    Ok(Globals {
        read_only: get(0),
        semi_sync_source: get(1),
    })
}

/// `host:port` split for CHANGE MASTER.
fn host_port(address: &str) -> AgentResult<(&str, u16)> {
    let (h, p) = address
        .rsplit_once(':')
        .ok_or_else(|| AgentError::failed(format!("{address} has no port")))?;
    let h = h.trim_start_matches('[').trim_end_matches(']');
    Ok((
        h,
        p.parse()
            .map_err(|_| AgentError::failed(format!("{address} has a bad port")))?,
    ))
}

/// Quotes a string literal.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

impl MariaDbAgent {
    /// Waits until `server` has applied `position`; fails at once if its applier stopped.
    pub(super) async fn catch_up_to(
        &self,
        server: &Server,
        position: &str,
        timeout: Duration,
    ) -> AgentResult<()> {
        let work = async {
            let mut conn = self.connect(server).await?;
            loop {
                let current = first_value(&mut conn, "SELECT @@gtid_current_pos").await?;
                if gtid::includes(&current, position) {
                    return Ok(());
                }
                // Still applying? A stopped applier will never get there.
                let (names, rows) = conn
                    .query_table("SHOW ALL SLAVES STATUS")
                    .await
                    .map_err(agent_error)?;
                match replica_status(&names, &rows) {
                    Some(rs) if rs.sql_running => {}
                    Some(rs) => {
                        return Err(AgentError::failed(format!(
                            "its replication applier is stopped at {current}{}",
                            rs.error.map(|e| format!(": {e}")).unwrap_or_default()
                        )))
                    }
                    None => {
                        return Err(AgentError::failed(format!(
                            "it does not replicate and has only {current}"
                        )))
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        within(timeout, work).await
    }

    /// `STOP ALL SLAVES` (or only the receivers). With a dead or hung source, a semi-synchronous replica stopping its
    /// receiver first logs in to the source to end its binlog dump, waiting up to
    /// `rpl_semi_sync_slave_kill_conn_timeout` (5 s by default; about 2 s measured): lowered
    /// to 1 s (0 would mean no limit) for the stop, and set back whatever happens.
    pub(super) async fn stop_replication(
        &self,
        server: &Server,
        source_failed: bool,
        which: Threads,
    ) -> AgentResult<()> {
        let stop = match which {
            Threads::Receiving => "STOP ALL SLAVES IO_THREAD",
            Threads::All => "STOP ALL SLAVES",
        };
        let work = async {
            let mut conn = self.connect(server).await?;
            let mut restore = None;
            if source_failed {
                let kct = first_value(
                    &mut conn,
                    "SELECT @@GLOBAL.rpl_semi_sync_slave_kill_conn_timeout",
                )
                .await
                .ok()
                .filter(|v| v.parse::<u32>().is_ok());
                if let Some(kct) = kct {
                    // Without the privilege to lower it, stop anyway (more slowly).
                    if conn
                        .exec("SET GLOBAL rpl_semi_sync_slave_kill_conn_timeout=1")
                        .await
                        .is_ok()
                    {
                        restore = Some(kct);
                    }
                }
            }
            let stopped = conn.exec(stop).await;
            if let Some(kct) = restore {
                let sql = format!("SET GLOBAL rpl_semi_sync_slave_kill_conn_timeout={kct}");
                if let Err(e) = conn.exec(&sql).await {
                    tracing::warn!(server = %server.name, error = %e, "could not restore rpl_semi_sync_slave_kill_conn_timeout");
                }
            }
            stopped
                .map(|_| ())
                .map_err(|e| agent_error(e).context(stop))
        };
        within(OP_TIMEOUT, work).await
    }

    /// Makes a detached replica the primary: semi-synchronous acknowledgement waits as on
    /// the old primary, `read_only=0`, and last (so that a failure leaves its replication
    /// configured) `RESET SLAVE ALL`.
    pub(super) async fn make_primary(&self, server: &Server) -> AgentResult<()> {
        let work = async {
            let mut conn = self.connect(server).await?;
            let g = globals(&mut conn).await?;
            let steps = [
                // Semi-synchronous replication (replicas acknowledge): the new primary waits
                // for acknowledgements, as the old one did.
                step(
                    "SET GLOBAL rpl_semi_sync_master_enabled=@@rpl_semi_sync_slave_enabled",
                    Some(format!(
                        "SET GLOBAL rpl_semi_sync_master_enabled={}",
                        g.semi_sync_source
                    )),
                ),
                step(
                    "SET GLOBAL read_only=0",
                    Some(format!("SET GLOBAL read_only={}", g.read_only)),
                ),
                step("RESET SLAVE ALL", None),
            ];
            run_steps(&mut conn, &steps).await
        };
        within(OP_TIMEOUT, work).await
    }

    /// Points `replica` at `primary` and starts replication; on failure its previous
    /// settings and replication are restored.
    pub(super) async fn follow(
        &self,
        replica: &Server,
        primary: &Server,
        fresh: bool,
    ) -> AgentResult<()> {
        let (host, port) = host_port(&primary.address)?;
        let mut change = format!(
            "CHANGE MASTER TO MASTER_HOST={}, MASTER_PORT={port}, MASTER_USE_GTID=slave_pos",
            quote(host)
        );
        if fresh {
            // A former primary: it continues from what it committed itself.
            let (user, password) = self.creds.lock().replication.clone();
            change.push_str(&format!(
                ", MASTER_USER={}, MASTER_PASSWORD={}, MASTER_CONNECT_RETRY=1",
                quote(&user),
                quote(&password)
            ));
        }
        let work = async {
            let mut conn = self.connect(replica).await?;
            let g = globals(&mut conn).await?;
            let mut steps = vec![
                step(
                    "SET GLOBAL read_only=1",
                    Some(format!("SET GLOBAL read_only={}", g.read_only)),
                ),
                // A replica does not wait for acknowledgements of what it applies.
                step(
                    "SET GLOBAL rpl_semi_sync_master_enabled=0",
                    Some(format!(
                        "SET GLOBAL rpl_semi_sync_master_enabled={}",
                        g.semi_sync_source
                    )),
                ),
                step("STOP SLAVE", (!fresh).then(|| "START SLAVE".to_string())),
            ];
            if fresh {
                steps.push(step("SET GLOBAL gtid_slave_pos=@@gtid_binlog_pos", None));
            }
            steps.push(step(change.clone(), None));
            steps.push(step("START SLAVE", None));
            run_steps(&mut conn, &steps).await
        };
        within(OP_TIMEOUT, work).await
    }
}
