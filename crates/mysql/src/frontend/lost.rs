//! A backend connection lost under a statement: what the client is told, and why.

use super::pins::Pins;
use super::session::{Fatal, Session};
use crate::wire::consts::err;
use sluice_core::{Failure, Seen};
use sluice_sqlscan::Effects;

impl Session {
    /// A backend connection was lost under a statement (it broke, stayed silent longer than
    /// `[pool] read_timeout`, or sent something malformed): tell the client, with an ERR
    /// packet in place of the rest of the response.
    ///
    /// Losing the held connection loses the session's pinned state. When that state is only
    /// an open transaction, the transaction is over either way and the session goes on
    /// outside any transaction: if the statement could not have committed it, it is certainly
    /// rolled back (the server died or drops the connection) and the client gets
    /// ER_LOCK_DEADLOCK (1213, SQLSTATE 40001, "restart the transaction"), as after a
    /// deadlock; if it could have (a COMMIT in flight), the client is told the outcome is
    /// unknown. Otherwise (temporary tables, locks, variables) the client is disconnected
    /// after the error, as a server crash would disconnect it. A client left in the middle of
    /// a packet (a row larger than `scan::WHOLE_UP_TO` was being passed on) cannot take an
    /// error at all: it is disconnected.
    pub(crate) async fn report_lost(
        &mut self,
        was_held: bool,
        lost: &Failure,
        effects: Effects,
    ) -> Result<(), Fatal> {
        let why = self.failure_note(lost.server.as_deref().unwrap_or("?"));
        let what = lost.what();
        let partial = lost.seen != Seen::Nothing;
        let (when, incomplete) = if partial {
            (" in the middle of the result", "; the result is incomplete")
        } else {
            (" before the statement completed", "")
        };
        let Some(seq) = lost.can_tell_client().then_some(lost.next_seq) else {
            return Err(Fatal(format!(
                "{what}{when}{why}: the client was inside a packet and cannot be sent an error ({})",
                lost.error
            )));
        };
        let trx = Pins(Pins::TRANSACTION.0 | Pins::PREVIOUS_STATEMENT.0);
        let only_trx =
            self.st.pins.has(Pins::TRANSACTION) && Pins(self.st.pins.0 & !trx.0).is_empty();
        if was_held && only_trx {
            if effects.intersects(Effects::MAY_COMMIT) {
                let msg = format!(
                    "sluice: {what}{when}{why}{incomplete}; its outcome is unknown: the transaction may have been committed or rolled back"
                );
                self.client
                    .send_err(seq, err::BACKEND_LOST, b"08S01", &msg)
                    .await?;
            } else {
                let msg = format!(
                    "sluice: the transaction was rolled back: {what}{when}{why}{incomplete}; restart the transaction"
                );
                self.client
                    .send_err(seq, err::LOCK_DEADLOCK, b"40001", &msg)
                    .await?;
            }
            self.st.in_trans = false;
            self.st.pins.set(trx, false);
            self.publish_pins();
            return Ok(());
        }
        let msg = if partial {
            format!("sluice: {what}{when}{why}{incomplete}")
        } else {
            format!("sluice: {what}{when}{why}; its outcome is unknown")
        };
        self.client
            .send_err(seq, err::BACKEND_LOST, b"08S01", &msg)
            .await?;
        if was_held && !self.st.pins.is_empty() {
            return Err(Fatal(format!(
                "pinned backend connection lost ({})",
                self.st.pins
            )));
        }
        Ok(())
    }

    /// Why a server's connections are being lost, if the monitor knows (for error messages).
    pub(crate) fn failure_note(&self, server: &str) -> String {
        let Some(s) = self
            .proxy
            .topology
            .all()
            .iter()
            .find(|s| &*s.name == server)
            .cloned()
        else {
            return String::new();
        };
        // The lost connection's server, which may no longer hold the role it had.
        s.failure_note()
    }
}
