//! After a statement: keeping the connection (pinned, or for the next statement's
//! diagnostics) or giving it back to its pool, reset when it must be.

use super::exec::Attached;
use super::pins::Pins;
use super::session::Session;
use sluice_sqlscan::Effects;

impl Session {
    /// Keeps the connection (pinned, or for the next statement's diagnostics) or returns it.
    pub(crate) async fn settle(&mut self, att: Attached, from_held: bool, soft: bool) {
        let pinned = !self.st.pins.is_empty();
        if pinned && (from_held || self.held.is_none()) {
            self.held = Some(att);
            self.prev_is_held = soft;
        } else if soft {
            if from_held {
                self.prev_is_held = false;
            }
            self.prev = Some(att);
        } else {
            if from_held {
                self.prev_is_held = false;
            }
            self.release(att).await;
        }
        self.publish_pins();
        if self.held.is_none() && self.prev.is_none() {
            self.handle.set_backend(None);
        }
    }

    /// Returns a connection to the pool, first reading LAST_INSERT_ID() if this session
    /// changed it there.
    pub(crate) async fn release(&mut self, mut att: Attached) {
        if att.insert_dirty && att.lease.is_reusable() {
            // Read the value and put 0 back in one round trip (left to right).
            match att
                .conn()
                .query_rows("SELECT LAST_INSERT_ID(), LAST_INSERT_ID(0)")
                .await
            {
                Ok(rows) => {
                    let v = rows
                        .first()
                        .and_then(|r| r.first().cloned().flatten())
                        .and_then(|s| s.parse::<u64>().ok())
                        .unwrap_or(0);
                    // 0 means "unchanged" (the connection had 0 or the session's own value),
                    // unless the session set it to 0 itself.
                    if v != 0 || att.lid_explicit {
                        self.st.last_insert_id = v;
                    }
                    att.conn().state.last_insert_id = Some(0);
                }
                Err(_) => att.lease.discard(),
            }
        }
        if att.lease.is_reusable() && att.lease.conn_ref().stmts.server_full() {
            super::stmt::make_room(att.conn()).await;
        }
        drop(att);
    }

    /// Gives back the connection kept for the previous statement, unless `scan` needs it.
    pub(crate) async fn drop_previous_unless_needed(&mut self, effects: Effects) {
        if effects.intersects(Effects::PREV_STATEMENT) {
            return;
        }
        self.prev_is_held = false;
        if let Some(att) = self.prev.take() {
            self.release(att).await;
        }
    }

    /// Gives back (after resetting it if it carries session-private state) a connection the
    /// session no longer uses. The reset runs in the background.
    pub(crate) async fn dispose(&mut self, mut att: Attached, pins: Pins) {
        if !pins.needs_reset() {
            self.release(att).await;
            return;
        }
        tokio::spawn(async move {
            let conn = att.lease.conn();
            if let Err(e) = conn.reset().await {
                tracing::debug!(error = %e, "backend reset failed; closing the connection");
                att.lease.discard();
            }
            drop(att);
        });
    }
}
