//! What failover, switchover and rejoin do to PostgreSQL servers (13 and later: a standby's
//! `primary_conninfo` is reloadable):
//!
//! - a standby stops receiving when its `primary_conninfo` is emptied (`ALTER SYSTEM` and
//!   `pg_reload_conf()`): its WAL receiver ends, its startup process goes on replaying what
//!   it received; the old value is kept to put back;
//! - it follows another server when `primary_conninfo` names that server's host and port,
//!   everything else (user, password file, TLS, `application_name`) kept;
//! - it is promoted with `pg_promote()`, after taking the old primary's
//!   `synchronous_standby_names` (when it has none of its own) and dropping a
//!   `default_transaction_read_only` a fencing left in its configuration;
//! - a server is fenced with `default_transaction_read_only` (new transactions cannot write;
//!   sluice sends it nothing meanwhile);
//! - a former primary diverged if its WAL goes past the point where the new primary's
//!   timeline forked from its own (the new primary's timeline history file), or its timeline
//!   is not in that history. It follows only after a restart as a standby (and `pg_rewind`
//!   when it diverged): `[failover] rewind_command` does that, in the background.

use super::connection::{first_row, rows, value_on, OP_TIMEOUT};
use super::conninfo::{self, literal};
use super::rewind::{self, Job, State};
use super::{lsn, PgAgent};
use crate::backend::PgConn;
use sluice_core::Server;
use sluice_monitor::agent::{within, Agent, AgentError, AgentResult};
use std::time::{Duration, Instant};

/// How long `pg_promote()` may take.
const PROMOTE_WAIT_S: u32 = 60;

/// A server's timeline, from the name of its current WAL file (primaries only).
const TIMELINE: &str = "('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int";

impl PgAgent {
    /// The first column of the first row of `sql`, on a fresh connection.
    pub(super) async fn value(&self, server: &Server, sql: &str) -> AgentResult<String> {
        let who = self.creds.lock().clone();
        value_on(&server.address, &who, sql).await
    }

    /// A fresh connection, within the operation time limit.
    async fn op_conn(&self, server: &Server) -> AgentResult<PgConn> {
        within(OP_TIMEOUT, self.connect(server)).await
    }

    /// Runs `sql` (one statement) within the time limit; the first row of its result.
    async fn run(conn: &mut PgConn, sql: &str) -> AgentResult<Vec<Option<String>>> {
        within(OP_TIMEOUT, first_row(conn, sql)).await
    }

    /// Whether the server is in recovery (a standby), and the columns `cols` (one
    /// `SELECT` list) as text.
    async fn recovery_and(conn: &mut PgConn, cols: &str) -> AgentResult<(bool, Vec<String>)> {
        let row = Self::run(conn, &format!("SELECT pg_is_in_recovery(), {cols}")).await?;
        let mut row = row.into_iter().map(Option::unwrap_or_default);
        let standby = row.next().is_some_and(|r| r == "t");
        Ok((standby, row.collect()))
    }

    /// As [`PgAgent::recovery_and`], an error unless the server is a standby.
    async fn standby_and(
        conn: &mut PgConn,
        server: &Server,
        cols: &str,
    ) -> AgentResult<Vec<String>> {
        match Self::recovery_and(conn, cols).await? {
            (true, row) => Ok(row),
            (false, _) => Err(AgentError::failed(format!(
                "{} is not a standby",
                server.name
            ))),
        }
    }

    /// Changes settings with `ALTER SYSTEM` (one statement each: it cannot run in a
    /// transaction block, implicit ones included), then reloads the configuration.
    async fn alter_system(conn: &mut PgConn, settings: &[String]) -> AgentResult<()> {
        for s in settings {
            Self::run(conn, &format!("ALTER SYSTEM SET {s}")).await?;
        }
        Self::run(conn, "SELECT pg_reload_conf()").await.map(|_| ())
    }

    /// `Agent::detach`: the standby stops receiving (its WAL receiver gone), replaying on.
    pub(super) async fn stop_receiving(&self, server: &Server) -> AgentResult<()> {
        let mut conn = self.op_conn(server).await?;
        let previous = Self::standby_and(&mut conn, server, "current_setting('primary_conninfo')")
            .await?
            .swap_remove(0);
        if !previous.is_empty() {
            self.detached
                .lock()
                .insert(server.name.clone(), previous.clone());
        }
        Self::alter_system(&mut conn, &["primary_conninfo = ''".into()]).await?;
        // The startup process ends the receiver when it sees the new setting.
        let deadline = Instant::now() + OP_TIMEOUT;
        loop {
            let n = Self::run(&mut conn, "SELECT count(*) FROM pg_stat_wal_receiver").await?;
            if n.first().cloned().flatten().as_deref() == Some("0") {
                return Ok(());
            }
            if Instant::now() >= deadline {
                // All or nothing: it streams as before.
                if !previous.is_empty() {
                    let put_back = format!("primary_conninfo = {}", literal(&previous));
                    let _ = Self::alter_system(&mut conn, &[put_back]).await;
                    self.detached.lock().remove(&server.name);
                }
                return Err(AgentError::failed(format!(
                    "its WAL receiver did not stop within {} ms",
                    OP_TIMEOUT.as_millis()
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `Agent::resume`: the `primary_conninfo` [`PgAgent::stop_receiving`] emptied is put
    /// back.
    pub(super) async fn receive_again(&self, server: &Server) -> AgentResult<()> {
        let Some(previous) = self.detached.lock().get(&server.name).cloned() else {
            let current = self
                .value(server, "SELECT current_setting('primary_conninfo')")
                .await?;
            if current.is_empty() {
                return Err(AgentError::failed(format!(
                    "the primary_conninfo {} had is not known (sluice restarted since it was emptied)",
                    server.name
                )));
            }
            return Ok(());
        };
        let mut conn = self.op_conn(server).await?;
        let setting = format!("primary_conninfo = {}", literal(&previous));
        Self::alter_system(&mut conn, &[setting]).await?;
        self.detached.lock().remove(&server.name);
        Ok(())
    }

    /// `Agent::promote`.
    pub(super) async fn make_primary(&self, server: &Server) -> AgentResult<()> {
        let mut conn = self.op_conn(server).await?;
        let row = Self::standby_and(
            &mut conn,
            server,
            "current_setting('default_transaction_read_only'), current_setting('synchronous_standby_names')",
        )
        .await?;
        let (read_only, own_names) = (&row[0], &row[1]);
        let mut settings = Vec::new();
        if read_only == "on" {
            settings.push("default_transaction_read_only = off".to_string());
        }
        let names = self.synchronous_names.lock().clone();
        if own_names.trim().is_empty() && !names.trim().is_empty() {
            settings.push(format!("synchronous_standby_names = {}", literal(&names)));
        }
        if !settings.is_empty() {
            Self::alter_system(&mut conn, &settings).await?;
        }
        let promote = format!("SELECT pg_promote(true, {PROMOTE_WAIT_S})");
        let limit = Duration::from_secs(u64::from(PROMOTE_WAIT_S) + 5);
        let promoted = within(limit, first_row(&mut conn, &promote)).await?;
        if promoted.first().cloned().flatten().as_deref() != Some("t") {
            return Err(AgentError::failed(format!(
                "pg_promote() did not complete within {PROMOTE_WAIT_S} s"
            )));
        }
        Ok(())
    }

    /// `Agent::replicate_from`: a standby is pointed at `primary`; a former primary is
    /// restarted as a standby by `rewind_command`, in the background (an error says it is
    /// under way; the monitor places the server once it reports as a standby).
    pub(super) async fn follow(&self, replica: &Server, primary: &Server) -> AgentResult<()> {
        let mut conn = self.op_conn(replica).await?;
        let (standby, mut row) =
            Self::recovery_and(&mut conn, "current_setting('primary_conninfo')").await?;
        if !standby {
            return self.rewind(replica, primary);
        }
        let (host, port) = rewind::split(&primary.address);
        let current = row.swap_remove(0);
        let base = if current.is_empty() {
            self.detached.lock().get(&replica.name).cloned()
        } else {
            Some(current)
        };
        let target = match base {
            Some(base) => conninfo::repoint(&base, host, port).ok_or_else(|| {
                AgentError::failed(format!(
                    "cannot rewrite the primary_conninfo of {} (not a key=value string)",
                    replica.name
                ))
            })?,
            None => {
                let super::Login { user, password, .. } = self.creds.lock().clone();
                conninfo::render(&[
                    ("host".into(), host.into()),
                    ("port".into(), port.into()),
                    ("user".into(), user),
                    ("password".into(), password),
                ])
            }
        };
        let setting = format!("primary_conninfo = {}", literal(&target));
        Self::alter_system(&mut conn, &[setting]).await?;
        self.detached.lock().remove(&replica.name);
        Ok(())
    }

    /// `Agent::fast_forward`: the standby streams from `source` (cascading replication)
    /// until it received `position`.
    pub(super) async fn fetch_from(
        &self,
        replica: &Server,
        source: &Server,
        position: &str,
        timeout: Duration,
    ) -> AgentResult<()> {
        self.follow(replica, source).await?;
        self.catch_up(replica, position, timeout).await
    }

    /// A former primary must restart as a standby: starts `rewind_command` (or says how far
    /// it is, or why it cannot).
    fn rewind(&self, server: &Server, primary: &Server) -> AgentResult<()> {
        match self.rewinds.state(&server.name) {
            State::Running(for_) => {
                return Err(AgentError::failed(format!(
                    "rewind_command is running ({} s so far)",
                    for_.as_secs()
                )))
            }
            State::Finished(Err(e)) => return Err(AgentError::failed(e)),
            State::Finished(Ok(())) | State::Idle => {}
        }
        let Some(command) = self.rewind_command.lock().clone() else {
            return Err(AgentError::failed(format!(
                "{} is a primary: PostgreSQL follows another server only after a restart as a standby (with pg_rewind if it diverged); set [failover] rewind_command, or do it by hand",
                server.name
            )));
        };
        self.rewinds.start(
            server.name.clone(),
            Job {
                command,
                server: server.address.to_string(),
                primary: primary.address.to_string(),
                login: self.creds.lock().clone(),
            },
        );
        Err(AgentError::failed(format!(
            "rewind_command started to make it a standby of {}",
            primary.name
        )))
    }

    /// `Agent::set_read_only`.
    pub(super) async fn fence(&self, server: &Server, on: bool) -> AgentResult<()> {
        let mut conn = self.op_conn(server).await?;
        let setting = format!(
            "default_transaction_read_only = {}",
            if on { "on" } else { "off" }
        );
        Self::alter_system(&mut conn, &[setting]).await
    }

    /// `Agent::errant`: how `server` (a former primary) diverged from `primary`'s history,
    /// if it did.
    pub(super) async fn diverged(
        &self,
        server: &Server,
        primary: &Server,
    ) -> AgentResult<Option<String>> {
        let mut conn = self.op_conn(server).await?;
        let (standby, row) = Self::recovery_and(
            &mut conn,
            &format!("CASE WHEN NOT pg_is_in_recovery() THEN pg_current_wal_insert_lsn() END, CASE WHEN NOT pg_is_in_recovery() THEN {TIMELINE} END"),
        )
        .await?;
        if standby {
            return Ok(None);
        }
        let (end, tli) = (&row[0], row[1].parse::<u32>().unwrap_or(0));
        let mut pconn = self.op_conn(primary).await?;
        let prow = Self::run(
            &mut pconn,
            &format!("SELECT {TIMELINE}, pg_current_wal_lsn()"),
        )
        .await?;
        let ptli: u32 = prow
            .first()
            .cloned()
            .flatten()
            .and_then(|t| t.parse().ok())
            .unwrap_or(0);
        if tli >= ptli {
            return Ok(Some(format!(
                "it is on timeline {tli}, the primary on {ptli}: they did not fork one from the other"
            )));
        }
        let file = format!("pg_wal/{ptli:08X}.history");
        let history = Self::run(
            &mut pconn,
            &format!("SELECT pg_read_file({})", literal(&file)),
        )
        .await?
        .into_iter()
        .next()
        .flatten()
        .unwrap_or_default();
        let Some(fork) = fork_point(&history, tli) else {
            return Ok(Some(format!(
                "its timeline {tli} is not in the history of the primary's timeline {ptli}"
            )));
        };
        let past = lsn(end).saturating_sub(lsn(&fork));
        Ok((past > 0).then(|| {
            format!(
                "its WAL ends at {end}, {past} bytes past {fork}, where {} left timeline {tli}",
                primary.name
            )
        }))
    }

    /// `Agent::missing_privileges`: what failover, switchover and rejoin need that the
    /// monitor's role lacks (PostgreSQL 15: `ALTER SYSTEM` per parameter; before it, only a
    /// superuser can).
    pub(super) async fn lacking(&self, server: &Server) -> AgentResult<Vec<String>> {
        let mut conn = self.op_conn(server).await?;
        let version = conn
            .params
            .get("server_version")
            .and_then(|v| v.split(['.', ' ']).next()?.parse::<u32>().ok())
            .unwrap_or(0);
        let superuser = Self::run(
            &mut conn,
            "SELECT rolsuper FROM pg_roles WHERE rolname = current_user",
        )
        .await?;
        if superuser.first().cloned().flatten().as_deref() == Some("t") {
            return Ok(Vec::new());
        }
        if version < 15 {
            return Ok(vec![format!(
                "superuser (PostgreSQL {version} grants ALTER SYSTEM to superusers only)"
            )]);
        }
        let checks: [(&str, &str); 8] = [
            (
                "has_function_privilege('pg_catalog.pg_promote(boolean,integer)', 'EXECUTE')",
                "EXECUTE on pg_promote (promotion)",
            ),
            (
                "has_function_privilege('pg_catalog.pg_reload_conf()', 'EXECUTE')",
                "EXECUTE on pg_reload_conf (repointing, fencing)",
            ),
            (
                "has_function_privilege('pg_catalog.pg_read_file(text)', 'EXECUTE')",
                "EXECUTE on pg_read_file(text) (telling whether a former primary diverged)",
            ),
            (
                "has_parameter_privilege('primary_conninfo', 'ALTER SYSTEM')",
                "ALTER SYSTEM on primary_conninfo (repointing)",
            ),
            (
                "has_parameter_privilege('default_transaction_read_only', 'ALTER SYSTEM')",
                "ALTER SYSTEM on default_transaction_read_only (fencing)",
            ),
            (
                "has_parameter_privilege('synchronous_standby_names', 'ALTER SYSTEM')",
                "ALTER SYSTEM on synchronous_standby_names (promotion under synchronous replication)",
            ),
            (
                "pg_has_role('pg_read_all_settings', 'USAGE')",
                "pg_read_all_settings (reading primary_conninfo)",
            ),
            (
                "pg_has_role('pg_monitor', 'USAGE')",
                "pg_monitor (the upstream of standbys)",
            ),
        ];
        let sql = format!(
            "SELECT {}",
            checks.iter().map(|c| c.0).collect::<Vec<_>>().join(", ")
        );
        let row = rows(&mut conn, &sql)
            .await?
            .into_iter()
            .next()
            .unwrap_or_default();
        Ok(checks
            .iter()
            .zip(row)
            .filter(|(_, v)| v.as_deref() != Some("t"))
            .map(|(c, _)| c.1.to_string())
            .collect())
    }
}

/// Where the timeline history `history` says timeline `tli` ended (lines
/// `tli<TAB>lsn<TAB>reason`).
fn fork_point(history: &str, tli: u32) -> Option<String> {
    history.lines().find_map(|line| {
        let mut parts = line.split_whitespace();
        let t: u32 = parts.next()?.parse().ok()?;
        let at = parts.next()?;
        (t == tli).then(|| at.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::fork_point;

    #[test]
    fn the_fork_point_comes_from_the_history_file() {
        let h = "1\t0/3000148\tno recovery target specified\n\n2\t0/5000000\tno recovery target specified\n";
        assert_eq!(fork_point(h, 1).as_deref(), Some("0/3000148"));
        assert_eq!(fork_point(h, 2).as_deref(), Some("0/5000000"));
        assert_eq!(fork_point(h, 3), None);
        assert_eq!(fork_point("", 1), None);
    }
}
