//! COM_STMT_FETCH, COM_STMT_RESET and COM_STMT_CLOSE: the commands that act on a statement's
//! server-side state (an open cursor, pending long data), which lives on the held connection.

use super::{with_backend_id, Session};
use crate::backend::stmt_cache::StmtKey;
use crate::frontend::digest::DigestOf;
use crate::frontend::exec::Attached;
use crate::frontend::scan::{Expect, Outcome};
use crate::frontend::session::Fatal;
use crate::wire::consts::com;
use sluice_core::Side;
use sluice_sqlscan::Effects;
use std::sync::Arc;

/// How a command on the held connection's statement went.
enum HeldRun {
    /// It ran; conclude with this outcome.
    Ran(Box<(Attached, Outcome)>),
    /// The held connection does not have the statement (nothing was sent).
    NotThere,
    /// The connection was lost (the client has been told).
    Lost,
}

/// ER_STMT_HAS_NO_OPEN_CURSOR.
const NO_OPEN_CURSOR: u16 = 1421;

impl Session {
    /// Sends a statement command to the held connection, with the backend's statement id.
    async fn on_held_stmt(
        &mut self,
        key: &Arc<StmtKey>,
        payload: &[u8],
        expect: Expect,
    ) -> Result<HeldRun, Fatal> {
        let Some(mut att) = self.held.take() else {
            return Ok(HeldRun::NotThere);
        };
        let Some(b) = att.conn().stmts.get(key).copied() else {
            self.settle(att, true, false).await;
            return Ok(HeldRun::NotThere);
        };
        let scanner = self.scanner_for(&att, expect);
        match self
            .forward(&mut att, &with_backend_id(payload, b.id), scanner, true)
            .await
        {
            Ok(out) => Ok(HeldRun::Ran(Box::new((att, out)))),
            Err(f) if f.side == Side::Client => Err(Fatal(f.what())),
            Err(lost) => {
                drop(att);
                self.report_lost(true, &lost, Effects::default()).await?;
                Ok(HeldRun::Lost)
            }
        }
    }

    /// COM_STMT_FETCH: rows from the open cursor, on the pinned connection.
    pub(crate) async fn stmt_fetch(&mut self, payload: bytes::BytesMut) -> Result<(), Fatal> {
        let Some(id) = self.known_stmt(&payload, "mysqld_stmt_fetch").await? else {
            return Ok(());
        };
        let stmt = &self.stmts.map[&id];
        let no_cursor = format!("The statement ({id}) has no open cursor");
        if !stmt.cursor || self.held.is_none() {
            return self.reply_err(NO_OPEN_CURSOR, b"HY000", &no_cursor).await;
        }
        let key = stmt.key.clone();
        let run = self.on_held_stmt(&key, &payload, Expect::Fetch).await?;
        let still_open =
            matches!(&run, HeldRun::Ran(r) if !r.1.last_row_sent && r.1.error.is_none());
        if let Some(s) = self.stmts.map.get_mut(&id) {
            s.cursor = still_open;
        }
        self.refresh_stmt_pins();
        match run {
            HeldRun::Ran(r) => {
                self.conclude(r.0, true, Effects::default(), DigestOf::Nothing, r.1, true)
                    .await
            }
            HeldRun::NotThere => return self.reply_err(NO_OPEN_CURSOR, b"HY000", &no_cursor).await,
            HeldRun::Lost => {}
        }
        Ok(())
    }

    /// COM_STMT_RESET: discards pending long data and closes an open cursor.
    pub(crate) async fn stmt_reset(&mut self, payload: &[u8]) -> Result<(), Fatal> {
        let Some(id) = self.known_stmt(payload, "mysqld_stmt_reset").await? else {
            return Ok(());
        };
        // `known_stmt` found it.
        let Some(stmt) = self.stmts.map.get_mut(&id) else {
            return Ok(());
        };
        let on_server = (stmt.long_data || stmt.cursor) && self.held.is_some();
        stmt.long_data = false;
        stmt.cursor = false;
        stmt.deferred_error = None;
        let key = stmt.key.clone();
        self.refresh_stmt_pins();
        if on_server {
            match self.on_held_stmt(&key, payload, Expect::Simple).await? {
                HeldRun::Ran(r) => {
                    self.conclude(r.0, true, Effects::default(), DigestOf::Nothing, r.1, true)
                        .await;
                    return Ok(());
                }
                HeldRun::Lost => return Ok(()),
                HeldRun::NotThere => {}
            }
        }
        // Nothing of this statement lives on a server: resetting it is a no-op.
        let st = self.st.status();
        Ok(self.client.send_ok(1, st).await?)
    }

    /// COM_STMT_CLOSE (no response). The backend statement stays cached for reuse; an open
    /// cursor or pending long data on it is reset.
    pub(crate) async fn stmt_close(&mut self, payload: &[u8]) -> Result<(), Fatal> {
        let Some(id) = super::stmt_id(payload) else {
            return Ok(());
        };
        let Some(stmt) = self.stmts.map.remove(&id) else {
            return Ok(());
        };
        self.refresh_stmt_pins();
        if !(stmt.cursor || stmt.long_data) {
            return Ok(());
        }
        if let Some(mut att) = self.held.take() {
            let conn = att.conn();
            if let Some(b) = conn.stmts.get(&stmt.key).copied() {
                if conn
                    .simple(com::STMT_RESET, &b.id.to_le_bytes())
                    .await
                    .is_err()
                {
                    att.lease.discard();
                }
            }
            self.settle(att, true, false).await;
        }
        Ok(())
    }
}
