//! Read-your-writes: a session that asks for it (`[[users]] read_your_writes`, or
//! `SET sluice.read_your_writes = on`) reads only from a standby that has replayed its last
//! write, or from the primary.
//!
//! When a transaction that wrote on the primary is over, sluice asks that connection for its
//! WAL insert position (one hidden round trip, before the connection goes back to the pool):
//! the commit record is before it. A later read leased on a standby is served there if the
//! monitor last saw the standby replayed that far; else the standby is asked
//! (`pg_last_wal_replay_lsn()`, one round trip); if it is still behind, the read goes to the
//! primary instead. Nothing waits: other sessions, and this one, go on at once.

use super::session::{Session, SessionError};
use super::state::Change;
use crate::agent::lsn;
use crate::backend::statements::StmtDef;
use crate::backend::PgConn;
use crate::wire::ReadyStatus;
use sluice_core::router::{Decision, Route};
use std::sync::Arc;

/// The custom setting that turns it on and off for a session.
pub const SETTING: &str = "sluice.read_your_writes";

/// A session's read-your-writes state.
#[derive(Debug, Default, Clone, Copy)]
pub struct Ryw {
    /// Asked for (the user's default until the session sets it).
    pub on: bool,
    /// The user's default (`RESET` goes back to it).
    pub default: bool,
    /// The open transaction wrote on the primary.
    dirty: bool,
    /// The primary's WAL position after the session's last write (0: none to wait for).
    pub lsn: u64,
}

impl Ryw {
    /// For a user whose default is `on`.
    pub fn new(on: bool) -> Ryw {
        Ryw {
            on,
            default: on,
            ..Ryw::default()
        }
    }
}

/// `Some(value)` if `change` sets (or resets, to `default`) read-your-writes.
fn asked(change: &Change, default: bool) -> Option<bool> {
    match change {
        Change::Set(name, stmt) if name == SETTING => {
            let lower = stmt.to_ascii_lowercase();
            let after = &lower[lower.find(SETTING)? + SETTING.len()..];
            let value = after
                .trim_start()
                .strip_prefix('=')
                .or_else(|| after.trim_start().strip_prefix("to "))?;
            match value.trim().trim_matches(['\'', '"', ';', ' ']) {
                "on" | "true" | "yes" | "1" => Some(true),
                "off" | "false" | "no" | "0" => Some(false),
                "default" => Some(default),
                _ => None,
            }
        }
        Change::Reset(name) if name == SETTING => Some(default),
        Change::ResetAll => Some(default),
        _ => None,
    }
}

impl Session {
    /// After a unit ran on `hostgroup`: follows `SET sluice.read_your_writes`, notes a write
    /// on the primary and, once its transaction is over, where the primary's WAL was.
    pub(super) async fn ryw_after(
        &mut self,
        ran: &[Arc<StmtDef>],
        on_writer: bool,
    ) -> Result<(), SessionError> {
        for def in ran {
            for c in &def.info.changes {
                if let Some(on) = asked(c, self.ryw.default) {
                    self.ryw.on = on;
                }
            }
        }
        if !self.ryw.on {
            self.ryw.dirty = false;
            return Ok(());
        }
        if on_writer
            && ran
                .iter()
                .any(|d| self.fe.route_of(&d.info) == Route::Write)
        {
            self.ryw.dirty = true;
        }
        if !self.ryw.dirty || self.status != ReadyStatus::Idle {
            return Ok(());
        }
        self.ryw.dirty = false;
        let Some(lease) = &mut self.lease else {
            return Ok(());
        };
        match position(lease.conn(), "SELECT pg_current_wal_insert_lsn()").await {
            Ok(at) => self.ryw.lsn = self.ryw.lsn.max(at),
            Err(e) => {
                lease.discard();
                self.lease = None;
                let msg = format!("sluice: cannot read the primary's WAL position: {e}");
                let _ = self.client.fatal("08006", &msg).await;
                return Err(SessionError::Refused(msg));
            }
        }
        Ok(())
    }

    /// Before a read runs on the connection just leased for `decision`: true if it may (it
    /// is the primary, or a standby that replayed the session's last write); false if the
    /// read must go to the primary instead.
    pub(super) async fn ryw_may_read_here(&mut self, decision: &Decision) -> bool {
        if !self.ryw.on || self.ryw.lsn == 0 {
            return true;
        }
        if *decision.hostgroup == *self.fe.topology.router.writer {
            return true;
        }
        let Some(lease) = &mut self.lease else {
            return true;
        };
        if lsn(&lease.server().observed().position) >= self.ryw.lsn {
            return true;
        }
        match position(lease.conn(), "SELECT pg_last_wal_replay_lsn()").await {
            Ok(at) => at >= self.ryw.lsn,
            Err(_) => {
                lease.discard();
                self.lease = None;
                false
            }
        }
    }
}

/// The WAL position a one-value query on `conn` returns.
async fn position(conn: &mut PgConn, sql: &str) -> Result<u64, String> {
    let mut q = Vec::with_capacity(sql.len() + 6);
    super::session::put_query(&mut q, sql.as_bytes());
    conn.send(&q).await.map_err(|e| e.to_string())?;
    let mut value = None;
    let mut error = None;
    loop {
        let (tag, body) = conn.next_owned().await.map_err(|e| e.to_string())?;
        match tag {
            b'D' => {
                // One column: length, then the text.
                let len = body
                    .get(2..6)
                    .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                    .unwrap_or(-1);
                if len >= 0 {
                    value = body
                        .get(6..6 + len as usize)
                        .map(|v| String::from_utf8_lossy(v).into_owned());
                }
            }
            b'S' => conn.note_parameter(&body),
            b'E' => {
                let fields = crate::wire::error_fields(&body).unwrap_or_default();
                error = fields.into_iter().find(|(k, _)| *k == b'M').map(|(_, m)| m);
            }
            b'Z' => break,
            _ => {}
        }
    }
    if let Some(e) = error {
        return Err(e);
    }
    Ok(value.map(|v| lsn(&v)).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::{asked, Change, SETTING};

    #[test]
    fn the_setting_is_read_from_set_and_reset() {
        let set = |s: &str| Change::Set(SETTING.into(), s.into());
        assert_eq!(
            asked(&set("SET sluice.read_your_writes = on"), false),
            Some(true)
        );
        assert_eq!(
            asked(&set("set sluice.read_your_writes to 'off'"), true),
            Some(false)
        );
        assert_eq!(
            asked(&set("SET sluice.read_your_writes TO DEFAULT"), true),
            Some(true)
        );
        assert_eq!(
            asked(&set("SET sluice.read_your_writes = maybe"), false),
            None
        );
        assert_eq!(asked(&Change::Reset(SETTING.into()), true), Some(true));
        assert_eq!(asked(&Change::ResetAll, false), Some(false));
        assert_eq!(asked(&Change::Reset("timezone".into()), true), None);
    }
}
