//! Settings made with `set_config(name, value, false)`: PostgreSQL reports few parameters, and
//! the value may be an expression or a parameter, so the session learns them by asking the
//! server once its transaction is over (`pg_settings`: the value, and whether the session set
//! it), and then moves them to other connections as any `SET` (replayed with `set_config`, as
//! startup parameters are). What the server says is what holds, whatever became of the call:
//! committed, rolled back, failed, local after all. Only names the scanner reads are asked for
//! (see `Pins::SET_CONFIG_READ`); a call whose name it cannot read pins the session instead.
//! A connection holding names not read back is never lent again ([`crate::backend::PgConn::usable`]).
//! What is read back is bounded as the session's own `SET`s are (`state::MAX_MADE`,
//! `MAX_MADE_BYTES`): a setting beyond them stays on its connection, which the session keeps
//! (pinned, `set_config`).

use super::session::{Session, SessionError};
use super::startup::{quote_literal, set_config};
use super::state::{pin, Change};
use crate::wire::ReadyStatus;

impl Session {
    /// The session's transaction is over on a connection where `set_config` may have set
    /// parameters for it.
    pub(super) fn read_back_due(&self) -> bool {
        self.status == ReadyStatus::Idle
            && self
                .lease
                .as_ref()
                .is_some_and(|l| !l.conn_ref().read_back.is_empty())
    }

    /// What the session asks the server after a unit: the primary's WAL position for
    /// read-your-writes, and the parameters `set_config` set.
    pub(super) async fn ask_after_unit(
        &mut self,
        position: bool,
        read_back: bool,
    ) -> Result<(), SessionError> {
        // Simple queries: the connection's unnamed statement is gone (parsed again where the
        // client names it next; outside a block, no portal is left to lose).
        self.lease_has_unnamed = false;
        if position {
            self.ryw_read_position().await?;
        }
        if read_back {
            self.read_back().await?;
        }
        Ok(())
    }

    /// Reads back the parameters `set_config` may have set (the session is outside a
    /// transaction block, on the connection that ran the calls) and takes them as the
    /// session's settings: the connection has them already.
    async fn read_back(&mut self) -> Result<(), SessionError> {
        let Some(lease) = self.lease.as_mut() else {
            return Ok(());
        };
        let names = std::mem::take(&mut lease.conn().read_back);
        if names.is_empty() {
            return Ok(());
        }
        // The value, and whether the session set it (`session`: a SET or set_config
        // that took; a call that failed — a parameter that cannot be changed now, or not by
        // this role — leaves the connection's own, which is not the session's to replay).
        // A value longer than a session's own settings may be in all is not fetched (its
        // row would be as long): such a setting cannot move, and pins the session.
        // (Under the session's own settings, a `statement_timeout` it just set too: a
        // `SET LOCAL` of it first would be what `pg_settings` shows. A read back that times
        // out pins the session, below.)
        let mut sql = format!(
            "SELECT pg_catalog.lower(name), CASE WHEN pg_catalog.octet_length(setting) <= {} \
             THEN setting END, source FROM pg_catalog.pg_settings \
             WHERE pg_catalog.lower(name) IN (",
            super::state::MAX_MADE_BYTES
        );
        for (i, name) in names.iter().enumerate() {
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&quote_literal(name));
        }
        sql.push(')');
        let rows = match crate::agent::connection::rows(lease.conn(), &sql).await {
            Ok(rows) => rows,
            Err(e) if e.kind == sluice_monitor::agent::ErrorKind::Unreachable => {
                let msg = format!("sluice: cannot read back the session's settings: {e}");
                return Err(self.end_over_connection("08006", msg).await);
            }
            // The server refused (the session's own `statement_timeout` ran out, a lock
            // waited for too long): what the calls set is not known, and stays with the
            // session on this connection, which is closed when it comes back.
            Err(e) => {
                tracing::warn!(session = self.handle.id, error = %e, "set_config values not read back; the session keeps its connection");
                self.pins |= pin::SET_CONFIG;
                lease.discard();
                return Ok(());
            }
        };
        for name in names {
            let row = rows
                .iter()
                .find(|r| r.first().and_then(|n| n.as_deref()) == Some(name.as_str()));
            let (value, source) = match row.map(|r| (r.get(1).cloned().flatten(), r.get(2))) {
                Some((Some(value), Some(Some(source)))) => (value, source.as_str()),
                // Not shown to this role, or too long to fetch (see above): what it holds
                // cannot be known, nor moved.
                _ => {
                    self.pins |= pin::SET_CONFIG;
                    continue;
                }
            };
            if source != "session" {
                // Not the session's (any more): nothing to replay.
                self.settings.forget(&name);
                continue;
            }
            if !value.is_ascii() && !self.client_utf8() {
                // As a SET of such a value: it could not be said again elsewhere.
                self.pins |= pin::NON_ASCII_SET;
                continue;
            }
            let change = Change::Set(name.clone(), set_config(&name, &value));
            if self
                .settings
                .over_bounds(std::iter::once(&change), false)
                .is_some()
            {
                // More than a session's own settings may be (`state::MAX_MADE`,
                // `MAX_MADE_BYTES`): kept on this connection, with the session.
                self.pins |= pin::SET_CONFIG;
                continue;
            }
            self.settings.apply(change);
        }
        if let Some(lease) = &mut self.lease {
            lease.conn().set_applied(self.settings.desired());
            self.lease_generation = self.settings.generation();
        }
        Ok(())
    }
}
