//! Read-your-writes: a session that asks for it (`[[users]] read_your_writes`, or
//! `SET sluice.read_your_writes = on`) reads only from a standby that has replayed its last
//! write, or from the primary. Whether it asked is read from the session's settings, which
//! follow `SET`, `RESET` and transactions (a `SET` in a rolled-back block never counted).
//!
//! When a transaction that wrote on the primary is over, sluice asks that connection for its
//! WAL insert position (one hidden round trip, before the connection goes back to the pool):
//! the commit record is before it. A later read leased on a standby is served there if the
//! monitor last saw the standby replayed that far; else the standby is asked
//! (`pg_last_wal_replay_lsn()`, one round trip); if it is still behind, the read goes to the
//! primary instead. Nothing waits: other sessions, and this one, go on at once.

use super::session::{Session, SessionError};
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
    /// The user's default (what holds while the session has not set it).
    pub default: bool,
    /// The open transaction wrote on the primary.
    pub(super) dirty: bool,
    /// The primary's WAL position after the session's last write (0: none to wait for).
    pub lsn: u64,
}

impl Ryw {
    /// For a user whose default is `on`.
    pub fn new(on: bool) -> Ryw {
        Ryw {
            default: on,
            ..Ryw::default()
        }
    }
}

/// The value a `SET sluice.read_your_writes ...` statement gives (`None`: not a boolean, or
/// not such a statement).
fn asked(stmt: &str) -> Option<bool> {
    super::state::boolean_set(stmt, SETTING)
}

impl Session {
    /// True if the session reads its own writes now: as its settings say, else as its
    /// user's default.
    fn ryw_on(&self) -> bool {
        self.settings
            .statement(SETTING)
            .and_then(asked)
            .unwrap_or(self.ryw.default)
    }

    /// After a unit ran: notes a write on the primary and, once its transaction is over,
    /// where the primary's WAL was (if the session reads its own writes then). `ended`: the
    /// unit ended with the server's ReadyForQuery; after a Flush the implicit transaction of
    /// an extended-protocol batch is still open, and a query sent then would run, and
    /// commit, inside it.
    pub(super) async fn ryw_after(
        &mut self,
        ran: &[Arc<StmtDef>],
        ended: bool,
    ) -> Result<(), SessionError> {
        if self.ryw_note(ran, ended) {
            // Boxed: most units need no position, and every unit's future would carry this.
            Box::pin(self.ryw_read_position()).await?;
        }
        Ok(())
    }

    /// Notes what `ran` wrote on the primary; true if the primary's WAL position must be
    /// read now (a write transaction ended, and the session reads its own writes).
    pub(super) fn ryw_note(&mut self, ran: &[Arc<StmtDef>], ended: bool) -> bool {
        let on_writer = self
            .lease
            .as_ref()
            .is_some_and(|l| **l.hostgroup() == *self.fe.topology.router.writer);
        if on_writer
            && ran
                .iter()
                .any(|d| self.fe.route_of(&d.info) == Route::Write)
        {
            self.ryw.dirty = true;
        }
        if !self.ryw.dirty || !ended || self.status != ReadyStatus::Idle {
            return false;
        }
        self.ryw.dirty = false;
        self.ryw_on() && self.lease.is_some()
    }

    /// Reads the primary's WAL insert position on the leased connection.
    pub(super) async fn ryw_read_position(&mut self) -> Result<(), SessionError> {
        let Some(lease) = &mut self.lease else {
            return Ok(());
        };
        match position(lease.conn(), "SELECT pg_current_wal_insert_lsn()").await {
            Ok(at) => self.ryw.lsn = self.ryw.lsn.max(at),
            Err(e) => {
                let msg = format!("sluice: cannot read the primary's WAL position: {e}");
                return Err(self.end_over_connection("08006", msg).await);
            }
        }
        Ok(())
    }

    /// True if the connection just leased for `decision` might not have replayed the
    /// session's last write yet: [`Session::ryw_may_read_here`] must ask (the usual answer,
    /// no, costs no await).
    pub(super) fn ryw_may_be_behind(&self, decision: &Decision) -> bool {
        if self.ryw.lsn == 0 || !self.ryw_on() {
            return false;
        }
        if *decision.hostgroup == *self.fe.topology.router.writer {
            return false;
        }
        self.lease
            .as_ref()
            .is_some_and(|l| lsn(&l.server().observed().position) < self.ryw.lsn)
    }

    /// Before a read runs on the connection just leased for `decision`: true if it may (it
    /// is the primary, or a standby that replayed the session's last write); false if the
    /// read must go to the primary instead.
    pub(super) async fn ryw_may_read_here(&mut self, decision: &Decision) -> bool {
        if self.ryw.lsn == 0 || !self.ryw_on() {
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

/// The WAL position a one-value query on `conn` returns (the monitor's way of reading it).
async fn position(conn: &mut PgConn, sql: &str) -> Result<u64, String> {
    let row = crate::agent::connection::first_row(conn, sql)
        .await
        .map_err(|e| e.message)?;
    Ok(row
        .into_iter()
        .next()
        .flatten()
        .map(|v| lsn(&v))
        .unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::{asked, SETTING};
    use crate::frontend::state::{Change, Settings};
    use sluice_runtime::intern::Interner;

    #[test]
    fn the_setting_is_read_from_set_and_reset() {
        assert_eq!(asked("SET sluice.read_your_writes = on"), Some(true));
        assert_eq!(asked("set sluice.read_your_writes to 'off'"), Some(false));
        assert_eq!(asked("SET sluice.read_your_writes = maybe"), None);
        // RESET and RESET ALL go back to the user's default: nothing is set any more.
        let interner = Interner::new(4);
        let mut s = Settings::from_startup(std::iter::empty(), &interner);
        s.apply(Change::Set(
            SETTING.into(),
            "SET sluice.read_your_writes = on".into(),
        ));
        assert_eq!(s.statement(SETTING).and_then(asked), Some(true));
        s.apply(Change::Reset(SETTING.into()));
        assert_eq!(s.statement(SETTING), None);
        s.apply(Change::Set(
            SETTING.into(),
            "SET sluice.read_your_writes = on".into(),
        ));
        s.apply(Change::ResetAll);
        assert_eq!(s.statement(SETTING), None);
    }
}
