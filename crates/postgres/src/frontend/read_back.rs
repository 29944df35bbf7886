//! Settings made with `set_config(name, value, false)`: PostgreSQL reports few parameters, and
//! the value may be an expression or a parameter, so the session learns them by asking the
//! server once its transaction is over (`current_setting`), and then moves them to other
//! connections as any `SET` (replayed with `set_config`, as startup parameters are). What
//! the server says is what holds, whatever became of the call: committed, rolled back, local
//! after all. Only names the scanner reads are asked for (see `Pins::SET_CONFIG_READ`); a call
//! whose name it cannot read pins the session instead.

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
        let mut sql = String::from("SELECT ");
        for (i, name) in names.iter().enumerate() {
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str("pg_catalog.current_setting(");
            sql.push_str(&quote_literal(name));
            sql.push_str(", true)");
        }
        let values = crate::agent::connection::first_row(lease.conn(), &sql).await;
        let values = match values {
            Ok(v) if v.len() == names.len() => v,
            other => {
                let why = match other {
                    Err(e) => e.to_string(),
                    Ok(_) => "an answer of another shape".to_string(),
                };
                let msg = format!("sluice: cannot read back the session's settings: {why}");
                return Err(self.end_over_connection("08006", msg).await);
            }
        };
        for (name, value) in names.into_iter().zip(values) {
            let change = match value {
                // A custom setting no longer there.
                None => Change::Reset(name),
                Some(v) if !v.is_ascii() && !self.client_utf8() => {
                    // As a SET of such a value: it could not be said again elsewhere.
                    self.pins |= pin::NON_ASCII_SET;
                    continue;
                }
                Some(v) => {
                    let stmt = set_config(&name, &v);
                    Change::Set(name, stmt)
                }
            };
            self.settings.apply(change);
        }
        if let Some(lease) = &mut self.lease {
            lease.conn().set_applied(self.settings.desired());
            self.lease_generation = self.settings.generation();
        }
        Ok(())
    }
}
